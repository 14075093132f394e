// Fuzz target: the HTTP front's multipart/form-data parser (server/multipart.h), on the
// Content-Type header and the body a client controls. Checks: every part is a view inside the
// body, at most kMaxFormParts parts, and the parser never reads outside its input.
//
// Input layout: [content-type length][content-type bytes][body bytes].
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_input.h"
#include "server/multipart.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  jasper::fuzz::FuzzInput in(data, size);
  const std::vector<uint8_t> type_bytes = in.Bytes(in.U8());
  const std::vector<uint8_t> body_bytes = in.Rest();
  const std::string content_type(type_bytes.begin(), type_bytes.end());
  const std::string body(body_bytes.begin(), body_bytes.end());
  absl::StatusOr<std::string> boundary = jasper::server::FormBoundary(content_type);
  if (!boundary.ok()) return 0;
  if (boundary->empty() || boundary->size() > 70) abort();
  absl::StatusOr<std::vector<jasper::server::FormPart>> parts =
      jasper::server::ParseMultipart(body, *boundary);
  if (!parts.ok()) return 0;
  if (parts->size() > static_cast<size_t>(jasper::server::kMaxFormParts)) abort();
  for (const jasper::server::FormPart& p : *parts) {
    if (p.data.data() < body.data() || p.data.data() + p.data.size() > body.data() + body.size()) {
      abort();
    }
  }
  return 0;
}
