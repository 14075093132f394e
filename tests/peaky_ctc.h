// Decoder test data over the fixture models' vocabulary (" ", a..z, "'"; blank = 28): the
// labels, random log-probabilities, and CTC-shaped ones (peaky output as trained CTC models give
// it: blank frames, then a spike of a few frames on each token's label).
// Thread-safety: pure functions (the caller's generator).
#ifndef JASPER_TESTS_PEAKY_CTC_H_
#define JASPER_TESTS_PEAKY_CTC_H_

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace jasper {
namespace test_util {

constexpr int kPeakyVocab = 29;
constexpr int kPeakyBlank = 28;

// The fixture models' labels: " ", a..z, "'" (blank = 28 follows them).
inline std::vector<std::string> FixtureLabels() {
  std::vector<std::string> l = {" "};
  for (char c = 'a'; c <= 'z'; ++c) l.emplace_back(1, c);
  l.emplace_back("'");
  return l;
}

// Frames of normal logits (blank favoured by +2), log-softmaxed: [frames, vocab] natural log.
inline std::vector<float> RandomLogProbs(std::mt19937& rng, int frames, float sharpness) {
  std::normal_distribution<float> n(0.0f, sharpness);
  std::vector<float> lp(static_cast<size_t>(frames) * kPeakyVocab);
  for (int t = 0; t < frames; ++t) {
    float* row = lp.data() + static_cast<size_t>(t) * kPeakyVocab;
    float max = -1e30f;
    for (int v = 0; v < kPeakyVocab; ++v)
      max = std::max(max, row[v] = n(rng) + (v == kPeakyBlank ? 2 : 0));
    float sum = 0;
    for (int v = 0; v < kPeakyVocab; ++v) sum += std::exp(row[v] - max);
    for (int v = 0; v < kPeakyVocab; ++v) row[v] = row[v] - max - std::log(sum);
  }
  return lp;
}

// `tokens` tokens (letters, and a space after 2+ letters now and then); per token 1-4 blank
// frames (2-5 before a repeated label, so that the repeat is a second token), then a spike of
// 1-3 frames on the label (peak probability 0.4-0.99, the label the argmax on every spike
// frame). The last blank frame before the spike already gives the label 0.001-0.3 (its onset):
// prefix beam search opens the prefix there, at a low probability. The mass left over is spread
// randomly over the other labels. Returns natural-log probabilities [frames, vocab], row-major.
inline std::vector<float> PeakyLogProbs(std::mt19937& rng, int tokens) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::uniform_int_distribution<int> letter(1, 26);
  std::vector<float> lp;
  const auto frame = [&](int label, float p, float blank_p) {
    std::vector<float> w(kPeakyVocab);
    float sum = 0;
    for (int v = 0; v < kPeakyVocab; ++v) {
      sum += (w[v] = (v == label || v == kPeakyBlank) ? 0 : u(rng));
    }
    const float rest = std::max(0.0f, 1.0f - p - blank_p);
    for (int v = 0; v < kPeakyVocab; ++v) {
      float q = w[v] / sum * rest;
      if (v == label) q = p;
      if (v == kPeakyBlank) q = blank_p;
      lp.push_back(std::log(std::max(q, 1e-9f)));
    }
  };
  int in_word = 0, previous = -1;
  for (int i = 0; i < tokens; ++i) {
    const int label = in_word >= 2 && u(rng) < 0.25f ? 0 : letter(rng);
    in_word = label == 0 ? 0 : in_word + 1;
    const int gap = (label == previous ? 2 : 1) + static_cast<int>(u(rng) * 4);
    previous = label;
    for (int g = 0; g + 1 < gap; ++g) frame(-1, 0, 0.97f + 0.029f * u(rng));
    const float onset = std::exp(std::log(0.001f) + u(rng) * std::log(300.0f));
    frame(label, onset, std::min(0.99f - onset, 0.6f + 0.38f * u(rng)));
    const float peak = 0.4f + 0.59f * u(rng);
    const int spike = 1 + static_cast<int>(u(rng) * 3);
    const int at = static_cast<int>(u(rng) * spike);
    for (int s = 0; s < spike; ++s) {
      const float p = s == at ? peak : std::max(0.45f, peak * (0.5f + 0.5f * u(rng)));
      frame(label, p, (1 - p) * 0.6f);
    }
  }
  frame(-1, 0, 0.99f);
  return lp;
}

}  // namespace test_util
}  // namespace jasper

#endif  // JASPER_TESTS_PEAKY_CTC_H_
