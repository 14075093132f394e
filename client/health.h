// grpc.health.v1.Health/Check from the command line (`jasper-client --health`), for container
// HEALTHCHECKs and exec probes: Debian ships no grpc_health_probe and no health.proto, so the
// call goes through grpc::GenericStub with the two one-field messages encoded here by hand
// (HealthCheckRequest{string service = 1}, HealthCheckResponse{ServingStatus status = 1}).
//
// Borrows the channel; stateless functions, thread-safe.
#ifndef JASPER_CLIENT_HEALTH_H_
#define JASPER_CLIENT_HEALTH_H_

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace jasper::client {

// grpc.health.v1.HealthCheckResponse.ServingStatus values.
enum class ServingStatus : int {
  kUnknown = 0,
  kServing = 1,
  kNotServing = 2,
  kServiceUnknown = 3,
};

struct HealthResult {
  grpc::Status status;  // the RPC's status; `serving` is meaningful only when ok()
  ServingStatus serving = ServingStatus::kUnknown;
};

// The wire bytes of HealthCheckRequest{service} and the status field of a HealthCheckResponse
// (kUnknown when the field is absent, as proto3 decodes it; -1 when the bytes are malformed).
std::string EncodeHealthCheckRequest(const std::string& service);
int DecodeHealthCheckResponse(const std::string& bytes);

// One Check call for `service` ("" = the whole server) with a deadline of `timeout_ms`.
HealthResult CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                         int timeout_ms);

const char* ServingStatusName(ServingStatus s);

// `jasper-client --health`: CheckHealth, one line on stdout (SERVING) or stderr (anything
// else), and the exit code: 0 when SERVING, 1 otherwise. Never 2, which Docker's HEALTHCHECK
// reserves.
int RunHealthCheck(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                   int timeout_ms);

}  // namespace jasper::client

#endif  // JASPER_CLIENT_HEALTH_H_
