#include "server/riva_service.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/offline_call.h"
#include "server/status_map.h"
#include "server/stream_call.h"

namespace jasper::server {
namespace {

namespace rasr = ::nvidia::riva::asr;

absl::StatusOr<CallConfig> ConfigFrom(const rasr::RecognitionConfig& c) {
  CallConfig config;
  if (absl::Status s =
          SetAudioFormat(c.encoding(), c.sample_rate_hertz(), c.audio_channel_count(), &config);
      !s.ok()) {
    return s;
  }
  config.model = c.model();
  config.language_code = c.language_code();
  config.word_time_offsets = c.enable_word_time_offsets();
  // Riva's end-of-utterance window; clients send it only when > 0.
  if (c.has_endpointing_config() && c.endpointing_config().has_stop_history()) {
    config.endpoint_silence_ms = c.endpointing_config().stop_history();
  }
  return config;
}

void FillAlternative(const SessionResult& r, const CallConfig& config,
                     rasr::SpeechRecognitionAlternative* alt) {
  alt->set_transcript(r.transcript);
  if (!r.is_final) return;
  alt->set_confidence(r.confidence);
  if (!config.word_time_offsets) return;
  for (const WordInfo& w : r.words) {
    rasr::WordInfo* out = alt->add_words();
    out->set_word(w.word);
    out->set_start_time(w.start_ms);
    out->set_end_time(w.end_ms);
    out->set_confidence(w.confidence);
  }
}

struct StreamAdapter {
  using Request = rasr::StreamingRecognizeRequest;
  using Response = rasr::StreamingRecognizeResponse;
  static constexpr const char* kApi = "nvidia.riva.asr";

  static RequestKind Classify(const Request& r) {
    switch (r.streaming_request_case()) {
      case Request::kStreamingConfig:
        return RequestKind::kConfig;
      case Request::kAudioContent:
        return RequestKind::kAudio;
      default:
        return RequestKind::kEmpty;
    }
  }
  static absl::StatusOr<CallConfig> ParseConfig(const Request& r) {
    absl::StatusOr<CallConfig> config = ConfigFrom(r.streaming_config().config());
    if (!config.ok()) return config;
    config->interim_results = r.streaming_config().interim_results();
    config->request_id = r.id().value();
    return config;
  }
  static absl::string_view Audio(const Request& r) { return r.audio_content(); }
  static std::unique_ptr<Response> MakeResult(const SessionResult& r, const CallConfig& config) {
    auto response = std::make_unique<Response>();
    rasr::StreamingRecognitionResult* result = response->add_results();
    FillAlternative(r, config, result->add_alternatives());
    result->set_is_final(r.is_final);
    if (!r.is_final) result->set_stability(r.stability);
    result->set_channel_tag(1);
    result->set_audio_processed(static_cast<float>(r.audio_processed_s));
    if (!config.request_id.empty()) response->mutable_id()->set_value(config.request_id);
    return response;
  }
  static std::unique_ptr<Response> MakeSpeechEvent(SpeechEventKind, double, int,
                                                   const CallConfig&) {
    return nullptr;  // Riva's API has no speech events
  }
};

struct OfflineAdapter {
  using Request = rasr::RecognizeRequest;
  using Response = rasr::RecognizeResponse;
  static constexpr const char* kApi = "nvidia.riva.asr";

  static absl::StatusOr<CallConfig> ParseConfig(const Request& r) {
    absl::StatusOr<CallConfig> config = ConfigFrom(r.config());
    if (config.ok()) config->request_id = r.id().value();
    return config;
  }
  static absl::string_view Audio(const Request& r) { return r.audio(); }
  static void AddResult(const SessionResult& r, const CallConfig& config, Response* response) {
    rasr::SpeechRecognitionResult* result = response->add_results();
    FillAlternative(r, config, result->add_alternatives());
    result->set_channel_tag(1);
    result->set_audio_processed(static_cast<float>(r.audio_processed_s));
  }
  static void Complete(const CallConfig& config, double, double, Response* response) {
    if (!config.request_id.empty()) response->mutable_id()->set_value(config.request_id);
  }
};

}  // namespace

grpc::ServerUnaryReactor* RivaService::Recognize(grpc::CallbackServerContext* /*context*/,
                                                 const rasr::RecognizeRequest* request,
                                                 rasr::RecognizeResponse* response) {
  return new OfflineCall<OfflineAdapter>(engine_, request, response);
}

grpc::ServerBidiReactor<rasr::StreamingRecognizeRequest, rasr::StreamingRecognizeResponse>*
RivaService::StreamingRecognize(grpc::CallbackServerContext* /*context*/) {
  return new StreamCall<StreamAdapter>(engine_);
}

grpc::ServerUnaryReactor* RivaService::GetRivaSpeechRecognitionConfig(
    grpc::CallbackServerContext* context, const rasr::RivaSpeechRecognitionConfigRequest* request,
    rasr::RivaSpeechRecognitionConfigResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!request->model_name().empty() && request->model_name() != engine_->model_name()) {
    reactor->Finish(ToGrpcStatus(absl::NotFoundError(absl::StrCat(
        "model '", request->model_name(), "' not found; served: '", engine_->model_name(), "'"))));
    return reactor;
  }
  const ServerOptions& o = engine_->options();
  for (const char* type : {"online", "offline"}) {
    rasr::RivaSpeechRecognitionConfigResponse::Config* config = response->add_model_config();
    config->set_model_name(engine_->model_name());
    auto& p = *config->mutable_parameters();
    p["type"] = type;
    p["language_code"] = engine_->language_code();
    p["sample_rate"] = std::to_string(engine_->model_sample_rate_hz());
    p["streaming"] = std::string(type) == "online" ? "true" : "false";
    p["chunk_size_ms"] = std::to_string(o.streaming.chunk_ms);
    p["left_padding_ms"] = std::to_string(o.streaming.left_context_ms);
    p["right_padding_ms"] = std::to_string(o.streaming.right_context_ms);
    p["decoder_type"] = "greedy";
    p["device"] = engine_->device_name();
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace jasper::server
