#include "engine/decoding/ctc.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace jasper {

void GreedyCtcDecoder::Feed(absl::Span<const int> ids, absl::Span<const float> best_log_probs,
                            int first_frame, std::vector<CtcToken>* tokens) {
  for (size_t t = 0; t < ids.size(); ++t) {
    const int id = ids[t];
    if (id < 0) continue;  // masked frame
    const float log_prob = t < best_log_probs.size() ? best_log_probs[t] : 0.0f;
    if (id != blank_id_ && id != previous_) {
      tokens->push_back({id, first_frame + static_cast<int>(t), log_prob});
    } else if (id != blank_id_ && !tokens->empty() && tokens->back().id == id) {
      // The token's run goes on: its confidence is the run's peak.
      tokens->back().log_prob = std::max(tokens->back().log_prob, log_prob);
    }
    previous_ = id;
  }
}

std::string TokensToText(absl::Span<const CtcToken> tokens,
                         const std::vector<std::string>& labels) {
  std::string text;
  for (const CtcToken& token : tokens) {
    if (token.id < 0 || token.id >= static_cast<int>(labels.size())) continue;
    const std::string& label = labels[token.id];
    const bool punctuation =
        label.size() == 1 && std::ispunct(static_cast<unsigned char>(label[0])) != 0;
    if (punctuation && !text.empty() && text.back() == ' ') text.pop_back();
    text += label;
  }
  return text;
}

std::vector<WordInfo> TokensToWords(absl::Span<const CtcToken> tokens,
                                    const std::vector<std::string>& labels, double ms_per_frame) {
  std::vector<WordInfo> words;
  WordInfo current;
  double log_prob_sum = 0.0;
  int count = 0;
  int last_frame = 0;
  auto flush = [&]() {
    if (count == 0) return;
    current.end_ms = static_cast<int>(std::lround((last_frame + 1) * ms_per_frame));
    current.confidence = static_cast<float>(std::exp(log_prob_sum / count));
    words.push_back(current);
    current = WordInfo();
    log_prob_sum = 0.0;
    count = 0;
  };
  for (const CtcToken& token : tokens) {
    if (token.id < 0 || token.id >= static_cast<int>(labels.size())) continue;
    const std::string& label = labels[token.id];
    if (label == " ") {
      flush();
      continue;
    }
    if (count == 0) current.start_ms = static_cast<int>(std::lround(token.frame * ms_per_frame));
    current.word += label;
    log_prob_sum += token.log_prob;
    last_frame = token.frame;
    ++count;
  }
  flush();
  return words;
}

TokensDescription DescribeTokens(absl::Span<const CtcToken> tokens,
                                 const std::vector<std::string>& labels, double ms_per_frame) {
  TokensDescription d;
  d.text = TokensToText(tokens, labels);
  d.words = TokensToWords(tokens, labels, ms_per_frame);
  float sum = 0.0f;
  for (const WordInfo& w : d.words) sum += w.confidence;
  d.confidence = d.words.empty() ? 0.0f : sum / static_cast<float>(d.words.size());
  return d;
}

}  // namespace jasper
