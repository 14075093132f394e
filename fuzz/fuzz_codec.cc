// Fuzz target: compressed audio (engine/audio/codec.h) through AudioInput as a session drives
// it: an encoding (LINEAR_PCM sniffs FLAC/Ogg/ID3 by magic; FLAC, OGGOPUS and MP3 labelled),
// a model rate, a bound on the output of each decode step, then the stream's bytes in pushes
// of one fuzzer-chosen size, Continue() while output is pending, Flush, Continue to the end.
// Checks: every sample finite and within [-8, 8] (decoded in [-1, 1], plus the resampler's
// ringing on clipped audio); no step exceeds its bound by more than one codec
// frame (a few bytes of FLAC can hold minutes: the bound, not the input, limits memory).
//
// Input layout: [encoding][model rate index][bound index][piece size] then the stream's bytes.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "engine/audio/audio_input.h"
#include "fuzz/fuzz_input.h"

namespace {

// One FLAC frame (65535 samples) resampled from 8 kHz to 48 kHz, and then some.
constexpr size_t kFrameSlack = 65536 * 6 + 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  jasper::fuzz::FuzzInput in(data, size);
  static constexpr jasper::AudioEncoding kEncodings[] = {
      jasper::AudioEncoding::kLinearPcm16, jasper::AudioEncoding::kFlac,
      jasper::AudioEncoding::kOggOpus, jasper::AudioEncoding::kMp3};
  static constexpr int kModelRates[] = {16000, 8000, 48000};
  static constexpr int64_t kBounds[] = {16000, 1, 160000, 4000};
  jasper::AudioFormat format;
  format.encoding = in.Pick(kEncodings);
  const int model_rate = in.Pick(kModelRates);
  const int64_t bound = in.Pick(kBounds);
  const size_t piece = 1 + in.U8() * 16;
  absl::StatusOr<std::unique_ptr<jasper::AudioInput>> input =
      jasper::AudioInput::Create(format, model_rate, bound);
  if (!input.ok()) return 0;
  std::vector<float> out;
  auto check = [&](size_t before) {
    if (bound > 0 && out.size() - before > static_cast<size_t>(bound) + kFrameSlack) abort();
    for (size_t i = before; i < out.size(); ++i) {
      // Decoders clamp to [-1, 1]; resampling rings beyond it on clipped, square-ish audio
      // (2.09 seen here, 16 -> 48 kHz): bounded by the filter's L1 norm, well under 8.
      if (!std::isfinite(out[i]) || std::fabs(out[i]) > 8.0f) abort();
    }
    if (out.size() > (1u << 24)) out.clear();  // keep the fuzzer's memory small
  };
  // Continue() until nothing is pending; false on an error.
  auto drain = [&]() {
    while ((*input)->has_pending()) {
      const size_t before = out.size();
      if (!(*input)->Continue(&out).ok()) return false;
      check(before);
    }
    return true;
  };
  while (!in.empty()) {
    const std::vector<uint8_t> bytes = in.Bytes(piece);
    const size_t before = out.size();
    if (!(*input)->Push(bytes, &out).ok()) return 0;
    check(before);
    if (!drain()) return 0;
  }
  const size_t before = out.size();
  if (!(*input)->Flush(&out).ok()) return 0;
  check(before);
  (void)drain();
  return 0;
}
