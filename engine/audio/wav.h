// WAV (RIFF/WAVE) decoding to float, plus the G.711 sample decoders.
//
// Supported: WAVE_FORMAT_PCM (1) with 8-bit unsigned, 16/24/32-bit signed little-endian;
// WAVE_FORMAT_IEEE_FLOAT (3) with 32- or 64-bit samples; WAVE_FORMAT_ALAW (6) and
// WAVE_FORMAT_MULAW (7) with 8-bit samples; WAVE_FORMAT_EXTENSIBLE (0xFFFE) whose sub-format GUID
// is one of those. Everything else (ADPCM, RIFX big-endian, RF64, 12/20-bit containers, ...) is
// an InvalidArgument error naming the problem.
//
// The parser walks chunks with bounds checks against the actual byte count (the RIFF size field
// is ignored), honours the pad byte after odd-sized chunks, and never reads outside the input.
//
// Thread-safety: free functions without shared state; safe to call concurrently.
#ifndef JASPER_ENGINE_AUDIO_WAV_H_
#define JASPER_ENGINE_AUDIO_WAV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace jasper {

struct Audio {
  // Interleaved samples, [frames, channels], scaled to [-1, 1] (integer formats divide by
  // 2^(bits-1); 32-bit PCM's largest value rounds to 1.0f). Float files are passed through
  // unchanged (they may exceed [-1, 1]); non-finite float samples are rejected.
  std::vector<float> samples;
  int sample_rate = 0;  // Hz
  int channels = 0;

  int64_t num_frames() const {
    return channels > 0 ? static_cast<int64_t>(samples.size()) / channels : 0;
  }
};

// Decodes a complete WAV file held in memory. An empty data chunk gives an Audio with no samples
// (not an error). Errors: not RIFF/WAVE, no or malformed fmt chunk, unsupported format, no data
// chunk, a data chunk (or fmt chunk) cut short in a way that cannot be recovered, non-finite
// float samples.
absl::StatusOr<Audio> DecodeWav(absl::Span<const uint8_t> bytes);

// Reads and decodes a file. Errors: NotFound / unreadable file, and those of DecodeWav.
absl::StatusOr<Audio> ReadWavFile(const std::string& path);

// Average of the channels per frame ([frames]); a copy for mono.
std::vector<float> DownmixToMono(const Audio& audio);

// ITU-T G.711 decoders: one encoded byte to a linear sample scaled by 1/32768 (so the largest
// magnitudes are 32124/32768 for mu-law and 32256/32768 for A-law).
float MuLawToFloat(uint8_t byte);
float ALawToFloat(uint8_t byte);

// True when the bytes start with a RIFF-family header ("RIFF", "RIFX" or "RF64", then
// "WAVE" at offset 8), i.e. the input should go to DecodeWav (which rejects RIFX/RF64 with a
// clear error) rather than be treated as headerless samples.
bool LooksLikeWav(absl::Span<const uint8_t> bytes);

}  // namespace jasper

#endif  // JASPER_ENGINE_AUDIO_WAV_H_
