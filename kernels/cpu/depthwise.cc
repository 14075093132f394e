// Depthwise convolution and input staging for the fused CPU sub-block (kernels/cpu/packed.cc,
// the backend's kernel; and kernels/cpu/blas_sub_block.cc, the OpenBLAS variant used by the
// tests and the benchmark): the channel-blocked staging, the packed depthwise weights and the
// depthwise tile with its AVX2+FMA clone. Declared in cpu_internal.h.
//
// Separable: the tile's input window is staged channel-blocked, [C/16][rows][16], and the
// depthwise weights packed the same way, [C/16][K][16]. Row-major x with power-of-two channel
// counts (256, 512, 1024) puts every tap of a 16-channel column in the same few L1 sets; the
// blocked copy keeps a column's window contiguous so the tap loop runs from L1.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"

namespace jasper::kernels {
namespace cpu_internal {

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

// Depthwise conv of `Frames` consecutive output frames for one 16-channel block (16 / lanes
// vectors of V per frame). `window` is the block's staged input ([rows][16]): frame f, tap k
// reads row f*stride + k*dilation. `w` is the block's packed weights ([K][16]). Writes `valid`
// (<= 16) channels of each frame to `out`.
template <typename V, int Frames>
JASPER_ALWAYS_INLINE void DepthwiseBlock(const float* __restrict window, Index row_step,
                                         Index tap_step, const float* __restrict w, int taps,
                                         float* __restrict out, Index out_stride, int valid) {
  constexpr int kL = kLanes<V>;
  constexpr int kNv = kChannelBlock / kL;
  V acc[Frames][kNv];
  for (int f = 0; f < Frames; ++f) {
    for (int v = 0; v < kNv; ++v) acc[f][v] = V{};
  }
  const float* xk = window;
  for (int k = 0; k < taps; ++k, xk += tap_step) {
    V wv[kNv];
    for (int v = 0; v < kNv; ++v) LoadVec(w + k * kChannelBlock + v * kL, &wv[v]);
    for (int f = 0; f < Frames; ++f) {
      for (int v = 0; v < kNv; ++v) {
        V x;
        LoadVec(xk + f * row_step + v * kL, &x);
        acc[f][v] += wv[v] * x;
      }
    }
  }
  for (int f = 0; f < Frames; ++f) {
    float* o = out + f * out_stride;
    if (valid == kChannelBlock) {
      for (int v = 0; v < kNv; ++v) StoreVec(&acc[f][v], o + v * kL);
    } else {
      float lanes[kChannelBlock];
      for (int v = 0; v < kNv; ++v) StoreVec(&acc[f][v], lanes + v * kL);
      std::memcpy(o, lanes, sizeof(float) * valid);
    }
  }
}

// Stride-1 depthwise of `Frames` consecutive output frames for one vector of channels (8 lanes:
// half of a 16-channel block; 16 lanes: all of it). Taps go in pairs (k, k+1): each input row
// of the pair's span is loaded once and feeds tap k of frame j and tap k+1 of frame j - Dil from
// registers, so a pair costs Frames + Dil + 2 loads for 2 * Frames FMAs (AVX2, 12 frames: 15
// loads per 24 FMAs, where DepthwiseBlock<6> needs 14 per 12; AVX-512, 24 frames: 27 per 48).
// Registers: Frames accumulators + 2 weights + 1 input (15 of AVX2's 16, 27 of AVX-512's 32).
// The sum per output still runs over the taps in ascending order. `window` and `w` point at this
// vector's first lane; rows are kChannelBlock floats apart. Writes `valid` (1..lanes) channels
// of each frame.
template <typename V, int Frames, int Dil>
JASPER_ALWAYS_INLINE void DepthwisePairs(const float* __restrict window, const float* __restrict w,
                                         int taps, float* __restrict out, Index out_stride,
                                         int valid) {
  constexpr int kL = kLanes<V>;
  V acc[Frames];
  for (int f = 0; f < Frames; ++f) acc[f] = V{};
  int k = 0;
  for (; k + 2 <= taps; k += 2) {
    const float* xk = window + static_cast<Index>(k) * Dil * kChannelBlock;
#if defined(__GNUC__)
    // Opaque to the optimiser: otherwise GCC carries the rows that the next pair reads again
    // across iterations in registers (predictive commoning) and spills the accumulators.
    asm("" : "+r"(xk));
#endif
    V w0, w1;
    LoadVec(w + static_cast<Index>(k) * kChannelBlock, &w0);
    LoadVec(w + static_cast<Index>(k + 1) * kChannelBlock, &w1);
#pragma GCC unroll 32
    for (int j = 0; j < Frames + Dil; ++j) {
      V x;
      LoadVec(xk + j * kChannelBlock, &x);
#if defined(__GNUC__) && !defined(__clang__)
      // One load into a register, used by both taps: GCC would otherwise fold the load into
      // both FMAs (two loads). Clang keeps it in a register by itself, and rejects a vector
      // operand in a template it checks outside the clone's target. "v": any of the 32 AVX-512
      // registers; "x": the 16 of AVX2.
      if constexpr (kL == 16) {
        asm("" : "+v"(x));
      } else {
        asm("" : "+x"(x));
      }
#endif
      if (j < Frames) acc[j] += w0 * x;
      if (j >= Dil) acc[j - Dil] += w1 * x;
    }
  }
  if (k < taps) {  // odd tap count: the last tap alone
    const float* xk = window + static_cast<Index>(k) * Dil * kChannelBlock;
    V w0;
    LoadVec(w + static_cast<Index>(k) * kChannelBlock, &w0);
#pragma GCC unroll 32
    for (int f = 0; f < Frames; ++f) {
      V x;
      LoadVec(xk + f * kChannelBlock, &x);
      acc[f] += w0 * x;
    }
  }
  for (int f = 0; f < Frames; ++f) {
    float* o = out + f * out_stride;
    if (valid == kL) {
      StoreVec(&acc[f], o);
    } else {
      float lanes[kL];
      StoreVec(&acc[f], lanes);
      std::memcpy(o, lanes, sizeof(float) * valid);
    }
  }
}

// Frames [0, frames - frames % Frames) of one 16-channel block with DepthwisePairs (stride 1,
// dilation Dil); returns the number of frames done.
template <typename V, int Frames, int Dil>
JASPER_ALWAYS_INLINE int DepthwisePairsBlock(const float* win, const float* w, int taps, int frames,
                                             float* out, Index out_stride, int valid) {
  constexpr int kL = kLanes<V>;
  const int done = frames - frames % Frames;
  for (int part = 0; part < kChannelBlock / kL; ++part) {
    const int lanes = std::min(kL, valid - part * kL);
    if (lanes <= 0) break;
    for (int f = 0; f < done; f += Frames) {
      DepthwisePairs<V, Frames, Dil>(
          win + static_cast<Index>(f) * kChannelBlock + part * kL, w + part * kL, taps,
          out + static_cast<Index>(f) * out_stride + part * kL, out_stride, lanes);
    }
  }
  return done;
}

// Depthwise conv of a whole tile: out[frames, channels] from the channel-blocked window.
// PairFrames > 0: stride-1 tiles with dilation 1 or 2 use DepthwisePairs for whole groups of
// PairFrames frames (it needs 16 vector registers for 8 lanes, 32 for 16: the AVX2 and AVX-512
// builds only).
template <typename V, int PairFrames>
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
    if constexpr (PairFrames > 0) {
      if (stride == 1 && dilation == 1) {
        f = DepthwisePairsBlock<V, PairFrames, 1>(win, w, taps, frames, out + c0, channels, valid);
      } else if (stride == 1 && dilation == 2) {
        f = DepthwisePairsBlock<V, PairFrames, 2>(win, w, taps, frames, out + c0, channels, valid);
      }
    }
    for (; f + kFrameBlock <= frames; f += kFrameBlock) {
      DepthwiseBlock<V, kFrameBlock>(win + f * row_step, row_step, tap_step, w, taps,
                                     out + static_cast<Index>(f) * channels + c0, channels, valid);
    }
    // Leftover frames (1-5) in one block: a 1- or 2-frame block has too few accumulators to
    // hide the FMA latency, so a tail of 4 frames must not run as 2 + 2 (or 5 as 2 + 2 + 1).
    const float* wt = win + f * row_step;
    float* ot = out + static_cast<Index>(f) * channels + c0;
    switch (frames - f) {
      case 5:
        DepthwiseBlock<V, 5>(wt, row_step, tap_step, w, taps, ot, channels, valid);
        break;
      case 4:
        DepthwiseBlock<V, 4>(wt, row_step, tap_step, w, taps, ot, channels, valid);
        break;
      case 3:
        DepthwiseBlock<V, 3>(wt, row_step, tap_step, w, taps, ot, channels, valid);
        break;
      case 2:
        DepthwiseBlock<V, 2>(wt, row_step, tap_step, w, taps, ot, channels, valid);
        break;
      case 1:
        DepthwiseBlock<V, 1>(wt, row_step, tap_step, w, taps, ot, channels, valid);
        break;
      default:
        break;
    }
  }
}

// The build targets baseline x86-64 (SSE2); the depthwise loop gets AVX2+FMA and AVX-512
// clones, picked at run time by the one CPU-feature probe (kernels/cpu_features.h).
void DepthwiseTileGeneric(const float* window, Index block_stride, int stride, int dilation,
                          const float* packed_w, int taps, int channels, int frames, float* out) {
  DepthwiseTileImpl<Vec8, 0>(window, block_stride, stride, dilation, packed_w, taps, channels,
                             frames, out);
}

#if JASPER_X86_DISPATCH
__attribute__((target("avx2,fma"))) void DepthwiseTileAvx2(const float* window, Index block_stride,
                                                           int stride, int dilation,
                                                           const float* packed_w, int taps,
                                                           int channels, int frames, float* out) {
  DepthwiseTileImpl<Vec8, 12>(window, block_stride, stride, dilation, packed_w, taps, channels,
                              frames, out);
}

JASPER_AVX512_TARGET void DepthwiseTileAvx512(const float* window, Index block_stride, int stride,
                                              int dilation, const float* packed_w, int taps,
                                              int channels, int frames, float* out) {
  DepthwiseTileImpl<Vec16, 24>(window, block_stride, stride, dilation, packed_w, taps, channels,
                               frames, out);
}
#endif

DepthwiseTileFn DepthwiseTile() {
#if JASPER_X86_DISPATCH
  return Fp32ForActiveIsa<DepthwiseTileFn>(DepthwiseTileGeneric, DepthwiseTileAvx2,
                                           DepthwiseTileAvx512);
#else
  return DepthwiseTileGeneric;
#endif
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

}  // namespace jasper::kernels
