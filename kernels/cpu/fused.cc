// Fused CPU sub-block on the caller's unpacked weights (OpenBLAS SGEMMs; the backend runs the
// packed variant in packed.cc, which shares the depthwise and staging helpers defined here via
// cpu_internal.h). Time-tiled. Per utterance, output frames [0, out_len) are cut into tiles
// of kTileFrames frames; frames at or past out_len are only zero-filled. Per tile:
//   separable: depthwise conv into workspace [tile, C_in], then one SGEMM with the pointwise W;
//   dense K=1: one SGEMM straight on the rows of x;
//   dense K>1: K SGEMMs, one per tap, on shifted (strided) views of x, summed into the tile;
// then one SGEMM (beta=1) per residual branch into the same tile, and one epilogue pass (bias,
// activation). Masking is applied when staging the input rows a tile reads (masked rows become
// zeros), so the inner loops never test bounds or read masked frames; an interior dense tile
// reads x in place.
//
// Separable: the tile's input window is staged channel-blocked, [C/16][rows][16], and the
// depthwise weights packed the same way, [C/16][K][16]. Row-major x with power-of-two channel
// counts (256, 512, 1024) puts every tap of a 16-channel column in the same few L1 sets; the
// blocked copy keeps a column's window contiguous so the tap loop runs from L1.
//
// Dense uses per-tap GEMMs rather than im2col + one GEMM: OpenBLAS repacks the whole weight
// matrix on every call, so the GEMM M (= tile) must be large, and an im2col tile of 256 frames
// would need 256*K*C_in floats (26 MB for Jasper's K=29, C=896). The per-tap form needs only
// the staged window; measured on C=768..896, K=25..29 (one core): im2col with a 64-frame tile
// 48-60 GFLOP/s, per-tap GEMMs with a 256-frame tile 77-82 GFLOP/s.
#include <cblas.h>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/sub_block.h"

namespace jasper::kernels {
namespace cpu_internal {

// Output frames per tile. Measured (one core, Zen 2) on separable C=256/512, K=33..87 and dense
// C=256..1024: 64 -> 128 -> 256 frames went ~70 -> ~75 -> ~83 GFLOP/s as OpenBLAS's per-call
// packing of the weights is amortised; 384 and 512 were no better. The workspace stays a few MB
// (C=1024 separable: ~2.3 MB).
constexpr int kTileFrames = 256;

// GNU vector extension: 8 floats, one AVX register (two SSE registers in the baseline build).
// Used instead of plain loops because GCC keeps an array of accumulators in memory (on the
// stack) across the tap loop, which ran ~4x slower than register accumulators.
// Output frames sharing each loaded weight vector: 6 x 2 = 12 accumulators cover the FMA
// latency x throughput (5 x 2 on Zen 2) and, with the 2 weight vectors, fit the 16 AVX registers
// (the input is read by the FMAs' memory operand). Staged buffers are 64-byte aligned: unaligned
// 32-byte loads that split cache lines cost ~1/3 of the depthwise throughput.
constexpr int kFrameBlock = 6;

bool IsPointwiseDense(const SubBlockDesc& desc) { return !desc.separable && desc.kernel_size == 1; }

// Input rows spanned by a tile of `frames` output frames.
Index WindowRows(const SubBlockDesc& desc, int frames) {
  return static_cast<Index>(frames - 1) * desc.stride +
         static_cast<Index>(desc.kernel_size - 1) * desc.dilation + 1;
}

int ClampedLength(const int* lengths, int b, int extent) {
  if (lengths == nullptr) return extent;
  return std::clamp(lengths[b], 0, extent);
}

// Copies input rows [first, first + rows) of one utterance into `dst` ([rows, channels]), zero
// where the row is masked (outside [0, in_len)).
void StageRows(const float* xb, int in_len, Index first, Index rows, int channels, float* dst) {
  const Index begin = std::clamp<Index>(-first, 0, rows);
  const Index end = std::clamp<Index>(in_len - first, begin, rows);
  const std::size_t row_bytes = sizeof(float) * channels;
  if (begin > 0) std::memset(dst, 0, row_bytes * begin);
  if (end > begin) {
    std::memcpy(dst + begin * channels, xb + (first + begin) * channels, row_bytes * (end - begin));
  }
  if (rows > end) std::memset(dst + end * channels, 0, row_bytes * (rows - end));
}

// Same rows, channel-blocked: dst[blk * block_stride + r * 16 + j] = x[first + r][blk * 16 + j],
// zero where masked and for the padding channels of the last block.
void StageRowsBlocked(const float* xb, int in_len, Index first, Index rows, int channels,
                      Index block_stride, float* dst) {
  const int blocks = ChannelBlocks(channels);
  for (Index r = 0; r < rows; ++r) {
    const Index row = first + r;
    float* d = dst + r * kChannelBlock;
    if (row < 0 || row >= in_len) {
      for (int blk = 0; blk < blocks; ++blk) {
        std::memset(d + blk * block_stride, 0, sizeof(float) * kChannelBlock);
      }
      continue;
    }
    const float* s = xb + row * channels;
    const int full = channels / kChannelBlock;
    for (int blk = 0; blk < full; ++blk) {
      std::memcpy(d + blk * block_stride, s + blk * kChannelBlock, sizeof(float) * kChannelBlock);
    }
    if (full < blocks) {
      const int rest = channels - full * kChannelBlock;
      float* tail = d + full * block_stride;
      std::memcpy(tail, s + full * kChannelBlock, sizeof(float) * rest);
      std::memset(tail + rest, 0, sizeof(float) * (kChannelBlock - rest));
    }
  }
}

// Depthwise weights [K, C] -> [C/16][K][16], zero-padded channels.
void PackDepthwise(const float* w, int taps, int channels, float* dst) {
  const int blocks = ChannelBlocks(channels);
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kChannelBlock;
    const int n = std::min(kChannelBlock, channels - c0);
    for (int k = 0; k < taps; ++k) {
      float* d = dst + (static_cast<Index>(blk) * taps + k) * kChannelBlock;
      std::memcpy(d, w + static_cast<Index>(k) * channels + c0, sizeof(float) * n);
      std::memset(d + n, 0, sizeof(float) * (kChannelBlock - n));
    }
  }
}

// Depthwise conv of `Frames` consecutive output frames for one 16-channel block. `window` is the
// block's staged input ([rows][16]): frame f, tap k reads row f*stride + k*dilation. `w` is the
// block's packed weights ([K][16]). Writes `valid` (<= 16) channels of each frame to `out`.
template <int Frames>
JASPER_ALWAYS_INLINE void DepthwiseBlock(const float* __restrict window, Index row_step,
                                         Index tap_step, const float* __restrict w, int taps,
                                         float* __restrict out, Index out_stride, int valid) {
  Vec8 acc[Frames][2];
  for (int f = 0; f < Frames; ++f) acc[f][0] = acc[f][1] = Vec8{};
  const float* xk = window;
  for (int k = 0; k < taps; ++k, xk += tap_step) {
    Vec8 w0, w1;
    LoadVec(w + k * kChannelBlock, &w0);
    LoadVec(w + k * kChannelBlock + kVecWidth, &w1);
    for (int f = 0; f < Frames; ++f) {
      Vec8 x0, x1;
      LoadVec(xk + f * row_step, &x0);
      LoadVec(xk + f * row_step + kVecWidth, &x1);
      acc[f][0] += w0 * x0;
      acc[f][1] += w1 * x1;
    }
  }
  for (int f = 0; f < Frames; ++f) {
    float* o = out + f * out_stride;
    if (valid == kChannelBlock) {
      StoreVec(&acc[f][0], o);
      StoreVec(&acc[f][1], o + kVecWidth);
    } else {
      float lanes[kChannelBlock];
      StoreVec(&acc[f][0], lanes);
      StoreVec(&acc[f][1], lanes + kVecWidth);
      std::memcpy(o, lanes, sizeof(float) * valid);
    }
  }
}

// Stride-1 depthwise of `Frames` consecutive output frames for 8 channels (one vector: half of a
// 16-channel block). Taps go in pairs (k, k+1): each input row of the pair's span is loaded once
// and feeds tap k of frame j and tap k+1 of frame j - Dil from registers, so a pair costs
// Frames + Dil + 2 loads for 2 * Frames FMAs (12 frames: 15 loads per 24 FMAs, where
// DepthwiseBlock<6> needs 14 per 12). Registers: Frames accumulators + 2 weights + 1 input = 15
// of AVX2's 16. The sum per output still runs over the taps in ascending order. `window` and `w`
// point at this half's first lane; rows are kChannelBlock floats apart. Writes `valid` (1..8)
// channels of each frame.
template <int Frames, int Dil>
JASPER_ALWAYS_INLINE void DepthwiseHalfPairs(const float* __restrict window,
                                             const float* __restrict w, int taps,
                                             float* __restrict out, Index out_stride, int valid) {
  Vec8 acc[Frames];
  for (int f = 0; f < Frames; ++f) acc[f] = Vec8{};
  int k = 0;
  for (; k + 2 <= taps; k += 2) {
    const float* xk = window + static_cast<Index>(k) * Dil * kChannelBlock;
#if defined(__GNUC__)
    // Opaque to the optimiser: otherwise GCC carries the rows that the next pair reads again
    // across iterations in registers (predictive commoning) and spills the accumulators.
    asm("" : "+r"(xk));
#endif
    Vec8 w0, w1;
    LoadVec(w + static_cast<Index>(k) * kChannelBlock, &w0);
    LoadVec(w + static_cast<Index>(k + 1) * kChannelBlock, &w1);
#pragma GCC unroll 16
    for (int j = 0; j < Frames + Dil; ++j) {
      Vec8 x;
      LoadVec(xk + j * kChannelBlock, &x);
#if defined(__GNUC__) && !defined(__clang__)
      // One load into a register, used by both taps: GCC would otherwise fold the load into
      // both FMAs (two loads). Clang keeps it in a register by itself, and rejects a 32-byte
      // "x" operand in a template it checks outside the AVX2 clone's target.
      asm("" : "+x"(x));
#endif
      if (j < Frames) acc[j] += w0 * x;
      if (j >= Dil) acc[j - Dil] += w1 * x;
    }
  }
  if (k < taps) {  // odd tap count: the last tap alone
    const float* xk = window + static_cast<Index>(k) * Dil * kChannelBlock;
    Vec8 w0;
    LoadVec(w + static_cast<Index>(k) * kChannelBlock, &w0);
#pragma GCC unroll 16
    for (int f = 0; f < Frames; ++f) {
      Vec8 x;
      LoadVec(xk + f * kChannelBlock, &x);
      acc[f] += w0 * x;
    }
  }
  for (int f = 0; f < Frames; ++f) {
    float* o = out + f * out_stride;
    if (valid == kVecWidth) {
      StoreVec(&acc[f], o);
    } else {
      float lanes[kVecWidth];
      StoreVec(&acc[f], lanes);
      std::memcpy(o, lanes, sizeof(float) * valid);
    }
  }
}

// Frames per DepthwiseHalfPairs call.
constexpr int kPairFrames = 12;

// Frames [0, frames - frames % kPairFrames) of one 16-channel block with DepthwiseHalfPairs
// (stride 1, dilation Dil); returns the number of frames done.
template <int Dil>
JASPER_ALWAYS_INLINE int DepthwisePairsBlock(const float* win, const float* w, int taps, int frames,
                                             float* out, Index out_stride, int valid) {
  const int done = frames - frames % kPairFrames;
  for (int half = 0; half < 2; ++half) {
    const int lanes = std::min(kVecWidth, valid - half * kVecWidth);
    if (lanes <= 0) break;
    for (int f = 0; f < done; f += kPairFrames) {
      DepthwiseHalfPairs<kPairFrames, Dil>(
          win + static_cast<Index>(f) * kChannelBlock + half * kVecWidth, w + half * kVecWidth,
          taps, out + static_cast<Index>(f) * out_stride + half * kVecWidth, out_stride, lanes);
    }
  }
  return done;
}

// Depthwise conv of a whole tile: out[frames, channels] from the channel-blocked window.
// kPairs: stride-1 tiles with dilation 1 or 2 use DepthwiseHalfPairs for whole groups of
// kPairFrames frames (needs 16 vector registers: the AVX2 build only).
template <bool kPairs>
JASPER_ALWAYS_INLINE void DepthwiseTileImpl(const float* window, Index block_stride, int stride,
                                            int dilation, const float* packed_w, int taps,
                                            int channels, int frames, float* out) {
  const Index row_step = static_cast<Index>(stride) * kChannelBlock;
  const Index tap_step = static_cast<Index>(dilation) * kChannelBlock;
  for (int blk = 0; blk < ChannelBlocks(channels); ++blk) {
    const int c0 = blk * kChannelBlock;
    const int valid = std::min(kChannelBlock, channels - c0);
    const float* win = window + blk * block_stride;
    const float* w = packed_w + static_cast<Index>(blk) * taps * kChannelBlock;
    int f = 0;
    if (kPairs && stride == 1 && dilation == 1) {
      f = DepthwisePairsBlock<1>(win, w, taps, frames, out + c0, channels, valid);
    } else if (kPairs && stride == 1 && dilation == 2) {
      f = DepthwisePairsBlock<2>(win, w, taps, frames, out + c0, channels, valid);
    }
    for (; f + kFrameBlock <= frames; f += kFrameBlock) {
      DepthwiseBlock<kFrameBlock>(win + f * row_step, row_step, tap_step, w, taps,
                                  out + static_cast<Index>(f) * channels + c0, channels, valid);
    }
    // Leftover frames (1-5) in one block: a 1- or 2-frame block has too few accumulators to
    // hide the FMA latency, so a tail of 4 frames must not run as 2 + 2 (or 5 as 2 + 2 + 1).
    const float* wt = win + f * row_step;
    float* ot = out + static_cast<Index>(f) * channels + c0;
    switch (frames - f) {
      case 5:
        DepthwiseBlock<5>(wt, row_step, tap_step, w, taps, ot, channels, valid);
        break;
      case 4:
        DepthwiseBlock<4>(wt, row_step, tap_step, w, taps, ot, channels, valid);
        break;
      case 3:
        DepthwiseBlock<3>(wt, row_step, tap_step, w, taps, ot, channels, valid);
        break;
      case 2:
        DepthwiseBlock<2>(wt, row_step, tap_step, w, taps, ot, channels, valid);
        break;
      case 1:
        DepthwiseBlock<1>(wt, row_step, tap_step, w, taps, ot, channels, valid);
        break;
      default:
        break;
    }
  }
}

// The build targets baseline x86-64 (SSE2); the depthwise loop is the only hand-written hot
// loop, so it gets an AVX2+FMA clone picked at run time. The GEMMs are OpenBLAS's own kernels.
void DepthwiseTileGeneric(const float* window, Index block_stride, int stride, int dilation,
                          const float* packed_w, int taps, int channels, int frames, float* out) {
  DepthwiseTileImpl<false>(window, block_stride, stride, dilation, packed_w, taps, channels, frames,
                           out);
}

#if JASPER_X86_DISPATCH
__attribute__((target("avx2,fma"))) void DepthwiseTileAvx2(const float* window, Index block_stride,
                                                           int stride, int dilation,
                                                           const float* packed_w, int taps,
                                                           int channels, int frames, float* out) {
  DepthwiseTileImpl<true>(window, block_stride, stride, dilation, packed_w, taps, channels, frames,
                          out);
}
#endif

DepthwiseTileFn SelectDepthwiseTile() {
#if JASPER_X86_DISPATCH
  // JASPER_KERNELS_BASELINE=1 forces the portable build (tests run both).
  if (const char* env = std::getenv("JASPER_KERNELS_BASELINE"); env && env[0] == '1') {
    return DepthwiseTileGeneric;
  }
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return DepthwiseTileAvx2;
#endif
  return DepthwiseTileGeneric;
}

// Thread-safe one-time selection (function-local static).
DepthwiseTileFn DepthwiseTile() {
  static const DepthwiseTileFn fn = SelectDepthwiseTile();
  return fn;
}

// y[rows, cols] = act(y + bias), one pass over the tile.
void Epilogue(const float* __restrict bias, Activation activation, int rows, int cols,
              float* __restrict y) {
  const bool relu = activation == Activation::kRelu;
  if (bias == nullptr && !relu) return;
  for (int r = 0; r < rows; ++r) {
    float* __restrict yr = y + static_cast<Index>(r) * cols;
    if (bias != nullptr && relu) {
      // `v < 0 ? 0 : v` keeps a NaN as NaN, like std::max(v, 0) in the reference.
      for (int o = 0; o < cols; ++o) {
        const float v = yr[o] + bias[o];
        yr[o] = v < 0.0f ? 0.0f : v;
      }
    } else if (bias != nullptr) {
      for (int o = 0; o < cols; ++o) yr[o] += bias[o];
    } else {
      for (int o = 0; o < cols; ++o) yr[o] = yr[o] < 0.0f ? 0.0f : yr[o];
    }
  }
}

// y[rows, n] (+)= a[rows, k] * b[k, n], all row-major.
void Gemm(int rows, int n, int k, const float* a, int lda, const float* b, float beta, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, n, k, 1.0f, a, lda, b, n, beta, y,
              n);
}

Index RoundToLine(Index floats) { return (floats + kLineFloats - 1) / kLineFloats * kLineFloats; }

// The caller's workspace need not be aligned: align its start to a cache line (the workspace
// size includes the slack for that).
float* AlignToLine(float* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t line = kLineFloats * sizeof(float);
  return reinterpret_cast<float*>((address + line - 1) / line * line);
}

}  // namespace cpu_internal

namespace {

using cpu_internal::AlignToLine;
using cpu_internal::ChannelBlocks;
using cpu_internal::ClampedLength;
using cpu_internal::DepthwiseTile;
using cpu_internal::DepthwiseTileFn;
using cpu_internal::Epilogue;
using cpu_internal::Gemm;
using cpu_internal::Index;
using cpu_internal::IsPointwiseDense;
using cpu_internal::kChannelBlock;
using cpu_internal::kLineFloats;
using cpu_internal::kTileFrames;
using cpu_internal::PackDepthwise;
using cpu_internal::RoundToLine;
using cpu_internal::StageRows;
using cpu_internal::StageRowsBlocked;
using cpu_internal::WindowRows;

// Workspace layout for a separable sub-block (offsets in floats from the aligned start).
struct SeparableLayout {
  Index block_stride;  // floats per channel block of the window: 16 x rows of a full tile
  Index dw_out;        // [tile, C_in] depthwise output, the GEMM's A
  Index window;        // [C_in/16][rows][16] staged input
  Index weights;       // [C_in/16][K][16] packed depthwise weights
  Index total;
};

SeparableLayout LayoutSeparable(const SubBlockDesc& desc) {
  const int tile = kTileFrames;
  const Index padded = static_cast<Index>(ChannelBlocks(desc.in_channels)) * kChannelBlock;
  SeparableLayout l;
  l.block_stride = WindowRows(desc, tile) * kChannelBlock;
  l.dw_out = 0;
  l.window = RoundToLine(l.dw_out + static_cast<Index>(tile) * desc.in_channels);
  l.weights = l.window + l.block_stride * ChannelBlocks(desc.in_channels);
  l.total = l.weights + static_cast<Index>(desc.kernel_size) * padded + kLineFloats;
  return l;
}

}  // namespace

std::size_t FusedSubBlockWorkspaceFloats(const SubBlockDesc& desc) {
  if (!IsValid(desc)) return 0;
  if (desc.separable) return static_cast<std::size_t>(LayoutSeparable(desc).total);
  if (IsPointwiseDense(desc)) return 0;  // GEMM straight on x rows.
  // Dense: the staged input window of an edge tile.
  return static_cast<std::size_t>(WindowRows(desc, kTileFrames)) * desc.in_channels;
}

void FusedSubBlockCpu(const SubBlockDesc& desc, const SubBlockWeights& weights, const float* x,
                      const BatchGeometry& geometry, const ResidualInput* residuals,
                      int num_residuals, float* workspace, float* y) {
  if (!IsValid(desc)) return;
  const int c_in = desc.in_channels;
  const int c_out = desc.out_channels;
  const int taps = desc.kernel_size;
  const int stride = desc.stride;
  const int in_time = geometry.in_time;
  const int out_time = geometry.out_time;
  const int tile = kTileFrames;

  DepthwiseTileFn depthwise_tile = nullptr;
  SeparableLayout layout{};
  if (desc.separable) {
    depthwise_tile = DepthwiseTile();
    layout = LayoutSeparable(desc);
    workspace = AlignToLine(workspace);
    PackDepthwise(weights.depthwise, taps, c_in, workspace + layout.weights);
  }

  for (int b = 0; b < geometry.batch; ++b) {
    const int in_len = ClampedLength(geometry.in_lengths, b, in_time);
    const int out_len = ClampedLength(geometry.out_lengths, b, out_time);
    const float* xb = x + static_cast<Index>(b) * in_time * c_in;
    float* yb = y + static_cast<Index>(b) * out_time * c_out;
    if (out_len < out_time) {
      std::memset(yb + static_cast<Index>(out_len) * c_out, 0,
                  sizeof(float) * c_out * static_cast<std::size_t>(out_time - out_len));
    }

    for (int t0 = 0; t0 < out_len; t0 += tile) {
      const int frames = std::min(tile, out_len - t0);
      float* y_tile = yb + static_cast<Index>(t0) * c_out;
      // First input row read by the tile (tap 0 of frame t0).
      const Index first = static_cast<Index>(t0) * stride - desc.padding;

      if (desc.separable) {
        // The window is laid out for a full tile; a short last tile stages only its rows.
        float* window = workspace + layout.window;
        float* dw_out = workspace + layout.dw_out;
        StageRowsBlocked(xb, in_len, first, WindowRows(desc, frames), c_in, layout.block_stride,
                         window);
        depthwise_tile(window, layout.block_stride, stride, desc.dilation,
                       workspace + layout.weights, taps, c_in, frames, dw_out);
        Gemm(frames, c_out, c_in, dw_out, c_in, weights.weight, 0.0f, y_tile);
      } else if (IsPointwiseDense(desc)) {
        // 1x1 conv: frame t reads input row t*stride - padding. The frames whose row is valid
        // form one range [lo, hi): GEMM on x in place (lda = stride*C_in), zero the rest.
        const Index lo =
            std::clamp<Index>(first >= 0 ? 0 : (-first + stride - 1) / stride, 0, frames);
        const Index past = static_cast<Index>(in_len) - first;  // valid rows: f*stride < past
        const Index hi = std::clamp<Index>(past <= 0 ? 0 : (past - 1) / stride + 1, lo, frames);
        if (lo > 0) std::memset(y_tile, 0, sizeof(float) * c_out * lo);
        if (hi > lo) {
          Gemm(static_cast<int>(hi - lo), c_out, c_in, xb + (first + lo * stride) * c_in,
               stride * c_in, weights.weight, 0.0f, y_tile + lo * c_out);
        }
        if (frames > hi) {
          std::memset(y_tile + hi * c_out, 0, sizeof(float) * c_out * (frames - hi));
        }
      } else {
        // Dense as K shifted GEMMs: tap k of frame f reads row first + f*stride + k*dilation,
        // so for each tap the tile's rows form a strided matrix (lda = stride*C_in) multiplied
        // by W[k] ([C_in, C_out]) and summed into the tile. Interior tiles read x in place.
        const Index rows = WindowRows(desc, frames);
        const float* src = workspace;
        if (first >= 0 && first + rows <= in_len) {
          src = xb + first * c_in;
        } else {
          StageRows(xb, in_len, first, rows, c_in, workspace);
        }
        for (int k = 0; k < taps; ++k) {
          Gemm(frames, c_out, c_in, src + static_cast<Index>(k) * desc.dilation * c_in,
               stride * c_in, weights.weight + static_cast<Index>(k) * c_in * c_out,
               k == 0 ? 0.0f : 1.0f, y_tile);
        }
      }

      // Residual branches (read only at valid output frames) accumulate into the tile.
      for (int p = 0; p < num_residuals; ++p) {
        const ResidualInput& r = residuals[p];
        if (r.channels <= 0) continue;  // nothing to add (and an illegal lda for BLAS)
        const float* xr = r.x + (static_cast<Index>(b) * out_time + t0) * r.channels;
        Gemm(frames, c_out, r.channels, xr, r.channels, r.weight, 1.0f, y_tile);
      }
      Epilogue(weights.bias, desc.activation, frames, c_out, y_tile);
    }
  }
}

}  // namespace jasper::kernels
