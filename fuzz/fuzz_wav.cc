// Fuzz target: whole-file WAV decoding (engine/audio/wav.h: RIFF chunk walk, fmt parsing, every
// sample format) and the G.711 decoders. The input is the file.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/types/span.h"
#include "engine/audio/wav.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> bytes(data, size);
  (void)jasper::LooksLikeWav(bytes);
  absl::StatusOr<jasper::Audio> audio = jasper::DecodeWav(bytes);
  if (audio.ok()) {
    // Invariants the callers rely on.
    if (audio->channels <= 0 || audio->sample_rate <= 0) abort();
    if (audio->samples.size() % static_cast<size_t>(audio->channels) != 0) abort();
    const std::vector<float> mono = jasper::DownmixToMono(*audio);
    if (static_cast<int64_t>(mono.size()) != audio->num_frames()) abort();
    for (float v : audio->samples) {
      if (!std::isfinite(v)) abort();
    }
  }
  for (size_t i = 0; i < size && i < 256; ++i) {
    const float u = jasper::MuLawToFloat(data[i]);
    const float a = jasper::ALawToFloat(data[i]);
    if (!(std::fabs(u) <= 1.0f) || !(std::fabs(a) <= 1.0f)) abort();
  }
  return 0;
}
