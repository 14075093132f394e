#include "engine/decoding/ctc.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace jasper {
namespace {

const std::vector<std::string> kLabels = {" ", "a", "b", "c", "'"};  // blank = 5
constexpr int kBlank = 5;

std::string Decode(const std::vector<int>& ids) {
  GreedyCtcDecoder decoder(kBlank);
  std::vector<float> lp(ids.size(), 0.0f);
  std::vector<CtcToken> tokens;
  decoder.Feed(ids, lp, 0, &tokens);
  return TokensToText(tokens, kLabels);
}

TEST(GreedyCtc, MergesRepeatsDropsBlanks) {
  EXPECT_EQ(Decode({1, 1, 5, 1, 2, 2, 5, 5, 3}), "aabc");
  EXPECT_EQ(Decode({5, 5, 5}), "");
  EXPECT_EQ(Decode({1, 1, 1}), "a");
  EXPECT_EQ(Decode({1, 0, 1}), "a a");
  EXPECT_EQ(Decode({}), "");
  EXPECT_EQ(Decode({-1, 1, -1}), "a");     // masked frames are skipped
  EXPECT_EQ(Decode({1, 0, 4, 2}), "a'b");  // NeMo drops the space before punctuation
}

// Splitting the frames into chunks at any point gives the same tokens as one pass.
TEST(GreedyCtc, ChunkedEqualsWhole) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> id(0, kBlank);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int> ids(1 + rng() % 60);
    for (int& v : ids) v = id(rng);
    std::vector<float> lp(ids.size(), -0.1f);
    GreedyCtcDecoder whole(kBlank);
    std::vector<CtcToken> expected;
    whole.Feed(ids, lp, 0, &expected);
    GreedyCtcDecoder chunked(kBlank);
    std::vector<CtcToken> actual;
    size_t pos = 0;
    while (pos < ids.size()) {
      size_t n = std::min(ids.size() - pos, static_cast<size_t>(1 + rng() % 7));
      chunked.Feed(absl::MakeConstSpan(ids.data() + pos, n),
                   absl::MakeConstSpan(lp.data() + pos, n), static_cast<int>(pos), &actual);
      pos += n;
    }
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      EXPECT_EQ(actual[i].id, expected[i].id);
      EXPECT_EQ(actual[i].frame, expected[i].frame);
    }
  }
}

TEST(GreedyCtc, WordTimesAndConfidence) {
  // "ab c" at frames 2,3 | space 5 | c 8
  std::vector<int> ids = {5, 5, 1, 2, 5, 0, 5, 5, 3, 5};
  std::vector<float> lp = {0, 0, std::log(0.5f), std::log(0.5f), 0, 0, 0, 0, std::log(0.9f), 0};
  GreedyCtcDecoder decoder(kBlank);
  std::vector<CtcToken> tokens;
  decoder.Feed(ids, lp, 0, &tokens);
  std::vector<WordInfo> words = TokensToWords(tokens, kLabels, 20.0);
  ASSERT_EQ(words.size(), 2u);
  EXPECT_EQ(words[0].word, "ab");
  EXPECT_EQ(words[0].start_ms, 40);
  EXPECT_EQ(words[0].end_ms, 80);
  EXPECT_NEAR(words[0].confidence, 0.5, 1e-5);
  EXPECT_EQ(words[1].word, "c");
  EXPECT_EQ(words[1].start_ms, 160);
  EXPECT_EQ(words[1].end_ms, 180);
  EXPECT_NEAR(words[1].confidence, 0.9, 1e-5);
}

}  // namespace
}  // namespace jasper
