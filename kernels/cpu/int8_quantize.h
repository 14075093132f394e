// INT8 quantization of activations, shared by the INT8 GEMM (int8_gemm.cc) and the INT8
// depthwise conv (int8_depthwise.cc): q = clamp(round_half_even(v * inv_scale), -127, 127),
// NaN -> -127, stored signed or, for vpdpbusd's unsigned operand, as q + 128; a tensor known
// to be non-negative (a ReLU's output: the depthwise input, a dense sub-block's or a residual
// GEMM input) as u = clamp(round_half_even(v * inv_scale), 0, 255), NaN -> 0, stored as is for
// an unsigned operand and as u - 128 for a signed one. The portable and the AVX-512 forms give
// the same bytes (kernels_test: Int8QuantizeTest). Not a public interface: include only from
// kernels/cpu/*.cc and that test. Thread-safety: reentrant.
#ifndef JASPER_KERNELS_CPU_INT8_QUANTIZE_H_
#define JASPER_KERNELS_CPU_INT8_QUANTIZE_H_

#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_internal.h"

#if JASPER_X86_DISPATCH
#include <immintrin.h>
#endif

namespace jasper::kernels::cpu_internal {

inline std::int8_t QuantizeInt8(float v, float inv) {
  float s = v * inv;
  if (!(s >= -127.0f)) s = -127.0f;
  if (s > 127.0f) s = 127.0f;
  return static_cast<std::int8_t>(std::nearbyint(s));
}

// A non-negative tensor (a ReLU's output) on the unsigned grid: u = clamp(round_half_even(v *
// inv_scale), 0, 255), NaN -> 0; twice the steps of the signed grid over the same range.
inline std::uint8_t QuantizeUint8(float v, float inv) {
  float s = v * inv;
  if (!(s >= 0.0f)) s = 0.0f;
  if (s > 255.0f) s = 255.0f;
  return static_cast<std::uint8_t>(std::nearbyint(s));
}

// src[0, n) into dst; returns n. `grid_unsigned`: the tensor is non-negative (a ReLU's output)
// and quantized on the unsigned grid, u = QuantizeUint8; its byte is u for an unsigned operand
// (`to_unsigned`, vpdpbusd's) and u - 128 for a signed one (the GEMM adds 128 x the column
// sums back). Else the signed grid's q, as q + 128 for an unsigned operand.
inline int QuantizeRowPortable(const float* src, int n, std::int8_t* dst, float inv,
                               bool to_unsigned, bool grid_unsigned = false) {
  for (int c = 0; c < n; ++c) {
    const std::uint8_t byte = grid_unsigned ? QuantizeUint8(src[c], inv)
                                            : static_cast<std::uint8_t>(QuantizeInt8(src[c], inv));
    dst[c] = static_cast<std::int8_t>(to_unsigned != grid_unsigned ? byte ^ 0x80u : byte);
  }
  return n;
}

#if JASPER_X86_DISPATCH
// 16 lanes: round_half_even(clamp(v * inv, -127, 127)) as INT32 (every use of the rule on
// vectors goes through here). Clamped in FP32 before the conversion: vcvtps2dq turns anything
// beyond INT32 into INT32_MIN, and vmaxps(NaN, -127) gives -127. The merge-masked forms with every
// lane set avoid GCC 12's "may be used uninitialized" warnings about the plain forms' internal
// undefined vectors.
JASPER_AVX512_TARGET inline __m512i QuantizeLanesAvx512(__m512 v, __m512 inv) {
  const __mmask16 all = 0xffff;
  const __m512 zero_ps = _mm512_setzero_ps();
  const __m512 clamped = _mm512_mask_min_ps(
      zero_ps, all,
      _mm512_mask_max_ps(zero_ps, all, _mm512_mul_ps(v, inv), _mm512_set1_ps(-127.0f)),
      _mm512_set1_ps(127.0f));
  return _mm512_mask_cvtps_epi32(_mm512_setzero_si512(), all, clamped);
}

// 16 lanes: round_half_even(clamp(v * inv, 0, 255)) as INT32 (QuantizeUint8; NaN -> 0).
JASPER_AVX512_TARGET inline __m512i QuantizeLanesUint8Avx512(__m512 v, __m512 inv) {
  const __mmask16 all = 0xffff;
  const __m512 zero_ps = _mm512_setzero_ps();
  const __m512 clamped = _mm512_mask_min_ps(
      zero_ps, all, _mm512_mask_max_ps(zero_ps, all, _mm512_mul_ps(v, inv), zero_ps),
      _mm512_set1_ps(255.0f));
  return _mm512_mask_cvtps_epi32(_mm512_setzero_si512(), all, clamped);
}

// 16 at a time, the bytes of QuantizeRowPortable; the masked tail loads zeros, so the elements
// written past n (up to the next multiple of 16; the return value) are the zero's byte.
JASPER_AVX512_TARGET inline int QuantizeRowAvx512(const float* src, int n, std::int8_t* dst,
                                                  float inv, bool to_unsigned,
                                                  bool grid_unsigned = false) {
  const __m512 scale = _mm512_set1_ps(inv);
  const __m128i flip = _mm_set1_epi8(to_unsigned != grid_unsigned ? static_cast<char>(0x80) : 0);
  const __mmask16 all = 0xffff;
  const __m128i zero_b = _mm_setzero_si128();
  int c = 0;
  for (; c < n; c += 16) {
    const __mmask16 m = c + 16 <= n ? all : static_cast<__mmask16>((1u << (n - c)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, src + c);
    // vpmovdb keeps each lane's low byte: u in [0, 255] as is.
    const __m512i q =
        grid_unsigned ? QuantizeLanesUint8Avx512(v, scale) : QuantizeLanesAvx512(v, scale);
    const __m128i bytes = _mm_xor_si128(_mm512_mask_cvtepi32_epi8(zero_b, all, q), flip);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + c), bytes);
  }
  return c;
}
#endif

}  // namespace jasper::kernels::cpu_internal

#endif  // JASPER_KERNELS_CPU_INT8_QUANTIZE_H_
