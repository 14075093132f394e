// Pieces shared by the two low-precision GEMMs of the fused CPU sub-block (bf16_gemm.cc and
// int8_gemm.cc): where a segment's K lands in the padded, grouped B; the walk that gathers a
// chunk of A (converted to the GEMM's element type) into a contiguous buffer; the epilogue from
// an FP32 accumulator buffer; and the AMX tile configuration. Not a public interface: include
// only from kernels/cpu/*.cc.
//
// Layouts (sub_block.h, PackedSubBlock): B's K is cut into groups (C_in of one tap of W_main, or
// one residual branch's channels), each padded with zeros to a multiple of the element type's
// granule (p.c_in_pad, p.res_k0_pad). The FP32 accumulators are [rows][AccCols(p)].
// Thread-safety: every function is reentrant.
#ifndef JASPER_KERNELS_CPU_TILE_GEMM_H_
#define JASPER_KERNELS_CPU_TILE_GEMM_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/sub_block.h"

#if JASPER_X86_DISPATCH
#include <immintrin.h>
#endif

namespace jasper::kernels::cpu_internal {

constexpr int kTilePanel = 16;  // columns per B panel (one AMX tile's 16 columns)

inline int RoundUpTo(int v, int m) { return (v + m - 1) / m * m; }

// Columns of the accumulator buffers and of the low-precision B: C_out rounded up to 32.
inline int AccCols(const PackedSubBlock& p) { return RoundUpTo(p.n_panels, 2) * kTilePanel; }

// Where a segment's K lands in the padded B: `groups` groups of `group` real rows, each padded to
// `group_pad`, starting at padded row `k0_pad`; `qgroup` is the weight group it belongs to (0:
// W_main, 1 + p: W_res_p; INT8 has one activation scale per weight group).
struct SegmentGroups {
  int group = 0;
  int group_pad = 0;
  int groups = 0;
  int k0_pad = 0;
  int qgroup = 0;
};

inline SegmentGroups GroupsOf(const PackedSubBlock& p, const Segment& seg) {
  SegmentGroups g;
  if (seg.k0 < p.k_main) {  // W_main: groups of C_in (one per tap)
    const int c_in = p.desc.in_channels;
    g.group = c_in;
    g.group_pad = p.c_in_pad;
    g.groups = seg.k / c_in;
    g.k0_pad = seg.k0 / c_in * p.c_in_pad;
    return g;
  }
  int k0 = p.k_main;
  for (std::size_t r = 0; r < p.residual_channels.size(); ++r) {
    if (k0 == seg.k0) {
      g.group = p.residual_channels[r];
      g.group_pad = p.res_k0_pad[r + 1] - p.res_k0_pad[r];
      g.groups = 1;
      g.k0_pad = p.res_k0_pad[r];
      g.qgroup = static_cast<int>(r) + 1;
      return g;
    }
    k0 += p.residual_channels[r];
  }
  return g;  // not reached for segments built by packed.cc
}

// The widest padded group of `p` (a chunk holds at least one group).
inline int WidestGroup(const PackedSubBlock& p) {
  int widest = p.c_in_pad;
  for (std::size_t r = 0; r + 1 < p.res_k0_pad.size(); ++r) {
    widest = std::max(widest, p.res_k0_pad[r + 1] - p.res_k0_pad[r]);
  }
  return widest;
}

// a[r][(g - g0) * group_pad + c] = convert(seg row r, group g, channel c), zero for c >= group:
// the one walk over a chunk's rows and groups. `convert(src, n, dst)` converts one run (C_in or
// a residual branch's channels) and returns how many elements it wrote (>= n; extra ones zero).
template <typename T, typename Convert>
JASPER_ALWAYS_INLINE void GatherGroups(const Segment& seg, const SegmentGroups& g, int g0, int gc,
                                       int rows, T* a, int ld, Convert convert) {
  for (int r = 0; r < rows; ++r) {
    const float* src_row = seg.rows[r] + seg.offset;
    T* dst_row = a + static_cast<Index>(r) * ld;
    for (int gi = 0; gi < gc; ++gi) {
      const float* src = src_row + static_cast<Index>(g0 + gi) * g.group;
      T* dst = dst_row + static_cast<Index>(gi) * g.group_pad;
      const int written = convert(src, g.group, dst);
      if (written < g.group_pad) std::memset(dst + written, 0, sizeof(T) * (g.group_pad - written));
    }
  }
}

// FP32 -> BF16, round to nearest even (vcvtne(2)ps2bf16's rounding but for denormals, which
// those flush; NaN stays a quiet NaN). The portable paths of the BF16 GEMM and depthwise.
inline std::uint16_t ToBf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

inline float FromBf16(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// The last segment with columns (-1: none): the tile's last chunk is its last one, where a
// kernel that finishes the output from its registers (kFusedEnd) does so.
inline int LastSegmentWithColumns(const Segment* segments, int num_segments) {
  int last = -1;
  for (int si = 0; si < num_segments; ++si) {
    if (segments[si].k > 0) last = si;
  }
  return last;
}

// Output rows from the accumulators: act(acc + bias), the valid columns only.
JASPER_ALWAYS_INLINE void EpilogueRows(const PackedSubBlock& p, const float* acc, int rows,
                                       float* const* c_rows) {
  const int acc_cols = AccCols(p);
  const int c_out = p.desc.out_channels;
  const bool relu = p.desc.activation == Activation::kRelu;
  const float* __restrict bias = p.bias.data();
  for (int r = 0; r < rows; ++r) {
    const float* __restrict ar = acc + static_cast<Index>(r) * acc_cols;
    float* __restrict out = c_rows[r];
    for (int o = 0; o < c_out; ++o) {
      const float v = ar[o] + bias[o];
      // `v < 0 ? 0 : v` keeps a NaN as NaN, like std::max(v, 0) in the reference.
      out[o] = relu && v < 0.0f ? 0.0f : v;
    }
  }
}

#if JASPER_X86_DISPATCH
#define JASPER_AVX512F_TARGET __attribute__((target("avx512f")))

// All 16 lanes: the maskz_ form of an unmasked intrinsic (the same instruction), because the
// unmasked one's _mm512_undefined operand trips GCC 12's -Wmaybe-uninitialized when inlined.
constexpr __mmask16 kAllLanes = 0xffff;

// EpilogueRows for one 32-column panel (columns n0 .. n0 + 31) in registers, for GEMM kernels
// that finish their output rows from their accumulators (the VNNI and vdpbf16ps ones).
struct PanelEpilogue {
  __m512 bias[2];
  __mmask16 keep[2];  // columns < C_out
  bool relu = false;

  JASPER_AVX512F_TARGET void Load(const PackedSubBlock& p, int n0) {
    relu = p.desc.activation == Activation::kRelu;
    for (int h = 0; h < 2; ++h) {
      const int n = n0 + h * kTilePanel;
      bias[h] = _mm512_loadu_ps(p.bias.data() + n);  // padded to AccCols with zeros
      keep[h] =
          static_cast<__mmask16>((1u << std::clamp(p.desc.out_channels - n, 0, kTilePanel)) - 1u);
    }
  }
  // out[0, 16) = act(v + bias[h]) for the columns < C_out, the others left alone: the operations
  // of EpilogueRows (ReLU as max(0, v) keeps a NaN and -0.0 like its `v < 0 ? 0 : v`).
  JASPER_AVX512F_TARGET JASPER_ALWAYS_INLINE void Store(__m512 v, int h, float* out) const {
    v = _mm512_add_ps(v, bias[h]);
    if (relu) v = _mm512_maskz_max_ps(kAllLanes, _mm512_setzero_ps(), v);
    _mm512_mask_storeu_ps(out, keep[h], v);
  }
};
#endif

// ldtilecfg's 64-byte operand: palette 1, tiles 0-7 all 16 rows x 64 bytes (the shape of every
// tile both GEMMs use: FP32/INT32 16 x 16 accumulators, 16 x 64-byte A slices, B panels of 16
// K pairs (BF16) or quads (INT8)).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t tile_rows[16] = {};
};

#if JASPER_X86_DISPATCH
// The target of every AMX kernel (BF16 and INT8 alike, so that AmxChunk inlines into both).
#define JASPER_AMX_TARGET                                                     \
  __attribute__((                                                             \
      target("amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512dq," \
             "avx512bf16,avx512vnni,avx2,fma")))

// One chunk of a low-precision GEMM on AMX, the loop both GEMMs run: acc (+)= A x B for every
// 32 x 32 block of the output: tiles 0-3 hold the 2 x 2 16 x 16 accumulators (zeroed when
// `first`, else loaded from and stored back to acc), tiles 4-5 two 16-row A slices of 64 bytes
// of K, tiles 6-7 two 16-column B panels; a last block of 16 rows uses one A slice and two
// accumulators. Rows past `rows` up to the next multiple of 16 are computed from whatever the
// buffer holds (stored into acc's padding rows, never to an output). `Dot` issues the tile
// products: Dot::Two() = tiles 0, 1 += 4 x 6, 4 x 7; Dot::Four() adds tiles 2, 3 += 5 x 6, 5 x 7
// (tdpbf16ps or tdpbssd; the intrinsics take tile numbers as literals). T: the operands' element
// type (64 bytes of K = kKStep elements); Acc: the accumulators' (float or int32).
//   a     [rows rounded to 16][ld] (ld = cols)
//   b     the first column panel's row kp0 in the packed B ([panel][k_pad K][16] in T's
//         interleave: 64 bytes per K step of one panel), panel_stride elements between panels
//   acc   [rows rounded to 32][acc_cols]
template <typename Dot, typename T, typename Acc>
JASPER_AMX_TARGET JASPER_ALWAYS_INLINE void AmxChunk(const T* a, int ld, int cols, const T* b,
                                                     Index panel_stride, bool first, int rows,
                                                     Acc* acc_base, int acc_cols) {
  constexpr int kKStep = 64 / sizeof(T);
  // The tile loads read memory through asm operands the compiler cannot see: make the gathered
  // A (and the sums of earlier chunks) visible in memory first.
  __asm__ volatile("" ::: "memory");
  const Index acc_stride = static_cast<Index>(acc_cols) * sizeof(Acc);
  const Index a_stride = static_cast<Index>(ld) * sizeof(T);
  const Index b_stride = 64;
  const int rows_pad = RoundUpTo(rows, 16);
  for (int n0 = 0; n0 < acc_cols; n0 += 2 * kTilePanel) {
    const T* b0 = b + static_cast<Index>(n0 / kTilePanel) * panel_stride;
    const T* b1 = b0 + panel_stride;
    for (int m0 = 0; m0 < rows_pad; m0 += 32) {
      Acc* acc = acc_base + static_cast<Index>(m0) * acc_cols + n0;
      const T* a0 = a + static_cast<Index>(m0) * ld;
      const bool half = m0 + 16 == rows_pad;  // a last block of 16 rows
      Acc* acc_lo = acc + static_cast<Index>(16) * acc_cols;
      if (first) {
        _tile_zero(0);
        _tile_zero(1);
        if (!half) {
          _tile_zero(2);
          _tile_zero(3);
        }
      } else {
        _tile_loadd(0, acc, acc_stride);
        _tile_loadd(1, acc + kTilePanel, acc_stride);
        if (!half) {
          _tile_loadd(2, acc_lo, acc_stride);
          _tile_loadd(3, acc_lo + kTilePanel, acc_stride);
        }
      }
      const T* a1 = a0 + static_cast<Index>(16) * ld;
      for (int k = 0; k < cols; k += kKStep) {
        _tile_loadd(4, a0 + k, a_stride);
        _tile_loadd(6, b0 + static_cast<Index>(k) * kTilePanel, b_stride);
        _tile_loadd(7, b1 + static_cast<Index>(k) * kTilePanel, b_stride);
        if (half) {
          Dot::Two();
        } else {
          _tile_loadd(5, a1 + k, a_stride);
          Dot::Four();
        }
      }
      _tile_stored(0, acc, acc_stride);
      _tile_stored(1, acc + kTilePanel, acc_stride);
      if (!half) {
        _tile_stored(2, acc_lo, acc_stride);
        _tile_stored(3, acc_lo + kTilePanel, acc_stride);
      }
    }
  }
  // The sums were written by tile stores the compiler cannot see either.
  __asm__ volatile("" ::: "memory");
}

// Loads the configuration above. Not _tile_loadconfig: GCC 12's version passes only the first 8
// bytes as the asm's memory operand, so the compiler may drop the stores of the rest of it.
__attribute__((target("amx-tile"))) inline void LoadTileConfig() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.tile_rows[t] = 16;
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(config));
}
#endif

}  // namespace jasper::kernels::cpu_internal

#endif  // JASPER_KERNELS_CPU_TILE_GEMM_H_
