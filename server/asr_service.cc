#include "server/asr_service.h"

#include <cmath>
#include <memory>
#include <string>

#include "server/offline_call.h"
#include "server/status_map.h"
#include "server/stream_call.h"

namespace jasper::server {
namespace {

namespace pb = ::jasper::asr::v1;

absl::StatusOr<CallConfig> ConfigFrom(const pb::RecognitionConfig& c) {
  CallConfig config;
  if (absl::Status s =
          SetAudioFormat(c.encoding(), c.sample_rate_hertz(), c.audio_channel_count(), &config);
      !s.ok()) {
    return s;
  }
  config.model = c.model();
  config.language_code = c.language_code();
  config.word_time_offsets = c.enable_word_time_offsets();
  if (c.has_endpointing_config() && c.endpointing_config().has_stop_history()) {
    config.endpoint_silence_ms = c.endpointing_config().stop_history();
  }
  return config;
}

void FillAlternative(const SessionResult& r, const CallConfig& config,
                     pb::SpeechRecognitionAlternative* alt) {
  alt->set_transcript(r.transcript);
  if (!r.is_final) return;
  alt->set_confidence(r.confidence);
  if (!config.word_time_offsets) return;
  for (const WordInfo& w : r.words) {
    pb::WordInfo* out = alt->add_words();
    out->set_word(w.word);
    out->set_start_time(w.start_ms);
    out->set_end_time(w.end_ms);
    out->set_confidence(w.confidence);
  }
}

struct StreamAdapter {
  using Request = pb::StreamingRecognizeRequest;
  using Response = pb::StreamingRecognizeResponse;
  static constexpr const char* kApi = "jasper.asr.v1";

  static RequestKind Classify(const Request& r) {
    switch (r.streaming_request_case()) {
      case Request::kStreamingConfig:
        return RequestKind::kConfig;
      case Request::kAudioContent:
        return RequestKind::kAudio;
      case Request::kForceFinal:
        return RequestKind::kForceFinal;
      default:
        return RequestKind::kEmpty;
    }
  }
  static absl::StatusOr<CallConfig> ParseConfig(const Request& r) {
    absl::StatusOr<CallConfig> config = ConfigFrom(r.streaming_config().config());
    if (!config.ok()) return config;
    config->interim_results = r.streaming_config().interim_results();
    config->speech_events = r.streaming_config().enable_speech_events();
    config->request_id = r.request_id();
    return config;
  }
  static absl::string_view Audio(const Request& r) { return r.audio_content(); }
  static std::unique_ptr<Response> MakeResult(const SessionResult& r, const CallConfig& config) {
    auto response = std::make_unique<Response>();
    pb::StreamingRecognitionResult* result = response->add_results();
    FillAlternative(r, config, result->add_alternatives());
    result->set_is_final(r.is_final);
    if (!r.is_final) result->set_stability(r.stability);
    result->set_channel_tag(1);
    result->set_audio_processed(static_cast<float>(r.audio_processed_s));
    result->set_utterance_index(r.utterance_index);
    result->set_processing_latency_ms(static_cast<float>(r.processing_latency_ms));
    result->set_audio_start(static_cast<float>(r.audio_start_s));
    response->set_request_id(config.request_id);
    return response;
  }
  static std::unique_ptr<Response> MakeSpeechEvent(SpeechEventKind kind, double audio_s,
                                                   int utterance_index, const CallConfig& config) {
    auto response = std::make_unique<Response>();
    pb::SpeechEvent* event = response->mutable_speech_event();
    event->set_type(kind == SpeechEventKind::kBegin ? pb::SPEECH_ACTIVITY_BEGIN
                                                    : pb::SPEECH_ACTIVITY_END);
    event->set_audio_time(static_cast<float>(audio_s));
    event->set_utterance_index(utterance_index);
    response->set_request_id(config.request_id);
    return response;
  }
};

struct OfflineAdapter {
  using Request = pb::RecognizeRequest;
  using Response = pb::RecognizeResponse;
  static constexpr const char* kApi = "jasper.asr.v1";

  static absl::StatusOr<CallConfig> ParseConfig(const Request& r) {
    absl::StatusOr<CallConfig> config = ConfigFrom(r.config());
    if (config.ok()) config->request_id = r.request_id();
    return config;
  }
  static absl::string_view Audio(const Request& r) { return r.audio(); }
  static void AddResult(const SessionResult& r, const CallConfig& config, Response* response) {
    pb::SpeechRecognitionResult* result = response->add_results();
    FillAlternative(r, config, result->add_alternatives());
    result->set_channel_tag(1);
    result->set_audio_processed(static_cast<float>(r.audio_processed_s));
    result->set_utterance_index(r.utterance_index);
    result->set_audio_start(static_cast<float>(r.audio_start_s));
  }
  static void Complete(const CallConfig& config, double audio_s, double latency_ms,
                       Response* response) {
    response->set_audio_duration(static_cast<float>(audio_s));
    response->set_processing_latency_ms(static_cast<float>(latency_ms));
    response->set_request_id(config.request_id);
  }
};

}  // namespace

grpc::ServerUnaryReactor* AsrService::Recognize(grpc::CallbackServerContext* /*context*/,
                                                const pb::RecognizeRequest* request,
                                                pb::RecognizeResponse* response) {
  return new OfflineCall<OfflineAdapter>(engine_, request, response);
}

grpc::ServerBidiReactor<pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>*
AsrService::StreamingRecognize(grpc::CallbackServerContext* /*context*/) {
  return new StreamCall<StreamAdapter>(engine_);
}

grpc::ServerUnaryReactor* AsrService::ListModels(grpc::CallbackServerContext* context,
                                                 const pb::ListModelsRequest* /*request*/,
                                                 pb::ListModelsResponse* response) {
  const ServerOptions& o = engine_->options();
  pb::ModelInfo* m = response->add_models();
  m->set_name(engine_->model_name());
  m->set_language_code(engine_->language_code());
  m->set_sample_rate_hertz(engine_->model_sample_rate_hz());
  m->set_supports_streaming(true);
  m->set_supports_offline(true);
  m->set_is_default(true);
  m->set_device(engine_->device_name());
  m->set_chunk_ms(o.streaming.chunk_ms);
  m->set_left_context_ms(o.streaming.left_context_ms);
  m->set_right_context_ms(o.streaming.right_context_ms);
  for (const std::string& label : engine_->model().config().labels) m->add_labels(label);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace jasper::server
