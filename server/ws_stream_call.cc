#include "server/ws_stream_call.h"

#include "nlohmann/json.hpp"

namespace jasper::server {

std::string WebSocketErrorJson(const grpc::Status& status) {
  // gRPC's codes are absl's, number for number: absl names them ("INVALID_ARGUMENT").
  const std::string code =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  return nlohmann::json{{"error", {{"code", code}, {"message", status.error_message()}}}}.dump();
}

absl::Status ParseWebSocketText(const std::string& text, google::protobuf::Message* request,
                                bool* end) {
  *end = false;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError("a text message must be a JSON object");
  }
  if (j.contains("end")) {
    *end = true;
    return absl::OkStatus();
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(text, request, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a StreamingRecognizeRequest: ", std::string(status.message())));
  }
  return absl::OkStatus();
}

}  // namespace jasper::server
