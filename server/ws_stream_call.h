// WsStreamCall<Adapter>: StreamingRecognize over a WebSocket of the HTTP front (docs/HTTP.md,
// "WebSocket streaming"). The protocol logic is StreamCallCore's, the same as the gRPC call's
// (config first, audio, force-final, flow control by not reading while the session is full,
// interim results replaced while unsent, finals never dropped, drain, idle and duration
// timers); this shell only maps messages:
//
//   client -> server  text:   the JSON form of the API's StreamingRecognizeRequest (first
//                             {"streamingConfig": {...}}; later {"forceFinal": {}}), or
//                             {"end": true} (the half-close: no more audio)
//                     binary: audio bytes (as audio_content)
//   server -> client  text:   the JSON form of each StreamingRecognizeResponse
//   the end           OK: close 1000 after the last result; an error: a text message
//                     {"error": {"code": "INVALID_ARGUMENT", "message": ...}}, then close with
//                     4000 + the gRPC code (4003 INVALID_ARGUMENT, 4008 RESOURCE_EXHAUSTED, ...)
//
// A client that disconnects cancels the call. Ownership: the WebSocket connection owns the call
// (HttpServer's WebSocketHandler); the call holds the socket weakly. Thread-safety: as
// StreamCallCore; socket callbacks arrive on an I/O thread.
#ifndef JASPER_SERVER_WS_STREAM_CALL_H_
#define JASPER_SERVER_WS_STREAM_CALL_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "server/http_server.h"
#include "server/stream_call.h"

namespace jasper::server {

// The WebSocket close code of an error: 4000 + its gRPC code.
inline int WebSocketCloseCode(grpc::StatusCode code) { return 4000 + static_cast<int>(code); }

// {"error": {"code": "INVALID_ARGUMENT", "message": ...}}.
std::string WebSocketErrorJson(const grpc::Status& status);

// A text message: {"end": ...} (then *end is set), or the JSON form of `request`. Errors:
// INVALID_ARGUMENT naming the problem (not JSON, an unknown field).
absl::Status ParseWebSocketText(const std::string& text, google::protobuf::Message* request,
                                bool* end);

template <typename Adapter>
class WsStreamCall final : public StreamCallCore,
                           public std::enable_shared_from_this<WsStreamCall<Adapter>> {
 public:
  using Request = typename Adapter::Request;

  WsStreamCall(ServingEngine* engine, std::weak_ptr<WebSocket> socket)
      : StreamCallCore(engine, "websocket"), socket_(std::move(socket)) {}
  ~WsStreamCall() override { HandleDone(); }

  // Starts the call (admission, timers, the first read).
  void Begin() { Start(); }

 private:
  void DoStartRead() override {
    std::shared_ptr<WebSocket> socket = socket_.lock();
    if (socket == nullptr) return;
    std::weak_ptr<WsStreamCall> weak = this->shared_from_this();
    socket->Read([weak](bool ok, bool is_text, std::string data) {
      std::shared_ptr<WsStreamCall> self = weak.lock();
      if (self == nullptr) return;
      if (!ok) return self->HandleCancel();  // the client went away
      self->request_.Clear();
      if (!is_text) {
        self->request_.set_audio_content(std::move(data));
        return self->HandleReadDone(true);
      }
      bool end = false;
      absl::Status parsed = ParseWebSocketText(data, &self->request_, &end);
      if (!parsed.ok()) {
        // Not a request: answer like a bad config (the core fails the call).
        self->request_.Clear();
        self->bad_text_ = parsed;
      }
      self->HandleReadDone(!end);  // {"end"}: the half-close
    });
  }
  void DoStartWrite(const google::protobuf::Message& response) override {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = false;
    options.always_print_primitive_fields = true;  // isFinal: false is said, not implied
    (void)google::protobuf::util::MessageToJsonString(response, &json, options);
    std::shared_ptr<WebSocket> socket = socket_.lock();
    std::weak_ptr<WsStreamCall> weak = this->shared_from_this();
    if (socket == nullptr) return;
    socket->Write(true, std::move(json), [weak](bool ok) {
      if (std::shared_ptr<WsStreamCall> self = weak.lock()) self->HandleWriteDone(ok);
    });
  }
  void DoFinish(grpc::Status status) override {
    std::shared_ptr<WebSocket> socket = socket_.lock();
    if (socket == nullptr) return;
    if (status.ok()) return socket->Close(1000, "");
    socket->Write(true, WebSocketErrorJson(status), [](bool) {});
    socket->Close(WebSocketCloseCode(status.error_code()), status.error_message());
  }
  RequestKind ClassifyRequest() const override {
    if (!bad_text_.ok()) return RequestKind::kConfig;  // ParseConfigRequest reports it
    return Adapter::Classify(request_);
  }
  absl::StatusOr<CallConfig> ParseConfigRequest() const override {
    if (!bad_text_.ok()) return bad_text_;
    return Adapter::ParseConfig(request_);
  }
  absl::string_view RequestAudio() const override { return Adapter::Audio(request_); }
  std::unique_ptr<google::protobuf::Message> MakeResult(const SessionResult& result,
                                                        const CallConfig& config) const override {
    return Adapter::MakeResult(result, config);
  }
  std::unique_ptr<google::protobuf::Message> MakeSpeechEvent(
      SpeechEventKind kind, double audio_s, int utterance_index,
      const CallConfig& config) const override {
    return Adapter::MakeSpeechEvent(kind, audio_s, utterance_index, config);
  }

  const std::weak_ptr<WebSocket> socket_;
  Request request_;        // the message being handled (read callbacks run one at a time)
  absl::Status bad_text_;  // a text message that was not a request
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_WS_STREAM_CALL_H_
