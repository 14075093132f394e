#include "engine/audio/codec.h"

#include <algorithm>
#include <cstring>

#include "engine/audio/codec_internal.h"

namespace jasper {

const char* CodecName(Codec codec) {
  switch (codec) {
    case Codec::kFlac:
      return "FLAC";
    case Codec::kOgg:
      return "Ogg";
    case Codec::kMp3:
      return "MP3";
  }
  return "unknown";
}

SniffResult SniffCodec(absl::Span<const uint8_t> prefix) {
  struct Magic {
    const char* bytes;
    size_t size;
    SniffResult result;
  };
  static constexpr Magic kMagics[] = {{"fLaC", 4, SniffResult::kFlac},
                                      {"OggS", 4, SniffResult::kOgg},
                                      {"ID3", 3, SniffResult::kMp3}};
  bool partial = false;
  for (const Magic& m : kMagics) {
    const size_t n = std::min(prefix.size(), m.size);
    if (std::memcmp(prefix.data(), m.bytes, n) != 0) continue;
    if (n == m.size) return m.result;
    partial = true;
  }
  return partial ? SniffResult::kNeedMore : SniffResult::kNone;
}

absl::StatusOr<std::unique_ptr<CodecDecoder>> CodecDecoder::Create(Codec codec,
                                                                   int preferred_rate_hz) {
  switch (codec) {
    case Codec::kFlac:
      return NewFlacDecoder();
    case Codec::kOgg:
      return NewOggDecoder(preferred_rate_hz);
    case Codec::kMp3:
      return NewMp3Decoder();
  }
  return absl::InvalidArgumentError("unknown codec");
}

}  // namespace jasper
