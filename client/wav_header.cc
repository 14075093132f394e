#include "client/wav_header.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace jasper::client {
namespace {

uint32_t Le32(const std::string& b, size_t at) {
  return static_cast<uint32_t>(static_cast<uint8_t>(b[at])) |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 2])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 3])) << 24;
}

uint16_t Le16(const std::string& b, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[at]) | static_cast<uint8_t>(b[at + 1]) << 8);
}

}  // namespace

bool IsWav(const std::string& bytes) {
  return bytes.size() >= 12 && bytes.compare(0, 4, "RIFF") == 0 && bytes.compare(8, 4, "WAVE") == 0;
}

absl::StatusOr<WavHeader> ParseWavHeader(const std::string& bytes) {
  if (!IsWav(bytes)) return absl::InvalidArgumentError("not a RIFF/WAVE file");
  WavHeader header;
  bool have_fmt = false;
  size_t pos = 12;
  while (pos + 8 <= bytes.size()) {
    const std::string id = bytes.substr(pos, 4);
    const size_t size = Le32(bytes, pos + 4);
    const size_t body = pos + 8;
    if (id == "fmt ") {
      if (size < 16 || body + 16 > bytes.size()) {
        return absl::InvalidArgumentError("truncated fmt chunk");
      }
      header.format_tag = Le16(bytes, body);
      header.channels = Le16(bytes, body + 2);
      header.sample_rate = static_cast<int>(Le32(bytes, body + 4));
      header.bits_per_sample = Le16(bytes, body + 14);
      have_fmt = true;
    } else if (id == "data") {
      if (!have_fmt) return absl::InvalidArgumentError("data chunk before fmt chunk");
      header.data_offset = body;
      header.data_bytes = std::min(size, bytes.size() - body);
      if (header.channels <= 0 || header.sample_rate <= 0 || header.bits_per_sample <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("bad fmt: channels=", header.channels,
                                                       " rate=", header.sample_rate,
                                                       " bits=", header.bits_per_sample));
      }
      return header;
    }
    if (body + size > bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("chunk '", id, "' runs past the file end"));
    }
    pos = body + size + (size & 1);
  }
  return absl::InvalidArgumentError("no data chunk");
}

}  // namespace jasper::client
