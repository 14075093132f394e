// A minimal RIFF/WAV header reader for the client: just enough to know where the samples start,
// their format and the audio's duration. The client sends files as they are (header included;
// the server parses the header itself), so nothing here decodes samples.
//
// Thread-safety: pure functions.
#ifndef JASPER_CLIENT_WAV_HEADER_H_
#define JASPER_CLIENT_WAV_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace jasper::client {

struct WavHeader {
  int format_tag = 0;  // 1 PCM, 3 float, 6 A-law, 7 mu-law, 0xFFFE extensible
  int channels = 0;
  int sample_rate = 0;  // Hz
  int bits_per_sample = 0;
  size_t data_offset = 0;  // byte offset of the first sample
  size_t data_bytes = 0;   // clamped to the bytes present in the file

  int bytes_per_frame() const { return channels * ((bits_per_sample + 7) / 8); }
  double duration_s() const {
    const int bpf = bytes_per_frame();
    return bpf > 0 && sample_rate > 0 ? static_cast<double>(data_bytes / bpf) / sample_rate : 0.0;
  }
};

// True when `bytes` starts with "RIFF....WAVE".
bool IsWav(const std::string& bytes);

// Parses the header of a complete file held in memory. Errors: not RIFF/WAVE, no fmt or data
// chunk, a chunk that runs past the end of the file before the data chunk.
absl::StatusOr<WavHeader> ParseWavHeader(const std::string& bytes);

}  // namespace jasper::client

#endif  // JASPER_CLIENT_WAV_HEADER_H_
