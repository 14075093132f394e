// multipart/form-data (RFC 7578), as HTML forms and the OpenAI clients send files: the boundary
// from the Content-Type header, then the parts, each with its Content-Disposition name (and
// filename) and its bytes. Parsing works on the whole body held in memory (the HTTP front caps
// its size first) and copies nothing: parts are views into the body.
//
// Thread-safety: pure functions.
#ifndef JASPER_SERVER_MULTIPART_H_
#define JASPER_SERVER_MULTIPART_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace jasper::server {

struct FormPart {
  std::string name;          // Content-Disposition's name
  std::string filename;      // its filename ("" when absent)
  std::string content_type;  // the part's Content-Type ("" when absent)
  absl::string_view data;    // the part's bytes, a view into the body
};

// Parts at most; header block of one part at most.
inline constexpr int kMaxFormParts = 64;
inline constexpr size_t kMaxFormPartHeaderBytes = 8192;

// The boundary of a `multipart/form-data; boundary=...` Content-Type (quoted or not).
// INVALID_ARGUMENT: another media type, no boundary, or a boundary outside RFC 2046's 1-70
// characters.
absl::StatusOr<std::string> FormBoundary(absl::string_view content_type);

// The parts of `body`. INVALID_ARGUMENT (naming what is wrong): no opening boundary, a part
// without a complete header block or Content-Disposition form-data name, a header block over
// kMaxFormPartHeaderBytes, more than kMaxFormParts parts, no closing boundary.
absl::StatusOr<std::vector<FormPart>> ParseMultipart(absl::string_view body,
                                                     absl::string_view boundary);

}  // namespace jasper::server

#endif  // JASPER_SERVER_MULTIPART_H_
