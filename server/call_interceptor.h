// CallInterceptor: one gRPC server interceptor, registered in JasperServer for every call, that
//  - checks the API key (when --api_keys_file is set) from the call's metadata,
//    `authorization: Bearer <key>` or `x-api-key: <key>`. A call without a valid key ends with
//    UNAUTHENTICATED before any of its messages is read (its handler only sees a cancelled
//    call). grpc.health.v1 and server reflection stay open, so probes need no key.
//  - counts calls for the metrics: active calls and streams, finished calls by status code.
// An interceptor works with plaintext and TLS ports alike (an AuthMetadataProcessor would need
// TLS), and needs no change in the services.
//
// Ownership: the factory borrows ServerMetrics and shares the ApiKeyStore; both must outlive
// the grpc::Server (JasperServer destroys the server first). Each call uses the keys in force
// when it starts.
// Thread-safety: the factory is thread-safe; an interceptor lives as long as its call.
#ifndef JASPER_SERVER_CALL_INTERCEPTOR_H_
#define JASPER_SERVER_CALL_INTERCEPTOR_H_

#include <memory>

#include "absl/strings/string_view.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/auth.h"
#include "server/server_metrics.h"

namespace jasper::server {

class CallInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `keys` null: no authentication. `metrics` must not be null.
  CallInterceptorFactory(ServerMetrics* metrics, std::shared_ptr<const ApiKeyStore> keys)
      : metrics_(metrics), keys_(std::move(keys)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // Whether a method ("/package.Service/Method") is callable without a key: health checks and
  // reflection.
  static bool IsOpenMethod(absl::string_view full_method);

 private:
  ServerMetrics* const metrics_;
  const std::shared_ptr<const ApiKeyStore> keys_;
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_CALL_INTERCEPTOR_H_
