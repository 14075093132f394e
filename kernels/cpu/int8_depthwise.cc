// The INT8 depthwise stage of a kInt8 separable sub-block (sub_block.h: PackedSubBlock's
// depthwise_int8 fields). Per tile of output frames:
//   1. the window's input rows (and 3 x dilation more, for the last tap quad) are quantized with
//      each channel's depthwise input scale (depthwise_in_inv: one per tensor or, from a
//      calibration that has them, one per channel) into unsigned bytes u = q + 128, masked rows
//      as 128 (zero); an
//      input known to be non-negative (depthwise_in_unsigned: a ReLU's output) on the unsigned
//      grid instead, u = clamp(round(x / scale), 0, 255), masked rows as 0, which halves the
//      step for the same range and needs no correction (its weight sums are stored as 0);
//      rows of C_in rounded up to 64 (a group of 4 channel blocks of 16). Within each group the
//      bytes are lane-permuted: channel 16k + 4L + i (block k, i < 4) sits at byte
//      16L + 4k + i. That is the order in which AVX-512's in-lane packs (vpackssdw, vpacksswb)
//      leave the 4 blocks' quantized values, and the order that makes step 2 in-lane too;
//   2. per group, the rows are stacked by tap quads: stacked[k][r][16][4] holds, for the 16
//      channels of block k, the bytes of rows r, r + d, r + 2d and r + 3d (d = dilation), so
//      that output frame t's taps 4q .. 4q + 3 are the 64 bytes at row t * stride + 4q * d: one
//      vpdpbusd operand against the packed weights' quad q ([cb][q][16][4], taps past K zero).
//      With the lane-permuted rows, the bytes interleave per 128-bit lane (vpunpck*bw, *wd) and
//      vector k of the result is block k's stacked row: 16 instructions per row of 4 blocks;
//   3. per block and run of frames, vpdpbusd sums the quads in INT32, the weight vector loaded
//      once per quad: with stride 1 and dilation 1 (all of QuartzNet's B blocks) runs of 12
//      frames, whose quad q + 1 reads 8 of the same 12 stacked rows as quad q, so the rows stay
//      in registers and 4 new ones are loaded per quad; else runs of up to 8 frames, one load
//      per frame and quad. The sum minus 128 x the channel's weight sum, times
//      depthwise_dequant[c] (the channel's input scale x its weight scale), is the FP32 output; it
//      is quantized
//      at once with the GEMM's activation scale and stored as the GEMM's A row (int8_gemm.cc:
//      GemmInt8AStage; q + 128 for vpdpbusd), the bytes the GEMM's gather would have made of
//      it, so the FP32 row is never stored.
// Without AVX-512 VNNI, plain loops compute the same INT32 sums from the same bytes: the same
// bits.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/int8_quantize.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"

#if JASPER_X86_DISPATCH
#include <immintrin.h>
#endif

namespace jasper::kernels::cpu_internal {
namespace {

constexpr int kBlock = 16;      // channels per block
constexpr int kGroup = 64;      // channels per group: 4 blocks
constexpr int kQuadBytes = 64;  // one block's four taps: [16][4] bytes
constexpr int kMaxFrames = 8;   // accumulators per run (the generic kernel)
constexpr int kRunS1 = 12;      // frames per run (the stride-1, dilation-1 kernel)
// Rows past its window that a plane has room for: the stride-1 kernel's loop loads the rows of
// one more quad than it runs (at most 3 past the window: see Frames12S1).
constexpr int kOverRead = 4;

using U8 = std::uint8_t;
using I8 = std::int8_t;
using I32 = std::int32_t;

int Quads(int taps) { return (taps + 3) / 4; }
int Blocks(int channels) { return (channels + kBlock - 1) / kBlock; }
Index RowBytes(int channels) {
  return static_cast<Index>((channels + kGroup - 1) / kGroup) * kGroup;
}

// Byte of channel c (< RowBytes) in a lane-permuted row.
Index PermutedByte(int c) {
  const int g = c / kGroup, k = (c / kBlock) % 4, lane = (c % kBlock) / 4, i = c % 4;
  return static_cast<Index>(g) * kGroup + lane * kBlock + k * 4 + i;
}

// Scratch layout: the quantized rows, then one group's stacked quads (64-byte aligned).
struct Scratch {
  U8* rows;     // [window rows + 3d][RowBytes]
  U8* stacked;  // [4][window rows + kOverRead][64]
};

Index WindowMax(const SubBlockDesc& d) { return WindowRows(d, kTileRows); }

Index RowsBytes(const SubBlockDesc& d) {
  const Index bytes = (WindowMax(d) + 3 * static_cast<Index>(d.dilation)) * RowBytes(d.in_channels);
  return (bytes + 63) / 64 * 64;
}

Scratch ScratchOf(const SubBlockDesc& d, U8* base) { return {base, base + RowsBytes(d)}; }

// Step 1 for one row: channels [0, n) of src, as lane-permuted unsigned bytes; the rest of the
// row's RowBytes(n) bytes 128 (zero).
void PermutedRowPortable(const float* src, int n, const float* inv, U8* dst) {
  std::memset(dst, 0x80, static_cast<std::size_t>(RowBytes(n)));
  for (int c = 0; c < n; ++c) {
    dst[PermutedByte(c)] = static_cast<U8>(static_cast<U8>(QuantizeInt8(src[c], inv[c])) ^ 0x80u);
  }
}

// The same for a non-negative input on the unsigned grid (QuantizeUint8); the rest 0 (zero).
void PermutedRowUint8Portable(const float* src, int n, const float* inv, U8* dst) {
  std::memset(dst, 0, static_cast<std::size_t>(RowBytes(n)));
  for (int c = 0; c < n; ++c) dst[PermutedByte(c)] = QuantizeUint8(src[c], inv[c]);
}

// Steps 2 for group g's 4 blocks: stacked[k][r][c][j] = rows[r + j * d][PermutedByte(64g +
// 16k + c)]. Every block of the group is written (channels past C_in read the padding bytes).
void StackGroupPortable(const U8* rows, Index row_bytes, int g, Index window, int d, U8* stacked) {
  for (int k = 0; k < 4; ++k) {
    U8* out = stacked + static_cast<Index>(k) * (window + kOverRead) * kQuadBytes;
    for (Index r = 0; r < window; ++r, out += kQuadBytes) {
      for (int c = 0; c < kBlock; ++c) {
        const Index at = PermutedByte(g * kGroup + k * kBlock + c);
        for (int j = 0; j < 4; ++j) out[c * 4 + j] = rows[(r + j * d) * row_bytes + at];
      }
    }
  }
}

#if JASPER_X86_DISPATCH
// SSE2 (every x86-64): the same bytes, one 128-bit lane at a time.
void StackGroupSse2(const U8* rows, Index row_bytes, int g, Index window, int d, U8* stacked) {
  const Index plane = (window + kOverRead) * kQuadBytes;
  const Index step = static_cast<Index>(d) * row_bytes;
  for (Index r = 0; r < window; ++r) {
    const U8* a = rows + r * row_bytes + static_cast<Index>(g) * kGroup;
    U8* out = stacked + r * kQuadBytes;
    for (int lane = 0; lane < 4; ++lane) {
      const U8* x = a + lane * 16;
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + step));
      const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 2 * step));
      const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 3 * step));
      const __m128i t0 = _mm_unpacklo_epi8(x0, x1);  // bytes 0-7 of rows 0, 1
      const __m128i t1 = _mm_unpackhi_epi8(x0, x1);  // bytes 8-15
      const __m128i t2 = _mm_unpacklo_epi8(x2, x3);
      const __m128i t3 = _mm_unpackhi_epi8(x2, x3);
      // Bytes 4k .. 4k + 3 of this lane are block k's channels 4 lane .. 4 lane + 3.
      U8* o = out + lane * 16;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi16(t0, t2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + plane), _mm_unpackhi_epi16(t0, t2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * plane), _mm_unpacklo_epi16(t1, t3));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 3 * plane), _mm_unpackhi_epi16(t1, t3));
    }
  }
}

// AVX-512: the 4 lanes at once.
JASPER_AVX512_TARGET void StackGroupAvx512(const U8* rows, Index row_bytes, int g, Index window,
                                           int d, U8* stacked) {
  const Index plane = (window + kOverRead) * kQuadBytes;
  const Index step = static_cast<Index>(d) * row_bytes;
  for (Index r = 0; r < window; ++r) {
    const U8* x = rows + r * row_bytes + static_cast<Index>(g) * kGroup;
    const __m512i x0 = _mm512_loadu_si512(x);
    const __m512i x1 = _mm512_loadu_si512(x + step);
    const __m512i x2 = _mm512_loadu_si512(x + 2 * step);
    const __m512i x3 = _mm512_loadu_si512(x + 3 * step);
    const __m512i t0 = _mm512_unpacklo_epi8(x0, x1);
    const __m512i t1 = _mm512_unpackhi_epi8(x0, x1);
    const __m512i t2 = _mm512_unpacklo_epi8(x2, x3);
    const __m512i t3 = _mm512_unpackhi_epi8(x2, x3);
    U8* o = stacked + r * kQuadBytes;
    _mm512_storeu_si512(o, _mm512_unpacklo_epi16(t0, t2));
    _mm512_storeu_si512(o + plane, _mm512_unpackhi_epi16(t0, t2));
    _mm512_storeu_si512(o + 2 * plane, _mm512_unpacklo_epi16(t1, t3));
    _mm512_storeu_si512(o + 3 * plane, _mm512_unpackhi_epi16(t1, t3));
  }
}

// Step 1 with AVX-512: 64 channels per group, the 4 blocks' INT32 values packed in-lane, which
// is the lane permutation. Signed grid: values within [-127, 127] (saturation never applies),
// flipped to q + 128; channels past n load as zeros, so they become 128. Unsigned grid
// (kUnsigned): values in [0, 255] pack through INT16 (signed saturation, never reached) to
// unsigned bytes (vpackuswb, the same in-lane order); channels past n stay 0.
template <bool kUnsigned>
JASPER_AVX512_TARGET void PermutedRowAvx512(const float* src, int n, const float* inv, U8* dst) {
  const __mmask16 all = 0xffff;
  for (int c = 0; c < n; c += kGroup) {
    __m512i q[4];
    for (int k = 0; k < 4; ++k) {
      const int c0 = c + k * kBlock;
      const __mmask16 m = c0 + 16 <= n ? all
                          : c0 >= n    ? static_cast<__mmask16>(0)
                                       : static_cast<__mmask16>((1u << (n - c0)) - 1u);
      const __m512 v = _mm512_maskz_loadu_ps(m, src + c0);
      const __m512 scale = _mm512_loadu_ps(inv + c0);  // padded to RowBytes(n) channels
      q[k] = kUnsigned ? QuantizeLanesUint8Avx512(v, scale) : QuantizeLanesAvx512(v, scale);
    }
    const __m512i words01 = _mm512_packs_epi32(q[0], q[1]);
    const __m512i words23 = _mm512_packs_epi32(q[2], q[3]);
    const __m512i bytes = kUnsigned ? _mm512_packus_epi16(words01, words23)
                                    : _mm512_xor_si512(_mm512_packs_epi16(words01, words23),
                                                       _mm512_set1_epi8(static_cast<char>(0x80)));
    _mm512_storeu_si512(dst + c, bytes);
  }
}
#endif

// `inv`: 1 / each channel's scale, RowBytes(n) values (0 past n).
using QuantizeRowFn = void (*)(const float* src, int n, const float* inv, U8* dst);

// Step 1: rows [0, count) of the utterance's input from row `first` on, as bytes; rows outside
// the utterance as `zero` (the grid's zero: 128 signed, 0 unsigned).
void QuantizeRows(const float* xb, int in_len, Index first, Index count, int channels,
                  const float* inv, QuantizeRowFn quantize, U8 zero, U8* rows) {
  const Index row_bytes = RowBytes(channels);
  for (Index r = 0; r < count; ++r) {
    U8* dst = rows + r * row_bytes;
    const Index src = first + r;
    if (src >= 0 && src < in_len) {
      quantize(xb + src * channels, channels, inv, dst);
    } else {
      std::memset(dst, zero, static_cast<std::size_t>(row_bytes));
    }
  }
}

// Step 3 for one channel block: the GEMM's A rows of `frames` frames (out_stride bytes apart),
// 16 bytes each.
struct BlockArgs {
  const U8* stacked;  // this block's [window][64]
  const I8* weights;  // this block's [quads][64]
  int quads;
  Index quad_step;   // bytes between quads: 4 * d * 64
  Index frame_step;  // bytes between frames: stride * 64
  const I32* sums;   // this block's 16 weight sums
  const float* dq;   // this block's 16 dequantization factors
  float inv;         // 1 / the GEMM's activation scale (p.a_scale[0])
  bool to_unsigned;  // A as q + 128 (vpdpbusd's operand)
  I8* out;           // frame 0, this block's first channel
  Index out_stride;  // bytes between frames
};

// The sum of one channel, dequantized to the FP32 value the unfused path stored, then quantized
// as the GEMM's gather quantized that value: the same bits.
I8 OutputByte(I32 acc, I32 sum, float dq, float inv, bool to_unsigned) {
  const I8 q = QuantizeInt8(static_cast<float>(acc - 128 * sum) * dq, inv);
  return to_unsigned ? static_cast<I8>(static_cast<U8>(q) ^ 0x80u) : q;
}

void BlockPortable(const BlockArgs& a, int frames) {
  for (int f = 0; f < frames; ++f) {
    for (int c = 0; c < kBlock; ++c) {
      I32 acc = 0;
      for (int q = 0; q < a.quads; ++q) {
        const U8* x = a.stacked + f * a.frame_step + q * a.quad_step + c * 4;
        const I8* w = a.weights + static_cast<Index>(q) * kQuadBytes + c * 4;
        for (int j = 0; j < 4; ++j) acc += I32{x[j]} * I32{w[j]};
      }
      a.out[f * a.out_stride + c] = OutputByte(acc, a.sums[c], a.dq[c], a.inv, a.to_unsigned);
    }
  }
}

#if JASPER_X86_DISPATCH
#define JASPER_DW_VNNI_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")))

// The sums of F frames, minus 128 x the weight sums, dequantized (the FP32 value the unfused
// path stored), quantized again with the GEMM's scale as its gather did (int8_quantize.h), and
// stored as 16 bytes of A per frame.
template <int F>
JASPER_DW_VNNI_TARGET JASPER_ALWAYS_INLINE void StoreFrames(const BlockArgs& a,
                                                            const __m512i* acc) {
  // The merge-masked forms with every lane set: GCC 12 warns about the plain forms' internal
  // undefined vectors (int8_quantize.h).
  const __mmask16 all = 0xffff;
  const __m512i correction =  // 128 x sums
      _mm512_mask_slli_epi32(_mm512_setzero_si512(), all, _mm512_loadu_si512(a.sums), 7);
  const __m512 dq = _mm512_loadu_ps(a.dq);
  const __m512 inv = _mm512_set1_ps(a.inv);
  const __m128i flip = _mm_set1_epi8(a.to_unsigned ? static_cast<char>(0x80) : 0);
  const __m512 zero_ps = _mm512_setzero_ps();
  const __m128i zero_b = _mm_setzero_si128();
  for (int f = 0; f < F; ++f) {
    const __m512 v = _mm512_mul_ps(
        _mm512_mask_cvtepi32_ps(zero_ps, all, _mm512_sub_epi32(acc[f], correction)), dq);
    const __m512i q = QuantizeLanesAvx512(v, inv);
    const __m128i bytes = _mm_xor_si128(_mm512_mask_cvtepi32_epi8(zero_b, all, q), flip);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a.out + f * a.out_stride), bytes);
  }
}

template <int F>
JASPER_DW_VNNI_TARGET JASPER_ALWAYS_INLINE void FramesVnni(const BlockArgs& a) {
  __m512i acc[F];
  for (int f = 0; f < F; ++f) acc[f] = _mm512_setzero_si512();
  const U8* x = a.stacked;
  const I8* w = a.weights;
  for (int q = 0; q < a.quads; ++q, x += a.quad_step, w += kQuadBytes) {
    const __m512i wq = _mm512_loadu_si512(w);
    for (int f = 0; f < F; ++f) {
      acc[f] = _mm512_dpbusd_epi32(acc[f], _mm512_loadu_si512(x + f * a.frame_step), wq);
    }
  }
  StoreFrames<F>(a, acc);
}

template <int F>
JASPER_DW_VNNI_TARGET JASPER_ALWAYS_INLINE void AnyFramesVnni(const BlockArgs& a, int frames) {
  if constexpr (F > 1) {
    if (frames < F) {
      AnyFramesVnni<F - 1>(a, frames);
      return;
    }
  }
  FramesVnni<F>(a);
}

// One quad of 12 frames: frames 0-3 read the rows L0-L3, 4-7 M0-M3, 8-11 H0-H3; then L0-L3
// take the 4 rows the next quad adds (after the last quad of the loop they are loaded and not
// used: up to kOverRead rows past the window, which the planes have room for). A macro over
// named variables: GCC keeps the 25 vectors in registers only so (arrays passed to inline
// helpers were spilled and copied every quad).
#define JASPER_DW_QUAD12(L0, L1, L2, L3, M0, M1, M2, M3, H0, H1, H2, H3, wptr) \
  do {                                                                         \
    const __m512i wq = _mm512_loadu_si512(wptr);                               \
    a0 = _mm512_dpbusd_epi32(a0, L0, wq);                                      \
    a1 = _mm512_dpbusd_epi32(a1, L1, wq);                                      \
    a2 = _mm512_dpbusd_epi32(a2, L2, wq);                                      \
    a3 = _mm512_dpbusd_epi32(a3, L3, wq);                                      \
    a4 = _mm512_dpbusd_epi32(a4, M0, wq);                                      \
    a5 = _mm512_dpbusd_epi32(a5, M1, wq);                                      \
    a6 = _mm512_dpbusd_epi32(a6, M2, wq);                                      \
    a7 = _mm512_dpbusd_epi32(a7, M3, wq);                                      \
    a8 = _mm512_dpbusd_epi32(a8, H0, wq);                                      \
    a9 = _mm512_dpbusd_epi32(a9, H1, wq);                                      \
    a10 = _mm512_dpbusd_epi32(a10, H2, wq);                                    \
    a11 = _mm512_dpbusd_epi32(a11, H3, wq);                                    \
    L0 = _mm512_loadu_si512(next);                                             \
    L1 = _mm512_loadu_si512(next + kQuadBytes);                                \
    L2 = _mm512_loadu_si512(next + 2 * kQuadBytes);                            \
    L3 = _mm512_loadu_si512(next + 3 * kQuadBytes);                            \
    next += 4 * kQuadBytes;                                                    \
  } while (false)

// Stride 1, dilation 1: frame f's quad q is stacked row f + 4q, so quad q of frames 0-11 reads
// rows 4q .. 4q + 11 and quad q + 1 the last 8 of them and 4 more. The rows are held in three
// groups of 4 registers (r0-r3, r4-r7, r8-r11) that take turns, the loop unrolled by 3 so that
// no register moves: 12 accumulators + 12 rows + 1 weight vector = 25 of the 32 registers. The
// loop's last quad q <= quads - 1 loads rows up to 4 quads + 11 of the run, frame 0 of which is
// at most frames - 12: row frames + 4 quads - 1 <= window + 3 (4 quads <= K + 3, window =
// frames + K - 1), within the kOverRead rows a plane has past its window.
JASPER_DW_VNNI_TARGET void Frames12S1(const BlockArgs& a) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
          a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;
  const U8* x = a.stacked;
  __m512i r0 = _mm512_loadu_si512(x), r1 = _mm512_loadu_si512(x + kQuadBytes),
          r2 = _mm512_loadu_si512(x + 2 * kQuadBytes), r3 = _mm512_loadu_si512(x + 3 * kQuadBytes),
          r4 = _mm512_loadu_si512(x + 4 * kQuadBytes), r5 = _mm512_loadu_si512(x + 5 * kQuadBytes),
          r6 = _mm512_loadu_si512(x + 6 * kQuadBytes), r7 = _mm512_loadu_si512(x + 7 * kQuadBytes),
          r8 = _mm512_loadu_si512(x + 8 * kQuadBytes), r9 = _mm512_loadu_si512(x + 9 * kQuadBytes),
          r10 = _mm512_loadu_si512(x + 10 * kQuadBytes),
          r11 = _mm512_loadu_si512(x + 11 * kQuadBytes);
  const U8* next = x + 12 * kQuadBytes;  // the rows the next quad adds
  const I8* w = a.weights;
  const int quads = a.quads;
  int q = 0;
  // Whole rounds of 3 quads without a branch, the rows in registers; the last 0-2 quads read
  // their rows from memory (the registers are dead after the loop, so GCC needs no copies).
  for (; q + 3 <= quads; q += 3, w += 3 * kQuadBytes) {
    JASPER_DW_QUAD12(r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, w);
    JASPER_DW_QUAD12(r4, r5, r6, r7, r8, r9, r10, r11, r0, r1, r2, r3, w + kQuadBytes);
    JASPER_DW_QUAD12(r8, r9, r10, r11, r0, r1, r2, r3, r4, r5, r6, r7, w + 2 * kQuadBytes);
  }
  for (; q < quads; ++q, w += kQuadBytes) {
    const __m512i wq = _mm512_loadu_si512(w);
    const U8* y = x + static_cast<Index>(4) * q * kQuadBytes;
    a0 = _mm512_dpbusd_epi32(a0, _mm512_loadu_si512(y), wq);
    a1 = _mm512_dpbusd_epi32(a1, _mm512_loadu_si512(y + kQuadBytes), wq);
    a2 = _mm512_dpbusd_epi32(a2, _mm512_loadu_si512(y + 2 * kQuadBytes), wq);
    a3 = _mm512_dpbusd_epi32(a3, _mm512_loadu_si512(y + 3 * kQuadBytes), wq);
    a4 = _mm512_dpbusd_epi32(a4, _mm512_loadu_si512(y + 4 * kQuadBytes), wq);
    a5 = _mm512_dpbusd_epi32(a5, _mm512_loadu_si512(y + 5 * kQuadBytes), wq);
    a6 = _mm512_dpbusd_epi32(a6, _mm512_loadu_si512(y + 6 * kQuadBytes), wq);
    a7 = _mm512_dpbusd_epi32(a7, _mm512_loadu_si512(y + 7 * kQuadBytes), wq);
    a8 = _mm512_dpbusd_epi32(a8, _mm512_loadu_si512(y + 8 * kQuadBytes), wq);
    a9 = _mm512_dpbusd_epi32(a9, _mm512_loadu_si512(y + 9 * kQuadBytes), wq);
    a10 = _mm512_dpbusd_epi32(a10, _mm512_loadu_si512(y + 10 * kQuadBytes), wq);
    a11 = _mm512_dpbusd_epi32(a11, _mm512_loadu_si512(y + 11 * kQuadBytes), wq);
  }
  const __m512i acc[kRunS1] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
  StoreFrames<kRunS1>(a, acc);
}
#undef JASPER_DW_QUAD12

JASPER_DW_VNNI_TARGET void BlockVnni(const BlockArgs& a, int frames, bool s1) {
  BlockArgs run = a;
  int f0 = 0;
  if (s1) {
    for (; f0 + kRunS1 <= frames; f0 += kRunS1) {
      run.stacked = a.stacked + f0 * a.frame_step;
      run.out = a.out + f0 * a.out_stride;
      Frames12S1(run);
    }
  }
  for (; f0 < frames; f0 += kMaxFrames) {
    run.stacked = a.stacked + f0 * a.frame_step;
    run.out = a.out + f0 * a.out_stride;
    AnyFramesVnni<kMaxFrames>(run, std::min(kMaxFrames, frames - f0));
  }
}
#endif

bool UseVnni() {
#if JASPER_X86_DISPATCH
  const CpuIsa isa = ActiveCpuIsa();
  return (isa == CpuIsa::kAmx || isa == CpuIsa::kAvx512) && GetCpuFeatures().avx512_vnni;
#else
  return false;
#endif
}

}  // namespace

std::size_t Int8DepthwiseScratchBytes(const SubBlockDesc& desc) {
  return static_cast<std::size_t>(RowsBytes(desc) + 4 * (WindowMax(desc) + kOverRead) * kQuadBytes);
}

bool PackInt8Depthwise(const float* depthwise, float input_scale, const float* channel_scales,
                       bool unsigned_input, PackedSubBlock* p) {
  const int taps = p->desc.kernel_size;
  const int channels = p->desc.in_channels;
  const int quads = Quads(taps);
  const int blocks = Blocks(channels);
  auto input_scale_of = [&](int c) {
    return channel_scales != nullptr ? channel_scales[c] : input_scale;
  };
  for (int c = 0; c < channels; ++c) {
    const float s = input_scale_of(c);
    if (!(std::isfinite(s) && s > 0.0f && std::isfinite(1.0f / s))) return false;
  }
  p->depthwise_in_inv.assign(static_cast<std::size_t>(RowBytes(channels)), 0.0f);
  for (int c = 0; c < channels; ++c) p->depthwise_in_inv[c] = 1.0f / input_scale_of(c);
  p->depthwise_in_unsigned = unsigned_input;
  p->depthwise_int8.assign(static_cast<std::size_t>(blocks) * quads * kQuadBytes, 0);
  p->depthwise_dequant.assign(static_cast<std::size_t>(blocks) * kBlock, 0.0f);
  p->depthwise_int8_sums.assign(static_cast<std::size_t>(blocks) * kBlock, 0);
  for (int c = 0; c < channels; ++c) {
    float max_abs = 0.0f;
    for (int k = 0; k < taps; ++k) {
      max_abs = std::max(max_abs, std::fabs(depthwise[static_cast<Index>(k) * channels + c]));
    }
    p->depthwise_dequant[c] = input_scale_of(c) * (max_abs / 127.0f);
    if (!(max_abs > 0.0f)) continue;  // an all-zero (or NaN) channel stays zero
    const float inv = 127.0f / max_abs;
    I32 sum = 0;
    for (int k = 0; k < taps; ++k) {
      const I8 q = QuantizeInt8(depthwise[static_cast<Index>(k) * channels + c], inv);
      const Index at =
          (static_cast<Index>(c / kBlock) * quads + k / 4) * kQuadBytes + (c % kBlock) * 4 + k % 4;
      p->depthwise_int8[static_cast<std::size_t>(at)] = q;
      sum += q;
    }
    // The unsigned grid has its zero at 0: nothing to subtract.
    p->depthwise_int8_sums[c] = unsigned_input ? 0 : sum;
  }
  return true;
}

void DepthwiseInt8Tile(const PackedSubBlock& p, const float* xb, int in_len, Index first,
                       int frames, std::uint8_t* scratch, const Int8AStage& out) {
  const SubBlockDesc& d = p.desc;
  const int channels = d.in_channels;
  const int blocks = Blocks(channels);
  const int quads = Quads(d.kernel_size);
  const Index window = WindowRows(d, frames);
  const Index row_bytes = RowBytes(channels);
  const Scratch s = ScratchOf(d, scratch);
  const bool u8 = p.depthwise_in_unsigned;
  QuantizeRowFn quantize = u8 ? PermutedRowUint8Portable : PermutedRowPortable;
  auto stack = StackGroupPortable;
#if JASPER_X86_DISPATCH
  const bool vnni = UseVnni();
  const bool s1 = d.stride == 1 && d.dilation == 1;
  stack = StackGroupSse2;
  if (ActiveCpuIsa() >= CpuIsa::kAvx512) {
    quantize = u8 ? PermutedRowAvx512<true> : PermutedRowAvx512<false>;
    stack = StackGroupAvx512;
  }
#endif
  QuantizeRows(xb, in_len, first, window + 3 * static_cast<Index>(d.dilation), channels,
               p.depthwise_in_inv.data(), quantize, u8 ? 0 : 0x80, s.rows);
  for (int cb = 0; cb < blocks; ++cb) {
    if (cb % 4 == 0) stack(s.rows, row_bytes, cb / 4, window, d.dilation, s.stacked);
    BlockArgs a;
    a.stacked = s.stacked + static_cast<Index>(cb % 4) * (window + kOverRead) * kQuadBytes;
    a.weights = p.depthwise_int8.data() + static_cast<Index>(cb) * quads * kQuadBytes;
    a.quads = quads;
    a.quad_step = static_cast<Index>(4) * d.dilation * kQuadBytes;
    a.frame_step = static_cast<Index>(d.stride) * kQuadBytes;
    a.sums = p.depthwise_int8_sums.data() + cb * kBlock;
    a.dq = p.depthwise_dequant.data() + cb * kBlock;
    a.inv = 1.0f / p.a_scale[0];
    a.to_unsigned = out.unsigned_a;
    a.out = out.a + cb * kBlock;
    a.out_stride = out.ld;
#if JASPER_X86_DISPATCH
    if (vnni) {
      BlockVnni(a, frames, s1);
      continue;
    }
#endif
    BlockPortable(a, frames);
  }
}

}  // namespace jasper::kernels::cpu_internal
