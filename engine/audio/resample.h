// Sample-rate conversion of mono float audio over libsoxr, for streams and for whole buffers.
//
// Quality: SOXR_HQ (20-bit precision, linear phase, passband to 0.913 of the lower Nyquist,
// stopband from 1.0), soxr's default engine, single-threaded. Integer rates 8000..48000 Hz.
// Equal rates are an exact pass-through (no soxr object, no delay).
//
// Latency (streaming): the output is time-aligned with the input (soxr removes the filter's group
// delay), but a stream holds samples back until it has enough input to the right of them and
// emits output in blocks. Measured with libsoxr 0.1.3 (engine cr32s) feeding 10-ms pieces: the
// first output appears after 120 ms of input and the steady-state hold-back peaks at ~115 ms for
// 8k <-> 16k, and first output after 40-50 ms with a ~37-40 ms peak for 48k/44.1k -> 16k. The
// held-back tail comes out at Flush().
// delay() reports the current hold-back in output samples. Fine for chunked recognition (1.6-s
// chunks); budget for it in end-to-end latency.
//
// Streaming output equals one-shot output: soxr's result does not depend on how the input is
// chunked (bit-identical in tests; asserted to 1e-6).
//
// Ownership: a Resampler owns its soxr handle (move-only).
// Thread-safety: none per object (one Resampler per stream); distinct objects are independent.
#ifndef JASPER_ENGINE_AUDIO_RESAMPLE_H_
#define JASPER_ENGINE_AUDIO_RESAMPLE_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

struct soxr;  // libsoxr's handle type (soxr_t is `struct soxr*`)

namespace jasper {

class Resampler {
 public:
  static constexpr int kMinRate = 8000;
  static constexpr int kMaxRate = 48000;

  // Errors: a rate outside [kMinRate, kMaxRate]; soxr failing to initialise (Internal).
  static absl::StatusOr<Resampler> Create(int in_rate, int out_rate);

  Resampler(Resampler&&) noexcept;
  Resampler& operator=(Resampler&&) noexcept;
  Resampler(const Resampler&) = delete;
  Resampler& operator=(const Resampler&) = delete;
  ~Resampler();

  int in_rate() const { return in_rate_; }
  int out_rate() const { return out_rate_; }
  bool is_identity() const { return in_rate_ == out_rate_; }

  // Consumes all of `in` (samples at in_rate) and appends whatever output is ready (at
  // out_rate) to *out. Non-finite input is an InvalidArgument error (nothing consumed).
  absl::Status Process(absl::Span<const float> in, std::vector<float>* out);

  // Ends the stream: appends the held-back tail to *out, then resets so the object can take a
  // new stream.
  absl::Status Flush(std::vector<float>* out);

  // Output samples currently held back (0 for identity).
  double delay() const;

 private:
  struct SoxrDeleter {
    void operator()(soxr* s) const;
  };
  Resampler(int in_rate, int out_rate) : in_rate_(in_rate), out_rate_(out_rate) {}
  // Runs soxr_process until it has taken all `len` samples of `in` (in == nullptr: flush until
  // soxr has nothing left), appending to *out.
  absl::Status Drive(const float* in, size_t len, std::vector<float>* out);

  int in_rate_ = 0;
  int out_rate_ = 0;
  std::unique_ptr<soxr, SoxrDeleter> soxr_;  // null for identity
};

// One-shot conversion of a whole buffer (a fresh Resampler, Process, Flush). Output length is
// round(in.size() * out_rate / in_rate) give or take one sample.
absl::StatusOr<std::vector<float>> Resample(absl::Span<const float> in, int in_rate, int out_rate);

}  // namespace jasper

#endif  // JASPER_ENGINE_AUDIO_RESAMPLE_H_
