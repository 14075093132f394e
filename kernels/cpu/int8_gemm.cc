// The INT8 GEMM of the fused CPU sub-block (PackedSubBlock::precision == kInt8): B quantized once
// per output column and weight group (sub_block.h) in the AMX INT8 tile layout, A quantized per
// tile from the FP32 row pointers of packed.cc's segments with the group's calibrated
// activation scale into a contiguous buffer, products summed exactly in INT32.
//
// Per GEMM tile (<= kTileRows output rows): the segments are walked in order; consecutive
// segments of one weight group (W_main's taps, or one residual branch) share an INT32
// accumulator buffer [rows, C_out padded to 32]. K is cut into chunks of whole groups as in
// bf16_gemm.cc (at most kChunkCols columns unless one group is wider); per chunk, A is gathered
// and quantized into [rows, chunk] INT8, then every 32 x 32 block of the output runs on AMX:
// tiles 0-3 hold the 2 x 2 INT32 16 x 16 accumulators, tiles 4-5 two 16-row A slices of 64 K
// values, tiles 6-7 two 16-column B panels (16 K quads each); one tdpbssd per (A, B) pair; a last
// block of 16 rows uses one A slice and two accumulators. When the weight group ends, its INT32
// sums are converted to FP32 and added, times dequant[group][column], to the FP32 accumulators;
// after the last group, one epilogue pass adds the bias, applies the activation and stores the
// valid columns to the output rows. Rows past `rows` up to the next multiple of 16 are computed
// from whatever the buffer holds and never stored.
//
// Without AMX-INT8, a CPU with AVX-512 VNNI runs vpdpbusd instead (12 rows x 32 columns per
// call); vpdpbusd multiplies unsigned by signed bytes, so that kernel gathers A as q + 128 and
// subtracts 128 x the column sums of the quantized weights when it dequantizes; its tile's last
// chunk dequantizes, adds the earlier groups' FP32 sums and the bias, applies the activation and
// stores the output rows straight from its registers (FusedEnd), with no accumulator buffer in
// between. Below that, plain loops compute the same INT32 sums.
//
// A weight group whose input is non-negative (PackedSubBlock::a_unsigned: a ReLU's output) is
// quantized on the unsigned grid u in [0, 255] instead: its bytes are u for vpdpbusd (nothing to
// subtract) and u - 128 for the signed kernels (AMX, portable), which add 128 x the column sums
// (ColumnSumOffset).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/int8_quantize.h"
#include "kernels/cpu/tile_gemm.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"

namespace jasper::kernels::cpu_internal {
namespace {

constexpr int kNr = kTilePanel;   // columns per B panel
constexpr int kKGroup = 64;       // K granule: one AMX tile row of INT8 quads (64 bytes)
constexpr int kChunkCols = 2048;  // K columns of A gathered per chunk (512 KB for 256 rows)
constexpr int kRowsPad = (kTileRows + 31) / 32 * 32;

using Int8 = std::int8_t;
using Int32 = std::int32_t;

// Workspace regions of the GEMM scratch: the gathered A chunk, the INT32 sums of the current
// weight group, the FP32 accumulators.
struct Scratch {
  Int8* a = nullptr;       // [kRowsPad][chunk columns]
  Int32* acc_i = nullptr;  // [kRowsPad][AccCols]
  float* acc_f = nullptr;  // [kRowsPad][AccCols]
};

int MaxChunkCols(const PackedSubBlock& p) { return std::max(kChunkCols, WidestGroup(p)); }

Index AFloats(const PackedSubBlock& p) {
  return RoundToLine(static_cast<Index>(kRowsPad) * MaxChunkCols(p) / 4);
}
Index AccFloats(const PackedSubBlock& p) {
  return RoundToLine(static_cast<Index>(kRowsPad) * AccCols(p));
}

Scratch ScratchOf(const PackedSubBlock& p, float* scratch) {
  Scratch s;
  s.a = reinterpret_cast<Int8*>(scratch);
  s.acc_i = reinterpret_cast<Int32*>(scratch + AFloats(p));
  s.acc_f = scratch + AFloats(p) + AccFloats(p);
  return s;
}

// The last chunk of the last weight group, where a kernel with kFusedEnd finishes the output
// itself: out[r][n] = act((acc_f[r][n] +) dequantized sums + bias[n]) for n < c_out, the same
// operations, in the same order, as DequantRows followed by EpilogueRows.
struct FusedEnd {
  int group;             // the weight group whose sums the chunk completes
  const float* acc_f;    // the earlier groups' FP32 sums [rows][AccCols]; nullptr: none
  float* const* c_rows;  // the tile's output rows
};

// Parameters of one chunk's Block call.
struct ChunkArgs {
  const Int8* a;  // [rows rounded to 32][ld]
  int ld;         // = cols
  int kp0;        // first padded B row
  int cols;       // K of the chunk, a multiple of 64
  bool first;     // the weight group's INT32 sums start at zero
  int rows;
  Int32* acc;                     // [rows rounded to 32][AccCols]
  const FusedEnd* end = nullptr;  // set for the tile's last chunk when Kernel::kFusedEnd
};

// The multiple of the column sums that turns a group's INT32 sums into sum(q x w) on its grid:
// an unsigned operand (vpdpbusd) holds a signed-grid q as q + 128 (-128), a signed operand holds
// an unsigned-grid u as u - 128 (+128); otherwise the bytes are the values (0).
int ColumnSumOffset(const PackedSubBlock& p, int group, bool unsigned_operand) {
  const bool grid_unsigned = p.a_unsigned[group] != 0;
  return grid_unsigned == unsigned_operand ? 0 : (unsigned_operand ? -128 : 128);
}

// acc_f[r][n] (+)= (acc_i[r][n] + ColumnSumOffset * col_sums[group][n]) * dequant[group][n].
template <bool kUnsignedA>
JASPER_ALWAYS_INLINE void DequantRows(const PackedSubBlock& p, int group, const Int32* acc_i,
                                      int rows, bool first, float* acc_f) {
  const int cols = AccCols(p);
  const float* __restrict dq = p.dequant.data() + static_cast<Index>(group) * cols;
  const Int32* __restrict sums = p.b_int8_col_sums.data() + static_cast<Index>(group) * cols;
  const Int32 offset = ColumnSumOffset(p, group, kUnsignedA);
  for (int r = 0; r < rows; ++r) {
    const Int32* __restrict ai = acc_i + static_cast<Index>(r) * cols;
    float* __restrict af = acc_f + static_cast<Index>(r) * cols;
    for (int n = 0; n < cols; ++n) {
      const Int32 v = ai[n] + offset * sums[n];
      const float d = static_cast<float>(v) * dq[n];
      af[n] = first ? d : af[n] + d;
    }
  }
}

template <typename Kernel>
void GemmTileInt8Impl(const PackedSubBlock& p, const Segment* segments, int num_segments, int rows,
                      float* const* c_rows, float* scratch) {
  if (rows <= 0) return;
  const Scratch s = ScratchOf(p, scratch);
  Kernel::Begin();
  int group = -1;       // the weight group being summed
  bool first_i = true;  // its INT32 sums start at zero
  bool first_f = true;  // no group added to the FP32 accumulators yet
  const int last_segment = LastSegmentWithColumns(segments, num_segments);
  FusedEnd end;
  bool ended = false;  // the kernel finished the output rows itself (Kernel::kFusedEnd)
  for (int si = 0; si < num_segments; ++si) {
    const Segment& seg = segments[si];
    if (seg.k <= 0) continue;
    const SegmentGroups g = GroupsOf(p, seg);
    if (g.qgroup != group) {
      if (group >= 0) {
        Kernel::Dequant(p, group, s.acc_i, rows, first_f, s.acc_f);
        first_f = false;
      }
      group = g.qgroup;
      first_i = true;
    }
    const float inv = 1.0f / p.a_scale[group];
    const bool grid_unsigned = p.a_unsigned[group] != 0;
    const int per_chunk = std::max(1, kChunkCols / g.group_pad);
    for (int g0 = 0; g0 < g.groups; g0 += per_chunk) {
      const int gc = std::min(per_chunk, g.groups - g0);
      const int cols = gc * g.group_pad;
      // rows == nullptr: the caller wrote this (one-group) segment's A already (GemmInt8AStage).
      if (seg.rows != nullptr) {
        Kernel::Gather(seg, g, g0, gc, rows, s.a, cols, inv, grid_unsigned);
      }
      ChunkArgs chunk{s.a, cols, g.k0_pad + g0 * g.group_pad, cols, first_i, rows, s.acc_i};
      if (Kernel::kFusedEnd && si == last_segment && g0 + per_chunk >= g.groups) {
        end = FusedEnd{group, first_f ? nullptr : s.acc_f, c_rows};
        chunk.end = &end;
        ended = true;
      }
      Kernel::Block(p, chunk);
      first_i = false;
    }
  }
  Kernel::End();
  if (group < 0 || ended) return;  // group < 0: not reached, W_main always has rows
  Kernel::Dequant(p, group, s.acc_i, rows, first_f, s.acc_f);
  EpilogueRows(p, s.acc_f, rows, c_rows);
}

// Plain loops over the same buffers: acc[r][n] (+)= sum_k a[r][k] * B[kp0 + k][n], exactly.
struct PortableKernel {
  static constexpr bool kFusedEnd = false;
  static void Begin() {}
  static void End() {}
  static void Gather(const Segment& seg, const SegmentGroups& g, int g0, int gc, int rows, Int8* a,
                     int ld, float inv, bool grid_unsigned) {
    GatherGroups(
        seg, g, g0, gc, rows, a, ld, [inv, grid_unsigned](const float* src, int n, Int8* dst) {
          return QuantizeRowPortable(src, n, dst, inv, /*to_unsigned=*/false, grid_unsigned);
        });
  }
  static void Block(const PackedSubBlock& p, const ChunkArgs& c) {
    const int acc_cols = AccCols(p);
    for (int r = 0; r < c.rows; ++r) {
      Int32* ar = c.acc + static_cast<Index>(r) * acc_cols;
      if (c.first) std::fill(ar, ar + acc_cols, 0);
      const Int8* arow = c.a + static_cast<Index>(r) * c.ld;
      for (int panel = 0; panel < acc_cols / kNr; ++panel) {
        const Int8* bp = p.b_int8.data() + (static_cast<Index>(panel) * p.k_pad + c.kp0) * kNr;
        Int32* out = ar + panel * kNr;
        for (int k = 0; k < c.cols; k += 4) {
          const Int8* bk = bp + static_cast<Index>(k) * kNr;  // [16][4]: rows k .. k + 3
          for (int n = 0; n < kNr; ++n) {
            Int32 sum = 0;
            for (int j = 0; j < 4; ++j) sum += Int32{arow[k + j]} * Int32{bk[4 * n + j]};
            out[n] += sum;
          }
        }
      }
    }
  }
  static void Dequant(const PackedSubBlock& p, int group, const Int32* acc_i, int rows, bool first,
                      float* acc_f) {
    DequantRows<false>(p, group, acc_i, rows, first, acc_f);
  }
};

void GemmTileInt8Portable(const PackedSubBlock& p, const Segment* segments, int num_segments,
                          int rows, float* const* c_rows, float* scratch) {
  GemmTileInt8Impl<PortableKernel>(p, segments, num_segments, rows, c_rows, scratch);
}

#if JASPER_X86_DISPATCH
#define JASPER_VNNI_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")))

// AVX-512 VNNI without AMX-INT8 (e.g. Intel Ice Lake / Cascade Lake, AMD Zen 4): vpdpbusd on the
// same packed B (its [k / 4][16][4] panels are vpdpbusd's operand layout), MR rows x 32 columns:
// 2 * MR accumulators + 2 B vectors + 1 broadcast A quad. The tile's last chunk (c.end) finishes
// the output from the registers: no INT32 or FP32 accumulator buffer round trip.
struct VnniEnd {  // one 32-column panel's constants for the fused end
  // 128 x the quantized weights' column sums (vpdpbusd's A offset on the signed grid; 0 for a
  // group on the unsigned grid, whose bytes are the values)
  __m512i sums128[2];
  __m512 dq[2];
  PanelEpilogue epilogue;  // bias, activation, columns < C_out
};

// One 16-column half of a finished row: out = act((prev +) (sum - 128 x col sums) x dequant +
// bias), columns past C_out left alone.
JASPER_VNNI_TARGET JASPER_ALWAYS_INLINE void FinishHalf(__m512i sum, const VnniEnd& e, int h,
                                                        const float* prev, float* out) {
  __m512 v = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAllLanes, _mm512_sub_epi32(sum, e.sums128[h])),
                           e.dq[h]);
  // The product rounded on its own, in every MR instantiation alike: GCC would contract it with
  // the add below into an FMA in some and not others, and rows of a tile split differently
  // across threads would then get different bits.
  asm("" : "+v"(v));
  if (prev != nullptr) v = _mm512_add_ps(_mm512_loadu_ps(prev), v);
  e.epilogue.Store(v, h, out);
}

template <int MR, bool kEnd>
JASPER_VNNI_TARGET JASPER_ALWAYS_INLINE void DpBusdRows(const Int8* a, int ld, int cols,
                                                        const Int8* b0, const Int8* b1, bool first,
                                                        Int32* acc, int acc_cols, const VnniEnd& e,
                                                        const float* acc_f, float* const* c_rows,
                                                        int n0) {
  __m512i c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) {
    Int32* row = acc + static_cast<Index>(i) * acc_cols;
    c0[i] = first ? _mm512_setzero_si512() : _mm512_loadu_si512(row);
    c1[i] = first ? _mm512_setzero_si512() : _mm512_loadu_si512(row + kNr);
  }
  for (int k = 0; k < cols; k += 4) {
    const __m512i w0 = _mm512_loadu_si512(b0 + static_cast<Index>(k) * kNr);
    const __m512i w1 = _mm512_loadu_si512(b1 + static_cast<Index>(k) * kNr);
    for (int i = 0; i < MR; ++i) {
      Int32 quad;  // four unsigned A bytes as one 32-bit lane, in every lane
      std::memcpy(&quad, a + static_cast<Index>(i) * ld + k, sizeof(quad));
      const __m512i x = _mm512_set1_epi32(quad);
      c0[i] = _mm512_dpbusd_epi32(c0[i], x, w0);
      c1[i] = _mm512_dpbusd_epi32(c1[i], x, w1);
    }
  }
  if constexpr (kEnd) {
    // DequantRows<true> then EpilogueRows, per register: (sum - 128 x col sum) x dequant, plus
    // the earlier groups' FP32 sums, then PanelEpilogue (bias, ReLU).
    // Unrolled, like the loops above: an array indexed by a variable would live in memory, and
    // GCC would store every accumulator on each step of the K loop.
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const float* prev =
          acc_f == nullptr ? nullptr : acc_f + static_cast<Index>(i) * acc_cols + n0;
      float* out = c_rows[i] + n0;
      FinishHalf(c0[i], e, 0, prev, out);
      FinishHalf(c1[i], e, 1, prev == nullptr ? nullptr : prev + kNr, out + kNr);
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      Int32* row = acc + static_cast<Index>(i) * acc_cols;
      _mm512_storeu_si512(row, c0[i]);
      _mm512_storeu_si512(row + kNr, c1[i]);
    }
  }
}

template <int MR, bool kEnd>
JASPER_VNNI_TARGET JASPER_ALWAYS_INLINE void DpBusdAnyRows(int mr, const Int8* a, int ld, int cols,
                                                           const Int8* b0, const Int8* b1,
                                                           bool first, Int32* acc, int acc_cols,
                                                           const VnniEnd& e, const float* acc_f,
                                                           float* const* c_rows, int n0) {
  if constexpr (MR > 1) {
    if (mr < MR) {
      DpBusdAnyRows<MR - 1, kEnd>(mr, a, ld, cols, b0, b1, first, acc, acc_cols, e, acc_f, c_rows,
                                  n0);
      return;
    }
  }
  DpBusdRows<MR, kEnd>(a, ld, cols, b0, b1, first, acc, acc_cols, e, acc_f, c_rows, n0);
}

struct VnniKernel {
  static constexpr int kMr = 12;
  static constexpr bool kFusedEnd = true;
  static void Begin() {}
  static void End() {}
  static JASPER_VNNI_TARGET void Gather(const Segment& seg, const SegmentGroups& g, int g0, int gc,
                                        int rows, Int8* a, int ld, float inv, bool grid_unsigned) {
    GatherGroups(seg, g, g0, gc, rows, a, ld,
                 [inv, grid_unsigned](const float* src, int n, Int8* dst) {
                   return QuantizeRowAvx512(src, n, dst, inv, /*to_unsigned=*/true, grid_unsigned);
                 });
  }
  template <bool kEnd>
  static JASPER_VNNI_TARGET void Panels(const PackedSubBlock& p, const ChunkArgs& c) {
    const int acc_cols = AccCols(p);
    VnniEnd e{};
    const float* acc_f = nullptr;
    if constexpr (kEnd) acc_f = c.end->acc_f;
    for (int n0 = 0; n0 < acc_cols; n0 += 2 * kNr) {
      const Int8* b0 = p.b_int8.data() + (static_cast<Index>(n0 / kNr) * p.k_pad + c.kp0) * kNr;
      const Int8* b1 = b0 + static_cast<Index>(p.k_pad) * kNr;
      if constexpr (kEnd) {
        const Index at = static_cast<Index>(c.end->group) * acc_cols + n0;
        const bool offset = ColumnSumOffset(p, c.end->group, /*unsigned_operand=*/true) != 0;
        for (int h = 0; h < 2; ++h) {
          e.sums128[h] =
              offset
                  ? _mm512_maskz_slli_epi32(
                        kAllLanes, _mm512_loadu_si512(p.b_int8_col_sums.data() + at + h * kNr), 7)
                  : _mm512_setzero_si512();
          e.dq[h] = _mm512_loadu_ps(p.dequant.data() + at + h * kNr);
        }
        e.epilogue.Load(p, n0);
      }
      for (int r0 = 0; r0 < c.rows; r0 += kMr) {
        const int mr = std::min(kMr, c.rows - r0);
        DpBusdAnyRows<kMr, kEnd>(
            mr, c.a + static_cast<Index>(r0) * c.ld, c.ld, c.cols, b0, b1, c.first,
            c.acc + static_cast<Index>(r0) * acc_cols + n0, acc_cols, e,
            acc_f == nullptr ? nullptr : acc_f + static_cast<Index>(r0) * acc_cols,
            kEnd ? c.end->c_rows + r0 : nullptr, n0);
      }
    }
  }
  static JASPER_VNNI_TARGET void Block(const PackedSubBlock& p, const ChunkArgs& c) {
    if (c.end != nullptr) {
      Panels<true>(p, c);
    } else {
      Panels<false>(p, c);
    }
  }
  static JASPER_VNNI_TARGET void Dequant(const PackedSubBlock& p, int group, const Int32* acc_i,
                                         int rows, bool first, float* acc_f) {
    DequantRows<true>(p, group, acc_i, rows, first, acc_f);
  }
};

void GemmTileInt8Vnni(const PackedSubBlock& p, const Segment* segments, int num_segments, int rows,
                      float* const* c_rows, float* scratch) {
  GemmTileInt8Impl<VnniKernel>(p, segments, num_segments, rows, c_rows, scratch);
}

// AmxChunk's tile products: INT32 accumulators += signed byte quads.
struct AmxInt8Dot {
  static JASPER_AMX_TARGET void Two() {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
  }
  static JASPER_AMX_TARGET void Four() {
    Two();
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
};

struct AmxInt8Kernel {
  static constexpr bool kFusedEnd = false;
  static JASPER_AMX_TARGET void Begin() { LoadTileConfig(); }
  static JASPER_AMX_TARGET void End() { _tile_release(); }

  static JASPER_AMX_TARGET void Gather(const Segment& seg, const SegmentGroups& g, int g0, int gc,
                                       int rows, Int8* a, int ld, float inv, bool grid_unsigned) {
    GatherGroups(seg, g, g0, gc, rows, a, ld,
                 [inv, grid_unsigned](const float* src, int n, Int8* dst) {
                   return QuantizeRowAvx512(src, n, dst, inv, /*to_unsigned=*/false, grid_unsigned);
                 });
  }

  static JASPER_AMX_TARGET void Block(const PackedSubBlock& p, const ChunkArgs& c) {
    AmxChunk<AmxInt8Dot>(c.a, c.ld, c.cols, p.b_int8.data() + static_cast<Index>(c.kp0) * kNr,
                         static_cast<Index>(p.k_pad) * kNr, c.first, c.rows, c.acc, AccCols(p));
  }

  static JASPER_AMX_TARGET void Dequant(const PackedSubBlock& p, int group, const Int32* acc_i,
                                        int rows, bool first, float* acc_f) {
    DequantRows<false>(p, group, acc_i, rows, first, acc_f);
  }
};

void GemmTileInt8Amx(const PackedSubBlock& p, const Segment* segments, int num_segments, int rows,
                     float* const* c_rows, float* scratch) {
  GemmTileInt8Impl<AmxInt8Kernel>(p, segments, num_segments, rows, c_rows, scratch);
}
#endif

}  // namespace

GemmTileFn GemmTileInt8() {
#if JASPER_X86_DISPATCH
  const CpuIsa isa = ActiveCpuIsa();
  const CpuFeatures& f = GetCpuFeatures();
  if (isa == CpuIsa::kAmx && f.amx_int8) return GemmTileInt8Amx;
  if ((isa == CpuIsa::kAmx || isa == CpuIsa::kAvx512) && f.avx512_vnni) return GemmTileInt8Vnni;
#endif
  return GemmTileInt8Portable;
}

Int8AStage GemmInt8AStage(const PackedSubBlock& p, float* scratch) {
  Int8AStage stage;
  stage.a = ScratchOf(p, scratch).a;
  stage.ld = p.c_in_pad;
#if JASPER_X86_DISPATCH
  stage.unsigned_a = GemmTileInt8() == GemmTileInt8Vnni;
#endif
  return stage;
}

std::size_t GemmInt8ScratchFloats(const PackedSubBlock& p) {
  return static_cast<std::size_t>(AFloats(p) + 2 * AccFloats(p));
}

bool PackInt8Weights(const float* w_main, const ResidualInput* residuals, const float* a_scales,
                     const std::vector<bool>& unsigned_grid, PackedSubBlock* p) {
  const SubBlockDesc& d = p->desc;
  const int c_in = d.in_channels;
  const int c_out = d.out_channels;
  const int taps = d.separable ? 1 : d.kernel_size;
  const int num_groups = 1 + static_cast<int>(p->residual_channels.size());
  for (int q = 0; q < num_groups; ++q) {
    if (!(std::isfinite(a_scales[q]) && a_scales[q] > 0.0f)) return false;
  }
  p->c_in_pad = RoundUpTo(c_in, kKGroup);
  p->res_k0_pad.assign(1, taps * p->c_in_pad);
  for (int ch : p->residual_channels) {
    p->res_k0_pad.push_back(p->res_k0_pad.back() + RoundUpTo(ch, kKGroup));
  }
  p->k_pad = p->res_k0_pad.back();
  const int cols = AccCols(*p);
  p->b_int8.assign(static_cast<std::size_t>(cols / kNr) * p->k_pad * kNr, 0);
  p->a_scale.assign(a_scales, a_scales + num_groups);
  p->a_unsigned.assign(unsigned_grid.begin(), unsigned_grid.begin() + num_groups);
  p->dequant.assign(static_cast<std::size_t>(num_groups) * cols, 0.0f);
  p->b_int8_col_sums.assign(static_cast<std::size_t>(num_groups) * cols, 0);

  // One weight group: `rows` source rows of a [rows, C_out] matrix (row i at src(i)) into padded
  // rows kp(i), quantized per column with the group's max |w|.
  auto pack_group = [&](int q, int rows, auto src, auto kp) {
    for (int o = 0; o < c_out; ++o) {
      float max_abs = 0.0f;
      for (int i = 0; i < rows; ++i) max_abs = std::max(max_abs, std::fabs(src(i)[o]));
      const float w_scale = max_abs / 127.0f;
      const std::size_t at_q = static_cast<std::size_t>(q) * cols + o;
      p->dequant[at_q] = a_scales[q] * w_scale;
      if (!(max_abs > 0.0f)) continue;  // an all-zero (or NaN) column stays zero
      const float inv = 127.0f / max_abs;
      Int32 sum = 0;
      for (int i = 0; i < rows; ++i) {
        const Int8 v = QuantizeInt8(src(i)[o], inv);
        const int k = kp(i);
        const Index at =
            (static_cast<Index>(o / kNr) * p->k_pad + (k & ~3)) * kNr + (o % kNr) * 4 + (k & 3);
        p->b_int8[static_cast<std::size_t>(at)] = v;
        sum += v;
      }
      p->b_int8_col_sums[at_q] = sum;
    }
  };
  pack_group(
      0, taps * c_in, [&](int i) { return w_main + static_cast<Index>(i) * c_out; },
      [&](int i) { return i / c_in * p->c_in_pad + i % c_in; });
  for (std::size_t r = 0; r < p->residual_channels.size(); ++r) {
    const float* w = residuals[r].weight;
    const int k0 = p->res_k0_pad[r];
    pack_group(
        static_cast<int>(r) + 1, p->residual_channels[r],
        [&](int i) { return w + static_cast<Index>(i) * c_out; }, [&](int i) { return k0 + i; });
  }
  return true;
}

}  // namespace jasper::kernels::cpu_internal
