// THE mapping from absl::Status (the engine's and the server's error type) to grpc::Status. Every
// status a client sees goes through ToGrpcStatus(); no other file converts codes.
//
// The canonical codes are the same set in both libraries, so the mapping is 1:1 by name; the
// message is kept verbatim. Thread-safety: pure functions.
#ifndef JASPER_SERVER_STATUS_MAP_H_
#define JASPER_SERVER_STATUS_MAP_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace jasper::server {

grpc::StatusCode ToGrpcCode(absl::StatusCode code);

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace jasper::server

#endif  // JASPER_SERVER_STATUS_MAP_H_
