// CtcDecoder (engine/decoding/ctc_decoder.h): the factory's choices and errors, beam search
// refusing blocks without log-probabilities (nothing decoded), Peek leaving the state alone,
// block-by-block equal to one block, beam of one through the interface equal to greedy,
// DescribeTokens, and one confidence scale: greedy and beam search agree on the confidences of
// the same transcript.
#include "engine/decoding/ctc_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/decoding/ctc.h"
#include "gtest/gtest.h"
#include "tests/peaky_ctc.h"

namespace jasper {
namespace {

// The fixture models' vocabulary (tests/peaky_ctc.h).
constexpr int kVocab = test_util::kPeakyVocab;
constexpr int kBlank = test_util::kPeakyBlank;
std::vector<std::string> Labels() { return test_util::FixtureLabels(); }
using test_util::RandomLogProbs;

// Log-probabilities [frames, vocab] with their argmax ids and log-probs.
struct Output {
  std::vector<float> log_probs;
  std::vector<int> ids;
  std::vector<float> best;
  int frames = 0;

  explicit Output(std::vector<float> lp)
      : log_probs(std::move(lp)), frames(static_cast<int>(log_probs.size() / kVocab)) {
    for (int t = 0; t < frames; ++t) {
      const float* row = log_probs.data() + static_cast<size_t>(t) * kVocab;
      ids.push_back(static_cast<int>(std::max_element(row, row + kVocab) - row));
      best.push_back(row[ids.back()]);
    }
  }
  CtcFrames All(bool with_log_probs = true) const {
    CtcFrames f;
    f.ids = ids;
    f.best_log_probs = best;
    if (with_log_probs) {
      f.log_probs = log_probs;
      f.vocab = kVocab;
    }
    f.frames = frames;
    return f;
  }
};

void ExpectSameTokens(const std::vector<CtcToken>& a, const std::vector<CtcToken>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].frame, b[i].frame);
    EXPECT_EQ(a[i].log_prob, b[i].log_prob);
  }
}

std::unique_ptr<CtcDecoder> Create(const DecoderConfig& config,
                                   const std::vector<std::string>* labels) {
  absl::StatusOr<std::unique_ptr<CtcDecoder>> d = CreateCtcDecoder(config, labels, kBlank);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

TEST(CtcDecoderTest, TheFactoryRefusesBadBeamOptions) {
  const std::vector<std::string> labels = Labels();
  DecoderConfig config;
  config.beam_options.beam_width = 0;
  EXPECT_TRUE(CreateCtcDecoder(config, &labels, kBlank).ok());  // greedy ignores beam options
  config.beam = true;
  absl::StatusOr<std::unique_ptr<CtcDecoder>> bad = CreateCtcDecoder(config, &labels, kBlank);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("beam_width"), std::string::npos);
}

// N-best: Finish()'s tokens first, then distinct token sequences; greedy has one; n bounds it.
TEST(CtcDecoderTest, FinishNBestStartsWithFinishAndIsDistinct) {
  const std::vector<std::string> labels = Labels();
  DecoderConfig beam;
  beam.beam = true;
  beam.beam_options.beam_width = 8;
  for (unsigned seed = 1; seed <= 5; ++seed) {
    std::mt19937 rng(seed);
    const Output out(RandomLogProbs(rng, 120, 1.5f));
    std::unique_ptr<CtcDecoder> b = Create(beam, &labels);
    std::unique_ptr<CtcDecoder> g = Create(DecoderConfig(), &labels);
    ASSERT_NE(b, nullptr);
    ASSERT_NE(g, nullptr);
    // Nothing fed: the beam holds the empty prefix only.
    const std::vector<std::vector<CtcToken>> none = b->FinishNBest(3);
    ASSERT_EQ(none.size(), 1u);
    EXPECT_TRUE(none[0].empty());
    ASSERT_TRUE(b->Feed(out.All()).ok());
    ASSERT_TRUE(g->Feed(out.All()).ok());
    const std::vector<std::vector<CtcToken>> five = b->FinishNBest(5);
    ASSERT_EQ(five.size(), 5u) << "a beam of 8 over 120 noisy frames holds 5 prefixes";
    ExpectSameTokens(five[0], b->Finish());
    for (size_t i = 0; i < five.size(); ++i) {
      for (size_t j = i + 1; j < five.size(); ++j) {
        std::vector<int> a, c;
        for (const CtcToken& t : five[i]) a.push_back(t.id);
        for (const CtcToken& t : five[j]) c.push_back(t.id);
        EXPECT_NE(a, c) << "alternatives " << i << " and " << j << " are the same";
      }
    }
    const std::vector<std::vector<CtcToken>> two = b->FinishNBest(2);
    ASSERT_EQ(two.size(), 2u);
    ExpectSameTokens(two[1], five[1]);  // a prefix of the same ranking
    EXPECT_TRUE(b->FinishNBest(0).empty());
    const std::vector<std::vector<CtcToken>> greedy = g->FinishNBest(5);
    ASSERT_EQ(greedy.size(), 1u);
    ExpectSameTokens(greedy[0], g->Finish());
  }
}

TEST(CtcDecoderTest, MaxAlternativesIsValidated) {
  DecoderConfig config;
  EXPECT_TRUE(config.Validate().ok());
  config.max_alternatives = 0;
  EXPECT_NE(config.Validate().message().find("max_alternatives"), std::string::npos);
  config.max_alternatives = DecoderConfig::kMaxAlternatives + 1;
  EXPECT_EQ(config.Validate().code(), absl::StatusCode::kInvalidArgument);
  config.max_alternatives = DecoderConfig::kMaxAlternatives;
  EXPECT_TRUE(config.Validate().ok());
}

TEST(CtcDecoderTest, BeamSearchNeedsLogProbsAndDecodesNothingWithout) {
  const std::vector<std::string> labels = Labels();
  std::mt19937 rng(7);
  const Output out(RandomLogProbs(rng, 50, 3.0f));
  DecoderConfig config;
  config.beam = true;
  std::unique_ptr<CtcDecoder> beam = Create(config, &labels);
  ASSERT_NE(beam, nullptr);
  const absl::Status s = beam->Feed(out.All(/*with_log_probs=*/false));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "beam search needs the backend's log-probabilities (keep_log_probs)");
  EXPECT_EQ(beam->Peek(out.All(false)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(beam->Best().empty());
  EXPECT_FALSE(beam->HasSpeech());
  // Greedy needs only the argmax.
  std::unique_ptr<CtcDecoder> greedy = Create(DecoderConfig(), &labels);
  ASSERT_NE(greedy, nullptr);
  EXPECT_TRUE(greedy->CheckFrames(out.All(false)).ok());
  EXPECT_TRUE(greedy->Feed(out.All(false)).ok());
}

// Both decoders: blocks fed one by one (with a Peek of the next block between) give the tokens
// of one block; Peek changes nothing; Reset starts over. Beam of one equals greedy exactly.
TEST(CtcDecoderTest, BlocksPeekResetAndBeamOfOneIsGreedy) {
  const std::vector<std::string> labels = Labels();
  DecoderConfig greedy;
  DecoderConfig beam1;
  beam1.beam = true;
  beam1.beam_options.beam_width = 1;
  DecoderConfig beam8 = beam1;
  beam8.beam_options.beam_width = 8;
  for (unsigned seed = 1; seed <= 5; ++seed) {
    std::mt19937 rng(seed);
    const Output out(RandomLogProbs(rng, 200, 2.0f + seed % 3));
    std::vector<std::vector<CtcToken>> finals;
    for (const DecoderConfig* config : {&greedy, &beam1, &beam8}) {
      std::unique_ptr<CtcDecoder> whole = Create(*config, &labels);
      std::unique_ptr<CtcDecoder> blocks = Create(*config, &labels);
      ASSERT_NE(whole, nullptr);
      ASSERT_NE(blocks, nullptr);
      ASSERT_TRUE(whole->Feed(out.All()).ok());
      for (int t = 0; t < out.frames; t += 30) {
        const int end = std::min(out.frames, t + 30);
        ASSERT_TRUE(blocks->Feed(out.All().Slice(t, end)).ok());
        const std::vector<CtcToken> before = blocks->Best();
        if (end < out.frames) {
          ASSERT_TRUE(blocks->Peek(out.All().Slice(end, std::min(out.frames, end + 30))).ok());
        }
        ExpectSameTokens(blocks->Best(), before);
      }
      ExpectSameTokens(blocks->Finish(), whole->Finish());
      EXPECT_EQ(blocks->HasSpeech(), whole->HasSpeech());
      finals.push_back(whole->Finish());
      whole->Reset();
      EXPECT_TRUE(whole->Best().empty());
      EXPECT_FALSE(whole->HasSpeech());
    }
    ExpectSameTokens(finals[1], finals[0]);  // beam of one = greedy
  }
}

TEST(CtcDecoderTest, DescribeTokensGivesTextWordsAndTheMeanConfidence) {
  const std::vector<std::string> labels = Labels();
  // "ab c": a, b at frames 2, 3 (p 0.5), space at 5, c at 8 (p 0.9).
  const std::vector<CtcToken> tokens = {
      {1, 2, std::log(0.5f)}, {2, 3, std::log(0.5f)}, {0, 5, 0.0f}, {3, 8, std::log(0.9f)}};
  const TokensDescription d = DescribeTokens(tokens, labels, 20.0);
  EXPECT_EQ(d.text, "ab c");
  ASSERT_EQ(d.words.size(), 2u);
  EXPECT_EQ(d.words[0].word, "ab");
  EXPECT_EQ(d.words[0].start_ms, 40);
  EXPECT_EQ(d.words[0].end_ms, 80);
  EXPECT_NEAR(d.words[0].confidence, 0.5, 1e-5);
  EXPECT_NEAR(d.words[1].confidence, 0.9, 1e-5);
  EXPECT_NEAR(d.confidence, 0.7, 1e-5);
  EXPECT_EQ(DescribeTokens({}, labels, 20.0).confidence, 0.0f);
}

// Greedy and beam search (width 16, no LM, no boost) that read the same transcript give the
// same confidences on CTC-shaped output, although beam search opens a prefix at the label's
// onset, well below its spike: every utterance confidence within 0.05, the mean word
// confidence within 0.01, and 98 % of the words within 0.05 (a prefix reached by two
// alignments is one node in beam search: its peak may come from the other one).
TEST(CtcDecoderTest, GreedyAndBeamGiveTheSameConfidenceForTheSameTranscript) {
  const std::vector<std::string> labels = Labels();
  DecoderConfig beam_config;
  beam_config.beam = true;
  beam_config.beam_options.beam_width = 16;
  std::unique_ptr<CtcDecoder> greedy = Create(DecoderConfig(), &labels);
  std::unique_ptr<CtcDecoder> beam = Create(beam_config, &labels);
  ASSERT_NE(greedy, nullptr);
  ASSERT_NE(beam, nullptr);
  int same = 0, words = 0, close = 0;
  double worst_word = 0, worst_utterance = 0, sum_greedy = 0, sum_beam = 0;
  for (unsigned seed = 1000; seed < 1100; ++seed) {
    std::mt19937 rng(seed);
    const Output out(test_util::PeakyLogProbs(rng, 40));
    greedy->Reset();
    beam->Reset();
    ASSERT_TRUE(greedy->Feed(out.All()).ok());
    ASSERT_TRUE(beam->Feed(out.All()).ok());
    const TokensDescription g = DescribeTokens(greedy->Finish(), labels, 20.0);
    const TokensDescription b = DescribeTokens(beam->Finish(), labels, 20.0);
    if (g.text != b.text) continue;
    ++same;
    ASSERT_EQ(g.words.size(), b.words.size());
    for (size_t i = 0; i < g.words.size(); ++i) {
      const double diff = std::fabs(double{g.words[i].confidence} - b.words[i].confidence);
      worst_word = std::max(worst_word, diff);
      close += diff < 0.05 ? 1 : 0;
      sum_greedy += g.words[i].confidence;
      sum_beam += b.words[i].confidence;
      ++words;
    }
    const double diff = std::fabs(double{g.confidence} - b.confidence);
    EXPECT_LT(diff, 0.05) << "seed " << seed;
    worst_utterance = std::max(worst_utterance, diff);
  }
  EXPECT_GE(same, 80);  // most transcripts agree on this output
  ASSERT_GT(words, 0);
  EXPECT_GE(close, 0.98 * words);
  EXPECT_NEAR(sum_greedy / words, sum_beam / words, 0.01);
  std::printf(
      "%d/100 same transcripts, %d words: mean word confidence greedy %.4f beam %.4f; words "
      "within 0.05: %d; largest difference: word %.4f, utterance %.4f\n",
      same, words, sum_greedy / words, sum_beam / words, close, worst_word, worst_utterance);
}

}  // namespace
}  // namespace jasper
