#include "client/health.h"

#include <chrono>
#include <cstdint>
#include <iostream>
#include <vector>

#include "grpcpp/generic/generic_stub.h"

namespace jasper::client {
namespace {

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Reads a varint at *pos; false when the bytes end first or it is longer than 10 bytes.
bool GetVarint(const std::string& s, size_t* pos, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *pos < s.size(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(s[(*pos)++]);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

}  // namespace

std::string EncodeHealthCheckRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;  // proto3: the default value is not sent
  out.push_back(0x0a);              // field 1, wire type 2 (length-delimited)
  PutVarint(service.size(), &out);
  out += service;
  return out;
}

int DecodeHealthCheckResponse(const std::string& bytes) {
  int status = static_cast<int>(ServingStatus::kUnknown);
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint64_t key = 0;
    if (!GetVarint(bytes, &pos, &key)) return -1;
    const uint64_t field = key >> 3;
    const int wire_type = static_cast<int>(key & 7);
    uint64_t v = 0;
    switch (wire_type) {
      case 0:  // varint
        if (!GetVarint(bytes, &pos, &v)) return -1;
        if (field == 1) status = static_cast<int>(v);
        break;
      case 1:  // 64-bit
        if (bytes.size() - pos < 8) return -1;
        pos += 8;
        break;
      case 2:  // length-delimited
        if (!GetVarint(bytes, &pos, &v) || v > bytes.size() - pos) return -1;
        pos += v;
        break;
      case 5:  // 32-bit
        if (bytes.size() - pos < 4) return -1;
        pos += 4;
        break;
      default:
        return -1;
    }
  }
  return status;
}

HealthResult CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                         int timeout_ms) {
  HealthResult result;
  grpc::GenericStub stub(channel);
  const std::string request = EncodeHealthCheckRequest(service);
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1);
  grpc::ByteBuffer out;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", in, &cq);
  call->StartCall();
  int tag = 1;
  call->Finish(&out, &result.status, &tag);
  void* got = nullptr;
  bool ok = false;
  const bool have_event = cq.Next(&got, &ok);
  cq.Shutdown();
  void* drained = nullptr;
  while (cq.Next(&drained, &ok)) {
  }
  if (!have_event) {
    result.status = grpc::Status(grpc::StatusCode::INTERNAL, "completion queue shut down");
    return result;
  }
  if (!result.status.ok()) return result;
  std::vector<grpc::Slice> slices;
  if (!out.Dump(&slices).ok()) {
    result.status = grpc::Status(grpc::StatusCode::INTERNAL, "cannot read the response");
    return result;
  }
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  const int decoded = DecodeHealthCheckResponse(bytes);
  if (decoded < 0) {
    result.status = grpc::Status(grpc::StatusCode::INTERNAL, "malformed HealthCheckResponse");
    return result;
  }
  result.serving = static_cast<ServingStatus>(decoded);
  return result;
}

const char* ServingStatusName(ServingStatus s) {
  switch (s) {
    case ServingStatus::kUnknown:
      return "UNKNOWN";
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
  }
  return "UNRECOGNIZED";
}

int RunHealthCheck(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                   int timeout_ms) {
  const HealthResult r = CheckHealth(channel, service, timeout_ms);
  const std::string what = service.empty() ? std::string("server") : "service " + service;
  if (!r.status.ok()) {
    std::cerr << "health: " << what << ": RPC failed: " << r.status.error_code() << " "
              << r.status.error_message() << "\n";
    return 1;
  }
  if (r.serving != ServingStatus::kServing) {
    std::cerr << "health: " << what << ": " << ServingStatusName(r.serving) << "\n";
    return 1;
  }
  std::cout << "health: " << what << ": SERVING\n";
  return 0;
}

}  // namespace jasper::client
