// Fuzz target: the streaming resampler (engine/audio/resample.h) with any pair of rates (valid or
// not) and any float input, non-finite values included, fed in pieces of fuzzer-chosen sizes;
// checks that the streamed output has the length of the one-shot output.
//
// Input layout: [in rate index][out rate index] then repeated [piece samples (1 byte)]
// [piece x 4 bytes of little-endian float].
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/audio/resample.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  jasper::fuzz::FuzzInput in(data, size);
  static constexpr int kRates[] = {8000, 11025, 16000, 22050, 44100, 48000, 7999, 0, 96000};
  const int in_rate = in.Pick(kRates);
  const int out_rate = in.Pick(kRates);
  absl::StatusOr<jasper::Resampler> resampler = jasper::Resampler::Create(in_rate, out_rate);
  if (!resampler.ok()) return 0;
  std::vector<float> all_in, out;
  bool ok = true;
  while (!in.empty() && ok) {
    const size_t count = in.U8();
    const std::vector<uint8_t> raw = in.Bytes(count * 4);
    std::vector<float> piece(raw.size() / 4);
    if (!piece.empty()) std::memcpy(piece.data(), raw.data(), piece.size() * 4);
    ok = resampler->Process(piece, &out).ok();
    if (ok) all_in.insert(all_in.end(), piece.begin(), piece.end());
  }
  if (!ok) return 0;  // non-finite input: rejected, as documented
  if (!resampler->Flush(&out).ok()) abort();
  absl::StatusOr<std::vector<float>> once = jasper::Resample(all_in, in_rate, out_rate);
  if (!once.ok()) abort();
  if (once->size() != out.size()) abort();
  const double expected = static_cast<double>(all_in.size()) * out_rate / in_rate;
  if (std::fabs(static_cast<double>(out.size()) - expected) > 2.0) abort();
  return 0;
}
