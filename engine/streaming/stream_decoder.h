// StreamDecoder: CTC over a stream's windows, in order: a window's chunk frames are committed
// to the stream's CtcDecoder (engine/decoding/ctc_decoder.h: greedy or beam search, the state
// carried across windows), its look-ahead frames give interim text (CtcDecoder::Peek, never
// committed); the endpoint rule splits the stream into utterances; results are built here
// (text, words and times, confidence: DescribeTokens; latency).
// A plain value: no locks, threads or clock (the caller passes `now`), unit-tested on
// hand-made window results. StreamSession holds one under its lock.
//
// Units: encoder frames from the start of the stream; times in ms (Model::encoder_frame_ms()).
// Ownership: borrows the Model (must outlive the decoder).
// Thread-safety: not thread-safe (a per-stream value).
#ifndef JASPER_ENGINE_STREAMING_STREAM_DECODER_H_
#define JASPER_ENGINE_STREAMING_STREAM_DECODER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/decoding/ctc.h"
#include "engine/decoding/ctc_decoder.h"
#include "engine/model/model.h"
#include "engine/streaming/window_result.h"
#include "engine/streaming/windower.h"
#include "engine/text/written_words.h"

namespace jasper {

// Another hypothesis for a final result (DecoderConfig::max_alternatives).
struct SessionAlternative {
  std::string transcript;
  float confidence = 0.0f;      // mean of the word confidences, in [0, 1]
  std::vector<WordInfo> words;  // ms from the stream start
};

struct SessionResult {
  std::string transcript;  // the utterance's text so far (interim) or all of it (final)
  bool is_final = false;
  float stability = 0.0f;        // 1.0 final; interim: 0.9 committed tokens only, 0.5 with
                                 // tokens from the look-ahead
  float confidence = 0.0f;       // mean of the word confidences, in [0, 1]
  std::vector<WordInfo> words;   // final results only; ms from the stream start
  int utterance_index = 0;       // 0, 1, ... in stream order (per channel)
  int channel = 0;               // per-channel recognition: the channel, 0-based; else 0
  double audio_start_s = 0;      // start of the utterance (from the stream start)
  double audio_processed_s = 0;  // audio covered by this result (from the stream start)
  // Time from the arrival of the last audio this result needed (or the ForceFinal()/Finish()
  // call that allowed it without more audio) to the result.
  double processing_latency_ms = 0;
  // Final results with max_alternatives > 1 (beam search): up to max_alternatives - 1 other
  // hypotheses, best first, each reading differently (ignoring spacing) from the others and
  // from `transcript`.
  std::vector<SessionAlternative> alternatives;
};

// Endpointing: a run of `silence_frames` blank frames after some speech ends the utterance.
class EndpointRule {
 public:
  explicit EndpointRule(int silence_frames) : silence_frames_(silence_frames) {}  // 0: off
  // One decoded frame; `has_speech`: the utterance has tokens. True: the utterance ends here.
  bool Update(bool blank, bool has_speech) {
    blank_run_ = blank ? blank_run_ + 1 : 0;
    return silence_frames_ > 0 && has_speech && blank_run_ >= silence_frames_;
  }
  void Reset() { blank_run_ = 0; }

 private:
  int silence_frames_;
  int blank_run_ = 0;
};

class StreamDecoder {
 public:
  // endpoint_silence_frames: EndpointRule's (0: off); interim_results: emit is_final=false
  // results after each window; decoder: greedy, or beam search (the window results must then
  // carry log_probs; the decoder shares its LM and boost). The config should be valid
  // (StreamingOptions::Validate checks it); if not, status() and every DecodeWindow() return
  // CreateCtcDecoder's INVALID_ARGUMENT and nothing is decoded.
  // `text`: the post-processing stages of results (borrowed; none by default): written form,
  // punctuation (engine/text/written_words.h).
  StreamDecoder(const Model* model, int endpoint_silence_frames, bool interim_results,
                const DecoderConfig& decoder = {}, const TextStages& text = {});

  // OK, or the decoder config's error (see the constructor).
  const absl::Status& status() const { return status_; }

  // Decodes a window's chunk frames (final tokens, ending utterances at endpoints), then its
  // look-ahead frames as interim text unless the slot is the last before a flush. Appends
  // the results (finals of ended utterances, then at most one interim). FAILED_PRECONDITION
  // when beam search gets a result without log-probabilities (nothing is decoded then).
  absl::Status DecodeWindow(const WindowSlot& slot, const WindowResult& r, absl::Time now,
                            std::vector<SessionResult>* out);
  // A ForceFinal (finish = false) or Finish marker at `end_frame`: ends the utterance with a
  // final result (even if empty); for Finish, only when it has tokens or no final came yet.
  void EndUtterance(bool finish, int64_t end_frame, absl::Time audio_time, absl::Time now,
                    std::vector<SessionResult>* out);

  int utterance_index() const { return utterance_index_; }

 private:
  // An interim result of `tokens` unless it repeats the last one.
  void EmitInterim(const std::vector<CtcToken>& tokens, bool from_lookahead, const WindowSlot& slot,
                   absl::Time now, std::vector<SessionResult>* out);
  // Text, words and confidence of `tokens` into `res`.
  void Describe(const std::vector<CtcToken>& tokens, bool with_words, SessionResult* res) const;
  double FramesToSeconds(int64_t frames) const;

  const Model* const model_;
  const TextStages text_;  // stages all null: verbatim
  const bool interim_results_;
  const int max_alternatives_;
  const int blank_id_;
  absl::Status status_;                  // CreateCtcDecoder's
  std::unique_ptr<CtcDecoder> decoder_;  // the current utterance's; null when !status_.ok()
  EndpointRule endpoint_;
  int64_t utterance_start_frame_ = 0;
  int64_t processed_frames_ = 0;
  int utterance_index_ = 0;
  bool any_final_ = false;
  std::string last_interim_;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_STREAM_DECODER_H_
