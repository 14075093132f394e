// RivaService: the Riva-compatible API, nvidia.riva.asr.RivaSpeechRecognition
// (proto/riva/proto/riva_asr.proto), on the same engine as AsrService, so that stock Riva
// clients work unchanged. They send the WAV file as-is (the first streaming chunk, or the
// whole Recognize audio, starts with the RIFF header) and often leave encoding and
// sample_rate_hertz unset: the session reads the header. Responses have Riva's shapes (one
// result per message, RequestId echoed, word times in ms). GetRivaSpeechRecognitionConfig
// lists the model twice, with parameters "type" = "online" and "offline", as Riva's
// `--list-models` clients filter on that key.
//
// Ownership: borrows the ServingEngine. Thread-safety: thread-safe.
#ifndef JASPER_SERVER_RIVA_SERVICE_H_
#define JASPER_SERVER_RIVA_SERVICE_H_

#include "grpcpp/grpcpp.h"
#include "riva/proto/riva_asr.grpc.pb.h"
#include "server/serving_engine.h"

namespace jasper::server {

class RivaService final : public nvidia::riva::asr::RivaSpeechRecognition::CallbackService {
 public:
  explicit RivaService(ServingEngine* engine) : engine_(engine) {}

  grpc::ServerUnaryReactor* Recognize(grpc::CallbackServerContext* context,
                                      const nvidia::riva::asr::RecognizeRequest* request,
                                      nvidia::riva::asr::RecognizeResponse* response) override;

  grpc::ServerBidiReactor<nvidia::riva::asr::StreamingRecognizeRequest,
                          nvidia::riva::asr::StreamingRecognizeResponse>*
  StreamingRecognize(grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* GetRivaSpeechRecognitionConfig(
      grpc::CallbackServerContext* context,
      const nvidia::riva::asr::RivaSpeechRecognitionConfigRequest* request,
      nvidia::riva::asr::RivaSpeechRecognitionConfigResponse* response) override;

 private:
  ServingEngine* const engine_;  // not owned
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_RIVA_SERVICE_H_
