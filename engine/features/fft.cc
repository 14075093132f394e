#include "engine/features/fft.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace jasper {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// exp(-2*pi*i*k/n), each computed directly (no recurrence), so every twiddle is correctly
// rounded to within an ulp or two.
std::complex<double> Twiddle(int64_t k, int64_t n) {
  const double angle = kTwoPi * static_cast<double>(k) / static_cast<double>(n);
  return {std::cos(angle), -std::sin(angle)};
}

[[noreturn]] void Fail(const char* what, size_t got, size_t want) {
  std::fprintf(stderr, "RealFft::Transform: %s has %zu elements, expected %zu\n", what, got, want);
  std::abort();
}

}  // namespace

absl::StatusOr<RealFft> RealFft::Create(int n) {
  if (n < 1 || n > kMaxSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("FFT size must be in [1, ", kMaxSize, "], got ", n));
  }
  RealFft fft;
  fft.n_ = n;
  fft.power_of_two_ = IsPowerOfTwo(n);
  if (fft.power_of_two_) {
    const int m = n / 2;  // complex FFT size (0 when n == 1)
    fft.twiddles_.resize(m);
    for (int k = 0; k < m; ++k) fft.twiddles_[k] = Twiddle(k, n);
    fft.bit_reverse_.resize(m);
    int log2m = 0;
    while ((1 << log2m) < m) ++log2m;
    for (int i = 0; i < m; ++i) {
      int r = 0;
      for (int b = 0; b < log2m; ++b) r |= ((i >> b) & 1) << (log2m - 1 - b);
      fft.bit_reverse_[i] = r;
    }
  } else {
    fft.twiddles_.resize(n);
    for (int k = 0; k < n; ++k) fft.twiddles_[k] = Twiddle(k, n);
  }
  return fft;
}

void RealFft::Transform(absl::Span<const double> input,
                        absl::Span<std::complex<double>> output) const {
  if (input.size() != static_cast<size_t>(n_)) Fail("input", input.size(), n_);
  if (output.size() != static_cast<size_t>(num_bins())) {
    Fail("output", output.size(), num_bins());
  }
  if (power_of_two_) {
    TransformPow2(input, output.data());
  } else {
    TransformDirect(input, output.data());
  }
}

void RealFft::TransformPow2(absl::Span<const double> input, std::complex<double>* out) const {
  if (n_ == 1) {
    out[0] = {input[0], 0.0};
    return;
  }
  const int m = n_ / 2;
  // Pack even/odd samples as one complex sequence z[j] = x[2j] + i*x[2j+1], in bit-reversed
  // order, into out[0 .. m).
  for (int j = 0; j < m; ++j) {
    out[bit_reverse_[j]] = {input[2 * j], input[2 * j + 1]};
  }
  // Iterative radix-2 decimation-in-time FFT of size m, on the interleaved (re, im) doubles of
  // `out` (std::complex<double> arrays are layout-compatible with double[2] per element). Plain
  // doubles, not std::complex temporaries: GCC assembled the twiddle of a std::complex from two
  // scalar stack stores and one 16-byte load, a store-forwarding stall that cost ~3x.
  double* z = reinterpret_cast<double*>(out);
  const double* tw = reinterpret_cast<const double*>(twiddles_.data());
  // len = 2: the twiddle is 1, so the butterfly is a sum and a difference (exact, as before).
  for (int base = 0; base + 1 < m; base += 2) {
    double* u = z + 2 * base;
    const double ur = u[0], ui = u[1], vr = u[2], vi = u[3];
    u[0] = ur + vr;
    u[1] = ui + vi;
    u[2] = ur - vr;
    u[3] = ui - vi;
  }
  // The size-m twiddle W_m^t equals W_n^(2t) = twiddles_[2t].
  for (int len = 4; len <= m; len <<= 1) {
    const int half = len / 2;
    const int stride = 2 * (m / len);
    for (int base = 0; base < m; base += len) {
      double* u = z + 2 * base;
      double* v = u + 2 * half;
      for (int j = 0; j < half; ++j) {
        const double wr = tw[2 * j * stride];
        const double wi = tw[2 * j * stride + 1];
        const double vr = v[2 * j], vi = v[2 * j + 1];
        const double tr = vr * wr - vi * wi;
        const double ti = vr * wi + vi * wr;
        const double ur = u[2 * j], ui = u[2 * j + 1];
        u[2 * j] = ur + tr;
        u[2 * j + 1] = ui + ti;
        v[2 * j] = ur - tr;
        v[2 * j + 1] = ui - ti;
      }
    }
  }
  // Split: with Z = FFT_m(z), E[k] = (Z[k] + conj(Z[m-k]))/2 and O[k] = (Z[k] - conj(Z[m-k]))/(2i)
  // are the DFTs of the even and odd samples, and X[k] = E[k] + W_n^k * O[k], k = 0..m.
  // Bins k and m-k depend on the same two values, so they are updated in place as a pair.
  const std::complex<double> z0 = out[0];
  out[0] = {z0.real() + z0.imag(), 0.0};
  out[m] = {z0.real() - z0.imag(), 0.0};
  for (int k = 1; k <= m / 2; ++k) {
    const std::complex<double> a = out[k];
    const std::complex<double> b = out[m - k];
    const auto half_pair = [](std::complex<double> p, std::complex<double> q,
                              std::complex<double> w) {
      // p = Z[k], q = Z[m-k], w = W_n^k: returns X[k].
      const double er = 0.5 * (p.real() + q.real());
      const double ei = 0.5 * (p.imag() - q.imag());
      // O = (p - conj(q)) / (2i) = ((p.imag + q.imag) - i (p.real - q.real)) / 2
      const double orr = 0.5 * (p.imag() + q.imag());
      const double oi = -0.5 * (p.real() - q.real());
      return std::complex<double>(er + (w.real() * orr - w.imag() * oi),
                                  ei + (w.real() * oi + w.imag() * orr));
    };
    out[k] = half_pair(a, b, twiddles_[k]);
    out[m - k] = half_pair(b, a, twiddles_[m - k]);
  }
}

void RealFft::TransformDirect(absl::Span<const double> input, std::complex<double>* out) const {
  const int64_t n = n_;
  const int bins = num_bins();
  for (int k = 0; k < bins; ++k) {
    double re = 0.0;
    double im = 0.0;
    int64_t index = 0;  // (k * j) mod n, updated incrementally
    for (int64_t j = 0; j < n; ++j) {
      const std::complex<double> w = twiddles_[index];
      re += input[j] * w.real();
      im += input[j] * w.imag();
      index += k;
      if (index >= n) index -= n;
    }
    out[k] = {re, im};
  }
}

}  // namespace jasper
