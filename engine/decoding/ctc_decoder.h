// CtcDecoder: the one interface over the CTC decoders, chosen once per request (stream or
// offline utterance) by CreateCtcDecoder from a DecoderConfig: greedy (GreedyCtcDecoder,
// engine/decoding/ctc.h) or prefix beam search with an optional word LM and phrase boosts
// (CtcBeamDecoder, engine/decoding/ctc_beam.h). Both the streaming path (StreamDecoder) and
// the offline path (OfflineRecognizer) decode through it.
//
// Frames come in blocks of consecutive encoder frames (CtcFrames), in order: Feed() commits
// them; Peek() decodes a look-ahead without committing it (interim text); Best() reads the
// committed tokens; Finish() gives the utterance's final tokens; Reset() starts the next
// utterance. Tokens carry the same confidence scale whatever the decoder (CtcToken::log_prob:
// the peak log-probability of the token's label over the frames the path spends on it).
//
// Units: encoder frames (global, from the start of the stream); log-probabilities in natural
// log, as the backend's log-softmax gives them.
// Ownership: a decoder borrows `labels` (must outlive it) and shares the config's LM and boost.
// Thread-safety: not thread-safe (a per-stream value); CreateCtcDecoder is thread-safe.
#ifndef JASPER_ENGINE_DECODING_CTC_DECODER_H_
#define JASPER_ENGINE_DECODING_CTC_DECODER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/decoding/ctc.h"
#include "engine/decoding/ctc_beam.h"
#include "engine/decoding/ngram_lm.h"
#include "engine/decoding/phrase_boost.h"

namespace jasper {

// How transcripts are decoded from the backend's output: greedy CTC (the default), or CTC
// prefix beam search (engine/decoding/ctc_beam.h) with an optional word LM and phrase boosts.
// Beam search reads the full log-probabilities: the backend must keep them
// (BackendOptions::keep_log_probs).
// Validate(): INVALID_ARGUMENT naming the field (beam options) when beam is set.
struct DecoderConfig {
  bool beam = false;
  BeamOptions beam_options;
  std::shared_ptr<const NgramLm> lm;         // may be null
  std::shared_ptr<const PhraseBoost> boost;  // may be null
  // Final results carry up to this many alternatives (SessionResult::alternatives: the 2nd and
  // later); only beam search has more than one. [1, kMaxAlternatives]
  int max_alternatives = 1;
  static constexpr int kMaxAlternatives = 10;

  // INVALID_ARGUMENT naming the field.
  absl::Status Validate() const;
};

// A block of consecutive encoder frames of the backend's output. Views: the caller owns the
// memory, which must stay valid during the call that gets the block.
struct CtcFrames {
  absl::Span<const int> ids;               // [frames] argmax ids (a negative id: masked frame)
  absl::Span<const float> best_log_probs;  // [frames] log-probability of the argmax
  // [frames, vocab] row-major log-probabilities of every label; empty when the backend does
  // not keep them (greedy decoding does not need them, beam search does).
  absl::Span<const float> log_probs;
  int vocab = 0;
  int first_frame = 0;  // global index of the first frame
  int frames = 0;       // ids, best_log_probs (and log_probs' rows) have at least this many

  // The frames [begin, end) of this block (begin <= end <= frames).
  CtcFrames Slice(int begin, int end) const;
};

class CtcDecoder {
 public:
  virtual ~CtcDecoder() = default;

  // OK when this decoder can decode `frames`; FAILED_PRECONDITION "beam search needs the
  // backend's log-probabilities (keep_log_probs)" when beam search gets a block without them.
  virtual absl::Status CheckFrames(const CtcFrames& frames) const = 0;
  // Commits the frames (CheckFrames first: on an error nothing is decoded).
  virtual absl::Status Feed(const CtcFrames& frames) = 0;
  // The best tokens of the utterance if `lookahead` followed the committed frames, without
  // committing it (interim text; the state is unchanged). Errors as Feed.
  virtual absl::StatusOr<std::vector<CtcToken>> Peek(const CtcFrames& lookahead) = 0;
  // The tokens of the committed frames so far (interim: no end-of-sentence scores).
  virtual std::vector<CtcToken> Best() const = 0;
  // The final tokens of the utterance (beam with an LM: with the last word's and </s>'s
  // scores; unfinished boosts taken back). Does not reset: Reset() starts the next utterance.
  virtual std::vector<CtcToken> Finish() const = 0;
  // Up to `n` alternatives for the final result, Finish()'s first, then distinct token
  // sequences by score (beam search: the beam's other prefixes; greedy: Finish()'s only).
  // Empty when n < 1; otherwise at least one entry (possibly empty tokens).
  virtual std::vector<std::vector<CtcToken>> FinishNBest(int n) const = 0;
  // Forgets the utterance (the next frames start a new one).
  virtual void Reset() = 0;
  // Whether the utterance has speech, for endpointing: greedy, a token was emitted; beam
  // search, a committed frame's argmax was not blank.
  virtual bool HasSpeech() const = 0;
};

// Greedy (config.beam false) or beam search over `labels` (labels[i] is one character; " "
// separates words; borrowed: must outlive the decoder) with `blank_id` as in ModelConfig.
// INVALID_ARGUMENT for bad beam options (DecoderConfig::Validate).
absl::StatusOr<std::unique_ptr<CtcDecoder>> CreateCtcDecoder(const DecoderConfig& config,
                                                             const std::vector<std::string>* labels,
                                                             int blank_id);

}  // namespace jasper

#endif  // JASPER_ENGINE_DECODING_CTC_DECODER_H_
