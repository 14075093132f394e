// The BF16 GEMM of the fused CPU sub-block (PackedSubBlock::precision == kBf16): B packed once
// in BF16 in the AMX tile layout (sub_block.h), A gathered per tile from the FP32 row pointers of
// packed.cc's segments and rounded to BF16 (round to nearest even) into a contiguous buffer,
// products accumulated in FP32.
//
// Per GEMM tile (<= kTileRows output rows): K is cut into chunks of whole groups (a group is
// C_in of one tap of W_main, or one residual branch's channels, each padded with zeros to a
// multiple of 32), at most kChunkCols columns unless one group is wider. Per chunk, A is
// gathered into [rows, chunk] BF16, then every 32 x 32 block of the output runs on AMX: tiles
// 0-3 hold the 2 x 2 FP32 16 x 16 accumulators (zeroed on the first chunk, loaded from and
// stored to the FP32 accumulator buffer [rows, C_out padded to 32] around later chunks), tiles 4-5
// two 16-row A slices of 32 K values, tiles 6-7 two 16-column B panels (16 K pairs each); one
// tdpbf16ps per (A, B) pair; a last block of 16 rows uses one A slice and two accumulators.
// Rows past `rows` up to the next multiple of 16 are computed from whatever the buffer holds
// and never stored. After the last chunk, one epilogue pass adds the
// bias, applies the activation and stores the valid columns to the output rows.
//
// Without AMX, on a CPU with AVX-512 BF16 (kAvx512 level), each chunk runs on vdpbf16ps instead
// (12 rows x 32 columns per call, straight into the FP32 accumulators); below that, the same
// buffers run through plain loops: the same BF16 rounding of A and B, FP32 accumulation in
// another order.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/tile_gemm.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"

namespace jasper::kernels::cpu_internal {
namespace {

constexpr int kNr = kTilePanel;   // columns per B panel
constexpr int kKGroup = 32;       // K granule: one AMX tile row of BF16 pairs (64 bytes)
constexpr int kChunkCols = 1024;  // K columns of A gathered per chunk (512 KB for 256 rows)

using Bf16 = std::uint16_t;

// Workspace regions of the GEMM scratch: the gathered A chunk, then the accumulators.
struct Scratch {
  Bf16* a = nullptr;     // [kTileRows rounded to 32][chunk columns]
  float* acc = nullptr;  // [kTileRows rounded to 32][AccCols]
};

int MaxChunkCols(const PackedSubBlock& p) { return std::max(kChunkCols, WidestGroup(p)); }

constexpr int kRowsPad = (kTileRows + 31) / 32 * 32;

Scratch ScratchOf(const PackedSubBlock& p, float* scratch) {
  Scratch s;
  s.a = reinterpret_cast<Bf16*>(scratch);
  const Index a_floats = RoundToLine(static_cast<Index>(kRowsPad) * MaxChunkCols(p) / 2);
  s.acc = scratch + a_floats;
  return s;
}

// Groups per chunk for a segment (at least one).
int GroupsPerChunk(const SegmentGroups& g) { return std::max(1, kChunkCols / g.group_pad); }

// ---------------------------------------------------------------------------------------------
// The tile loop, shared by the AMX and the portable build through a kernel policy (static member
// functions, so that the AMX ones carry their target attribute; one call per chunk):
//   Begin() / End()   around a tile (AMX: load the tile configuration / release the tiles);
//   Gather(...)       converts one chunk of A to BF16;
//   Block(...)        acc (+)= A chunk x B rows [kp0, kp0 + cols) for all rows;
//   Epilogue(...)     output rows = act(acc + bias), the valid columns.

// Parameters of one chunk's Block call.
struct ChunkArgs {
  const Bf16* a;  // [rows rounded to 32][ld]
  int ld;         // = cols
  int kp0;        // first padded B row
  int cols;       // K of the chunk, a multiple of 32
  bool first;     // acc starts at zero
  int rows;
  float* acc;                        // [rows rounded to 32][AccCols]
  float* const* end_rows = nullptr;  // the tile's last chunk, Kernel::kFusedEnd: its output rows
};

// Converts src[0, n) to BF16 at dst; returns how many elements it wrote (>= n; the extra ones
// are zero).
using ConvertRowFn = int (*)(const float* src, int n, Bf16* dst);

int ConvertRowPortable(const float* src, int n, Bf16* dst) {
  for (int c = 0; c < n; ++c) dst[c] = ToBf16(src[c]);
  return n;
}

template <typename Kernel>
void GemmTileBf16Impl(const PackedSubBlock& p, const Segment* segments, int num_segments, int rows,
                      float* const* c_rows, float* scratch) {
  if (rows <= 0) return;
  const Scratch s = ScratchOf(p, scratch);
  Kernel::Begin();
  const int last_segment = LastSegmentWithColumns(segments, num_segments);
  bool first = true;
  bool ended = false;  // the kernel stored the output rows itself (Kernel::kFusedEnd)
  for (int si = 0; si < num_segments; ++si) {
    const Segment& seg = segments[si];
    if (seg.k <= 0) continue;
    const SegmentGroups g = GroupsOf(p, seg);
    const int per_chunk = GroupsPerChunk(g);
    for (int g0 = 0; g0 < g.groups; g0 += per_chunk) {
      const int gc = std::min(per_chunk, g.groups - g0);
      const int cols = gc * g.group_pad;
      // rows == nullptr: the caller wrote this (one-group) segment's A already (GemmBf16AStage).
      if (seg.rows != nullptr) Kernel::Gather(seg, g, g0, gc, rows, s.a, cols);
      ChunkArgs chunk{s.a, cols, g.k0_pad + g0 * g.group_pad, cols, first, rows, s.acc};
      if (Kernel::kFusedEnd && si == last_segment && g0 + per_chunk >= g.groups) {
        chunk.end_rows = c_rows;
        ended = true;
      }
      Kernel::Block(p, chunk);
      first = false;
    }
  }
  Kernel::End();
  if (!ended) Kernel::Epilogue(p, s.acc, rows, c_rows);
}

// Plain loops over the same buffers (no AMX): acc[r][n] += sum_k a[r][k] * B[kp0 + k][n].
struct PortableKernel {
  static constexpr bool kFusedEnd = false;
  static void Begin() {}
  static void End() {}
  static void Gather(const Segment& seg, const SegmentGroups& g, int g0, int gc, int rows, Bf16* a,
                     int ld) {
    GatherGroups(seg, g, g0, gc, rows, a, ld, ConvertRowPortable);
  }
  static void Block(const PackedSubBlock& p, const ChunkArgs& c) {
    const int acc_cols = AccCols(p);
    for (int r = 0; r < c.rows; ++r) {
      float* ar = c.acc + static_cast<Index>(r) * acc_cols;
      if (c.first) std::fill(ar, ar + acc_cols, 0.0f);
      const Bf16* arow = c.a + static_cast<Index>(r) * c.ld;
      for (int panel = 0; panel < acc_cols / kNr; ++panel) {
        const Bf16* bp = p.b_bf16.data() + (static_cast<Index>(panel) * p.k_pad + c.kp0) * kNr;
        float* out = ar + panel * kNr;
        for (int k = 0; k < c.cols; k += 2) {
          const float a0 = FromBf16(arow[k]);
          const float a1 = FromBf16(arow[k + 1]);
          const Bf16* bk = bp + static_cast<Index>(k) * kNr;  // [16][2]: rows k and k + 1
          for (int n = 0; n < kNr; ++n) {
            out[n] += a0 * FromBf16(bk[2 * n]) + a1 * FromBf16(bk[2 * n + 1]);
          }
        }
      }
    }
  }
  static void Epilogue(const PackedSubBlock& p, const float* acc, int rows, float* const* c_rows) {
    EpilogueRows(p, acc, rows, c_rows);
  }
};

void GemmTileBf16Portable(const PackedSubBlock& p, const Segment* segments, int num_segments,
                          int rows, float* const* c_rows, float* scratch) {
  GemmTileBf16Impl<PortableKernel>(p, segments, num_segments, rows, c_rows, scratch);
}

#if JASPER_X86_DISPATCH
#define JASPER_AVX512BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

// ConvertRowFn with vcvtne2ps2bf16 (the AMX and the AVX-512 BF16 kernels): 32 at a time, then
// masked 16-wide steps whose loads read zeros past n.
JASPER_AVX512BF16_TARGET int ConvertRowAvx512Bf16(const float* src, int n, Bf16* dst) {
  int c = 0;
  for (; c + 32 <= n; c += 32) {
    const __m512 lo = _mm512_loadu_ps(src + c);
    const __m512 hi = _mm512_loadu_ps(src + c + 16);
    _mm512_storeu_si512(dst + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
  for (; c < n; c += 16) {
    const __mmask16 m = static_cast<__mmask16>((1u << std::min(16, n - c)) - 1u);
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + c));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), h);
  }
  return c;
}

// AVX-512 BF16 without AMX (e.g. AMD Zen 4, Intel Cooper Lake): vdpbf16ps on the same packed B
// (its [k / 2][16][2] panels are vdpbf16ps's operand layout), MR rows x 32 columns per call:
// 2 * MR accumulators + 2 B vectors + 1 broadcast A pair (27 of the 32 registers for MR = 12),
// 2 B loads and MR broadcasts per 2 * MR instructions of 32 multiply-adds each.
template <int MR, bool kEnd>
JASPER_AVX512BF16_TARGET JASPER_ALWAYS_INLINE void DpBf16Rows(const Bf16* a, int ld, int cols,
                                                              const Bf16* b0, const Bf16* b1,
                                                              bool first, float* acc, int acc_cols,
                                                              const PanelEpilogue& e,
                                                              float* const* c_rows, int n0) {
  __m512 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) {
    float* row = acc + static_cast<Index>(i) * acc_cols;
    c0[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(row);
    c1[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(row + kNr);
  }
  for (int k = 0; k < cols; k += 2) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(b0 + static_cast<Index>(k) * kNr);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(b1 + static_cast<Index>(k) * kNr);
    for (int i = 0; i < MR; ++i) {
      // One pair of BF16 as a 32-bit lane, in every lane.
      std::uint32_t pair;
      std::memcpy(&pair, a + static_cast<Index>(i) * ld + k, sizeof(pair));
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      c0[i] = _mm512_dpbf16_ps(c0[i], x, w0);
      c1[i] = _mm512_dpbf16_ps(c1[i], x, w1);
    }
  }
  if constexpr (kEnd) {
    // Unrolled like the loops above: an array indexed by a variable would live in memory, and
    // GCC would store every accumulator on each step of the K loop.
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      float* out = c_rows[i] + n0;
      e.Store(c0[i], 0, out);
      e.Store(c1[i], 1, out + kNr);
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      float* row = acc + static_cast<Index>(i) * acc_cols;
      _mm512_storeu_ps(row, c0[i]);
      _mm512_storeu_ps(row + kNr, c1[i]);
    }
  }
}

template <int MR, bool kEnd>
JASPER_AVX512BF16_TARGET JASPER_ALWAYS_INLINE void DpBf16AnyRows(
    int mr, const Bf16* a, int ld, int cols, const Bf16* b0, const Bf16* b1, bool first, float* acc,
    int acc_cols, const PanelEpilogue& e, float* const* c_rows, int n0) {
  if constexpr (MR > 1) {
    if (mr < MR) {
      DpBf16AnyRows<MR - 1, kEnd>(mr, a, ld, cols, b0, b1, first, acc, acc_cols, e, c_rows, n0);
      return;
    }
  }
  DpBf16Rows<MR, kEnd>(a, ld, cols, b0, b1, first, acc, acc_cols, e, c_rows, n0);
}

struct Avx512Bf16Kernel {
  static constexpr int kMr = 12;
  static constexpr bool kFusedEnd = true;
  static void Begin() {}
  static void End() {}
  static JASPER_AVX512BF16_TARGET void Gather(const Segment& seg, const SegmentGroups& g, int g0,
                                              int gc, int rows, Bf16* a, int ld) {
    GatherGroups(seg, g, g0, gc, rows, a, ld, ConvertRowAvx512Bf16);
  }
  template <bool kEnd>
  static JASPER_AVX512BF16_TARGET void Panels(const PackedSubBlock& p, const ChunkArgs& c) {
    const int acc_cols = AccCols(p);
    PanelEpilogue e{};
    for (int n0 = 0; n0 < acc_cols; n0 += 2 * kNr) {
      const Bf16* b0 = p.b_bf16.data() + (static_cast<Index>(n0 / kNr) * p.k_pad + c.kp0) * kNr;
      const Bf16* b1 = b0 + static_cast<Index>(p.k_pad) * kNr;
      if constexpr (kEnd) e.Load(p, n0);
      for (int r0 = 0; r0 < c.rows; r0 += kMr) {
        const int mr = std::min(kMr, c.rows - r0);
        DpBf16AnyRows<kMr, kEnd>(mr, c.a + static_cast<Index>(r0) * c.ld, c.ld, c.cols, b0, b1,
                                 c.first, c.acc + static_cast<Index>(r0) * acc_cols + n0, acc_cols,
                                 e, kEnd ? c.end_rows + r0 : nullptr, n0);
      }
    }
  }
  static JASPER_AVX512BF16_TARGET void Block(const PackedSubBlock& p, const ChunkArgs& c) {
    if (c.end_rows != nullptr) {
      Panels<true>(p, c);
    } else {
      Panels<false>(p, c);
    }
  }
  static JASPER_AVX512BF16_TARGET void Epilogue(const PackedSubBlock& p, const float* acc, int rows,
                                                float* const* c_rows) {
    EpilogueRows(p, acc, rows, c_rows);
  }
};

void GemmTileBf16Avx512(const PackedSubBlock& p, const Segment* segments, int num_segments,
                        int rows, float* const* c_rows, float* scratch) {
  GemmTileBf16Impl<Avx512Bf16Kernel>(p, segments, num_segments, rows, c_rows, scratch);
}

// AmxChunk's tile products: FP32 accumulators += BF16 pairs.
struct AmxBf16Dot {
  static JASPER_AMX_TARGET void Two() {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
  }
  static JASPER_AMX_TARGET void Four() {
    Two();
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
};

struct AmxKernel {
  static constexpr bool kFusedEnd = false;
  static JASPER_AMX_TARGET void Begin() { LoadTileConfig(); }
  static JASPER_AMX_TARGET void End() { _tile_release(); }

  static JASPER_AMX_TARGET void Gather(const Segment& seg, const SegmentGroups& g, int g0, int gc,
                                       int rows, Bf16* a, int ld) {
    GatherGroups(seg, g, g0, gc, rows, a, ld, ConvertRowAvx512Bf16);
  }

  static JASPER_AMX_TARGET void Block(const PackedSubBlock& p, const ChunkArgs& c) {
    AmxChunk<AmxBf16Dot>(c.a, c.ld, c.cols, p.b_bf16.data() + static_cast<Index>(c.kp0) * kNr,
                         static_cast<Index>(p.k_pad) * kNr, c.first, c.rows, c.acc, AccCols(p));
  }

  static JASPER_AMX_TARGET void Epilogue(const PackedSubBlock& p, const float* acc, int rows,
                                         float* const* c_rows) {
    EpilogueRows(p, acc, rows, c_rows);
  }
};

void GemmTileBf16Amx(const PackedSubBlock& p, const Segment* segments, int num_segments, int rows,
                     float* const* c_rows, float* scratch) {
  GemmTileBf16Impl<AmxKernel>(p, segments, num_segments, rows, c_rows, scratch);
}
#endif

}  // namespace

GemmTileFn GemmTileBf16() {
#if JASPER_X86_DISPATCH
  const CpuIsa isa = ActiveCpuIsa();
  if (isa == CpuIsa::kAmx) return GemmTileBf16Amx;
  if (isa == CpuIsa::kAvx512 && GetCpuFeatures().avx512_bf16) return GemmTileBf16Avx512;
#endif
  return GemmTileBf16Portable;
}

Bf16AStage GemmBf16AStage(const PackedSubBlock& p, float* scratch) {
  return Bf16AStage{ScratchOf(p, scratch).a, p.c_in_pad};
}

std::size_t GemmBf16ScratchFloats(const PackedSubBlock& p) {
  const Index a_floats = RoundToLine(static_cast<Index>(kRowsPad) * MaxChunkCols(p) / 2);
  return static_cast<std::size_t>(a_floats + static_cast<Index>(kRowsPad) * AccCols(p));
}

void PackBf16Weights(const float* w_main, const ResidualInput* residuals, PackedSubBlock* p) {
  const SubBlockDesc& d = p->desc;
  const int c_in = d.in_channels;
  const int c_out = d.out_channels;
  const int taps = d.separable ? 1 : d.kernel_size;
  p->c_in_pad = RoundUpTo(c_in, kKGroup);
  p->res_k0_pad.assign(1, taps * p->c_in_pad);
  for (int ch : p->residual_channels) {
    p->res_k0_pad.push_back(p->res_k0_pad.back() + RoundUpTo(ch, kKGroup));
  }
  p->k_pad = p->res_k0_pad.back();
  const int panels = RoundUpTo(p->n_panels, 2);
  p->b_bf16.assign(static_cast<std::size_t>(panels) * p->k_pad * kNr, 0);
  // Source row k of a [k, C_out] row-major matrix into padded row kp.
  auto pack_row = [&](const float* src_row, int kp) {
    for (int o = 0; o < c_out; ++o) {
      const int panel = o / kNr;
      const Index at =
          (static_cast<Index>(panel) * p->k_pad + (kp & ~1)) * kNr + (o % kNr) * 2 + (kp & 1);
      p->b_bf16[static_cast<std::size_t>(at)] = ToBf16(src_row[o]);
    }
  };
  for (int t = 0; t < taps; ++t) {
    for (int c = 0; c < c_in; ++c) {
      pack_row(w_main + (static_cast<Index>(t) * c_in + c) * c_out, t * p->c_in_pad + c);
    }
  }
  for (std::size_t r = 0; r < p->residual_channels.size(); ++r) {
    for (int c = 0; c < p->residual_channels[r]; ++c) {
      pack_row(residuals[r].weight + static_cast<Index>(c) * c_out, p->res_k0_pad[r] + c);
    }
  }
}

}  // namespace jasper::kernels::cpu_internal
