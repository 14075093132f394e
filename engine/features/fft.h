// Forward DFT of a real sequence, in double precision:
//
//   X[k] = sum_{n=0}^{N-1} x[n] * exp(-2*pi*i*k*n / N),   k = 0 .. N/2
//
// i.e. the non-redundant half (N/2 + 1 bins), unnormalised: the convention of numpy.fft.rfft and
// of torch.stft(onesided=True, normalized=False).
//
// Sizes: any N >= 1. A power of two uses a radix-2 FFT of N/2 complex points plus a real-split
// post-pass (O(N log N)). Any other N falls back to a direct DFT over a precomputed table
// (O(N^2), same convention and accuracy class; fine for occasional non-power-of-two n_fft such as
// 400, slow for large N).
//
// Twiddle factors are computed once at construction with std::cos/std::sin per index (no
// recurrences), so the error is that of the butterflies alone: about log2(N) * 1e-16 relative.
//
// Thread-safety: immutable after Create(); Transform() is const and reentrant (the caller's
// output buffer is the only workspace). Copyable and movable.
#ifndef JASPER_ENGINE_FEATURES_FFT_H_
#define JASPER_ENGINE_FEATURES_FFT_H_

#include <complex>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace jasper {

class RealFft {
 public:
  // Largest supported size (keeps the direct-DFT table and index products in range).
  static constexpr int kMaxSize = 1 << 24;

  // Errors: n < 1 or n > kMaxSize.
  static absl::StatusOr<RealFft> Create(int n);

  int size() const { return n_; }
  int num_bins() const { return n_ / 2 + 1; }
  bool is_power_of_two() const { return power_of_two_; }

  // input: size() real samples. output: num_bins() complex bins, overwritten; it is also the
  // scratch space, so input and output must not overlap. Wrong span sizes abort (programming
  // error, not a data error).
  void Transform(absl::Span<const double> input, absl::Span<std::complex<double>> output) const;

 private:
  RealFft() = default;
  void TransformPow2(absl::Span<const double> input, std::complex<double>* out) const;
  void TransformDirect(absl::Span<const double> input, std::complex<double>* out) const;

  int n_ = 0;
  bool power_of_two_ = false;
  // Power of two: exp(-2*pi*i*k/N) for k in [0, N/2), and the bit-reversal permutation of N/2.
  // Otherwise: exp(-2*pi*i*k/N) for k in [0, N).
  std::vector<std::complex<double>> twiddles_;
  std::vector<int> bit_reverse_;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_FEATURES_FFT_H_
