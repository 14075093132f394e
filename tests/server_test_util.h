// Helpers for the in-process server tests (server_test, metrics_test, security_test): the test
// model and audio, jasper.asr.v1 requests, a blocking HTTP GET over loopback, a health check
// through the generic stub, and reading one sample out of a Prometheus text exposition.
// Header-only; thread-compatible.
#ifndef JASPER_TESTS_SERVER_TEST_UTIL_H_
#define JASPER_TESTS_SERVER_TEST_UTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "tests/test_files.h"

namespace jasper::test_util {

namespace fs = std::filesystem;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kSlowdown = 10;
#else
inline constexpr int kSlowdown = 1;
#endif

// tests/fixtures/quartznet_small/model, else the first model under models/; "" if none.
inline std::string ServerTestModelDir() {
  const fs::path root = JASPER_SOURCE_DIR;
  if (fs::exists(root / "tests/fixtures/quartznet_small/model/model.json")) {
    return (root / "tests/fixtures/quartznet_small/model").string();
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root / "models", ec)) {
    if (fs::exists(e.path() / "model.json")) return e.path().string();
  }
  return "";
}

// tests/fixtures/audio/fox.wav (16 kHz mono 16-bit WAV).
inline fs::path ServerTestWavPath() {
  return fs::path(JASPER_SOURCE_DIR) / "tests/fixtures/audio/fox.wav";
}

// The bytes of ServerTestWavPath() ("" when it is missing).
inline std::string ServerTestWav() {
  static const std::string wav = ReadFileBytes(ServerTestWavPath());
  return wav;
}

// `seconds` from now, scaled by kSlowdown.
inline std::chrono::system_clock::time_point DeadlineIn(int seconds = 20) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds * kSlowdown);
}

inline jasper::asr::v1::StreamingRecognizeRequest StreamConfig(bool interim = true) {
  jasper::asr::v1::StreamingRecognizeRequest r;
  r.mutable_streaming_config()->set_interim_results(interim);
  r.mutable_streaming_config()->mutable_config()->set_language_code("en-US");
  return r;
}

inline jasper::asr::v1::StreamingRecognizeRequest StreamAudio(const std::string& bytes) {
  jasper::asr::v1::StreamingRecognizeRequest r;
  r.set_audio_content(bytes);
  return r;
}

// Splits a WAV file into messages of `bytes`, the first one carrying the header.
inline std::vector<std::string> AudioChunks(const std::string& wav, size_t bytes = 3200) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < wav.size(); pos += bytes) out.push_back(wav.substr(pos, bytes));
  return out;
}

// Sends `raw` to 127.0.0.1:port and returns everything received until the server closes (or
// 5 s pass). Empty on connect failure.
inline std::string HttpRaw(int port, const std::string& raw) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{5 * kSlowdown, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  size_t sent = 0;
  while (sent < raw.size()) {
    const ssize_t n = ::send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

inline std::string HttpGet(int port, const std::string& path) {
  return HttpRaw(port, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
}

// The body of an HTTP response ("" without a header/body separator).
inline std::string HttpBody(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

// The value of the sample whose name+labels is exactly `series` (e.g.
// `jasper_active_streams{api="jasper"}`), or -1 when absent.
inline double MetricValue(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
    }
  }
  return -1;
}

// grpc.health.v1.Health/Check for `service` through the generic stub (no health proto needed):
// 1 = SERVING, 2 = NOT_SERVING, -code for a failed call, 0 for an unreadable response. Uses a
// completion queue on the calling thread, so nothing of the caller runs on gRPC's threads.
inline int HealthCheck(const std::shared_ptr<grpc::Channel>& channel,
                       const std::string& service = "") {
  grpc::GenericStub stub(channel);
  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1);
  grpc::ByteBuffer out;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(5));
  grpc::CompletionQueue cq;
  grpc::Status status;
  auto call = stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", in, &cq);
  call->StartCall();
  int tag = 1;
  call->Finish(&out, &status, &tag);
  void* got = nullptr;
  bool ok = false;
  const bool have_event = cq.Next(&got, &ok);
  cq.Shutdown();
  while (cq.Next(&got, &ok)) {
  }
  if (!have_event) return -1000;
  if (!status.ok()) return -static_cast<int>(status.error_code());
  std::vector<grpc::Slice> slices;
  (void)out.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes.size() >= 2 && bytes[0] == 0x08 ? bytes[1] : 0;
}

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_SERVER_TEST_UTIL_H_
