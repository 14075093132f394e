// Helpers for the HTTP front's tests (server_http_test, server_https_test): a raw loopback
// socket for byte-exact HTTP/1.1, a multipart form POST to /v1/audio/transcriptions, and one
// WebSocket /v1/stream call (docs/HTTP.md's protocol) over any Beast stream (ws:// or wss://).
// Header-only; thread-compatible.
#ifndef JASPER_TESTS_HTTP_TEST_UTIL_H_
#define JASPER_TESTS_HTTP_TEST_UTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace jasper::test_util {

// A connected loopback socket; closed when destroyed.
class Socket {
 public:
  explicit Socket(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    timeval tv{10, 0};  // no read waits forever
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~Socket() { close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool connected() const { return connected_; }
  void Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }
  // One response: its head, then Content-Length bytes of body. "" when the peer closed first.
  std::string ReadResponse() {
    while (true) {
      const size_t head_end = buffer_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t length = 0;
        const size_t cl = buffer_.find("Content-Length: ");
        if (cl != std::string::npos && cl < head_end) length = std::stoul(buffer_.substr(cl + 16));
        if (buffer_.size() >= head_end + 4 + length) {
          std::string response = buffer_.substr(0, head_end + 4 + length);
          buffer_.erase(0, head_end + 4 + length);
          return response;
        }
      }
      char chunk[4096];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) return "";
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  // Whether the peer closes the connection (recv returns 0) within the receive timeout.
  bool PeerCloses() {
    char c;
    return recv(fd_, &c, 1, 0) == 0;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

// The body of a whole response (after the blank line).
inline std::string Body(const std::string& response) {
  return response.substr(response.find("\r\n\r\n") + 4);
}

// A multipart/form-data POST of `fields` (name, filename, data) to the transcription route.
inline std::string FormPost(const std::vector<std::vector<std::string>>& fields,
                            const std::string& extra_headers = "") {
  const std::string boundary = "----jasperTestBoundary7MA4YWxk";
  std::string body;
  for (const auto& f : fields) {
    absl::StrAppend(&body, "--", boundary, "\r\nContent-Disposition: form-data; name=\"", f[0],
                    "\"", f[1].empty() ? "" : absl::StrCat("; filename=\"", f[1], "\""), "\r\n\r\n",
                    f[2], "\r\n");
  }
  absl::StrAppend(&body, "--", boundary, "--\r\n");
  return absl::StrCat("POST /v1/audio/transcriptions HTTP/1.1\r\nHost: localhost\r\n",
                      "Content-Type: multipart/form-data; boundary=", boundary, "\r\n",
                      "Content-Length: ", body.size(), "\r\n", extra_headers, "\r\n", body);
}

// What a /v1/stream call returned: the final transcripts concatenated, the interim results'
// count, the close code, and the error JSON's code ("" without one).
struct WsOutcome {
  std::string finals;
  int interims = 0;
  int close_code = 0;
  std::string error;
};

// One /v1/stream call over `ws`, whose lowest layer is connected (and whose TLS handshake, for
// wss://, is done): the upgrade to `host` (the Host header), the text frame `start`, `audio` in
// binary frames of 3200 bytes (100 ms of 16 kHz PCM), {"end": true}, then every result until
// the server closes.
template <class NextLayer>
WsOutcome StreamOverWebSocket(boost::beast::websocket::stream<NextLayer>& ws,
                              const std::string& host, const std::string& start,
                              const std::string& audio) {
  namespace beast = boost::beast;
  ws.handshake(host, "/v1/stream");
  WsOutcome out;
  beast::error_code ec;
  ws.text(true);
  ws.write(boost::asio::buffer(start), ec);
  for (size_t i = 0; !ec && i < audio.size(); i += 3200) {
    ws.binary(true);
    ws.write(boost::asio::buffer(audio.data() + i, std::min<size_t>(3200, audio.size() - i)), ec);
  }
  if (!ec) {
    ws.text(true);
    ws.write(boost::asio::buffer(std::string(R"({"end": true})")), ec);
  }
  while (true) {
    beast::flat_buffer buffer;
    ws.read(buffer, ec);
    if (ec) break;
    const auto j = nlohmann::json::parse(beast::buffers_to_string(buffer.data()));
    if (j.contains("error")) out.error = j["error"]["code"];
    for (const auto& r : j.value("results", nlohmann::json::array())) {
      if (!r["isFinal"].template get<bool>()) {
        ++out.interims;
      } else {
        out.finals += r["alternatives"][0]["transcript"].template get<std::string>();
      }
    }
  }
  out.close_code = static_cast<int>(ws.reason().code);
  return out;
}

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_HTTP_TEST_UTIL_H_
