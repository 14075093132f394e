#include "engine/audio/wav.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace jasper {
namespace {

constexpr uint16_t kFormatPcm = 1;
constexpr uint16_t kFormatIeeeFloat = 3;
constexpr uint16_t kFormatALaw = 6;
constexpr uint16_t kFormatMuLaw = 7;
constexpr uint16_t kFormatExtensible = 0xFFFE;

// Files bigger than this are refused by ReadWavFile (a RIFF file cannot exceed 4 GiB; a
// streamed one with an "unknown" data size could, but not usefully for speech recognition).
constexpr int64_t kMaxFileBytes = int64_t{1} << 31;

// Bytes 2..15 of KSDATAFORMAT_SUBTYPE_* GUIDs; bytes 0..1 hold the format tag.
constexpr uint8_t kSubformatGuidTail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                            0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};

uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t Le64(const uint8_t* p) {
  return static_cast<uint64_t>(Le32(p)) | (static_cast<uint64_t>(Le32(p + 4)) << 32);
}
bool Tag(const uint8_t* p, const char* tag) { return std::memcmp(p, tag, 4) == 0; }

std::string PrintableTag(const uint8_t* p) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    s += (p[i] >= 0x20 && p[i] < 0x7F) ? static_cast<char>(p[i]) : '?';
  }
  return s;
}

struct Format {
  uint16_t tag = 0;  // resolved (the sub-format for WAVE_FORMAT_EXTENSIBLE)
  int channels = 0;
  int sample_rate = 0;
  int bits = 0;  // container bits per sample
  int block_align = 0;
};

absl::StatusOr<Format> ParseFmt(const uint8_t* p, uint32_t size) {
  if (size < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("WAV: fmt chunk is ", size, " bytes, need at least 16"));
  }
  Format f;
  f.tag = Le16(p);
  const uint16_t channels = Le16(p + 2);
  const uint32_t sample_rate = Le32(p + 4);
  const uint16_t block_align = Le16(p + 12);
  const uint16_t bits = Le16(p + 14);
  if (f.tag == kFormatExtensible) {
    if (size < 40 || Le16(p + 16) < 22) {
      return absl::InvalidArgumentError(
          "WAV: WAVE_FORMAT_EXTENSIBLE fmt chunk is too short (need 40 bytes, cbSize >= 22)");
    }
    const uint16_t valid_bits = Le16(p + 18);
    if (std::memcmp(p + 26, kSubformatGuidTail, sizeof(kSubformatGuidTail)) != 0) {
      return absl::InvalidArgumentError(
          "WAV: WAVE_FORMAT_EXTENSIBLE with a non-standard "
          "sub-format GUID is not supported");
    }
    if (valid_bits > bits) {
      return absl::InvalidArgumentError(
          absl::StrCat("WAV: valid bits ", valid_bits, " exceed the container's ", bits));
    }
    // Samples are left-justified in their container, so decoding by container size gives the
    // right scale whatever the valid bit count.
    f.tag = Le16(p + 24);
  }
  if (channels == 0) return absl::InvalidArgumentError("WAV: 0 channels");
  if (sample_rate == 0 || sample_rate > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("WAV: invalid sample rate ", sample_rate));
  }
  bool supported = false;
  switch (f.tag) {
    case kFormatPcm:
      supported = bits == 8 || bits == 16 || bits == 24 || bits == 32;
      break;
    case kFormatIeeeFloat:
      supported = bits == 32 || bits == 64;
      break;
    case kFormatALaw:
    case kFormatMuLaw:
      supported = bits == 8;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("WAV: unsupported format tag 0x", absl::Hex(f.tag),
                       " (supported: PCM, IEEE float, A-law, mu-law, and EXTENSIBLE with those)"));
  }
  if (!supported) {
    return absl::InvalidArgumentError(
        absl::StrCat("WAV: unsupported bits per sample ", bits, " for format tag ", f.tag));
  }
  f.channels = channels;
  f.sample_rate = static_cast<int>(sample_rate);
  f.bits = bits;
  f.block_align = block_align;
  const int expected_align = channels * (bits / 8);
  if (block_align != expected_align) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WAV: block_align ", block_align, " does not match channels * bytes = ", expected_align));
  }
  return f;
}

}  // namespace

float MuLawToFloat(uint8_t byte) {
  const int u = ~byte & 0xFF;
  const int exponent = (u >> 4) & 0x07;
  const int mantissa = u & 0x0F;
  const int magnitude = ((mantissa << 3) + 0x84) << exponent;  // biased by 0x84
  const int sample = (u & 0x80) ? (0x84 - magnitude) : (magnitude - 0x84);
  return static_cast<float>(sample) / 32768.0f;
}

float ALawToFloat(uint8_t byte) {
  const int a = byte ^ 0x55;
  const int exponent = (a >> 4) & 0x07;
  const int mantissa = a & 0x0F;
  int magnitude = (mantissa << 4) + 8;
  if (exponent > 0) magnitude = (magnitude + 0x100) << (exponent - 1);
  const int sample = (a & 0x80) ? magnitude : -magnitude;  // sign bit set = positive
  return static_cast<float>(sample) / 32768.0f;
}

bool LooksLikeWav(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < 12) return false;
  const uint8_t* p = bytes.data();
  return (Tag(p, "RIFF") || Tag(p, "RIFX") || Tag(p, "RF64")) && Tag(p + 8, "WAVE");
}

absl::StatusOr<Audio> DecodeWav(absl::Span<const uint8_t> bytes) {
  const uint8_t* base = bytes.data();
  const uint64_t size = bytes.size();
  if (size < 12) {
    return absl::InvalidArgumentError(
        absl::StrCat("WAV: ", size, " bytes is too short for a RIFF header"));
  }
  if (Tag(base, "RIFX")) return absl::InvalidArgumentError("WAV: big-endian RIFX is not supported");
  if (Tag(base, "RF64")) return absl::InvalidArgumentError("WAV: RF64 is not supported");
  if (!Tag(base, "RIFF") || !Tag(base + 8, "WAVE")) {
    return absl::InvalidArgumentError("WAV: not a RIFF/WAVE file");
  }

  bool have_fmt = false;
  Format format;
  bool have_data = false;
  uint64_t data_begin = 0;
  uint64_t data_size = 0;
  uint64_t pos = 12;
  std::string stopped;  // why the walk ended early, for the error message
  while (pos + 8 <= size) {
    const uint8_t* header = base + pos;
    const uint64_t chunk_size = Le32(header + 4);
    const uint64_t body = pos + 8;
    const uint64_t available = size - body;
    if (Tag(header, "fmt ") && !have_fmt) {
      if (chunk_size > available) {
        return absl::InvalidArgumentError(absl::StrCat("WAV: fmt chunk claims ", chunk_size,
                                                       " bytes but only ", available, " remain"));
      }
      absl::StatusOr<Format> f = ParseFmt(base + body, static_cast<uint32_t>(chunk_size));
      if (!f.ok()) return f.status();
      format = *f;
      have_fmt = true;
    } else if (Tag(header, "data") && !have_data) {
      have_data = true;
      data_begin = body;
      if (chunk_size > available) {
        // The declared size runs past the end of the input, so this is necessarily the last
        // chunk: streaming writers emit a placeholder size (0xFFFFFFFF, or a stale value) and
        // truncated files end mid-chunk. Use the bytes that are there.
        data_size = available;
        if (!have_fmt) stopped = " before the data chunk, which runs to the end of the input";
        break;
      }
      data_size = chunk_size;
    }
    const uint64_t next = body + chunk_size + (chunk_size & 1);  // odd chunks carry a pad byte
    if (next > size) {
      if (!have_data || !have_fmt) {
        stopped = absl::StrCat(" (chunk '", PrintableTag(header), "' at offset ", pos, " claims ",
                               chunk_size, " bytes, past the end of the input)");
      }
      break;
    }
    if (have_fmt && have_data) break;
    pos = next;
  }
  if (!have_fmt) return absl::InvalidArgumentError(absl::StrCat("WAV: no fmt chunk", stopped));
  if (!have_data) return absl::InvalidArgumentError(absl::StrCat("WAV: no data chunk", stopped));

  // A trailing partial frame (truncated file) is dropped.
  const uint64_t frames = data_size / format.block_align;
  const uint64_t count = frames * format.channels;
  Audio audio;
  audio.sample_rate = format.sample_rate;
  audio.channels = format.channels;
  audio.samples.resize(count);
  const uint8_t* p = base + data_begin;
  float* out = audio.samples.data();
  switch (format.tag) {
    case kFormatPcm:
      switch (format.bits) {
        case 8:
          for (uint64_t i = 0; i < count; ++i) out[i] = (static_cast<int>(p[i]) - 128) / 128.0f;
          break;
        case 16:
          for (uint64_t i = 0; i < count; ++i) {
            out[i] = static_cast<int16_t>(Le16(p + 2 * i)) / 32768.0f;
          }
          break;
        case 24:
          for (uint64_t i = 0; i < count; ++i) {
            const uint8_t* s = p + 3 * i;
            // Assemble in the top 24 bits of an int32 so the sign extends.
            const int32_t v = static_cast<int32_t>((static_cast<uint32_t>(s[0]) << 8) |
                                                   (static_cast<uint32_t>(s[1]) << 16) |
                                                   (static_cast<uint32_t>(s[2]) << 24));
            out[i] = static_cast<float>(v / 2147483648.0);  // == sample / 2^23
          }
          break;
        default:  // 32
          for (uint64_t i = 0; i < count; ++i) {
            out[i] = static_cast<float>(static_cast<int32_t>(Le32(p + 4 * i)) / 2147483648.0);
          }
          break;
      }
      break;
    case kFormatIeeeFloat:
      for (uint64_t i = 0; i < count; ++i) {
        double v;
        if (format.bits == 32) {
          const uint32_t u = Le32(p + 4 * i);
          float f;
          std::memcpy(&f, &u, sizeof(f));
          v = f;
        } else {
          const uint64_t u = Le64(p + 8 * i);
          std::memcpy(&v, &u, sizeof(v));
        }
        // A 64-bit sample beyond float's range would become inf (and the conversion is UB).
        if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max()) {
          return absl::InvalidArgumentError(
              absl::StrCat("WAV: float sample ", i, " is not finite (as a 32-bit float)"));
        }
        out[i] = static_cast<float>(v);
      }
      break;
    case kFormatALaw:
      for (uint64_t i = 0; i < count; ++i) out[i] = ALawToFloat(p[i]);
      break;
    default:  // mu-law
      for (uint64_t i = 0; i < count; ++i) out[i] = MuLawToFloat(p[i]);
      break;
  }
  return audio;
}

absl::StatusOr<Audio> ReadWavFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  const std::streamoff end = in.tellg();
  if (end < 0) return absl::DataLossError(absl::StrCat("cannot size '", path, "'"));
  if (end > kMaxFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is ", end, " bytes; the limit is ", kMaxFileBytes));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(end));
  in.seekg(0);
  if (!bytes.empty() && !in.read(reinterpret_cast<char*>(bytes.data()), end)) {
    return absl::DataLossError(absl::StrCat("cannot read '", path, "'"));
  }
  absl::StatusOr<Audio> audio = DecodeWav(bytes);
  if (!audio.ok()) {
    return absl::Status(audio.status().code(), absl::StrCat(path, ": ", audio.status().message()));
  }
  return audio;
}

std::vector<float> DownmixToMono(const Audio& audio) {
  if (audio.channels <= 1) return audio.samples;
  const int64_t frames = audio.num_frames();
  std::vector<float> mono(frames);
  const int c = audio.channels;
  for (int64_t t = 0; t < frames; ++t) {
    double sum = 0.0;
    for (int ch = 0; ch < c; ++ch) sum += audio.samples[t * c + ch];
    mono[t] = static_cast<float>(sum / c);
  }
  return mono;
}

}  // namespace jasper
