// NgramLm (engine/decoding/ngram_lm.h) against a brute-force ARPA scorer written here from the
// format's definition, on a small hand-made trigram model: every score on random sequences
// (out-of-vocabulary words included), the binary round trip, and malformed inputs.
#include "engine/decoding/ngram_lm.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace jasper {
namespace {

constexpr char kArpa[] = R"(
\data\
ngram 1=8
ngram 2=7
ngram 3=3

\1-grams:
-1.0 <s> -0.5
-0.9 </s>
-1.1 the -0.4
-1.3 cat -0.3
-1.4 sat -0.25
-1.6 on -0.2
-1.8 mat -0.1
-2.5 <unk>

\2-grams:
-0.3 <s> the -0.2
-0.5 the cat -0.15
-0.6 cat sat -0.1
-0.4 sat on
-0.7 on the -0.05
-0.9 the mat
-0.8 mat </s>

\3-grams:
-0.1 <s> the cat
-0.2 the cat sat
-0.25 on the mat

\end\
)";

// The definition: P(w | h) = p(h w) if listed, else bo(h) + P(w | h minus its oldest word);
// a word not in the unigrams is <unk>.
class BruteForce {
 public:
  explicit BruteForce(const std::string& text) {
    int n = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (line.empty()) continue;
      if (line[0] == '\\') {
        if (line.size() > 7 && line.substr(line.size() - 7) == "-grams:") n = line[1] - '0';
        continue;
      }
      if (n == 0) continue;
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      std::vector<std::string> words(f.begin() + 1, f.begin() + 1 + n);
      p_[words] = std::stod(f[0]);
      if (f.size() > static_cast<size_t>(n) + 1) bo_[words] = std::stod(f.back());
    }
  }
  double P(std::vector<std::string> h, std::string w) const {
    if (!p_.count({w})) w = "<unk>";
    while (h.size() > 2) h.erase(h.begin());
    std::vector<std::string> g = h;
    g.push_back(w);
    if (p_.count(g)) return p_.at(g);
    const double bo = bo_.count(h) ? bo_.at(h) : 0.0;
    h.erase(h.begin());
    return bo + P(h, w);
  }

 private:
  std::map<std::vector<std::string>, double> p_, bo_;
};

TEST(NgramLmTest, ScoresEqualTheBruteForceDefinition) {
  auto lm = NgramLm::FromArpa(kArpa);
  ASSERT_TRUE(lm.ok()) << lm.status();
  EXPECT_EQ((*lm)->order(), 3);
  EXPECT_EQ((*lm)->num_ngrams(2), 7);
  BruteForce brute(kArpa);
  const std::vector<std::string> words = {"the", "cat", "sat", "on", "mat", "dog", "</s>"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    NgramLm::State state = (*lm)->BeginSentence();
    std::vector<std::string> history = {"<s>"};
    for (int i = 0; i < 6; ++i) {
      const std::string& w = words[rng() % words.size()];
      const float got = (*lm)->Score(state, (*lm)->WordId(w), &state);
      EXPECT_NEAR(got, brute.P(history, w), 1e-5) << "trial " << trial << " word " << i;
      history.push_back(w);
    }
  }
  EXPECT_EQ((*lm)->WordId("dog"), (*lm)->unk_id());
}

TEST(NgramLmTest, BinaryRoundTripKeepsEveryScore) {
  auto lm = NgramLm::FromArpa(kArpa);
  ASSERT_TRUE(lm.ok());
  const std::string image = (*lm)->ToBinary();
  auto copy = NgramLm::FromBinary(image);
  ASSERT_TRUE(copy.ok()) << copy.status();
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / "ngram_lm_test.bin";
  std::ofstream(path, std::ios::binary) << image;
  auto mapped = NgramLm::LoadBinary(path.string());
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  for (const auto* other : {&*copy, &*mapped}) {
    EXPECT_EQ((*other)->vocab_size(), (*lm)->vocab_size());
    for (int id = 0; id < (*lm)->vocab_size(); ++id) {
      EXPECT_EQ((*other)->Word(id), (*lm)->Word(id));
      NgramLm::State a = (*lm)->BeginSentence(), b = (*other)->BeginSentence();
      EXPECT_EQ((*lm)->Score(a, id, &a), (*other)->Score(b, id, &b));
      EXPECT_EQ((*lm)->Score(a, id, nullptr), (*other)->Score(b, id, nullptr));
    }
  }
  std::filesystem::remove(path);
  EXPECT_EQ(NgramLm::LoadBinary("/nonexistent/lm.bin").status().code(),
            absl::StatusCode::kNotFound);
}

// LoadFile picks the form by the name: *.arpa parsed, anything else mapped as binary.
TEST(NgramLmTest, LoadFileByName) {
  auto lm = NgramLm::FromArpa(kArpa);
  ASSERT_TRUE(lm.ok());
  const std::string dir = ::testing::TempDir();
  const std::string arpa = dir + "/load_file_test.arpa", bin = dir + "/load_file_test.bin";
  std::ofstream(arpa, std::ios::binary) << kArpa;
  std::ofstream(bin, std::ios::binary) << (*lm)->ToBinary();
  for (const std::string& path : {arpa, bin}) {
    auto loaded = NgramLm::LoadFile(path);
    ASSERT_TRUE(loaded.ok()) << path << ": " << loaded.status();
    EXPECT_EQ((*loaded)->ToBinary(), (*lm)->ToBinary()) << path;
  }
  // The binary image under an .arpa name is parsed as text, and fails as such.
  std::filesystem::copy_file(bin, dir + "/load_file_test_bin.arpa",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(NgramLm::LoadFile(dir + "/load_file_test_bin.arpa").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NgramLm::LoadFile("/nonexistent/lm.arpa").status().code(), absl::StatusCode::kNotFound);
  for (const std::string& path : {arpa, bin, dir + "/load_file_test_bin.arpa"}) {
    std::filesystem::remove(path);
  }
}

TEST(NgramLmTest, WordPrefixesOfTheVocabulary) {
  auto lm = NgramLm::FromArpa(kArpa);
  ASSERT_TRUE(lm.ok());
  for (const char* prefix : {"", "c", "ca", "cat", "m", "ma", "mat", "t", "th", "the", "o"}) {
    EXPECT_TRUE((*lm)->IsWordPrefix(prefix)) << prefix;
  }
  for (const char* prefix : {"cats", "x", "tha", "<", "<s", "<unk>", "mata"}) {
    EXPECT_FALSE((*lm)->IsWordPrefix(prefix)) << prefix;
  }
}

// The prefix ranges the beam decoder narrows letter by letter agree with the string forms.
TEST(NgramLmTest, PrefixRangesMatchTheWords) {
  auto lm = NgramLm::FromArpa(kArpa);
  ASSERT_TRUE(lm.ok());
  std::vector<std::string> prefixes = {""};
  const std::string letters = "acehmorstx<";
  for (size_t n = 0; n < prefixes.size() && prefixes[n].size() < 4; ++n) {
    for (char c : letters) prefixes.push_back(prefixes[n] + c);
  }
  for (const std::string& word : prefixes) {
    NgramLm::Prefix p = (*lm)->RootPrefix();
    bool known = true;
    for (char c : word) {
      const NgramLm::Prefix before = p;
      known = known && (*lm)->ExtendPrefix(&p, c);
      if (!known) {
        EXPECT_EQ(p.lo, before.lo);  // unchanged on failure
        EXPECT_EQ(p.hi, before.hi);
        break;
      }
    }
    EXPECT_EQ(known, (*lm)->IsWordPrefix(word)) << word;
    if (known) {
      EXPECT_EQ(p.depth, word.size());
      // An in-vocabulary word maps to its id; a prefix and the markers to <unk>.
      const int id = (*lm)->WordId(word);
      const bool marker = word == "<s>" || word == "</s>" || word == "<unk>";
      EXPECT_EQ((*lm)->PrefixWord(p), marker ? (*lm)->unk_id() : id) << word;
    }
  }
}

TEST(NgramLmTest, MissingMarkersAreAdded) {
  auto lm = NgramLm::FromArpa("\\data\\\nngram 1=2\n\\1-grams:\n-1 a\n-2 b\n\\end\\\n");
  ASSERT_TRUE(lm.ok()) << lm.status();
  EXPECT_EQ((*lm)->Word((*lm)->unk_id()), "<unk>");
  EXPECT_FLOAT_EQ((*lm)->Score((*lm)->BeginSentence(), (*lm)->WordId("zzz"), nullptr),
                  NgramLm::kUnkLog10Prob);
  EXPECT_FLOAT_EQ((*lm)->Score((*lm)->BeginSentence(), (*lm)->WordId("b"), nullptr), -2.0f);
}

TEST(NgramLmTest, MalformedInputIsAnErrorNamingTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "no \\data\\"},
      {"\\data\\\nngram 1=2\n\\1-grams:\n-1 a\n\\end\\\n", "declares 2"},
      {"\\data\\\nngram 1=1\n\\1-grams:\n-1 a\n", "without \\end\\"},
      {"\\data\\\nngram 1=1\n\\1-grams:\nnan a\n\\end\\\n", "finite"},
      {"\\data\\\nngram 1=1\n\\1-grams:\n-1 a b c\n\\end\\\n", "line 4"},
      {"\\data\\\nngram 2=1\n", "ngram N=COUNT"},
      {"\\data\\\nngram 1=1\n\\2-grams:\n-1 a b\n\\end\\\n", "no matching"},
  };
  for (const auto& [text, expect] : cases) {
    auto lm = NgramLm::FromArpa(text);
    ASSERT_FALSE(lm.ok()) << text;
    EXPECT_EQ(lm.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(lm.status().message().find(expect), std::string::npos) << lm.status();
  }
  auto good = NgramLm::FromArpa(kArpa);
  ASSERT_TRUE(good.ok());
  const std::string image = (*good)->ToBinary();
  EXPECT_FALSE(NgramLm::FromBinary(image.substr(0, image.size() - 8)).ok());  // truncated
  EXPECT_FALSE(NgramLm::FromBinary(image.substr(0, 20)).ok());
  std::string bad_magic = image;
  bad_magic[0] = 'X';
  EXPECT_FALSE(NgramLm::FromBinary(bad_magic).ok());
  // Any single corrupted byte in the header or offsets is caught or harmless: never a crash,
  // and a model that loads gives finite scores.
  for (size_t i = 0; i < 160 && i < image.size(); ++i) {
    std::string corrupt = image;
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
    auto lm = NgramLm::FromBinary(corrupt);
    if (lm.ok()) {
      EXPECT_TRUE(std::isfinite((*lm)->Score((*lm)->BeginSentence(), 3, nullptr)));
    }
  }
}

}  // namespace
}  // namespace jasper
