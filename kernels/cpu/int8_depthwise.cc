// The INT8 depthwise stage of a kInt8 separable sub-block (sub_block.h: PackedSubBlock's
// depthwise_int8 fields). Per tile of output frames:
//   1. the window's input rows (and 3 x dilation more, for the last tap quad) are quantized with
//      the depthwise input scale into unsigned bytes u = q + 128, masked rows as 128 (zero),
//      rows of C_in rounded up to 16;
//   2. the rows are stacked by tap quads: stacked[cb][r][16][4] holds, for the 16 channels of
//      block cb, the bytes of rows r, r + d, r + 2d and r + 3d (d = dilation), so that output
//      frame t's taps 4q .. 4q + 3 are the 64 bytes at row t * stride + 4q * d: one vpdpbusd
//      operand against the packed weights' quad q ([cb][q][16][4], taps past K zero);
//   3. per channel block and run of up to 8 frames, vpdpbusd sums the quads in INT32 (8
//      accumulators, the weight vector loaded once per quad), and the sum minus 128 x the
//      channel's weight sum, times depthwise_dequant[c] (input scale x weight scale), is the
//      FP32 output row that the INT8 GEMM then quantizes again as its A.
// Without AVX-512 VNNI, plain loops compute the same INT32 sums: the same bits.
#include <algorithm>
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
constexpr int kQuadBytes = 64;  // one block's four taps: [16][4] bytes
constexpr int kMaxFrames = 8;   // accumulators per run

using U8 = std::uint8_t;
using I8 = std::int8_t;
using I32 = std::int32_t;

int Quads(int taps) { return (taps + 3) / 4; }
int Blocks(int channels) { return (channels + kBlock - 1) / kBlock; }

// Scratch layout: the quantized rows, then the stacked quads (64-byte aligned).
struct Scratch {
  U8* rows;     // [window rows + 3d][blocks * 16]
  U8* stacked;  // [blocks][window rows][64]
};

Index WindowMax(const SubBlockDesc& d) { return WindowRows(d, kTileRows); }

Scratch ScratchOf(const SubBlockDesc& d, U8* base) {
  const Index row_bytes = static_cast<Index>(Blocks(d.in_channels)) * kBlock;
  const Index rows_bytes = (WindowMax(d) + 3 * static_cast<Index>(d.dilation)) * row_bytes;
  return {base, base + (rows_bytes + 63) / 64 * 64};
}

using QuantizeRowFn = int (*)(const float* src, int n, I8* dst, float inv, bool to_unsigned);

// Step 1: rows [0, count) of the utterance's input from row `first` on, as bytes.
void QuantizeRows(const float* xb, int in_len, Index first, Index count, int channels, float inv,
                  QuantizeRowFn quantize, U8* rows) {
  const Index row_bytes = static_cast<Index>(Blocks(channels)) * kBlock;
  for (Index r = 0; r < count; ++r) {
    U8* dst = rows + r * row_bytes;
    const Index src = first + r;
    int written = 0;
    if (src >= 0 && src < in_len) {
      written = quantize(xb + src * channels, channels, reinterpret_cast<I8*>(dst), inv, true);
    }
    if (written < row_bytes) std::memset(dst + written, 0x80, row_bytes - written);
  }
}

// Step 2: stacked[cb][r][c][j] = rows[r + j * d][cb * 16 + c].
void StackQuads(const U8* rows, int blocks, Index window, int d, U8* stacked) {
  const Index row_bytes = static_cast<Index>(blocks) * kBlock;
  for (int cb = 0; cb < blocks; ++cb) {
    U8* out = stacked + static_cast<Index>(cb) * window * kQuadBytes;
    for (Index r = 0; r < window; ++r, out += kQuadBytes) {
      const U8* a = rows + r * row_bytes + cb * kBlock;
#if JASPER_X86_DISPATCH
      // SSE2 (every x86-64): bytes of the four rows interleaved into channel-major quads.
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + d * row_bytes));
      const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2 * d * row_bytes));
      const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 3 * d * row_bytes));
      const __m128i t0 = _mm_unpacklo_epi8(x0, x1);  // channels 0-7 of rows 0, 1
      const __m128i t1 = _mm_unpackhi_epi8(x0, x1);  // channels 8-15
      const __m128i t2 = _mm_unpacklo_epi8(x2, x3);
      const __m128i t3 = _mm_unpackhi_epi8(x2, x3);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi16(t0, t2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm_unpackhi_epi16(t0, t2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32), _mm_unpacklo_epi16(t1, t3));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 48), _mm_unpackhi_epi16(t1, t3));
#else
      for (int c = 0; c < kBlock; ++c) {
        for (int j = 0; j < 4; ++j) out[c * 4 + j] = a[j * d * row_bytes + c];
      }
#endif
    }
  }
}

// Step 3 for one channel block: out rows t (stride out_stride floats) of `frames` frames.
struct BlockArgs {
  const U8* stacked;  // this block's [window][64]
  const I8* weights;  // this block's [quads][64]
  int quads;
  Index quad_step;   // bytes between quads: 4 * d * 64
  Index frame_step;  // bytes between frames: stride * 64
  const I32* sums;   // this block's 16 weight sums
  const float* dq;   // this block's 16 dequantization factors
  int valid;         // channels of this block that exist (<= 16)
  float* out;        // frame 0, this block's first channel
  Index out_stride;  // floats between frames
};

void BlockPortable(const BlockArgs& a, int frames) {
  for (int f = 0; f < frames; ++f) {
    for (int c = 0; c < a.valid; ++c) {
      I32 acc = 0;
      for (int q = 0; q < a.quads; ++q) {
        const U8* x = a.stacked + f * a.frame_step + q * a.quad_step + c * 4;
        const I8* w = a.weights + static_cast<Index>(q) * kQuadBytes + c * 4;
        for (int j = 0; j < 4; ++j) acc += I32{x[j]} * I32{w[j]};
      }
      a.out[f * a.out_stride + c] = static_cast<float>(acc - 128 * a.sums[c]) * a.dq[c];
    }
  }
}

#if JASPER_X86_DISPATCH
#define JASPER_DW_VNNI_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")))

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
  // The merge-masked forms with every lane set: GCC 12 warns about the plain forms' internal
  // undefined vectors (int8_quantize.h).
  const __mmask16 all = 0xffff;
  const __m512i correction =  // 128 x sums
      _mm512_mask_slli_epi32(_mm512_setzero_si512(), all, _mm512_loadu_si512(a.sums), 7);
  const __m512 dq = _mm512_loadu_ps(a.dq);
  const __mmask16 m = static_cast<__mmask16>((1u << a.valid) - 1u);
  for (int f = 0; f < F; ++f) {
    const __m512 v = _mm512_mul_ps(
        _mm512_mask_cvtepi32_ps(_mm512_setzero_ps(), all, _mm512_sub_epi32(acc[f], correction)),
        dq);
    _mm512_mask_storeu_ps(a.out + f * a.out_stride, m, v);
  }
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

JASPER_DW_VNNI_TARGET void BlockVnni(const BlockArgs& a, int frames) {
  BlockArgs run = a;
  for (int f0 = 0; f0 < frames; f0 += kMaxFrames) {
    run.stacked = a.stacked + f0 * a.frame_step;
    run.out = a.out + f0 * a.out_stride;
    AnyFramesVnni<kMaxFrames>(run, std::min(kMaxFrames, frames - f0));
  }
}

int QuantizeRowAvx512Fn(const float* src, int n, I8* dst, float inv, bool to_unsigned) {
  return QuantizeRowAvx512(src, n, dst, inv, to_unsigned);
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
  const Index row_bytes = static_cast<Index>(Blocks(desc.in_channels)) * kBlock;
  const Index rows_bytes = (WindowMax(desc) + 3 * static_cast<Index>(desc.dilation)) * row_bytes;
  const Index stacked_bytes = WindowMax(desc) * row_bytes * 4;
  return static_cast<std::size_t>((rows_bytes + 63) / 64 * 64 + stacked_bytes);
}

void PackInt8Depthwise(const float* depthwise, float input_scale, PackedSubBlock* p) {
  const int taps = p->desc.kernel_size;
  const int channels = p->desc.in_channels;
  const int quads = Quads(taps);
  const int blocks = Blocks(channels);
  p->depthwise_in_scale = input_scale;
  p->depthwise_int8.assign(static_cast<std::size_t>(blocks) * quads * kQuadBytes, 0);
  p->depthwise_dequant.assign(static_cast<std::size_t>(blocks) * kBlock, 0.0f);
  p->depthwise_int8_sums.assign(static_cast<std::size_t>(blocks) * kBlock, 0);
  for (int c = 0; c < channels; ++c) {
    float max_abs = 0.0f;
    for (int k = 0; k < taps; ++k) {
      max_abs = std::max(max_abs, std::fabs(depthwise[static_cast<Index>(k) * channels + c]));
    }
    p->depthwise_dequant[c] = input_scale * (max_abs / 127.0f);
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
    p->depthwise_int8_sums[c] = sum;
  }
}

void DepthwiseInt8Tile(const PackedSubBlock& p, const float* xb, int in_len, Index first,
                       int frames, std::uint8_t* scratch, float* out) {
  const SubBlockDesc& d = p.desc;
  const int channels = d.in_channels;
  const int blocks = Blocks(channels);
  const int quads = Quads(d.kernel_size);
  const Index window = WindowRows(d, frames);
  [[maybe_unused]] const bool vnni = UseVnni();  // read only by x86 builds
  const Scratch s = ScratchOf(d, scratch);
  QuantizeRowFn quantize = QuantizeRowPortable;
#if JASPER_X86_DISPATCH
  if (ActiveCpuIsa() >= CpuIsa::kAvx512) quantize = QuantizeRowAvx512Fn;
#endif
  QuantizeRows(xb, in_len, first, window + 3 * static_cast<Index>(d.dilation), channels,
               1.0f / p.depthwise_in_scale, quantize, s.rows);
  StackQuads(s.rows, blocks, window, d.dilation, s.stacked);
  for (int cb = 0; cb < blocks; ++cb) {
    BlockArgs a;
    a.stacked = s.stacked + static_cast<Index>(cb) * window * kQuadBytes;
    a.weights = p.depthwise_int8.data() + static_cast<Index>(cb) * quads * kQuadBytes;
    a.quads = quads;
    a.quad_step = static_cast<Index>(4) * d.dilation * kQuadBytes;
    a.frame_step = static_cast<Index>(d.stride) * kQuadBytes;
    a.sums = p.depthwise_int8_sums.data() + cb * kBlock;
    a.dq = p.depthwise_dequant.data() + cb * kBlock;
    a.valid = std::min(kBlock, channels - cb * kBlock);
    a.out = out + cb * kBlock;
    a.out_stride = channels;
#if JASPER_X86_DISPATCH
    if (vnni) {
      BlockVnni(a, frames);
      continue;
    }
#endif
    BlockPortable(a, frames);
  }
}

}  // namespace jasper::kernels::cpu_internal
