// Fused CPU sub-block on weights packed once at load time (kernels/sub_block.h: PackedSubBlock).
//
// One GEMM per tile of up to kTileRows output rows computes the whole sub-block:
//   y[rows, C_out] = act( [A_main | A_res0 | A_res1 ...] x [W_main; W_res0; W_res1 ...] + bias )
// where the K-segments of A are given by row pointers:
//   separable: A_main row r = the depthwise output of that frame (computed into the workspace
//              just before, from a channel-blocked staged window, see depthwise.cc; INT8: the
//              depthwise stage writes the quantized A rows into the GEMM's scratch itself, see
//              int8_depthwise.cc, and W_main's segment has no row pointers);
//   dense 1x1: A_main row r = the input row the frame reads, or a zero row when it is masked;
//   dense K>1: A_main row r = K consecutive input rows of a staged (or, inside the utterance,
//              in-place) window when dilation == 1 (one K*C_in segment), else one C_in segment
//              per tap;
//   residual p: A_res_p row r = residual_x[p] at that frame.
// Output rows are row pointers too, so a tile may stack frames of several utterances (separable
// and dense 1x1): a batch of short windows fills the tile like one long utterance. Frames at or
// past out_len are only zero-filled.
//
// FP32: the GEMM is BLIS-like without packing A: K in chunks of kKChunk, then 16-column panels
// of B (AVX-512: pairs of panels; a kKChunk-row micro-panel stays in L1/L2 while every row block
// of the tile streams past it), then row blocks (AVX2 6 x 16, AVX-512 12 x 32 micro-kernel).
// The first K chunk stores, later chunks accumulate, and the last applies bias and activation
// before its store: no extra pass over the output. The ISA level is read once per call
// (kernels/cpu_features.h). BF16 and INT8: the same driver hands the segments to bf16_gemm.cc's
// or int8_gemm.cc's GEMM.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"

namespace jasper::kernels {
namespace {

using cpu_internal::AlignToLine;
using cpu_internal::ChannelBlocks;
using cpu_internal::ClampedLength;
using cpu_internal::DepthwiseTile;
using cpu_internal::GemmTileFn;
using cpu_internal::Index;
using cpu_internal::IsPointwiseDense;
using cpu_internal::kChannelBlock;
using cpu_internal::kLanes;
using cpu_internal::kLineFloats;
using cpu_internal::kTileRows;
using cpu_internal::LoadVec;
using cpu_internal::PackDepthwise;
using cpu_internal::RoundToLine;
using cpu_internal::Segment;
using cpu_internal::StageRows;
using cpu_internal::StageRowsBlocked;
using cpu_internal::StoreVec;
using cpu_internal::Vec16;
using cpu_internal::Vec8;
using cpu_internal::WindowRows;

constexpr int kNr = 16;  // columns per B panel
// Rows per micro-kernel call: AVX2 6 x 16 (12 accumulators + 2 B vectors + 1 broadcast = 15 of
// the 16 registers; 8 loads per 12 FMAs), AVX-512 12 x 32 (two panels: 24 accumulators + 2 B +
// 1 broadcast = 27 of the 32 registers; 14 loads per 24 FMAs). Part boundaries fall on
// multiples of kRowGranuleFp32 (a multiple of both) or, for BF16, of an AMX tile's 16 rows.
constexpr int kMrAvx2 = 6;
constexpr int kMrAvx512 = 12;
constexpr int kRowGranuleFp32 = 12;
constexpr int kRowGranuleTiles = 16;  // BF16 and INT8
// K per chunk. Measured (one Zen 2 core, separable C=256/512, K=33..75, T=25..500, batch 1 and
// 8): K chunk 128 / 256 / 512 / 1024 gave ~86 / ~89 / ~94 / ~94 GFLOP/s (a 512 x 16 B
// micro-panel is 32 KB, Zen 2's whole L1, yet the prefetchers keep up; one chunk per
// 512-channel pointwise conv means the output tile is stored once); tiles (kTileRows) of 128,
// 192 and 256 rows were within noise. 256 rows fit 8 streaming windows of 25 frames in one GEMM.
constexpr int kKChunk = 512;

enum : int { kAccumulate = 1, kEpilogue = 2 };

// C rows (+)= A rows x B for MR rows and NV vectors of V per row. a[i] points at row i's first
// element of this K chunk; b at the chunk's first row of the first vector's columns; vector v's
// B is at b + v * b_vec (8 floats on, in the same panel, for AVX2's Vec8; the next panel for
// AVX-512's Vec16), stepping kNr floats per K row. c[i] points at row i's first column, of which
// n_valid (<= NV * lanes) are written.
template <typename V, int MR, int NV>
JASPER_ALWAYS_INLINE void MicroKernel(const float* const* a, int kc, const float* __restrict b,
                                      Index b_vec, float* const* c, int n_valid, int mode,
                                      const float* bias, bool relu) {
  constexpr int kL = kLanes<V>;
  V acc[MR][NV];
  const float* ap[MR];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
    ap[i] = a[i];
  }
  for (int k = 0; k < kc; ++k) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) LoadVec(b + v * b_vec, &bv[v]);
    b += kNr;
    for (int i = 0; i < MR; ++i) {
      // An initializer list in place compiles to vbroadcastss (through a helper, GCC built the
      // vector lane by lane; `V{} + s` adds a vaddss).
      const float si = ap[i][k];
      V ai;
      if constexpr (kL == 16) {
        ai = V{si, si, si, si, si, si, si, si, si, si, si, si, si, si, si, si};
      } else {
        ai = V{si, si, si, si, si, si, si, si};
      }
      for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
    }
  }
  V bias_v[NV];
  for (int v = 0; v < NV; ++v) {
    bias_v[v] = V{};
    if (mode & kEpilogue) LoadVec(bias + v * kL, &bias_v[v]);
  }
  const V zero{};
  const bool full = n_valid == NV * kL;
  for (int i = 0; i < MR; ++i) {
    float lanes[NV * kL];
    float* ci = full ? c[i] : lanes;
    if (!full && (mode & kAccumulate)) std::memcpy(lanes, c[i], sizeof(float) * n_valid);
    for (int v = 0; v < NV; ++v) {
      V out = acc[i][v];
      if (mode & kAccumulate) {
        V prev;
        LoadVec(ci + v * kL, &prev);
        out += prev;
      }
      if (mode & kEpilogue) {
        out += bias_v[v];
        // `v < 0 ? 0 : v` keeps a NaN as NaN, like std::max(v, 0) in the reference.
        if (relu) out = out < zero ? zero : out;
      }
      StoreVec(&out, ci + v * kL);
    }
    if (!full) std::memcpy(c[i], lanes, sizeof(float) * n_valid);
  }
}

// Rows of the next micro-kernel call: MR, except that a remainder of MR + 1 or MR + 2 runs as
// two near-halves (a 1- or 2-row call is FMA-latency-bound with too few accumulators).
template <int MR>
JASPER_ALWAYS_INLINE int NextRowBlock(int remaining) {
  if (remaining > MR && remaining <= MR + 2) return remaining / 2;
  return std::min(remaining, MR);
}

// MicroKernel<V, mr, NV> for a run-time mr in [1, MR].
template <typename V, int MR, int NV>
JASPER_ALWAYS_INLINE void MicroKernelRows(int mr, const float* const* a, int kc, const float* b,
                                          Index b_vec, float* const* c, int n_valid, int mode,
                                          const float* bias, bool relu) {
  if constexpr (MR > 1) {
    if (mr < MR) {
      MicroKernelRows<V, MR - 1, NV>(mr, a, kc, b, b_vec, c, n_valid, mode, bias, relu);
      return;
    }
  }
  MicroKernel<V, MR, NV>(a, kc, b, b_vec, c, n_valid, mode, bias, relu);
}

// y rows (c_rows[r] + column) = act(sum over segments A_s x B_s + bias) for rows [0, rows), with
// MR-row micro-kernels of 2 vectors of V (Vec8: one 16-column panel; Vec16: two panels, and an
// odd last panel runs with one vector).
template <typename V, int MR>
JASPER_ALWAYS_INLINE void GemmTileImpl(const PackedSubBlock& p, const Segment* segments,
                                       int num_segments, int rows, float* const* c_rows) {
  constexpr int kL = kLanes<V>;
  constexpr int kPanelsPerCall = 2 * kL / kNr;  // 1 (Vec8) or 2 (Vec16)
  const int c_out = p.desc.out_channels;
  const bool relu = p.desc.activation == Activation::kRelu;
  const Index panel_floats = static_cast<Index>(p.k_total) * kNr;
  const Index b_vec = kL == kNr ? panel_floats : kL;
  int last_segment = -1;
  for (int s = 0; s < num_segments; ++s) {
    if (segments[s].k > 0) last_segment = s;
  }
  if (last_segment < 0 || rows <= 0) return;
  bool first = true;
  for (int s = 0; s <= last_segment; ++s) {
    const Segment& seg = segments[s];
    for (int kk = 0; kk < seg.k; kk += kKChunk) {
      const int kc = std::min(kKChunk, seg.k - kk);
      const bool last = s == last_segment && kk + kc >= seg.k;
      const int mode = (first ? 0 : kAccumulate) | (last ? kEpilogue : 0);
      first = false;
      for (int panel = 0; panel < p.n_panels; panel += kPanelsPerCall) {
        const int col = panel * kNr;
        const int n_valid = std::min(2 * kL, c_out - col);
        const float* b = p.b.data() + panel * panel_floats + static_cast<Index>(seg.k0 + kk) * kNr;
        const float* bias = p.bias.data() + col;
        const bool one_vector = kPanelsPerCall == 2 && panel + 1 == p.n_panels;
        for (int r = 0; r < rows;) {
          const int mr = NextRowBlock<MR>(rows - r);
          const float* a[MR];
          float* c[MR];
          for (int i = 0; i < mr; ++i) {
            a[i] = seg.rows[r + i] + seg.offset + kk;
            c[i] = c_rows[r + i] + col;
          }
          if (one_vector) {
            MicroKernelRows<V, MR, 1>(mr, a, kc, b, b_vec, c, n_valid, mode, bias, relu);
          } else {
            MicroKernelRows<V, MR, 2>(mr, a, kc, b, b_vec, c, n_valid, mode, bias, relu);
          }
          r += mr;
        }
      }
    }
  }
}

void GemmTileGeneric(const PackedSubBlock& p, const Segment* segments, int num_segments, int rows,
                     float* const* c_rows, float* /*scratch*/) {
  GemmTileImpl<Vec8, kMrAvx2>(p, segments, num_segments, rows, c_rows);
}

#if JASPER_X86_DISPATCH
__attribute__((target("avx2,fma"))) void GemmTileAvx2(const PackedSubBlock& p,
                                                      const Segment* segments, int num_segments,
                                                      int rows, float* const* c_rows,
                                                      float* /*scratch*/) {
  GemmTileImpl<Vec8, kMrAvx2>(p, segments, num_segments, rows, c_rows);
}

JASPER_AVX512_TARGET void GemmTileAvx512(const PackedSubBlock& p, const Segment* segments,
                                         int num_segments, int rows, float* const* c_rows,
                                         float* /*scratch*/) {
  GemmTileImpl<Vec16, kMrAvx512>(p, segments, num_segments, rows, c_rows);
}
#endif

// The FP32 GEMM for the active ISA (kernels/cpu_features.h), or the BF16 or INT8 one.
GemmTileFn GemmTileFor(const PackedSubBlock& p) {
  if (p.precision == Precision::kBf16) return cpu_internal::GemmTileBf16();
  if (p.precision == Precision::kInt8) return cpu_internal::GemmTileInt8();
#if JASPER_X86_DISPATCH
  return cpu_internal::Fp32ForActiveIsa<GemmTileFn>(GemmTileGeneric, GemmTileAvx2, GemmTileAvx512);
#else
  return GemmTileGeneric;
#endif
}

// Segments of A_main: 1, except dense K>1 with dilation > 1 (one per tap).
int MainSegments(const SubBlockDesc& desc) {
  return (!desc.separable && desc.kernel_size > 1 && desc.dilation > 1) ? desc.kernel_size : 1;
}

// Workspace layout (offsets in floats from the line-aligned start).
struct Layout {
  Index block_stride = 0;  // separable: floats per channel block of the staged window
  Index dw_out = 0;        // separable: [tile, C_in] depthwise output
  Index window = 0;        // separable: [C_in/16][rows][16]; dense K>1: [rows, C_in]
  Index zero_row = 0;      // dense 1x1: C_in zeros
  Index a_rows = 0;        // [tile] const float*: A_main row pointers
  Index c_rows = 0;        // [tile] float*: output row pointers
  Index res_rows = 0;      // [num_residuals][tile] const float*
  Index segments = 0;      // [MainSegments + num_residuals] Segment
  Index gemm = 0;          // the GEMM's own scratch (BF16: the gathered A and the accumulators)
  Index total = 0;
};

constexpr Index FloatsFor(std::size_t bytes) {
  return static_cast<Index>((bytes + sizeof(float) - 1) / sizeof(float));
}

Layout LayoutFor(const PackedSubBlock& p) {
  const SubBlockDesc& d = p.desc;
  const Index tile = kTileRows;
  const Index num_res = static_cast<Index>(p.residual_channels.size());
  Layout l;
  Index at = 0;
  if (d.separable) {
    l.block_stride = WindowRows(d, kTileRows) * kChannelBlock;
    // INT8 and the BF16 depthwise write the GEMM's A themselves (GemmInt8AStage,
    // GemmBf16AStage): no FP32 output.
    l.dw_out = at;
    if (p.precision != Precision::kInt8 && !p.bf16_depthwise) {
      at = RoundToLine(at + tile * d.in_channels);
    }
    // FP32: the channel-blocked window; INT8: the depthwise's byte scratch; the BF16
    // depthwise: its pair rows (it reads the input rows in place).
    l.window = at;
    Index window = l.block_stride * ChannelBlocks(d.in_channels);
    if (p.precision == Precision::kInt8) {
      window = FloatsFor(cpu_internal::Int8DepthwiseScratchBytes(d));
    } else if (p.bf16_depthwise) {
      window = FloatsFor(cpu_internal::Bf16DepthwisePairBytes(d));
    }
    at = RoundToLine(at + window);
  } else if (IsPointwiseDense(d)) {
    l.zero_row = at;
    at = RoundToLine(at + d.in_channels);
  } else {
    l.window = at;
    at = RoundToLine(at + WindowRows(d, kTileRows) * d.in_channels);
  }
  l.a_rows = at;
  at = RoundToLine(at + FloatsFor(sizeof(const float*) * tile));
  l.c_rows = at;
  at = RoundToLine(at + FloatsFor(sizeof(float*) * tile));
  l.res_rows = at;
  at = RoundToLine(at + FloatsFor(sizeof(const float*) * tile * num_res));
  l.segments = at;
  at = RoundToLine(at + FloatsFor(sizeof(Segment) * (MainSegments(d) + num_res)));
  l.gemm = at;
  if (p.precision == Precision::kBf16) {
    at = RoundToLine(at + static_cast<Index>(cpu_internal::GemmBf16ScratchFloats(p)));
  } else if (p.precision == Precision::kInt8) {
    at = RoundToLine(at + static_cast<Index>(cpu_internal::GemmInt8ScratchFloats(p)));
  }
  l.total = at + kLineFloats;  // slack for aligning the caller's pointer
  return l;
}

// Typed views of the workspace regions (the workspace is raw scratch memory; these regions are
// only ever accessed through these types).
template <typename T>
T* Region(float* base, Index offset) {
  return reinterpret_cast<T*>(base + offset);
}

}  // namespace

PackedSubBlock PackSubBlock(const SubBlockDesc& desc, const SubBlockWeights& weights,
                            const ResidualInput* residuals, int num_residuals, Precision precision,
                            const float* int8_input_scales, const Int8PackOptions& int8) {
  PackedSubBlock p;
  p.desc = desc;
  p.precision = precision;
  if (!IsValid(desc) || weights.weight == nullptr || (desc.separable && !weights.depthwise) ||
      (precision != Precision::kFp32 && precision != Precision::kBf16 &&
       precision != Precision::kInt8) ||
      (precision == Precision::kInt8 && int8_input_scales == nullptr)) {
    return p;
  }
  const int c_in = desc.in_channels;
  const int c_out = desc.out_channels;
  p.k_main = desc.separable ? c_in : desc.kernel_size * c_in;
  p.k_total = p.k_main;
  for (int r = 0; r < num_residuals; ++r) {
    const int ch = std::max(residuals[r].channels, 0);
    p.residual_channels.push_back(ch);
    p.k_total += ch;
  }
  p.n_panels = (c_out + kNr - 1) / kNr;
  // Bias for an even number of panels: the AVX-512 and BF16 epilogues read 32 columns at once.
  p.bias.assign(static_cast<std::size_t>(p.n_panels + 1) / 2 * 2 * kNr, 0.0f);
  if (weights.bias != nullptr) std::copy(weights.bias, weights.bias + c_out, p.bias.begin());
  if (precision == Precision::kInt8) {
    const float* weight = weights.weight;
    const float* depthwise = weights.depthwise;
    std::vector<float> smoothed_weight, smoothed_depthwise;
    if (desc.separable && int8.output_smoothing != nullptr) {
      // Exact in real arithmetic: depthwise channel c / m_c, pointwise row c x m_c.
      const float* m = int8.output_smoothing;
      for (int c = 0; c < c_in; ++c) {
        if (!(std::isfinite(m[c]) && m[c] > 0.0f && std::isfinite(1.0f / m[c]))) return p;
      }
      smoothed_weight.assign(weight, weight + static_cast<std::size_t>(c_in) * c_out);
      for (int c = 0; c < c_in; ++c) {
        for (int o = 0; o < c_out; ++o)
          smoothed_weight[static_cast<std::size_t>(c) * c_out + o] *= m[c];
      }
      smoothed_depthwise.assign(depthwise,
                                depthwise + static_cast<std::size_t>(desc.kernel_size) * c_in);
      for (std::size_t i = 0; i < smoothed_depthwise.size(); ++i) {
        smoothed_depthwise[i] /= m[i % static_cast<std::size_t>(c_in)];
      }
      weight = smoothed_weight.data();
      depthwise = smoothed_depthwise.data();
    }
    std::vector<bool> residual_nonnegative;
    for (int r = 0; r < num_residuals; ++r)
      residual_nonnegative.push_back(residuals[r].nonnegative);
    const std::vector<bool> grid =
        Int8UnsignedGrid(desc, int8.nonnegative_input, residual_nonnegative);
    p.valid = cpu_internal::PackInt8Weights(weight, residuals, int8_input_scales, grid, &p);
    if (p.valid && desc.separable) {
      p.valid = cpu_internal::PackInt8Depthwise(depthwise, int8_input_scales[1 + num_residuals],
                                                int8.input_channel_scales, grid.back(), &p);
    }
    return p;
  }
  if (desc.separable) {
    p.depthwise.assign(
        static_cast<std::size_t>(ChannelBlocks(c_in)) * desc.kernel_size * kChannelBlock, 0.0f);
    PackDepthwise(weights.depthwise, desc.kernel_size, c_in, p.depthwise.data());
  }
  p.valid = true;
  if (precision == Precision::kBf16) {
    cpu_internal::PackBf16Weights(weights.weight, residuals, &p);
    if (desc.separable && Bf16DepthwiseFasterThanFp32()) {
      cpu_internal::PackBf16Depthwise(weights.depthwise, &p);
    }
    return p;
  }
  p.b.assign(static_cast<std::size_t>(p.n_panels) * p.k_total * kNr, 0.0f);
  // Row k of the concatenated B, [C_out] row-major, from its source matrix.
  auto pack_rows = [&](const float* src, int k0, int k) {
    for (int panel = 0; panel < p.n_panels; ++panel) {
      const int col = panel * kNr;
      const int n = std::min(kNr, c_out - col);
      for (int kk = 0; kk < k; ++kk) {
        float* dst = p.b.data() + (static_cast<Index>(panel) * p.k_total + k0 + kk) * kNr;
        std::memcpy(dst, src + static_cast<Index>(kk) * c_out + col, sizeof(float) * n);
      }
    }
  };
  pack_rows(weights.weight, 0, p.k_main);
  int k0 = p.k_main;
  for (int r = 0; r < num_residuals; ++r) {
    if (p.residual_channels[r] > 0) pack_rows(residuals[r].weight, k0, p.residual_channels[r]);
    k0 += p.residual_channels[r];
  }
  return p;
}

std::vector<bool> Int8UnsignedGrid(const SubBlockDesc& desc, bool input_nonnegative,
                                   const std::vector<bool>& residual_nonnegative) {
  std::vector<bool> grid{!desc.separable && input_nonnegative};
  grid.insert(grid.end(), residual_nonnegative.begin(), residual_nonnegative.end());
  if (desc.separable) grid.push_back(input_nonnegative);
  return grid;
}

std::size_t PackedSubBlockWorkspaceFloats(const PackedSubBlock& packed) {
  if (!packed.valid) return 0;
  return static_cast<std::size_t>(LayoutFor(packed).total);
}

void FusedSubBlockCpuPackedPart(const PackedSubBlock& p, const float* x,
                                const BatchGeometry& geometry, const float* const* residual_x,
                                int num_parts, int part, float* workspace, float* y) {
  if (!p.valid || num_parts < 1 || part < 0 || part >= num_parts) return;
  const SubBlockDesc& desc = p.desc;
  const int c_in = desc.in_channels;
  const int c_out = desc.out_channels;
  const int stride = desc.stride;
  const int in_time = geometry.in_time;
  const int out_time = geometry.out_time;
  const int num_res = static_cast<int>(p.residual_channels.size());
  const Layout layout = LayoutFor(p);
  float* ws = AlignToLine(workspace);
  const float** a_rows = Region<const float*>(ws, layout.a_rows);
  float** c_rows = Region<float*>(ws, layout.c_rows);
  const float** res_rows = Region<const float*>(ws, layout.res_rows);
  Segment* segments = Region<Segment>(ws, layout.segments);
  const GemmTileFn gemm = GemmTileFor(p);
  float* gemm_scratch = ws + layout.gemm;

  // Segments: A_main (1 or K), then one per residual branch.
  const int main_segments = MainSegments(desc);
  const bool int8 = p.precision == Precision::kInt8;
  // INT8 separable: the depthwise stage writes W_main's A into the GEMM's scratch.
  const cpu_internal::Int8AStage int8_a = desc.separable && int8
                                              ? cpu_internal::GemmInt8AStage(p, gemm_scratch)
                                              : cpu_internal::Int8AStage{};
  // BF16 with the BF16 depthwise: the same, in BF16.
  const cpu_internal::Bf16AStage bf16_a = desc.separable && p.bf16_depthwise
                                              ? cpu_internal::GemmBf16AStage(p, gemm_scratch)
                                              : cpu_internal::Bf16AStage{};
  const bool staged_a = int8_a.a != nullptr || bf16_a.a != nullptr;
  for (int s = 0; s < main_segments; ++s) {
    if (main_segments == 1) {
      segments[s] = {staged_a ? nullptr : a_rows, 0, p.k_main, 0};
    } else {
      segments[s] = {a_rows, static_cast<Index>(s) * desc.dilation * c_in, c_in, s * c_in};
    }
  }
  int k0 = p.k_main;
  for (int r = 0; r < num_res; ++r) {
    segments[main_segments + r] = {res_rows + static_cast<Index>(r) * kTileRows, 0,
                                   p.residual_channels[r], k0};
    k0 += p.residual_channels[r];
  }
  const int num_segments = main_segments + num_res;

  // Output row r of the tile: utterance b, frame t.
  auto add_output_row = [&](int r, int b, int t) {
    const Index row = static_cast<Index>(b) * out_time + t;
    c_rows[r] = y + row * c_out;
    for (int q = 0; q < num_res; ++q) {
      res_rows[static_cast<Index>(q) * kTileRows + r] =
          residual_x[q] + row * p.residual_channels[q];
    }
  };

  const bool separable = desc.separable;
  const bool pointwise = IsPointwiseDense(desc);
  const cpu_internal::DepthwiseTileFn depthwise = separable && !int8 ? DepthwiseTile() : nullptr;
  float* zero_row = nullptr;
  if (pointwise) {
    zero_row = ws + layout.zero_row;
    std::memset(zero_row, 0, sizeof(float) * c_in);
  }

  // Frames past each length: zero-filled by the part that owns the utterance (b % num_parts).
  Index total_rows = 0;  // valid output frames of the batch, stacked in batch order
  for (int b = 0; b < geometry.batch; ++b) {
    const int out_len = ClampedLength(geometry.out_lengths, b, out_time);
    total_rows += out_len;
    if (b % num_parts == part && out_len < out_time) {
      float* yb = y + static_cast<Index>(b) * out_time * c_out;
      std::memset(yb + static_cast<Index>(out_len) * c_out, 0,
                  sizeof(float) * c_out * static_cast<std::size_t>(out_time - out_len));
    }
  }
  // This part's contiguous range of stacked rows, in whole micro-kernel row blocks. Each row's
  // arithmetic (depthwise taps, GEMM K order, epilogue) does not depend on which tile holds it,
  // so any split gives the same bits.
  Index chunk = (total_rows + num_parts - 1) / num_parts;
  const int granule = p.precision == Precision::kFp32 ? kRowGranuleFp32 : kRowGranuleTiles;
  chunk = (chunk + granule - 1) / granule * granule;
  const Index row_begin = std::min(total_rows, chunk * part);
  const Index row_end = std::min(total_rows, row_begin + chunk);
  if (row_begin >= row_end) return;

  int tile_rows = 0;  // rows gathered in the current (stacked) tile
  Index stacked = 0;  // stacked rows of the utterances before b
  for (int b = 0; b < geometry.batch && stacked < row_end; ++b) {
    const int in_len = ClampedLength(geometry.in_lengths, b, in_time);
    const int out_len = ClampedLength(geometry.out_lengths, b, out_time);
    const float* xb = x + static_cast<Index>(b) * in_time * c_in;
    const int t_begin = static_cast<int>(std::clamp<Index>(row_begin - stacked, 0, out_len));
    const int t_end = static_cast<int>(std::clamp<Index>(row_end - stacked, 0, out_len));
    stacked += out_len;
    for (int t0 = t_begin; t0 < t_end;) {
      const int frames = std::min(t_end - t0, kTileRows - tile_rows);
      // First input row read by frame t0 (its tap 0).
      const Index first = static_cast<Index>(t0) * stride - desc.padding;
      if (separable) {
        float* window = ws + layout.window;
        if (int8) {
          cpu_internal::Int8AStage rows = int8_a;
          rows.a += static_cast<Index>(tile_rows) * rows.ld;
          cpu_internal::DepthwiseInt8Tile(p, xb, in_len, first, frames,
                                          reinterpret_cast<std::uint8_t*>(window), rows);
        } else if (p.bf16_depthwise) {
          cpu_internal::Bf16AStage rows = bf16_a;
          rows.a += static_cast<Index>(tile_rows) * rows.ld;
          cpu_internal::DepthwiseBf16Tile(p, xb, in_len, first, frames,
                                          reinterpret_cast<std::uint8_t*>(window), rows);
        } else {
          StageRowsBlocked(xb, in_len, first, WindowRows(desc, frames), c_in, layout.block_stride,
                           window);
          float* dw_out = ws + layout.dw_out + static_cast<Index>(tile_rows) * c_in;
          depthwise(window, layout.block_stride, stride, desc.dilation, p.depthwise.data(),
                    desc.kernel_size, c_in, frames, dw_out);
          for (int f = 0; f < frames; ++f)
            a_rows[tile_rows + f] = dw_out + static_cast<Index>(f) * c_in;
        }
      } else if (pointwise) {
        for (int f = 0; f < frames; ++f) {
          const Index row = first + static_cast<Index>(f) * stride;
          a_rows[tile_rows + f] = (row >= 0 && row < in_len) ? xb + row * c_in : zero_row;
        }
      } else {
        // Dense K>1: interior windows are read in place, edge windows staged with zeros.
        const Index rows = WindowRows(desc, frames);
        const float* src = ws + layout.window;
        if (first >= 0 && first + rows <= in_len) {
          src = xb + first * c_in;
        } else {
          StageRows(xb, in_len, first, rows, c_in, ws + layout.window);
        }
        for (int f = 0; f < frames; ++f) {
          a_rows[tile_rows + f] = src + static_cast<Index>(f) * stride * c_in;
        }
      }
      for (int f = 0; f < frames; ++f) add_output_row(tile_rows + f, b, t0 + f);
      tile_rows += frames;
      t0 += frames;
      // Dense K>1 windows are per utterance (the staged window is reused): flush every piece.
      if (tile_rows == kTileRows || !(separable || pointwise)) {
        gemm(p, segments, num_segments, tile_rows, c_rows, gemm_scratch);
        tile_rows = 0;
      }
    }
  }
  if (tile_rows > 0) gemm(p, segments, num_segments, tile_rows, c_rows, gemm_scratch);
}

void FusedSubBlockCpuPacked(const PackedSubBlock& p, const float* x, const BatchGeometry& geometry,
                            const float* const* residual_x, float* workspace, float* y) {
  FusedSubBlockCpuPackedPart(p, x, geometry, residual_x, /*num_parts=*/1, /*part=*/0, workspace, y);
}

}  // namespace jasper::kernels
