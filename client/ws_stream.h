// StreamingRecognize over the server's WebSocket front (`/v1/stream`, docs/HTTP.md): the same
// requests and responses as the gRPC call, in their JSON mapping, with audio as binary frames.
// jasper-client's `--transport=websocket` runs its streaming calls and load tests on it.
//
// Ownership: each stream owns its connection and one I/O thread, which ends in Finish (or the
// destructor). Thread-safety: as RecognizeStream (one writing thread, one reading thread).
#ifndef JASPER_CLIENT_WS_STREAM_H_
#define JASPER_CLIENT_WS_STREAM_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/calls.h"

namespace jasper::client {

struct WebSocketTarget {
  std::string address;              // the HTTP front's "host:port" or "[v6]:port"
  std::string path = "/v1/stream";  // the WebSocket route
  // TLS (wss://) when security.tls or any tls_* file is set; the API key goes in the upgrade
  // request as `Authorization: Bearer <key>`.
  ChannelSecurity security;
};

// Connects (TCP, TLS, WebSocket handshake) before `deadline`; the call ends with
// DEADLINE_EXCEEDED when still open at `deadline`. Errors: UNAVAILABLE (cannot connect, the
// handshake was refused), INVALID_ARGUMENT (bad address or TLS files), DEADLINE_EXCEEDED.
// The stream's Finish maps the server's close: 1000 is OK; 4000 + c is gRPC code c with the
// message of the error frame before it; anything else UNAVAILABLE.
absl::StatusOr<std::unique_ptr<RecognizeStream>> OpenWebSocketStream(
    const WebSocketTarget& target, std::chrono::system_clock::time_point deadline);

}  // namespace jasper::client

#endif  // JASPER_CLIENT_WS_STREAM_H_
