// Greedy CTC decoding: per-frame argmax ids -> tokens (repeats merged unless a blank separates
// them, blanks dropped; NeMo's rule), carried across chunks for streaming, plus word timings.
//
// Thread-safety: GreedyCtcDecoder is a per-stream value type, not thread-safe; the free
// functions are pure.
#ifndef JASPER_ENGINE_DECODING_CTC_H_
#define JASPER_ENGINE_DECODING_CTC_H_

#include <string>
#include <vector>

#include "absl/types/span.h"

namespace jasper {

// One emitted token. `log_prob` is the token's confidence, on one scale for every decoder:
// the peak (natural-log) probability its label reaches over the frames the path spends on the
// token (greedy: the run of equal argmax frames that emitted it; beam search: the frames a kept
// hypothesis stays on the prefix's last label, blank frames excluded). A word's confidence is the
// geometric mean of its tokens' (TokensToWords).
struct CtcToken {
  int id = 0;
  int frame = 0;          // encoder frame where the token starts (global, from the stream start)
  float log_prob = 0.0f;  // the peak log-probability of the label over the token's frames
};

class GreedyCtcDecoder {
 public:
  explicit GreedyCtcDecoder(int blank_id) : blank_id_(blank_id), previous_(blank_id) {}

  // Consumes consecutive frames starting at global frame `first_frame`; appends the emitted
  // tokens. ids and best_log_probs have one entry per frame. A token whose run of frames goes
  // on into this call is the last one of *tokens (pass the same vector in every call): its
  // log_prob rises to the run's peak.
  void Feed(absl::Span<const int> ids, absl::Span<const float> best_log_probs, int first_frame,
            std::vector<CtcToken>* tokens);
  // Forget the previous token (start of a new utterance).
  void Reset() { previous_ = blank_id_; }
  int blank_id() const { return blank_id_; }

 private:
  int blank_id_;
  int previous_;
};

struct WordInfo {
  std::string word;
  int start_ms = 0;
  int end_ms = 0;
  float confidence = 0.0f;  // geometric mean of the word's token probabilities, in [0, 1]
};

// Concatenated labels of the tokens, post-processed as NeMo's CTCDecoding does: one whitespace
// before a punctuation label (a one-character ASCII punctuation label, e.g. "'") is removed.
std::string TokensToText(absl::Span<const CtcToken> tokens, const std::vector<std::string>& labels);

// Splits tokens into words at labels equal to " ". A word starts at its first token's frame and
// ends one frame after its last token; times in ms = frame * ms_per_frame.
std::vector<WordInfo> TokensToWords(absl::Span<const CtcToken> tokens,
                                    const std::vector<std::string>& labels, double ms_per_frame);

// What a result reports of its tokens, whatever the decoder (streaming and offline alike).
struct TokensDescription {
  std::string text;             // TokensToText
  std::vector<WordInfo> words;  // TokensToWords: times in ms, confidences in [0, 1]
  float confidence = 0.0f;      // mean of the word confidences, in [0, 1]; 0 without words
};
TokensDescription DescribeTokens(absl::Span<const CtcToken> tokens,
                                 const std::vector<std::string>& labels, double ms_per_frame);

}  // namespace jasper

#endif  // JASPER_ENGINE_DECODING_CTC_H_
