// Fused CPU sub-block on the caller's unpacked weights with OpenBLAS SGEMMs: the tests' second
// oracle and the benchmark's comparison (library jasper_kernels_blas; the server does not link
// it). The backend runs the packed variant in packed.cc; both share the depthwise and staging
// helpers of depthwise.cc (cpu_internal.h). Time-tiled. Per utterance, output frames [0, out_len)
// are cut into tiles of kTileFrames frames; frames at or past out_len are only zero-filled. Per
// tile:
//   separable: depthwise conv into workspace [tile, C_in], then one SGEMM with the pointwise W;
//   dense K=1: one SGEMM straight on the rows of x;
//   dense K>1: K SGEMMs, one per tap, on shifted (strided) views of x, summed into the tile;
// then one SGEMM (beta=1) per residual branch into the same tile, and one epilogue pass (bias,
// activation). Masking is applied when staging the input rows a tile reads (masked rows become
// zeros), so the inner loops never test bounds or read masked frames; an interior dense tile
// reads x in place.
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
#include <cstring>

#include "kernels/blas_sub_block.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/sub_block.h"

namespace jasper::kernels {
namespace {

using cpu_internal::Index;

// Output frames per tile. Measured (one core, Zen 2) on separable C=256/512, K=33..87 and dense
// C=256..1024: 64 -> 128 -> 256 frames went ~70 -> ~75 -> ~83 GFLOP/s as OpenBLAS's per-call
// packing of the weights is amortised; 384 and 512 were no better. The workspace stays a few MB
// (C=1024 separable: ~2.3 MB).
constexpr int kTileFrames = 256;

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

using cpu_internal::AlignToLine;
using cpu_internal::ChannelBlocks;
using cpu_internal::ClampedLength;
using cpu_internal::DepthwiseTile;
using cpu_internal::DepthwiseTileFn;
using cpu_internal::IsPointwiseDense;
using cpu_internal::kChannelBlock;
using cpu_internal::kLineFloats;
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
