// CtcBeamDecoder and PhraseBoost (engine/decoding/ctc_beam.h, phrase_boost.h) on hand-made and
// random log-probability matrices: beam 1 equals greedy exactly, a wider beam sums paths, the
// LM flips an acoustically ambiguous word, boosting recovers a word greedy misses and leaves
// others alone, streaming in pieces equals one call, compaction changes nothing.
#include "engine/decoding/ctc_beam.h"

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/decoding/ctc.h"
#include "engine/decoding/ngram_lm.h"
#include "engine/decoding/phrase_boost.h"
#include "gtest/gtest.h"
#include "tests/peaky_ctc.h"

namespace jasper {
namespace {

// The fixture models' vocabulary (tests/peaky_ctc.h).
constexpr int kVocab = test_util::kPeakyVocab;
constexpr int kBlank = test_util::kPeakyBlank;
std::vector<std::string> Labels() { return test_util::FixtureLabels(); }
using test_util::RandomLogProbs;

int Id(char c) { return c == ' ' ? 0 : c == '_' ? kBlank : c == '\'' ? 27 : c - 'a' + 1; }

// Frames from a spec: each frame is a map label -> probability; the rest of the mass is
// spread over the other labels. Returns natural-log probabilities [frames, vocab].
std::vector<float> Frames(const std::vector<std::map<char, float>>& spec) {
  std::vector<float> lp;
  for (const auto& frame : spec) {
    float used = 0;
    for (const auto& [c, p] : frame) used += p;
    const float rest = (1.0f - used) / static_cast<float>(kVocab - frame.size());
    for (int v = 0; v < kVocab; ++v) {
      float p = rest;
      for (const auto& [c, q] : frame) {
        if (Id(c) == v) p = q;
      }
      lp.push_back(std::log(std::max(p, 1e-12f)));
    }
  }
  return lp;
}

std::string Text(const std::vector<CtcToken>& tokens) { return TokensToText(tokens, Labels()); }

TEST(CtcBeamTest, BeamOfOneIsGreedyExactly) {
  const std::vector<std::string> labels = Labels();
  BeamOptions o;
  o.beam_width = 1;
  o.word_bonus = 0;
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    const int frames = 300;
    const std::vector<float> lp = RandomLogProbs(rng, frames, 2.0f + seed % 3);
    std::vector<int> ids(frames);
    std::vector<float> best(frames);
    for (int t = 0; t < frames; ++t) {
      const float* row = lp.data() + static_cast<size_t>(t) * kVocab;
      ids[t] = static_cast<int>(std::max_element(row, row + kVocab) - row);
      best[t] = row[ids[t]];
    }
    GreedyCtcDecoder greedy(kBlank);
    std::vector<CtcToken> want;
    greedy.Feed(ids, best, 0, &want);
    CtcBeamDecoder beam(&labels, kBlank, o, nullptr, nullptr);
    // In pieces, as windows arrive.
    for (int t = 0; t < frames; t += 37) {
      const int n = std::min(37, frames - t);
      beam.Feed(lp.data() + static_cast<size_t>(t) * kVocab, n, kVocab, t);
    }
    const std::vector<CtcToken> got = beam.Finish();
    ASSERT_EQ(got.size(), want.size()) << "seed " << seed;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].id, want[i].id);
      EXPECT_EQ(got[i].frame, want[i].frame);
      EXPECT_EQ(got[i].log_prob, want[i].log_prob);
    }
  }
}

TEST(CtcBeamTest, AWiderBeamSumsThePaths) {
  // Two frames of p(a) = 0.4, p(blank) = 0.6: the best path is blank blank (""), but "a" has
  // 0.16 + 0.24 + 0.24 = 0.64 of the mass against 0.36.
  const std::vector<std::string> labels = Labels();
  const std::vector<float> lp = Frames({{{'a', 0.4f}, {'_', 0.6f}}, {{'a', 0.4f}, {'_', 0.6f}}});
  BeamOptions o;
  o.word_bonus = 0;
  o.beam_width = 1;
  CtcBeamDecoder narrow(&labels, kBlank, o, nullptr, nullptr);
  narrow.Feed(lp.data(), 2, kVocab, 0);
  EXPECT_EQ(Text(narrow.Finish()), "");
  o.beam_width = 8;
  CtcBeamDecoder wide(&labels, kBlank, o, nullptr, nullptr);
  wide.Feed(lp.data(), 2, kVocab, 0);
  EXPECT_EQ(Text(wide.Finish()), "a");
}

// "c", then "o" slightly over "a", then "t": greedy reads "cot".
std::vector<float> CotOrCat() {
  return Frames({{{'c', 0.9f}},
                 {{'_', 0.9f}},
                 {{'o', 0.48f}, {'a', 0.42f}},
                 {{'_', 0.9f}},
                 {{'t', 0.9f}},
                 {{'_', 0.95f}}});
}

TEST(CtcBeamTest, TheLanguageModelFlipsAnAmbiguousWord) {
  const std::vector<std::string> labels = Labels();
  auto lm = NgramLm::FromArpa(
      "\\data\\\nngram 1=5\n\\1-grams:\n-1 <s>\n-1 </s>\n-1.0 cat\n-4.0 cot\n-3 <unk>\n\\end\\\n");
  ASSERT_TRUE(lm.ok());
  const std::vector<float> lp = CotOrCat();
  BeamOptions o;
  o.word_bonus = 0;
  CtcBeamDecoder plain(&labels, kBlank, o, nullptr, nullptr);
  plain.Feed(lp.data(), 6, kVocab, 0);
  EXPECT_EQ(Text(plain.Finish()), "cot");
  o.lm_weight = 0.5f;
  CtcBeamDecoder with_lm(&labels, kBlank, o, lm->get(), nullptr);
  with_lm.Feed(lp.data(), 6, kVocab, 0);
  EXPECT_EQ(Text(with_lm.Finish()), "cat");
  // Before the word ends no LM score applies: the interim best is still the acoustic one.
  EXPECT_EQ(Text(with_lm.Best()), "cot");
}

TEST(CtcBeamTest, BoostingRecoversAWordAndLeavesOthersAlone) {
  const std::vector<std::string> labels = Labels();
  const std::vector<float> lp = CotOrCat();
  BeamOptions o;
  o.word_bonus = 0;
  auto boost = PhraseBoost::Create({{"Cat", 2.0f}}, labels);
  ASSERT_TRUE(boost.ok()) << boost.status();
  CtcBeamDecoder boosted(&labels, kBlank, o, nullptr, boost->get());
  boosted.Feed(lp.data(), 6, kVocab, 0);
  EXPECT_EQ(Text(boosted.Finish()), "cat");
  auto unrelated = PhraseBoost::Create({{"dog", 5.0f}, {"new york", 5.0f}}, labels);
  ASSERT_TRUE(unrelated.ok());
  CtcBeamDecoder other(&labels, kBlank, o, nullptr, unrelated->get());
  other.Feed(lp.data(), 6, kVocab, 0);
  EXPECT_EQ(Text(other.Finish()), "cot");
  // A boosted phrase that is only started ("ca" of "cab") earns nothing in the end.
  auto partial = PhraseBoost::Create({{"cab", 2.0f}}, labels);
  ASSERT_TRUE(partial.ok());
  CtcBeamDecoder p(&labels, kBlank, o, nullptr, partial->get());
  p.Feed(lp.data(), 6, kVocab, 0);
  EXPECT_EQ(Text(p.Finish()), "cot");
}

TEST(PhraseBoostTest, StepsEarnAndGiveBack) {
  auto boost = PhraseBoost::Create({{"ab", 4.0f}}, Labels());
  ASSERT_TRUE(boost.ok());
  int state = PhraseBoost::kRoot;
  EXPECT_FLOAT_EQ((*boost)->Step(&state, Id('a')), 2.0f);
  EXPECT_FLOAT_EQ((*boost)->Pending(state), 2.0f);
  EXPECT_FLOAT_EQ((*boost)->Step(&state, Id('b')), 2.0f);
  EXPECT_FLOAT_EQ((*boost)->Pending(state), 0.0f);  // a whole phrase
  EXPECT_FLOAT_EQ((*boost)->Step(&state, Id(' ')), 0.0f);
  EXPECT_EQ(state, PhraseBoost::kRoot);
  EXPECT_FLOAT_EQ((*boost)->Step(&state, Id('a')), 2.0f);
  EXPECT_FLOAT_EQ((*boost)->Step(&state, Id('x')), -2.0f);  // "ax": off the phrase
  EXPECT_EQ(state, PhraseBoost::kNoMatch);
  EXPECT_FLOAT_EQ((*boost)->Step(&state, Id('a')), 0.0f);  // mid-word: no new match
  EXPECT_FLOAT_EQ((*boost)->Step(&state, Id(' ')), 0.0f);
  EXPECT_EQ(state, PhraseBoost::kRoot);
  EXPECT_EQ(PhraseBoost::Normalize("  New-York's  BEST!! "), "new york's best");
}

TEST(PhraseBoostTest, BadInputIsRefusedNamingThePhrase) {
  const std::vector<std::string> labels = Labels();
  EXPECT_NE(PhraseBoost::Create({{"ok", 1}, {"", 1}}, labels).status().message().find("phrase 1"),
            std::string::npos);
  EXPECT_FALSE(PhraseBoost::Create({{"123 !!", 1}}, labels).ok());  // no letters
  EXPECT_FALSE(PhraseBoost::Create({{"ok", NAN}}, labels).ok());
  EXPECT_FALSE(PhraseBoost::Create({{"ok", INFINITY}}, labels).ok());
  EXPECT_FALSE(PhraseBoost::Create({{"ok", 51}}, labels).ok());
  PhraseBoostLimits limits;
  limits.max_phrases = 2;
  EXPECT_FALSE(PhraseBoost::Create({{"a", 1}, {"b", 1}, {"c", 1}}, labels, limits).ok());
  limits.max_phrase_chars = 3;
  EXPECT_FALSE(PhraseBoost::Create({{"abcd", 1}}, labels, limits).ok());
  // A model without the apostrophe cannot be boosted towards one.
  std::vector<std::string> no_apostrophe(labels.begin(), labels.end() - 1);
  EXPECT_FALSE(PhraseBoost::Create({{"don't", 1}}, no_apostrophe).ok());
  for (auto* s : {&labels}) EXPECT_TRUE(PhraseBoost::Create({{"don't", 1}}, *s).ok());
}

TEST(CtcBeamTest, PeekLeavesTheStateAndCompactionChangesNothing) {
  const std::vector<std::string> labels = Labels();
  auto lm = NgramLm::FromArpa(
      "\\data\\\nngram 1=6\n\\1-grams:\n-1 <s>\n-1 </s>\n-1 a\n-1.5 ab\n-2 b\n-3 <unk>\n\\end\\\n");
  ASSERT_TRUE(lm.ok());
  std::mt19937 rng(3);
  const int frames = 3000;
  const std::vector<float> lp = RandomLogProbs(rng, frames, 1.5f);
  BeamOptions o;
  o.beam_width = 8;
  o.max_nodes = 1024;  // compacts many times
  CtcBeamDecoder small(&labels, kBlank, o, lm->get(), nullptr);
  o.max_nodes = 1 << 30;  // never
  CtcBeamDecoder big(&labels, kBlank, o, lm->get(), nullptr);
  for (int t = 0; t < frames; t += 100) {
    const float* chunk = lp.data() + static_cast<size_t>(t) * kVocab;
    small.Feed(chunk, 100, kVocab, t);
    const std::vector<CtcToken> before = small.Best();
    if (t + 200 <= frames) (void)small.Peek(chunk + 100 * kVocab, 100, kVocab, t + 100);
    EXPECT_EQ(Text(small.Best()), Text(before));
    big.Feed(chunk, 100, kVocab, t);
  }
  EXPECT_LT(small.arena_size(), big.arena_size());
  const std::vector<CtcToken> a = small.Finish(), b = big.Finish();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].frame, b[i].frame);
  }
}

TEST(CtcBeamTest, OptionsAreValidated) {
  BeamOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.beam_width = 0;
  EXPECT_NE(o.Validate().message().find("beam_width"), std::string::npos);
  o = BeamOptions();
  o.lm_weight = NAN;
  EXPECT_NE(o.Validate().message().find("lm_weight"), std::string::npos);
  o = BeamOptions();
  o.prune_log_prob = 0;
  EXPECT_FALSE(o.Validate().ok());
  o = BeamOptions();
  o.beam_prune_log_prob = NAN;
  EXPECT_NE(o.Validate().message().find("beam_prune_log_prob"), std::string::npos);
}

// Hypotheses more than beam_prune_log_prob below the best are dropped, whatever beam_width
// allows; the best path is the same.
TEST(CtcBeamTest, FarHypothesesArePruned) {
  const std::vector<float> lp = Frames({{{'a', 0.90f}, {'b', 0.02f}, {'_', 0.07f}}});
  const std::vector<std::string> labels = Labels();
  BeamOptions wide;
  wide.beam_width = 64;
  wide.prune_log_prob = 100;  // every character is tried
  wide.beam_prune_log_prob = 1000;
  BeamOptions tight = wide;
  tight.beam_prune_log_prob = 4;  // keeps a (ln 0.9), blank (-2.6 below) and b (-3.8 below)
  CtcBeamDecoder all(&labels, kBlank, wide, nullptr, nullptr);
  CtcBeamDecoder pruned(&labels, kBlank, tight, nullptr, nullptr);
  all.Feed(lp.data(), 1, kVocab, 0);
  pruned.Feed(lp.data(), 1, kVocab, 0);
  EXPECT_EQ(all.num_hypotheses(), kVocab);  // every label, blank included
  EXPECT_EQ(pruned.num_hypotheses(), 3);
  EXPECT_EQ(Text(pruned.Best()), "a");
  EXPECT_EQ(Text(all.Best()), "a");
}

}  // namespace
}  // namespace jasper
