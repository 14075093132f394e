// Internal helpers shared by the fused CPU sub-block kernels (blas_sub_block.cc: OpenBLAS GEMMs
// on the caller's unpacked weights; packed.cc: own FP32 micro-kernels on weights packed at load
// time; bf16_gemm.cc: the BF16 GEMM on AMX, AVX-512 BF16 or portable loops; int8_gemm.cc: the
// INT8 GEMM on AMX, AVX-512 VNNI or portable loops). Not a public
// interface: include only from kernels/cpu/*.cc.
//
// Layouts: activations are row-major [rows, channels]. "Channel-blocked" buffers hold
// [ceil(C / 16)][rows][16] floats (the padding channels of the last block are zero).
// Thread-safety: every function is reentrant.
#ifndef JASPER_KERNELS_CPU_CPU_INTERNAL_H_
#define JASPER_KERNELS_CPU_CPU_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define JASPER_X86_DISPATCH 1
#else
#define JASPER_X86_DISPATCH 0
#endif
#define JASPER_ALWAYS_INLINE inline __attribute__((always_inline))
// The AVX-512 clones' target (FP32 only: F for the 16-float vectors and FMA, BW/VL/DQ for masks
// and conversions; cpu_features.h's kAvx512 guarantees all of them).
#define JASPER_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

namespace jasper::kernels::cpu_internal {

using Index = std::ptrdiff_t;

// GNU vector extension: 8 floats, one AVX register (two SSE registers in the baseline build).
// Used instead of plain loops because GCC keeps an array of accumulators in memory (on the
// stack) across a reduction loop, which ran ~4x slower than register accumulators.
typedef float Vec8 __attribute__((vector_size(32)));
// 16 floats: one AVX-512 register (used only inside functions built for AVX-512).
typedef float Vec16 __attribute__((vector_size(64)));
constexpr int kVecWidth = 8;
template <typename V>
constexpr int kLanes = static_cast<int>(sizeof(V) / sizeof(float));
// Channels per depthwise block (two vectors).
constexpr int kChannelBlock = 2 * kVecWidth;
constexpr Index kLineFloats = 64 / sizeof(float);

// Unaligned load/store. Vectors go by pointer: a by-value 32-byte vector changes the ABI between
// the baseline and the AVX2 build (-Wpsabi), although these are always inlined.
template <typename V>
JASPER_ALWAYS_INLINE void LoadVec(const float* p, V* v) {
  std::memcpy(v, p, sizeof(*v));
}
template <typename V>
JASPER_ALWAYS_INLINE void StoreVec(const V* v, float* p) {
  std::memcpy(p, v, sizeof(*v));
}

inline int ChannelBlocks(int channels) { return (channels + kChannelBlock - 1) / kChannelBlock; }

bool IsPointwiseDense(const SubBlockDesc& desc);

// Input rows spanned by a tile of `frames` output frames.
Index WindowRows(const SubBlockDesc& desc, int frames);

// lengths[b] clamped to [0, extent]; `extent` when lengths is null.
int ClampedLength(const int* lengths, int b, int extent);

// Copies input rows [first, first + rows) of one utterance into `dst` ([rows, channels]), zero
// where the row is masked (outside [0, in_len)).
void StageRows(const float* xb, int in_len, Index first, Index rows, int channels, float* dst);

// Same rows, channel-blocked with `block_stride` floats per channel block.
void StageRowsBlocked(const float* xb, int in_len, Index first, Index rows, int channels,
                      Index block_stride, float* dst);

// Depthwise weights [K, C] -> [C/16][K][16], zero-padded channels.
void PackDepthwise(const float* w, int taps, int channels, float* dst);

// Depthwise conv of `frames` output frames: out[frames, channels] (row stride `channels`) from
// the channel-blocked window (block_stride floats per block) and the packed weights. The AVX-512
// or AVX2+FMA build by kernels::ActiveCpuIsa() (cpu_features.h; read on each call of
// DepthwiseTile), else the baseline build.
using DepthwiseTileFn = void (*)(const float* window, Index block_stride, int stride, int dilation,
                                 const float* packed_w, int taps, int channels, int frames,
                                 float* out);
DepthwiseTileFn DepthwiseTile();

#if JASPER_X86_DISPATCH
// The FP32 build of a kernel for kernels::ActiveCpuIsa(): the one FP32 dispatch rule (AMX runs
// FP32 on AVX-512). Read on each call, so a cap set by SetCpuIsaCap applies to the next call.
template <typename Fn>
Fn Fp32ForActiveIsa(Fn generic, Fn avx2, Fn avx512) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAmx:
    case CpuIsa::kAvx512:
      return avx512;
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kBaseline:
      break;
  }
  return generic;
}
#endif

// One K-segment of the GEMM's A: row r of the segment starts at rows[r] + offset (FP32); it covers
// packed B rows [k0, k0 + k) (unpadded numbering: W_main rows first, then each W_res_p's).
struct Segment {
  const float* const* rows;
  Index offset;
  int k;
  int k0;
};

// y rows (c_rows[r] + column) = act(sum over segments A_s x B_s + bias) for rows [0, rows),
// rows <= kTileRows. `scratch` is the kernel's own workspace region (GemmScratchFloats floats,
// cache-line aligned).
using GemmTileFn = void (*)(const PackedSubBlock& p, const Segment* segments, int num_segments,
                            int rows, float* const* c_rows, float* scratch);
constexpr int kTileRows = 256;  // output rows per GEMM tile (see packed.cc)

// The BF16 GEMM (bf16_gemm.cc): AMX tiles when kernels::ActiveCpuIsa() is kAmx, vdpbf16ps at
// kAvx512 on a CPU with AVX-512 BF16, else the portable loops; all round A to BF16 as they gather
// it. For packed.precision == kBf16.
GemmTileFn GemmTileBf16();
std::size_t GemmBf16ScratchFloats(const PackedSubBlock& p);
// Packs B for kBf16 (the fields documented in sub_block.h); p->k_main, k_total, n_panels and
// residual_channels are already set.
void PackBf16Weights(const float* w_main, const ResidualInput* residuals, PackedSubBlock* p);

// The INT8 GEMM (int8_gemm.cc): AMX INT8 tiles when kernels::ActiveCpuIsa() is kAmx on a CPU with
// AMX-INT8, vpdpbusd at kAvx512 and up on a CPU with AVX-512 VNNI, else the portable loops; all
// quantize A with p.a_scale as they gather it. For packed.precision == kInt8.
GemmTileFn GemmTileInt8();
std::size_t GemmInt8ScratchFloats(const PackedSubBlock& p);
// Packs B for kInt8 (the fields documented in sub_block.h) with the activation scales
// a_scales[1 + num_residuals]; false (p untouched but for its padding fields) when a scale is not
// finite and positive. p->k_main, k_total, n_panels and residual_channels are already set. A
// group whose `unsigned_grid` entry is set (Int8UnsignedGrid: A_main, then each residual input)
// is gathered on the unsigned grid (p->a_unsigned).
bool PackInt8Weights(const float* w_main, const ResidualInput* residuals, const float* a_scales,
                     const std::vector<bool>& unsigned_grid, PackedSubBlock* p);

// Where the INT8 GEMM of a separable p (GemmTileInt8(), chosen now) takes its A for W_main: row r
// of the tile at a + r * ld (ld = p.c_in_pad bytes), q or, when unsigned_a (vpdpbusd), q + 128.
// A caller that writes those rows itself passes W_main's segment with rows == nullptr, and the
// GEMM does not gather it. The bytes lie in the GEMM's scratch (`scratch` as given to it); the
// GEMM overwrites them when it gathers the residual branches.
struct Int8AStage {
  std::int8_t* a = nullptr;
  Index ld = 0;
  bool unsigned_a = false;
};
Int8AStage GemmInt8AStage(const PackedSubBlock& p, float* scratch);

// The INT8 depthwise stage of a kInt8 separable sub-block (int8_depthwise.cc): input rows
// [first, first + WindowRows(p.desc, frames)) of one utterance (xb, in_len valid rows; masked rows
// read as zero), quantized with p.depthwise_in_inv (per channel), convolved with the packed INT8
// depthwise weights (vpdpbusd where the CPU has AVX-512 VNNI, else plain loops: the same bits),
// dequantized and quantized again with the GEMM's scale p.a_scale[0] into the GEMM's A rows out.a +
// f * out.ld (frames f < frames; bytes [0, C_in rounded up to 16) of each; the same bytes the
// GEMM's own gather would make of the FP32 output). frames <= kTileRows; `scratch` holds
// Int8DepthwiseScratchBytes(p.desc) bytes, 64-byte aligned.
void DepthwiseInt8Tile(const PackedSubBlock& p, const float* xb, int in_len, Index first,
                       int frames, std::uint8_t* scratch, const Int8AStage& out);
std::size_t Int8DepthwiseScratchBytes(const SubBlockDesc& desc);
// Packs the depthwise weights for kInt8 (the depthwise_* fields of sub_block.h) with the
// depthwise input's activation scales: `channel_scales` (C_in values) when given, else
// `input_scale` for every channel; on the unsigned grid when `unsigned_input`. false (p's
// depthwise fields unusable) when a scale is not finite and > 0 or its inverse overflows.
bool PackInt8Depthwise(const float* depthwise, float input_scale, const float* channel_scales,
                       bool unsigned_input, PackedSubBlock* p);

// Where the BF16 GEMM of a separable p takes its A for W_main: row r of the tile at a + r * ld
// (ld = p.c_in_pad BF16 values; columns past C_in zero). A caller that writes those rows itself
// passes W_main's segment with rows == nullptr, and the GEMM does not gather it. They lie in the
// GEMM's scratch (`scratch` as given to it), which every BF16 GEMM kernel (AMX, vdpbf16ps,
// portable) reads alike; the GEMM overwrites them when it gathers the residual branches.
struct Bf16AStage {
  std::uint16_t* a = nullptr;
  Index ld = 0;
};
Bf16AStage GemmBf16AStage(const PackedSubBlock& p, float* scratch);

// The BF16 depthwise stage of a kBf16 separable sub-block packed with bf16_depthwise
// (bf16_depthwise.cc): input rows [first, first + WindowRows(p.desc, frames) + dilation) of one
// utterance (xb [in_len valid rows, C_in]; rows outside them read as zero; the last `dilation`
// rows feed only an odd K's zero tap), convolved with p.depthwise_bf16, into the GEMM's A rows
// out.a + f * out.ld (frames f < frames), rounded to BF16 as the GEMM's own gather would round
// the FP32 sums (round to nearest even), columns [C_in, ld) zero; vdpbf16ps where the active
// level has AVX-512 BF16, else plain loops. `scratch` holds Bf16DepthwisePairBytes(p.desc) bytes.
void DepthwiseBf16Tile(const PackedSubBlock& p, const float* xb, int in_len, Index first,
                       int frames, std::uint8_t* scratch, const Bf16AStage& out);
std::size_t Bf16DepthwisePairBytes(const SubBlockDesc& desc);
// Packs p->depthwise_bf16 and sets p->bf16_depthwise.
void PackBf16Depthwise(const float* depthwise, PackedSubBlock* p);

// Offsets in floats rounded up to whole cache lines.
Index RoundToLine(Index floats);
// First cache-line boundary at or after p (workspace sizes include the slack for it).
float* AlignToLine(float* p);

}  // namespace jasper::kernels::cpu_internal

#endif  // JASPER_KERNELS_CPU_CPU_INTERNAL_H_
