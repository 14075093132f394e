// Fuzz target: the streaming audio decoder (engine/audio/audio_input.h) as a session drives it: a
// format from the config (encoding, rate, channels, possibly invalid), the model rate, then the
// stream's bytes cut into pushes of fuzzer-chosen sizes (a WAV header split anywhere, partial
// sample frames, 1-10 channels, mu-law/A-law, resampling between any two supported rates),
// then Flush.
//
// Input layout: [encoding][rate index][channels][model rate index] then repeated
// [piece length (1 byte)][piece bytes].
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "engine/audio/audio_input.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  jasper::fuzz::FuzzInput in(data, size);
  static constexpr jasper::AudioEncoding kEncodings[] = {jasper::AudioEncoding::kLinearPcm16,
                                                         jasper::AudioEncoding::kMulaw,
                                                         jasper::AudioEncoding::kAlaw};
  static constexpr int kRates[] = {0,     8000,  11025, 16000, 22050, 24000,
                                   32000, 44100, 48000, 7999,  48001, -16000};
  static constexpr int kModelRates[] = {16000, 8000, 48000};
  jasper::AudioFormat format;
  format.encoding = in.Pick(kEncodings);
  format.sample_rate_hz = in.Pick(kRates);
  format.channels = 1 + in.U8() % 10;  // 1-8 are averaged into one; 9 and 10 are refused
  const int model_rate = in.Pick(kModelRates);
  absl::StatusOr<std::unique_ptr<jasper::AudioInput>> input =
      jasper::AudioInput::Create(format, model_rate);
  if (!input.ok()) return 0;
  std::vector<float> out;
  bool failed = false;
  while (!in.empty()) {
    const size_t piece = in.U8();
    const std::vector<uint8_t> bytes = in.Bytes(piece);
    if (!(*input)->Push(bytes, &out).ok()) {
      failed = true;
      break;
    }
    if (out.size() > (1u << 22)) abort();  // output must stay proportional to the input
  }
  if (!failed) (void)(*input)->Flush(&out);
  for (float v : out) {
    if (!std::isfinite(v)) abort();
  }
  return 0;
}
