#include "engine/streaming/recognizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/runtime/backend_factory.h"
#include "engine/status_macros.h"

namespace jasper {

OfflineRecognizer::OfflineRecognizer(std::shared_ptr<const Model> model,
                                     std::unique_ptr<Backend> backend)
    : model_(std::move(model)), backend_(std::move(backend)) {}

absl::StatusOr<std::unique_ptr<OfflineRecognizer>> OfflineRecognizer::Create(
    std::shared_ptr<const Model> model, const BackendOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("OfflineRecognizer: no model");
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend(model, options);
  if (!backend.ok()) return backend.status();
  return Create(std::move(model), *std::move(backend));
}

absl::StatusOr<std::unique_ptr<OfflineRecognizer>> OfflineRecognizer::Create(
    std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend) {
  if (model == nullptr || backend == nullptr) {
    return absl::InvalidArgumentError("OfflineRecognizer: no model or backend");
  }
  return std::unique_ptr<OfflineRecognizer>(
      new OfflineRecognizer(std::move(model), std::move(backend)));
}

double OfflineRecognizer::ms_per_frame() const { return model_->encoder_frame_ms(); }

absl::StatusOr<std::vector<Transcript>> OfflineRecognizer::RecognizeBatch(
    const std::vector<absl::Span<const float>>& utterances, BackendOutput* outputs) {
  std::vector<Features> features;
  features.reserve(utterances.size());
  for (size_t i = 0; i < utterances.size(); ++i) {
    absl::StatusOr<Features> f = featurizer().Compute(utterances[i]);
    if (!f.ok()) {
      return absl::Status(f.status().code(),
                          absl::StrCat("utterance ", i, ": ", f.status().message()));
    }
    features.push_back(*std::move(f));
  }
  absl::StatusOr<std::vector<Transcript>> transcripts = RecognizeFeatures(features, outputs);
  if (transcripts.ok()) {
    for (size_t i = 0; i < utterances.size(); ++i) {
      (*transcripts)[i].audio_seconds =
          static_cast<double>(utterances[i].size()) / model_->config().featurizer.sample_rate;
    }
  }
  return transcripts;
}

absl::Status OfflineRecognizer::SetDecoder(DecoderConfig config) {
  JASPER_RETURN_IF_ERROR(config.Validate());
  decoder_ = std::move(config);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Transcript>> OfflineRecognizer::RecognizeFeatures(
    const std::vector<Features>& features, BackendOutput* outputs) {
  if (features.empty()) return std::vector<Transcript>();
  const int num_features = model_->config().feat_in;
  std::vector<const Features*> members;
  members.reserve(features.size());
  for (const Features& f : features) {
    if (f.num_features != num_features) {
      return absl::InvalidArgumentError(absl::StrCat("features have ", f.num_features,
                                                     " channels, model expects ", num_features));
    }
    members.push_back(&f);
  }
  const int batch = static_cast<int>(features.size());
  // Padded to the longest; the lengths keep the padding masked.
  absl::StatusOr<PaddedFeatureBatch> padded = PaddedFeatureBatch::Pack(members);
  if (!padded.ok()) return padded.status();
  const FeatureBatch input = padded->batch();
  BackendOutput local;
  BackendOutput* out = outputs != nullptr ? outputs : &local;
  JASPER_RETURN_IF_ERROR(backend_->Run(input, out));

  const std::vector<std::string>& labels = model_->config().labels;
  JASPER_ASSIGN_OR_RETURN(std::unique_ptr<CtcDecoder> decoder,
                          CreateCtcDecoder(decoder_, &labels, model_->config().blank_id()));
  // The full log-probabilities when the backend kept them (beam search needs them).
  const bool have_log_probs =
      out->vocab > 0 &&
      out->log_probs.size() == static_cast<size_t>(batch) * out->time * out->vocab;
  std::vector<Transcript> transcripts(batch);
  for (int b = 0; b < batch; ++b) {
    Transcript& t = transcripts[b];
    const size_t offset = static_cast<size_t>(b) * out->time;
    const int length = out->lengths[b];
    CtcFrames frames;
    frames.ids = absl::MakeConstSpan(out->ids.data() + offset, length);
    frames.best_log_probs = absl::MakeConstSpan(out->best_log_probs.data() + offset, length);
    if (have_log_probs) {
      frames.log_probs = absl::MakeConstSpan(out->log_probs.data() + offset * out->vocab,
                                             static_cast<size_t>(length) * out->vocab);
      frames.vocab = out->vocab;
    }
    frames.frames = length;
    decoder->Reset();
    JASPER_RETURN_IF_ERROR(decoder->Feed(frames));
    t.tokens = decoder->Finish();
    TokensDescription d = DescribeTokens(t.tokens, labels, ms_per_frame());
    t.text = std::move(d.text);
    t.words = std::move(d.words);
    t.confidence = d.confidence;
    t.encoder_frames = length;
  }
  return transcripts;
}

}  // namespace jasper
