// Fused CPU sub-block: time-tiled depthwise (or im2col) + one SGEMM per tile + residual SGEMMs
// accumulating into the same output tile + one epilogue pass (bias, activation).
//
// Per utterance, output frames [0, out_len) are cut into tiles of `TileFrames(desc)` frames;
// frames at or past out_len are only zero-filled. For a tile, the input window it reads is used
// in place when it lies inside [0, in_len); otherwise (the edges) it is first copied into a
// zero-padded staging buffer, so the inner loops never test bounds and never read masked frames.
#include <algorithm>
#include <cblas.h>
#include <cstddef>
#include <cstring>

#include "kernels/sub_block.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define JASPER_X86_DISPATCH 1
#define JASPER_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define JASPER_X86_DISPATCH 0
#define JASPER_ALWAYS_INLINE inline
#endif

namespace jasper::kernels {
namespace {

using Index = std::ptrdiff_t;

// Output frames per tile. 64 keeps the depthwise tile (64 x C_in) in L2 for C_in <= 1024 and
// amortises OpenBLAS's per-call packing of the weight matrix; see the timing notes in the report.
constexpr int kSeparableTile = 64;
// im2col rows are K*C_in wide, so the dense tile shrinks with the row width to bound the
// workspace (~kDenseColumnBudget floats), but never below kMinDenseTile frames.
constexpr Index kDenseColumnBudget = Index{1} << 20;
constexpr int kMaxDenseTile = 64;
constexpr int kMinDenseTile = 16;

// Channels per register block in the depthwise kernel and output frames sharing each loaded
// weight vector: 4 frames x 16 channels = 8 AVX accumulators, leaving registers for the loads.
constexpr int kChannelBlock = 16;
constexpr int kFrameBlock = 4;

bool IsPointwiseDense(const SubBlockDesc& desc) {
  return !desc.separable && desc.kernel_size == 1;
}

int TileFrames(const SubBlockDesc& desc) {
  if (desc.separable || IsPointwiseDense(desc)) return kSeparableTile;
  const Index row = static_cast<Index>(desc.kernel_size) * desc.in_channels;
  const Index tile = kDenseColumnBudget / row;
  return static_cast<int>(std::clamp<Index>(tile, kMinDenseTile, kMaxDenseTile));
}

// Input rows spanned by a tile of `frames` output frames.
Index WindowRows(const SubBlockDesc& desc, int frames) {
  return static_cast<Index>(frames - 1) * desc.stride +
         static_cast<Index>(desc.kernel_size - 1) * desc.dilation + 1;
}

int ClampedLength(const int* lengths, int b, int extent) {
  if (lengths == nullptr) return extent;
  return std::clamp(lengths[b], 0, extent);
}

// Copies input rows [first, first + rows) of one utterance into `dst`, zero where the row is
// masked (outside [0, in_len)).
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

// Depthwise conv of `frames` consecutive output frames. Output frame f, tap k reads the row at
// src + f*row_step + k*tap_step; every such row must be readable (valid input or staged zeros).
// The accumulators are fixed-size arrays indexed by constant-trip loops, so GCC unrolls them
// into vector registers and each loaded weight vector serves `Frames` output frames.
template <int Frames>
JASPER_ALWAYS_INLINE void DepthwiseFrames(const float* __restrict src, Index row_step,
                                          Index tap_step, const float* __restrict w, int taps,
                                          int channels, float* __restrict out) {
  int c0 = 0;
  for (; c0 + kChannelBlock <= channels; c0 += kChannelBlock) {
    float acc[Frames][kChannelBlock] = {};
    for (int k = 0; k < taps; ++k) {
      const float* __restrict wk = w + static_cast<Index>(k) * channels + c0;
      const float* __restrict xk = src + k * tap_step + c0;
      for (int f = 0; f < Frames; ++f) {
        for (int j = 0; j < kChannelBlock; ++j) acc[f][j] += wk[j] * xk[f * row_step + j];
      }
    }
    for (int f = 0; f < Frames; ++f) {
      for (int j = 0; j < kChannelBlock; ++j) out[f * channels + c0 + j] = acc[f][j];
    }
  }
  // Channel tail (channel counts that are not a multiple of the block; real models have none).
  for (int c = c0; c < channels; ++c) {
    for (int f = 0; f < Frames; ++f) {
      float acc = 0.0f;
      for (int k = 0; k < taps; ++k) {
        acc += w[static_cast<Index>(k) * channels + c] * src[f * row_step + k * tap_step + c];
      }
      out[f * channels + c] = acc;
    }
  }
}

JASPER_ALWAYS_INLINE void DepthwiseTileImpl(const float* src, Index row_step, Index tap_step,
                                            const float* w, int taps, int channels, int frames,
                                            float* out) {
  int f = 0;
  for (; f + kFrameBlock <= frames; f += kFrameBlock) {
    DepthwiseFrames<kFrameBlock>(src + f * row_step, row_step, tap_step, w, taps, channels,
                                 out + static_cast<Index>(f) * channels);
  }
  for (; f < frames; ++f) {
    DepthwiseFrames<1>(src + f * row_step, row_step, tap_step, w, taps, channels,
                       out + static_cast<Index>(f) * channels);
  }
}

// The build targets baseline x86-64 (SSE2); the depthwise loop is the only hand-written hot
// loop, so it gets an AVX2+FMA clone picked at run time. The GEMMs are OpenBLAS's own kernels.
void DepthwiseTileGeneric(const float* src, Index row_step, Index tap_step, const float* w,
                          int taps, int channels, int frames, float* out) {
  DepthwiseTileImpl(src, row_step, tap_step, w, taps, channels, frames, out);
}

#if JASPER_X86_DISPATCH
__attribute__((target("avx2,fma"))) void DepthwiseTileAvx2(const float* src, Index row_step,
                                                           Index tap_step, const float* w,
                                                           int taps, int channels, int frames,
                                                           float* out) {
  DepthwiseTileImpl(src, row_step, tap_step, w, taps, channels, frames, out);
}
#endif

using DepthwiseTileFn = void (*)(const float*, Index, Index, const float*, int, int, int, float*);

DepthwiseTileFn SelectDepthwiseTile() {
#if JASPER_X86_DISPATCH
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

// y[m, n] = act(y + bias), one pass over the tile.
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

}  // namespace

std::size_t FusedSubBlockWorkspaceFloats(const SubBlockDesc& desc) {
  if (!IsValid(desc)) return 0;
  const int tile = TileFrames(desc);
  const std::size_t c_in = desc.in_channels;
  if (desc.separable) {
    // Depthwise tile output + the staging window for edge tiles.
    return (tile + static_cast<std::size_t>(WindowRows(desc, tile))) * c_in;
  }
  if (IsPointwiseDense(desc)) return 0;  // GEMM straight on x rows.
  return static_cast<std::size_t>(tile) * desc.kernel_size * c_in;  // im2col rows
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
  const int tile = TileFrames(desc);
  const Index row_step = static_cast<Index>(stride) * c_in;
  const Index tap_step = static_cast<Index>(desc.dilation) * c_in;
  const DepthwiseTileFn depthwise_tile = desc.separable ? DepthwiseTile() : nullptr;
  float* const dw_out = workspace;  // separable: [tile, C_in]
  float* const stage = workspace + static_cast<Index>(tile) * c_in;
  float* const columns = workspace;  // dense: [tile, K*C_in]
  const Index column_width = static_cast<Index>(taps) * c_in;

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
      // First input row read by the tile (tap 0 of frame t0) and the rows it spans.
      const Index first = static_cast<Index>(t0) * stride - desc.padding;
      const Index rows = WindowRows(desc, frames);

      if (desc.separable) {
        const float* src = stage;
        if (first >= 0 && first + rows <= in_len) {
          src = xb + first * c_in;
        } else {
          StageRows(xb, in_len, first, rows, c_in, stage);
        }
        depthwise_tile(src, row_step, tap_step, weights.depthwise, taps, c_in, frames, dw_out);
        Gemm(frames, c_out, c_in, dw_out, c_in, weights.weight, 0.0f, y_tile);
      } else if (IsPointwiseDense(desc)) {
        // 1x1 conv: frame t reads input row t*stride - padding. The frames whose row is valid
        // form one range; GEMM on x in place (lda = stride*C_in), zero the rest of the tile.
        // ceil((padding - first) / stride) for the lowest frame with a row >= 0.
        const Index lo = std::clamp<Index>(first >= 0 ? 0 : (-first + stride - 1) / stride, 0,
                                           frames);
        const Index past = static_cast<Index>(in_len) - first;  // rows < in_len: f*s < past
        const Index hi = std::clamp<Index>(past <= 0 ? 0 : (past - 1) / stride + 1, lo, frames);
        if (lo > 0) std::memset(y_tile, 0, sizeof(float) * c_out * lo);
        if (hi > lo) {
          Gemm(static_cast<int>(hi - lo), c_out, c_in, xb + (first + lo * stride) * c_in,
               static_cast<int>(row_step), weights.weight, 0.0f, y_tile + lo * c_out);
        }
        if (frames > hi) {
          std::memset(y_tile + hi * c_out, 0, sizeof(float) * c_out * (frames - hi));
        }
      } else {
        // im2col: row f holds the K input rows of frame t0+f side by side (zero when masked).
        // With dilation 1 the K rows are consecutive in x: one copy per frame.
        for (int f = 0; f < frames; ++f) {
          const Index row0 = first + static_cast<Index>(f) * stride;
          float* dst = columns + f * column_width;
          if (desc.dilation == 1) {
            StageRows(xb, in_len, row0, taps, c_in, dst);
            continue;
          }
          for (int k = 0; k < taps; ++k) {
            StageRows(xb, in_len, row0 + static_cast<Index>(k) * desc.dilation, 1, c_in,
                      dst + static_cast<Index>(k) * c_in);
          }
        }
        Gemm(frames, c_out, static_cast<int>(column_width), columns,
             static_cast<int>(column_width), weights.weight, 0.0f, y_tile);
      }

      // Residual branches (read only at valid output frames) accumulate into the tile.
      for (int p = 0; p < num_residuals; ++p) {
        const ResidualInput& r = residuals[p];
        const float* xr = r.x + (static_cast<Index>(b) * out_time + t0) * r.channels;
        Gemm(frames, c_out, r.channels, xr, r.channels, r.weight, 1.0f, y_tile);
      }
      Epilogue(weights.bias, desc.activation, frames, c_out, y_tile);
    }
  }
}

}  // namespace jasper::kernels
