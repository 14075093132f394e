// StringTransducer (engine/text/string_transducer.h), the ITN grammars' fast path, against the
// plain reference: OpenFst's Compose(string acceptor, fst) + ShortestPath(.., 1). On fresh random
// transducers (input epsilons, negative weights, dead ends) and strings, and on the shipped
// tagger and verbalizer with the ITN fixture's sentences and fresh random word strings from its
// vocabulary. The seed is printed; outputs are poisoned before each call.
#include "engine/text/string_transducer.h"

#include <fst/arcsort.h>
#include <fst/compose.h>
#include <fst/shortest-path.h>
#include <fst/vector-fst.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace jasper {
namespace {

namespace fs = std::filesystem;

uint32_t FreshSeed() {
  static const uint32_t seed = [] {
    const uint32_t s = std::random_device{}();
    std::printf("string_transducer_test seed %u\n", s);
    return s;
  }();
  return seed;
}

fst::StdVectorFst Acceptor(const std::string& s) {
  fst::StdVectorFst a;
  int state = a.AddState();
  a.SetStart(state);
  for (char c : s) {
    const int next = a.AddState();
    const int label = static_cast<unsigned char>(c);
    a.AddArc(state, fst::StdArc(label, label, fst::TropicalWeight::One(), next));
    state = next;
  }
  a.SetFinal(state, fst::TropicalWeight::One());
  return a;
}

struct Reference {
  std::vector<PathArc> arcs;
  float weight = 0;
};

// The `n` lightest paths (OpenFst's n-shortest, a tree), lightest first.
std::vector<Reference> OpenFstPaths(const fst::StdVectorFst& f, const std::string& input, int n) {
  std::vector<Reference> out;
  fst::StdVectorFst lattice;
  fst::Compose(Acceptor(input), f, &lattice);
  if (lattice.NumStates() == 0) return out;
  fst::StdVectorFst tree;
  fst::ShortestPath(lattice, &tree, n);
  if (tree.Start() == fst::kNoStateId) return out;
  std::vector<std::pair<int, Reference>> stack = {{static_cast<int>(tree.Start()), Reference()}};
  while (!stack.empty()) {
    auto [state, r] = std::move(stack.back());
    stack.pop_back();
    if (tree.Final(state) != fst::TropicalWeight::Zero()) {
      Reference done = r;
      done.weight += tree.Final(state).Value();
      out.push_back(std::move(done));
    }
    for (fst::ArcIterator<fst::StdVectorFst> it(tree, state); !it.Done(); it.Next()) {
      Reference next = r;
      next.arcs.push_back(
          {static_cast<int>(it.Value().ilabel), static_cast<int>(it.Value().olabel)});
      next.weight += it.Value().weight.Value();
      stack.push_back({static_cast<int>(it.Value().nextstate), std::move(next)});
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Reference& a, const Reference& b) { return a.weight < b.weight; });
  return out;
}

std::string Inputs(const std::vector<PathArc>& arcs) {
  std::string s;
  for (const PathArc& a : arcs) {
    if (a.ilabel != 0) s.push_back(static_cast<char>(a.ilabel));
  }
  return s;
}

std::vector<int> Outputs(const std::vector<PathArc>& arcs) {
  std::vector<int> out;
  for (const PathArc& a : arcs) {
    if (a.olabel != 0) out.push_back(a.olabel);
  }
  return out;
}

// The weight of `arcs` walked in `f` from its start, or NaN when they are not a successful path
// there (an arc is matched by labels; several matches: the lightest that keeps the walk going).
float WalkWeight(const fst::StdVectorFst& f, const std::vector<PathArc>& arcs) {
  // Sets of (state, weight) reachable after each arc; small FSTs only.
  std::vector<std::pair<int, float>> at = {{static_cast<int>(f.Start()), 0.0f}};
  for (const PathArc& p : arcs) {
    std::vector<std::pair<int, float>> next;
    for (auto [s, w] : at) {
      for (fst::ArcIterator<fst::StdVectorFst> it(f, s); !it.Done(); it.Next()) {
        const fst::StdArc& a = it.Value();
        if (a.ilabel == p.ilabel && a.olabel == p.olabel) {
          next.push_back({static_cast<int>(a.nextstate), w + a.weight.Value()});
        }
      }
    }
    at = std::move(next);
  }
  float best = std::numeric_limits<float>::quiet_NaN();
  for (auto [s, w] : at) {
    const float f_w = f.Final(s).Value();
    if (f_w == std::numeric_limits<float>::infinity()) continue;
    if (std::isnan(best) || w + f_w < best) best = w + f_w;
  }
  return best;
}

// A random transducer over input bytes 'a'..'c' and epsilon: input-epsilon arcs only go to
// higher-numbered states (no epsilon cycle); weights in [-1, 3]; some states final, some dead.
fst::StdVectorFst RandomFst(std::mt19937* rng) {
  std::uniform_int_distribution<int> num_states(2, 14), label(0, 3), out(0, 5), coin(0, 3);
  std::uniform_real_distribution<float> weight(-1.0f, 3.0f);
  fst::StdVectorFst f;
  const int n = num_states(*rng);
  for (int i = 0; i < n; ++i) f.AddState();
  f.SetStart(0);
  std::uniform_int_distribution<int> state(0, n - 1), arcs(0, 5);
  for (int s = 0; s < n; ++s) {
    if (coin(*rng) == 0) f.SetFinal(s, weight(*rng));
    const int k = arcs(*rng);
    for (int j = 0; j < k; ++j) {
      const int il = label(*rng);
      int next = state(*rng);
      if (il == 0) {
        if (s == n - 1) continue;
        next = std::uniform_int_distribution<int>(s + 1, n - 1)(*rng);
      }
      f.AddArc(s, fst::StdArc(il == 0 ? 0 : 'a' + il - 1, out(*rng), weight(*rng), next));
    }
  }
  fst::ArcSort(&f, fst::ILabelCompare<fst::StdArc>());
  return f;
}

TEST(StringTransducerTest, MatchesOpenFstOnRandomTransducers) {
  std::mt19937 rng(FreshSeed());
  std::uniform_int_distribution<int> length(0, 7), byte(0, 2);
  int found = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const fst::StdVectorFst f = RandomFst(&rng);
    absl::StatusOr<std::unique_ptr<const StringTransducer>> t = StringTransducer::Compile(f, "r");
    ASSERT_TRUE(t.ok()) << t.status();
    for (int q = 0; q < 20; ++q) {
      std::string input(length(rng), 'a');
      for (char& c : input) c = static_cast<char>('a' + byte(rng));
      const std::vector<Reference> best = OpenFstPaths(f, input, 1);
      std::vector<PathArc> path(3, PathArc{-7, -7});  // poisoned
      float weight = std::numeric_limits<float>::quiet_NaN();
      const bool ok = (*t)->ShortestPath(input, &path, &weight);
      ASSERT_EQ(ok, !best.empty()) << "trial " << trial << " input '" << input << "'";
      if (!ok) continue;
      ++found;
      EXPECT_EQ(Inputs(path), input);
      EXPECT_NEAR(weight, best[0].weight, 1e-5f) << "trial " << trial << " input '" << input << "'";
      EXPECT_NEAR(WalkWeight(f, path), weight, 1e-5f);  // a real path of that weight
    }
  }
  EXPECT_GT(found, 400);  // the transducers accept a fair share of the strings
}

TEST(StringTransducerTest, RejectsWhatItCannotSearch) {
  fst::StdVectorFst cycle;
  cycle.AddState();
  cycle.AddState();
  cycle.SetStart(0);
  cycle.SetFinal(1, 0);
  cycle.AddArc(0, fst::StdArc(0, 1, 0, 1));
  cycle.AddArc(1, fst::StdArc(0, 2, 0, 0));
  absl::StatusOr<std::unique_ptr<const StringTransducer>> t =
      StringTransducer::Compile(cycle, "cyclic.fst");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("cyclic.fst"), std::string::npos);

  fst::StdVectorFst wide;
  wide.AddState();
  wide.SetStart(0);
  wide.SetFinal(0, 0);
  wide.AddArc(0, fst::StdArc(300, 300, 0, 0));
  EXPECT_EQ(StringTransducer::Compile(wide, "wide").status().code(),
            absl::StatusCode::kInvalidArgument);

  fst::StdVectorFst unsorted;
  unsorted.AddState();
  unsorted.SetStart(0);
  unsorted.SetFinal(0, 0);
  unsorted.AddArc(0, fst::StdArc('b', 'b', 0, 0));
  unsorted.AddArc(0, fst::StdArc('a', 'a', 0, 0));
  EXPECT_EQ(StringTransducer::Compile(unsorted, "unsorted").status().code(),
            absl::StatusCode::kInvalidArgument);

  fst::StdVectorFst empty;  // no start state: compiles, finds nothing
  t = StringTransducer::Compile(empty, "empty");
  ASSERT_TRUE(t.ok());
  std::vector<PathArc> path;
  EXPECT_FALSE((*t)->ShortestPath("", &path));
}

TEST(StringTransducerTest, NulAndEmptyInput) {
  fst::StdVectorFst f;
  f.AddState();
  f.SetStart(0);
  f.SetFinal(0, 0.5f);
  f.AddArc(0, fst::StdArc('a', 'b', 1.0f, 0));
  absl::StatusOr<std::unique_ptr<const StringTransducer>> t = StringTransducer::Compile(f, "f");
  ASSERT_TRUE(t.ok());
  std::vector<PathArc> path;
  float w = -1;
  ASSERT_TRUE((*t)->ShortestPath("", &path, &w));
  EXPECT_TRUE(path.empty());
  EXPECT_EQ(w, 0.5f);
  ASSERT_TRUE((*t)->ShortestPath("aa", &path, &w));
  EXPECT_EQ(path.size(), 2u);
  EXPECT_EQ(w, 2.5f);
  EXPECT_FALSE((*t)->ShortestPath(std::string("a\0a", 3), &path));
  EXPECT_FALSE((*t)->ShortestPath("ab", &path));
}

// The shipped grammars: every fixture sentence and fresh random word strings, tagger and
// verbalizer, the same output labels and weight as OpenFst's composition.
class ShippedGrammarTest : public ::testing::Test {
 protected:
  static fs::path Dir() {
    return fs::path(JASPER_SOURCE_DIR) / "models/quartznet_en_tts_small/itn";
  }
  // Each grammar read and compiled once for the suite.
  struct Grammar {
    std::unique_ptr<fst::StdVectorFst> fst;
    std::unique_ptr<const StringTransducer> compiled;
  };
  static void Load(const char* name, Grammar* g) {
    g->fst.reset(fst::StdVectorFst::Read((Dir() / name).string()));
    ASSERT_NE(g->fst, nullptr) << name;
    absl::StatusOr<std::unique_ptr<const StringTransducer>> t =
        StringTransducer::Compile(*g->fst, name);
    ASSERT_TRUE(t.ok()) << t.status();
    g->compiled = *std::move(t);
  }
  static void SetUpTestSuite() {
    Load("tagger.fst", &tagger_);
    Load("verbalizer.fst", &verbalizer_);
  }
  static void TearDownTestSuite() {
    tagger_ = {};
    verbalizer_ = {};
  }
  void SetUp() override {
    ASSERT_NE(tagger_.compiled, nullptr);
    ASSERT_NE(verbalizer_.compiled, nullptr);
  }
  inline static Grammar tagger_;
  inline static Grammar verbalizer_;
  static std::vector<std::string> Sentences() {
    std::ifstream in(fs::path(JASPER_SOURCE_DIR) / "tests/fixtures/itn/itn_en.tsv");
    std::vector<std::string> out;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> parts = absl::StrSplit(line, '\t');
      if (parts.size() == 2) out.push_back(parts[0]);
    }
    return out;
  }
  // The tagger's output labels >= 256 name strings (tagger_labels.json); paths of equal weight
  // may split the same output differently ("00" as one label or two), so outputs are compared
  // as text.
  static std::vector<std::string> Labels() {
    std::ifstream in(Dir() / "tagger_labels.json");
    return nlohmann::json::parse(in).get<std::vector<std::string>>();
  }
  static std::string Text(const std::vector<PathArc>& arcs,
                          const std::vector<std::string>& labels) {
    std::string out;
    for (int label : Outputs(arcs)) {
      if (label >= 256) {
        out += labels.at(label - 256);
      } else if (label < 0x80) {  // labels.json holds code points < 256 as UTF-8
        out.push_back(static_cast<char>(label));
      } else {
        out.push_back(static_cast<char>(0xC0 | (label >> 6)));
        out.push_back(static_cast<char>(0x80 | (label & 0x3F)));
      }
    }
    return out;
  }
  // `t`'s path has OpenFst's best weight, and its output is that of one of OpenFst's lightest
  // paths: the only one when the best is unique, one of those of equal weight otherwise (the
  // grammars hold such ties, "votes dot six" -> "votes.6" or "votes.six"; which one a search
  // takes depends on its order; tests/itn_test.cc checks the sentences against NeMo's own).
  // Returns whether the best path was tied.
  static bool ExpectSame(const fst::StdVectorFst& f, const StringTransducer& t,
                         const std::string& input, const std::vector<std::string>& labels = {}) {
    constexpr int kPaths = 8;
    const std::vector<Reference> ref = OpenFstPaths(f, input, kPaths);
    std::vector<PathArc> path(2, PathArc{-7, -7});
    float weight = std::numeric_limits<float>::quiet_NaN();
    const bool ok = t.ShortestPath(input, &path, &weight);
    EXPECT_EQ(ok, !ref.empty()) << input;
    if (!ok || ref.empty()) return false;
    EXPECT_EQ(Inputs(path), input);
    EXPECT_EQ(weight, ref[0].weight) << input;
    auto text = [&](const std::vector<PathArc>& arcs) {
      if (labels.empty()) return absl::StrJoin(Outputs(arcs), ",");
      return Text(arcs, labels);
    };
    const std::string mine = text(path);
    size_t tied = 1;
    while (tied < ref.size() && ref[tied].weight == ref[0].weight) ++tied;
    if (tied == static_cast<size_t>(kPaths)) return true;  // more ties than listed
    bool among = false;
    for (size_t i = 0; i < tied; ++i) among = among || text(ref[i].arcs) == mine;
    EXPECT_TRUE(among) << input << "\n  this: " << mine << "\n  OpenFst: " << text(ref[0].arcs);
    return tied > 1;
  }
};

TEST_F(ShippedGrammarTest, TaggerMatchesOpenFst) {
  const fst::StdVectorFst& tagger = *tagger_.fst;
  const StringTransducer& t = *tagger_.compiled;
  const std::vector<std::string> labels = Labels();
  const std::vector<std::string> sentences = Sentences();
  ASSERT_GE(sentences.size(), 300u);
  std::vector<std::string> vocabulary;
  int ties = 0;
  for (const std::string& s : sentences) {
    ties += ExpectSame(tagger, t, s, labels);
    for (absl::string_view w : absl::StrSplit(s, ' ', absl::SkipEmpty())) {
      vocabulary.emplace_back(w);
    }
  }
  std::mt19937 rng(FreshSeed() + 1);
  std::uniform_int_distribution<size_t> pick(0, vocabulary.size() - 1);
  std::uniform_int_distribution<int> length(1, 12);
  for (int i = 0; i < 150; ++i) {
    std::vector<std::string> words(length(rng));
    for (std::string& w : words) w = vocabulary[pick(rng)];
    ties += ExpectSame(tagger, t, absl::StrJoin(words, " "), labels);
  }
  std::printf("%d of %zu sentences had tied best paths\n", ties, sentences.size() + 150);
}

// A long input (more nodes than a thread keeps between calls) is searched whole, and the next
// call on the same thread starts clean.
TEST_F(ShippedGrammarTest, LongInputThenShortOne) {
  const fst::StdVectorFst& tagger = *tagger_.fst;
  const StringTransducer& t = *tagger_.compiled;
  std::vector<std::string> words;
  for (int i = 0; i < 2000; ++i) words.push_back(i % 7 == 3 ? "twenty" : "hello");
  const std::string input = absl::StrJoin(words, " ");
  std::vector<PathArc> path;
  float weight = 0;
  ASSERT_TRUE(t.ShortestPath(input, &path, &weight));
  EXPECT_EQ(Inputs(path), input);
  ExpectSame(tagger, t, "twenty three dollars", Labels());
}

TEST_F(ShippedGrammarTest, VerbalizerMatchesOpenFst) {
  // Serialized tokens as the normalizer writes them, and damaged ones that must not pass.
  const std::vector<std::string> tokens = {
      "tokens { cardinal { integer: \"23\" } } ",
      "tokens { money { integer_part: \"23\" currency: \"$\" fractional_part: \"50\" } } ",
      "tokens { date { month: \"may\" day: \"3\" year: \"1998\" preserve_order: true } } ",
      "tokens { name: \"paid\" } ",
      "tokens { time { hours: \"3\" minutes: \"30\" suffix: \"p.m.\" } } ",
      "tokens { ordinal { integer: \"3\" } } ",
      "tokens { decimal { integer_part: \"20\" fractional_part: \"6\" } } ",
      "tokens { measure { cardinal { integer: \"10\" } units: \"km\" } } ",
      "tokens { cardinal { integer: \"23\" } ",
      "tokens { money { currency: \"$\" } } ",
      "",
  };
  for (const std::string& token : tokens) {
    ExpectSame(*verbalizer_.fst, *verbalizer_.compiled, token);
  }
}

}  // namespace
}  // namespace jasper
