// The BF16 depthwise stage of a kBf16 separable sub-block packed with bf16_depthwise (sub_block.h;
// PackSubBlock sets it where kernels::Bf16DepthwiseFasterThanFp32(): vdpbf16ps on AMD's AVX-512
// BF16, which does twice an FMA's multiply-adds per cycle). Per channel block of 16 and tile:
//   1. the block's pair rows: pairs[r][16][2] = BF16 (round to nearest even) of the window's
//      rows r and r + d (d = dilation), read straight from the input (rows outside the
//      utterance, the conv's padding, and channels past C_in as zeros; no staged FP32 copy),
//      channel-major, so that output frame t's taps
//      2p and 2p + 1 are the 64 bytes at row t * stride + 2p * d: one vdpbf16ps operand against
//      the packed weights' pair p ([cb][p][16][2], a tap past K zero). vcvtne2ps2bf16 converts
//      the two rows, vpermw interleaves them;
//   2. per run of up to 12 frames, vdpbf16ps sums the pairs in FP32 (one accumulator per frame,
//      the weight pair loaded once per pair, the rows as memory operands), and the sums, rounded
//      to BF16, are written straight into the BF16 GEMM's A rows (GemmBf16AStage), the values
//      its gather would have made of FP32 output rows.
// Without AVX-512 BF16 at the active level (kernels::ActiveCpuIsa() capped), plain loops compute
// the same sums in vdpbf16ps's order (odd element of a pair first): the same values but for
// denormals, which vdpbf16ps flushes to zero.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/tile_gemm.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"

#if JASPER_X86_DISPATCH
#include <immintrin.h>
#endif

namespace jasper::kernels::cpu_internal {
namespace {

using Bf16 = std::uint16_t;

constexpr int kBlock = kChannelBlock;  // 16 channels
constexpr int kPairBf16 = 2 * kBlock;  // one pair row of a block: [16][2] BF16, 64 bytes
constexpr int kMaxFrames = 12;         // accumulators per run

int Pairs(int taps) { return (taps + 1) / 2; }

// One block's work for one tile.
struct BlockArgs {
  const float* x;   // the utterance's input [in_len, C_in] at this block's first channel
  Index c_in;       // floats between input rows
  int in_len;       // valid input rows (others read as zero)
  Index first;      // input row of pair row 0 (may be < 0)
  Index pair_rows;  // rows of `pairs` to build
  int dilation;
  int stride;
  const Bf16* weights;  // this block's [pairs][16][2]
  int pairs_per_tap;    // Pairs(K)
  Bf16* pairs;          // scratch [pair_rows][16][2]
  int valid;            // channels of this block that exist (<= 16)
  Bf16* out;            // A row of frame 0, this block's first channel
  Index out_stride;     // BF16 values between frames
};

// Input row `first + r` of the block, or nullptr where it lies outside [0, in_len) (a zero row:
// the conv's padding, or frames past the utterance's length).
inline const float* InputRow(const BlockArgs& a, Index r) {
  const Index row = a.first + r;
  return row >= 0 && row < a.in_len ? a.x + row * a.c_in : nullptr;
}

// GCC 12.2 at -O3 vectorizes the sum loop below wrongly (its outer-loop vectorization of the
// strided pairs: sums off by whole terms; a standalone copy of the loop shows it, and -O2 or
// -fno-tree-loop-vectorize give the right sums), so this function is built without the loop
// vectorizer. It is the fallback path; its speed does not matter.
#if defined(__GNUC__) && !defined(__clang__)
#define JASPER_NO_LOOP_VECTORIZE __attribute__((optimize("no-tree-loop-vectorize")))
#else
#define JASPER_NO_LOOP_VECTORIZE
#endif

JASPER_NO_LOOP_VECTORIZE void BlockPortable(const BlockArgs& a, int frames) {
  for (Index r = 0; r < a.pair_rows; ++r) {
    const float* x0 = InputRow(a, r);
    const float* x1 = InputRow(a, r + a.dilation);
    for (int c = 0; c < kBlock; ++c) {
      const bool in = c < a.valid;
      a.pairs[r * kPairBf16 + 2 * c] = in && x0 != nullptr ? ToBf16(x0[c]) : Bf16{0};
      a.pairs[r * kPairBf16 + 2 * c + 1] = in && x1 != nullptr ? ToBf16(x1[c]) : Bf16{0};
    }
  }
  for (int f = 0; f < frames; ++f) {
    for (int c = 0; c < a.valid; ++c) {
      float acc = 0.0f;
      for (int q = 0; q < a.pairs_per_tap; ++q) {
        const Bf16* x =
            a.pairs +
            (static_cast<Index>(f) * a.stride + static_cast<Index>(2) * q * a.dilation) *
                kPairBf16 +
            2 * c;
        const Bf16* w = a.weights + static_cast<Index>(q) * kPairBf16 + 2 * c;
        acc += FromBf16(x[1]) * FromBf16(w[1]);
        acc += FromBf16(x[0]) * FromBf16(w[0]);
      }
      a.out[f * a.out_stride + c] = ToBf16(acc);
    }
    for (int c = a.valid; c < kBlock; ++c) a.out[f * a.out_stride + c] = 0;
  }
}

#if JASPER_X86_DISPATCH
#define JASPER_DW_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

// Row r of the block, zero outside the input or past C_in.
JASPER_DW_BF16_TARGET JASPER_ALWAYS_INLINE __m512 LoadRow(const BlockArgs& a, Index r,
                                                          __mmask16 m) {
  const float* x = InputRow(a, r);
  return x == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, x);
}

// Step 1: vcvtne2ps2bf16 puts row r's 16 values in the low half, row r + d's in the high half;
// vpermw interleaves them into [16][2].
JASPER_DW_BF16_TARGET void BuildPairs(const BlockArgs& a) {
  alignas(64) static constexpr std::uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i order = _mm512_load_si512(kInterleave);
  const __mmask16 m = static_cast<__mmask16>((1u << a.valid) - 1u);
  // Rows of the conv's interior (all of r and r + d inside the input) need no checks.
  const Index lo = std::max<Index>(0, -a.first);
  const Index hi = std::min<Index>(a.pair_rows, a.in_len - a.first - a.dilation);
  const Index step = static_cast<Index>(a.dilation) * a.c_in;
  for (Index r = 0; r < a.pair_rows; ++r) {
    __m512i both;
    if (r >= lo && r < hi) {
      const float* x0 = a.x + (a.first + r) * a.c_in;
      both = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m, x0 + step),
                                          _mm512_maskz_loadu_ps(m, x0));
    } else {
      both = (__m512i)_mm512_cvtne2ps_pbh(LoadRow(a, r + a.dilation, m), LoadRow(a, r, m));
    }
    _mm512_storeu_si512(a.pairs + r * kPairBf16, _mm512_permutexvar_epi16(order, both));
  }
}

template <int F>
JASPER_DW_BF16_TARGET JASPER_ALWAYS_INLINE void FramesBf16(const BlockArgs& a, const Bf16* x,
                                                           Bf16* out) {
  __m512 acc[F];
  for (int f = 0; f < F; ++f) acc[f] = _mm512_setzero_ps();
  const Index frame_step = static_cast<Index>(a.stride) * kPairBf16;
  const Index pair_step = static_cast<Index>(2) * a.dilation * kPairBf16;
  const Bf16* w = a.weights;
  for (int q = 0; q < a.pairs_per_tap; ++q, x += pair_step, w += kPairBf16) {
    const __m512bh wq = (__m512bh)_mm512_loadu_si512(w);
    for (int f = 0; f < F; ++f) {
      acc[f] = _mm512_dpbf16_ps(acc[f], (__m512bh)_mm512_loadu_si512(x + f * frame_step), wq);
    }
  }
  // The GEMM's A: vcvtneps2bf16 rounds as its gather would; channels past C_in stored as zero.
  const __mmask16 m = static_cast<__mmask16>((1u << a.valid) - 1u);
  for (int f = 0; f < F; ++f) {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_mov_ps(m, acc[f]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + f * a.out_stride), h);
  }
}

template <int F>
JASPER_DW_BF16_TARGET JASPER_ALWAYS_INLINE void AnyFramesBf16(const BlockArgs& a, int frames,
                                                              const Bf16* x, Bf16* out) {
  if constexpr (F > 1) {
    if (frames < F) {
      AnyFramesBf16<F - 1>(a, frames, x, out);
      return;
    }
  }
  FramesBf16<F>(a, x, out);
}

JASPER_DW_BF16_TARGET void BlockAvx512Bf16(const BlockArgs& a, int frames) {
  BuildPairs(a);
  for (int f0 = 0; f0 < frames; f0 += kMaxFrames) {
    AnyFramesBf16<kMaxFrames>(a, std::min(kMaxFrames, frames - f0),
                              a.pairs + static_cast<Index>(f0) * a.stride * kPairBf16,
                              a.out + static_cast<Index>(f0) * a.out_stride);
  }
}
#endif

}  // namespace

std::size_t Bf16DepthwisePairBytes(const SubBlockDesc& desc) {
  return static_cast<std::size_t>(WindowRows(desc, kTileRows)) * kPairBf16 * sizeof(Bf16);
}

void PackBf16Depthwise(const float* depthwise, PackedSubBlock* p) {
  const int taps = p->desc.kernel_size;
  const int channels = p->desc.in_channels;
  const int pairs = Pairs(taps);
  p->depthwise_bf16.assign(static_cast<std::size_t>(ChannelBlocks(channels)) * pairs * kPairBf16,
                           0);
  for (int c = 0; c < channels; ++c) {
    for (int k = 0; k < taps; ++k) {
      const Index at =
          (static_cast<Index>(c / kBlock) * pairs + k / 2) * kPairBf16 + (c % kBlock) * 2 + k % 2;
      p->depthwise_bf16[static_cast<std::size_t>(at)] =
          ToBf16(depthwise[static_cast<Index>(k) * channels + c]);
    }
  }
  p->bf16_depthwise = true;
}

void DepthwiseBf16Tile(const PackedSubBlock& p, const float* xb, int in_len, Index first,
                       int frames, std::uint8_t* scratch, const Bf16AStage& out) {
  const SubBlockDesc& d = p.desc;
  const int channels = d.in_channels;
  const int pairs = Pairs(d.kernel_size);
  [[maybe_unused]] const bool hardware =
      ActiveCpuIsa() >= CpuIsa::kAvx512 && GetCpuFeatures().avx512_bf16;
  for (int cb = 0; cb < ChannelBlocks(channels); ++cb) {
    BlockArgs a;
    a.x = xb + cb * kBlock;
    a.c_in = channels;
    a.in_len = in_len;
    a.first = first;
    // Pair rows read by the last frame's last pair: (frames - 1) * stride + 2 (pairs - 1) * d.
    a.pair_rows = static_cast<Index>(frames - 1) * d.stride +
                  static_cast<Index>(2) * (pairs - 1) * d.dilation + 1;
    a.dilation = d.dilation;
    a.stride = d.stride;
    a.weights = p.depthwise_bf16.data() + static_cast<Index>(cb) * pairs * kPairBf16;
    a.pairs_per_tap = pairs;
    a.pairs = reinterpret_cast<Bf16*>(scratch);
    a.valid = std::min(kBlock, channels - cb * kBlock);
    a.out = out.a + cb * kBlock;
    a.out_stride = out.ld;
#if JASPER_X86_DISPATCH
    if (hardware) {
      BlockAvx512Bf16(a, frames);
      continue;
    }
#endif
    BlockPortable(a, frames);
  }
  const Index written = static_cast<Index>(ChannelBlocks(channels)) * kBlock;  // <= out.ld
  if (written < out.ld) {
    for (int f = 0; f < frames; ++f) {
      std::fill(out.a + f * out.ld + written, out.a + (f + 1) * out.ld, Bf16{0});
    }
  }
}

}  // namespace jasper::kernels::cpu_internal
