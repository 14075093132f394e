#include "server/asr_service.h"

#include <memory>
#include <string>

#include "server/offline_call.h"
#include "server/service_glue.h"
#include "server/stream_call.h"
#include "server/ws_stream_call.h"

namespace jasper::server {
namespace {

namespace pb = ::jasper::asr::v1;

// What jasper.asr.v1 adds to the shared glue (service_glue.h): force_final, speech events,
// request_id, and the utterance/latency details of its results.
struct JasperApi : ApiMessages<pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse,
                               pb::RecognizeRequest, pb::RecognizeResponse> {
  static constexpr const char* kName = "jasper.asr.v1";

  static RequestKind Classify(const StreamingRequest& r) {
    if (r.streaming_request_case() == StreamingRequest::kForceFinal) {
      return RequestKind::kForceFinal;
    }
    return ClassifyStreamingRequest(r);
  }
  static void ParseStreamingOptions(const StreamingRequest& r, CallConfig* config) {
    config->speech_events = r.streaming_config().enable_speech_events();
  }
  template <typename Request>
  static std::string RequestId(const Request& r) {
    return r.request_id();
  }
  template <typename Response>
  static void SetRequestId(const CallConfig& config, Response* response) {
    response->set_request_id(config.request_id);
  }
  static void AddResultDetails(const SessionResult& r, pb::StreamingRecognitionResult* result) {
    result->set_utterance_index(r.utterance_index);
    result->set_processing_latency_ms(static_cast<float>(r.processing_latency_ms));
    result->set_audio_start(static_cast<float>(r.audio_start_s));
  }
  static void AddResultDetails(const SessionResult& r, pb::SpeechRecognitionResult* result) {
    result->set_utterance_index(r.utterance_index);
    result->set_audio_start(static_cast<float>(r.audio_start_s));
  }
  static std::unique_ptr<StreamingResponse> MakeSpeechEvent(SpeechEventKind kind, double audio_s,
                                                            int utterance_index) {
    auto response = std::make_unique<StreamingResponse>();
    pb::SpeechEvent* event = response->mutable_speech_event();
    event->set_type(kind == SpeechEventKind::kBegin ? pb::SPEECH_ACTIVITY_BEGIN
                                                    : pb::SPEECH_ACTIVITY_END);
    event->set_audio_time(static_cast<float>(audio_s));
    event->set_utterance_index(utterance_index);
    return response;
  }
  static void AddTotals(double audio_s, double latency_ms, RecognizeResponse* response) {
    response->set_audio_duration(static_cast<float>(audio_s));
    response->set_processing_latency_ms(static_cast<float>(latency_ms));
  }
};

}  // namespace

grpc::ServerUnaryReactor* AsrService::Recognize(grpc::CallbackServerContext* /*context*/,
                                                const pb::RecognizeRequest* request,
                                                pb::RecognizeResponse* response) {
  return new OfflineCall<OfflineAdapter<JasperApi>>(engine_, request, response);
}

grpc::ServerBidiReactor<pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>*
AsrService::StreamingRecognize(grpc::CallbackServerContext* /*context*/) {
  return new StreamCall<StreamAdapter<JasperApi>>(engine_);
}

std::shared_ptr<void> StartWebSocketStream(ServingEngine* engine, std::weak_ptr<WebSocket> socket) {
  auto call = std::make_shared<WsStreamCall<StreamAdapter<JasperApi>>>(engine, std::move(socket));
  call->Begin();
  return call;
}

grpc::ServerUnaryReactor* AsrService::ListModels(grpc::CallbackServerContext* context,
                                                 const pb::ListModelsRequest* /*request*/,
                                                 pb::ListModelsResponse* response) {
  const ServerOptions& o = engine_->options();
  for (const auto& served : engine_->models()) {
    pb::ModelInfo* m = response->add_models();
    m->set_name(served->name);
    m->set_language_code(engine_->language_code());
    m->set_sample_rate_hertz(served->sample_rate_hz());
    m->set_supports_streaming(true);
    m->set_supports_offline(true);
    m->set_is_default(served.get() == &engine_->default_model());
    m->set_device(served->device_name);
    m->set_chunk_ms(o.streaming.chunk_ms);
    m->set_left_context_ms(o.streaming.left_context_ms);
    m->set_right_context_ms(o.streaming.right_context_ms);
    for (const std::string& label : served->model->config().labels) m->add_labels(label);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace jasper::server
