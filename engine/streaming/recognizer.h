// Offline recognition: whole utterances -> features -> backend -> CTC decoding (a CtcDecoder:
// greedy, or beam search with an LM and boosts: SetDecoder) -> transcripts.
// Used by the offline command (tools/transcribe.cc) and the parity tests. The server's
// streaming path uses the scheduler and sessions instead; both share Featurizer, Backend and
// the CTC decoder.
//
// Ownership: shares the Model, owns one Featurizer and one Backend.
// Thread-safety: not thread-safe (one Backend); use one recognizer per thread.
#ifndef JASPER_ENGINE_STREAMING_RECOGNIZER_H_
#define JASPER_ENGINE_STREAMING_RECOGNIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/decoding/ctc.h"
#include "engine/decoding/ctc_decoder.h"
#include "engine/features/features.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"

namespace jasper {

struct Transcript {
  std::string text;
  std::vector<CtcToken> tokens;
  std::vector<WordInfo> words;
  float confidence = 0.0f;  // mean of the word confidences (0 when no words)
  int encoder_frames = 0;
  double audio_seconds = 0.0;
};

class OfflineRecognizer {
 public:
  static absl::StatusOr<std::unique_ptr<OfflineRecognizer>> Create(
      std::shared_ptr<const Model> model, const BackendOptions& options);
  // Wraps an existing backend (tests: reference vs fused backends).
  static absl::StatusOr<std::unique_ptr<OfflineRecognizer>> Create(
      std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend);

  // Each utterance is mono audio at the model's sample rate, floats in [-1, 1]. The utterances
  // run as one padded batch. `outputs` (optional) receives the raw backend output.
  absl::StatusOr<std::vector<Transcript>> RecognizeBatch(
      const std::vector<absl::Span<const float>>& utterances, BackendOutput* outputs = nullptr);

  // Features already computed ([frames, features] each, valid frames only or padded with
  // lengths given by Features::valid_frames).
  absl::StatusOr<std::vector<Transcript>> RecognizeFeatures(const std::vector<Features>& features,
                                                            BackendOutput* outputs = nullptr);

  // INVALID_ARGUMENT for bad beam options. Recognizing with beam search on a backend that does
  // not keep its log-probabilities fails with FAILED_PRECONDITION.
  absl::Status SetDecoder(DecoderConfig config);

  const Featurizer& featurizer() const { return model_->featurizer(); }
  const Model& model() const { return *model_; }
  const Backend& backend() const { return *backend_; }
  // Milliseconds per encoder frame (hop x subsampling; 20 ms for QuartzNet/Jasper).
  double ms_per_frame() const;

 private:
  OfflineRecognizer(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend);
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  DecoderConfig decoder_;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_RECOGNIZER_H_
