// AsrService: jasper-serve's own API, jasper.asr.v1.Asr (proto/jasper/asr/v1/asr.proto), on
// the callback API. StreamingRecognize and Recognize are StreamCall/OfflineCall with this
// API's adapters; ListModels describes the served model.
//
// Ownership: borrows the ServingEngine (must outlive the gRPC server).
// Thread-safety: thread-safe (gRPC calls the methods concurrently).
#ifndef JASPER_SERVER_ASR_SERVICE_H_
#define JASPER_SERVER_ASR_SERVICE_H_

#include "grpcpp/grpcpp.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "server/http_server.h"
#include "server/serving_engine.h"

namespace jasper::server {

class AsrService final : public jasper::asr::v1::Asr::CallbackService {
 public:
  explicit AsrService(ServingEngine* engine) : engine_(engine) {}

  grpc::ServerUnaryReactor* Recognize(grpc::CallbackServerContext* context,
                                      const jasper::asr::v1::RecognizeRequest* request,
                                      jasper::asr::v1::RecognizeResponse* response) override;

  grpc::ServerBidiReactor<jasper::asr::v1::StreamingRecognizeRequest,
                          jasper::asr::v1::StreamingRecognizeResponse>*
  StreamingRecognize(grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const jasper::asr::v1::ListModelsRequest* request,
                                       jasper::asr::v1::ListModelsResponse* response) override;

 private:
  ServingEngine* const engine_;  // not owned
};

// The WebSocket front's streaming call (server/ws_stream_call.h) on this API's messages:
// starts it on `socket` and returns it for the connection to own.
std::shared_ptr<void> StartWebSocketStream(ServingEngine* engine, std::weak_ptr<WebSocket> socket);

}  // namespace jasper::server

#endif  // JASPER_SERVER_ASR_SERVICE_H_
