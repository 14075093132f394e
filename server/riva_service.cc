#include "server/riva_service.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/offline_call.h"
#include "server/service_glue.h"
#include "server/status_map.h"
#include "server/stream_call.h"

namespace jasper::server {
namespace {

namespace rasr = ::nvidia::riva::asr;

// What Riva's API differs in from the shared glue (service_glue.h): no force-final control, no
// speech events, the request id as `id.value` (echoed only when set), and no result details
// beyond the shared fields.
struct RivaApi : ApiMessages<rasr::StreamingRecognizeRequest, rasr::StreamingRecognizeResponse,
                             rasr::RecognizeRequest, rasr::RecognizeResponse> {
  static constexpr const char* kName = "nvidia.riva.asr";

  static RequestKind Classify(const StreamingRequest& r) { return ClassifyStreamingRequest(r); }
  static void ParseStreamingOptions(const StreamingRequest&, CallConfig*) {}
  template <typename Request>
  static std::string RequestId(const Request& r) {
    return r.id().value();
  }
  template <typename Response>
  static void SetRequestId(const CallConfig& config, Response* response) {
    if (!config.request_id.empty()) response->mutable_id()->set_value(config.request_id);
  }
  template <typename Result>
  static void AddResultDetails(const SessionResult&, Result*) {}
  static std::unique_ptr<StreamingResponse> MakeSpeechEvent(SpeechEventKind, double, int) {
    return nullptr;  // Riva's API has no speech events
  }
  static void AddTotals(double, double, RecognizeResponse*) {}
};

}  // namespace

grpc::ServerUnaryReactor* RivaService::Recognize(grpc::CallbackServerContext* /*context*/,
                                                 const rasr::RecognizeRequest* request,
                                                 rasr::RecognizeResponse* response) {
  return new OfflineCall<OfflineAdapter<RivaApi>>(engine_, request, response);
}

grpc::ServerBidiReactor<rasr::StreamingRecognizeRequest, rasr::StreamingRecognizeResponse>*
RivaService::StreamingRecognize(grpc::CallbackServerContext* /*context*/) {
  return new StreamCall<StreamAdapter<RivaApi>>(engine_);
}

grpc::ServerUnaryReactor* RivaService::GetRivaSpeechRecognitionConfig(
    grpc::CallbackServerContext* context, const rasr::RivaSpeechRecognitionConfigRequest* request,
    rasr::RivaSpeechRecognitionConfigResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::vector<const ServedModel*> listed;
  if (request->model_name().empty()) {
    for (const auto& served : engine_->models()) listed.push_back(served.get());
  } else {
    absl::StatusOr<const ServedModel*> served = engine_->FindModel(request->model_name());
    if (!served.ok()) {
      reactor->Finish(ToGrpcStatus(served.status()));
      return reactor;
    }
    listed.push_back(*served);
  }
  const ServerOptions& o = engine_->options();
  for (const ServedModel* served : listed) {
    for (const char* type : {"online", "offline"}) {
      rasr::RivaSpeechRecognitionConfigResponse::Config* config = response->add_model_config();
      config->set_model_name(served->name);
      auto& p = *config->mutable_parameters();
      p["type"] = type;
      p["language_code"] = engine_->language_code();
      p["sample_rate"] = std::to_string(served->sample_rate_hz());
      p["streaming"] = std::string(type) == "online" ? "true" : "false";
      p["chunk_size_ms"] = std::to_string(o.streaming.chunk_ms);
      p["left_padding_ms"] = std::to_string(o.streaming.left_context_ms);
      p["right_padding_ms"] = std::to_string(o.streaming.right_context_ms);
      // greedy or beam (speech_contexts always use beam)
      p["decoder_type"] = engine_->DefaultDecoder(*served);
      p["device"] = served->device_name;
    }
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace jasper::server
