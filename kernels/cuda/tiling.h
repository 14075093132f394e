// Index, tiling and masking arithmetic of the fused CUDA sub-block kernel, as inline functions
// callable from host and device code. Plain C++ includes this header too (no CUDA types), so
// the CPU-only test suite (tests/cuda_tiling_test.cc) checks every formula the kernel uses
// against brute force even where no GPU exists.
//
// The kernel computes one output tile of kTileM frames (of ONE batch item) x tile_n output
// channels per CTA as a GEMM whose K dimension is walked in "K-steps" of kChunk rows:
//
//   main steps      separable: one step per input-channel chunk (the depthwise output of that
//                              chunk is the A operand);
//                   dense:     one step per (input-channel chunk, tap) pair, chunk-major, taps
//                              inner (the A operand is the halo shifted by tap * dilation);
//   residual steps  then, per residual branch p in order, one step per chunk of its channels
//                   (the A operand is the residual activation at the output frame).
//
// This is the K-concatenation [dw_out ; residual_0 ; residual_1 ; ...] of the design: the
// residual 1x1 convs share the pointwise GEMM's accumulators. The packed weight matrix
// (weight_pack.h) is laid out [k_steps][kChunk][n_padded] in exactly this step order, with
// zero rows for channels past the real channel counts.
//
// Thread-safety: pure functions.
#ifndef JASPER_KERNELS_CUDA_TILING_H_
#define JASPER_KERNELS_CUDA_TILING_H_

#if defined(__CUDACC__)
#define JASPER_HD __host__ __device__ __forceinline__
#else
#define JASPER_HD inline
#endif

#include "kernels/precision.h"

namespace jasper::kernels::cuda {

// The element type of activations and GEMM operands: kernels/precision.h (kFp16/kBf16 run the
// GEMM on tensor cores with WMMA). Unqualified `Precision` here names that one enum.
using ::jasper::kernels::Precision;

JASPER_HD int PrecisionBytes(Precision precision) { return precision == Precision::kFp32 ? 4 : 2; }

// ---- Tile constants --------------------------------------------------------------------------

constexpr int kChunk = 32;     // K-step width: input channels per step (= one warp's lanes)
constexpr int kTileM = 64;     // output frames per CTA
constexpr int kThreads = 256;  // threads per CTA
constexpr int kWarps = kThreads / 32;
constexpr int kDwFrames = kTileM / kWarps;  // depthwise: output frames per thread (one channel)
constexpr int kWideN = 128;                 // output channels per CTA (usual case)
constexpr int kNarrowN = 64;                // ... when C_out padded is not a multiple of 128
constexpr int kNPadMultiple = 64;           // n_padded = C_out rounded up to this
constexpr int kMaxResiduals = 16;           // residual branches per sub-block (Jasper DR: 10)
constexpr int kSmemAlign = 128;             // every shared-memory region starts aligned to this
constexpr int kSimtThreadsN = 16;           // FP32 GEMM: threads along N (and 16 along M)
constexpr int kSimtThreadsM = kThreads / kSimtThreadsN;

static_assert(kDwFrames * kWarps == kTileM, "depthwise mapping must cover the tile");
static_assert(kChunk == 32, "a warp's lanes map to the channels of one chunk");
static_assert(kTileM % 16 == 0 && kWideN % 16 == 0 && kNarrowN % 16 == 0, "WMMA tiles are 16");

// ---- Small helpers ---------------------------------------------------------------------------

JASPER_HD int CeilDiv(int a, int b) { return (a + b - 1) / b; }
JASPER_HD int RoundUp(int a, int multiple) { return CeilDiv(a, multiple) * multiple; }
JASPER_HD int Max(int a, int b) { return a > b ? a : b; }
JASPER_HD int Min(int a, int b) { return a < b ? a : b; }

// A caller's length clamped to the buffer extent (same rule as the CPU reference).
JASPER_HD int ClampLength(int length, int extent) {
  return length < 0 ? 0 : (length > extent ? extent : length);
}

// ---- M (time) tiling -------------------------------------------------------------------------

// Tiles never straddle two batch items, so a tile's input window is contiguous in time.
JASPER_HD int MTilesPerItem(int out_time) { return CeilDiv(out_time, kTileM); }

struct MTile {
  int batch_index;
  int first_frame;  // first output frame of the tile
};

JASPER_HD MTile DecodeMTile(int tile, int tiles_per_item) {
  MTile result;
  result.batch_index = tile / tiles_per_item;
  result.first_frame = (tile % tiles_per_item) * kTileM;
  return result;
}

// Frames of the tile that lie inside the padded output buffer (the rest are not stored).
JASPER_HD int StoredRows(int first_frame, int out_time) {
  return Max(0, Min(kTileM, out_time - first_frame));
}

// ---- Halo (input window of a tile) -----------------------------------------------------------

// Input rows spanned by `tile_m` consecutive output frames.
JASPER_HD int HaloRows(int tile_m, int kernel_size, int stride, int dilation) {
  return (tile_m - 1) * stride + (kernel_size - 1) * dilation + 1;
}

// Input frame of halo row 0 for a tile starting at output frame `first_frame` (may be negative:
// the 'same' padding reads as zeros).
JASPER_HD int HaloFirstInputFrame(int first_frame, int stride, int padding) {
  return first_frame * stride - padding;
}

// Halo row read by tile row m at tap k.
JASPER_HD int HaloRowOf(int m, int tap, int stride, int dilation) {
  return m * stride + tap * dilation;
}

// The mask (NeMo MaskedConv1d): an input frame is read only when 0 <= t < length; any other
// frame, padding or garbage in the buffer, reads as zero.
JASPER_HD bool InputFrameValid(int input_frame, int clamped_in_length) {
  return input_frame >= 0 && input_frame < clamped_in_length;
}

// Whether channel `channel` of a chunk exists (chunks past C are zero-padded).
JASPER_HD bool ChannelValid(int chunk, int lane, int channels) {
  return chunk * kChunk + lane < channels;
}

// Depthwise sliding window (stride 1, dilation 1): thread of warp `warp` owns frames
// m0 = warp * kDwFrames .. m0 + kDwFrames - 1; after tap k (k + 1 < K) it loads halo row
// DwWindowNextRow(m0, k) to shift its register window by one row.
JASPER_HD int DwFirstFrame(int warp) { return warp * kDwFrames; }
JASPER_HD int DwWindowNextRow(int m0, int tap) { return m0 + kDwFrames + tap; }

// ---- N (output channel) tiling ---------------------------------------------------------------

JASPER_HD int PaddedOutChannels(int out_channels) { return RoundUp(out_channels, kNPadMultiple); }
JASPER_HD int TileNFor(int n_padded) { return n_padded % kWideN == 0 ? kWideN : kNarrowN; }

// ---- K schedule ------------------------------------------------------------------------------

JASPER_HD int Chunks(int channels) { return CeilDiv(channels, kChunk); }
JASPER_HD int TapsPerChunk(int kernel_size, bool separable) { return separable ? 1 : kernel_size; }
JASPER_HD int MainSteps(int in_channels, int kernel_size, bool separable) {
  return Chunks(in_channels) * TapsPerChunk(kernel_size, separable);
}
// Step of (chunk, tap) among the main steps (tap is 0 for separable).
JASPER_HD int MainStep(int chunk, int tap, int kernel_size, bool separable) {
  return chunk * TapsPerChunk(kernel_size, separable) + tap;
}
// Step of chunk `chunk` of residual p, where `chunks_before` = sum of Chunks(C_q), q < p.
JASPER_HD int ResidualStep(int main_steps, int chunks_before, int chunk) {
  return main_steps + chunks_before + chunk;
}

// Row of the packed [k_steps * kChunk, n_padded] weight matrix holding the canonical main
// weight row (channel, tap): separable pointwise row `channel` (tap 0); dense [tap, channel].
JASPER_HD int PackedMainRow(int channel, int tap, int kernel_size, bool separable) {
  return MainStep(channel / kChunk, tap, kernel_size, separable) * kChunk + channel % kChunk;
}
JASPER_HD int PackedResidualRow(int main_steps, int chunks_before, int channel) {
  return ResidualStep(main_steps, chunks_before, channel / kChunk) * kChunk + channel % kChunk;
}

// ---- Thread -> element mappings of the GEMM ---------------------------------------------------

// FP32 (CUDA-core) GEMM: thread tid owns rows SimtRow(tid, i), i < kTileM / kSimtThreadsM and
// columns SimtCol(tid, j), j < tile_n / kSimtThreadsN. Strided so that a warp's B reads are
// consecutive and its A reads are broadcasts.
JASPER_HD int SimtRow(int tid, int i) { return tid / kSimtThreadsN + kSimtThreadsM * i; }
JASPER_HD int SimtCol(int tid, int j) { return tid % kSimtThreadsN + kSimtThreadsN * j; }

// Tensor-core (WMMA 16x16x16) GEMM: warps form a WarpsM x WarpsN grid, each owning
// FragsM x FragsN 16x16 accumulator fragments.
JASPER_HD int WmmaWarpsN(int tile_n) { return tile_n == kWideN ? 4 : 2; }
JASPER_HD int WmmaWarpsM(int tile_n) { return kWarps / WmmaWarpsN(tile_n); }
JASPER_HD int WmmaFragsM(int tile_n) { return kTileM / 16 / WmmaWarpsM(tile_n); }
JASPER_HD int WmmaFragsN(int tile_n) { return tile_n / 16 / WmmaWarpsN(tile_n); }
// First row / column of fragment (i, j) of warp `warp`.
JASPER_HD int WmmaFragRow(int warp, int i, int tile_n) {
  return ((warp / WmmaWarpsN(tile_n)) * WmmaFragsM(tile_n) + i) * 16;
}
JASPER_HD int WmmaFragCol(int warp, int j, int tile_n) {
  return ((warp % WmmaWarpsN(tile_n)) * WmmaFragsN(tile_n) + j) * 16;
}

// ---- Shared memory layout --------------------------------------------------------------------

// Byte offsets of the regions of one CTA's dynamic shared memory. The main loop uses halo,
// depthwise weights, A and two B buffers (B is prefetched one step ahead with cp.async); the
// epilogue reuses the same bytes from offset 0 for the FP32 C tile.
//   halo  [halo_rows][kChunk] FP32     input window of the current channel chunk
//   dw    [kernel_size][kChunk] FP32   depthwise taps of the chunk (separable only)
//   a     [kTileM][ld_a] elem          A operand of the current step, row-major
//   b0,b1 [kChunk][ld_b] elem          B operand (packed weights), row-major
//   c     [kTileM][ld_c] FP32          accumulators for the epilogue
// Leading dimensions are padded to spread shared-memory banks and keep WMMA's 16-byte
// (elements: multiple of 8 for 16-bit, of 4 for FP32) ldm rule.
struct SmemLayout {
  int halo = 0, dw = 0, a = 0, b0 = 0, b1 = 0, c = 0;
  int ld_a = 0, ld_b = 0, ld_c = 0;  // in elements
  int main_loop_bytes = 0;           // end of the last main-loop region
  int total_bytes = 0;               // dynamic shared memory to request
};

JASPER_HD int AlignUp(int bytes) { return RoundUp(bytes, kSmemAlign); }

// `depthwise_taps` is the kernel size for a separable sub-block and 0 for a dense one.
JASPER_HD SmemLayout MakeSmemLayout(int elem_bytes, int tile_n, int halo_rows, int depthwise_taps) {
  SmemLayout l;
  const int pad = elem_bytes == 4 ? 4 : 8;
  l.ld_a = kChunk + pad;
  l.ld_b = tile_n + pad;
  l.ld_c = tile_n + 4;
  int offset = 0;
  l.halo = offset;
  offset += AlignUp(halo_rows * kChunk * 4);
  l.dw = offset;
  offset += AlignUp(depthwise_taps * kChunk * 4);
  l.a = offset;
  offset += AlignUp(kTileM * l.ld_a * elem_bytes);
  l.b0 = offset;
  offset += AlignUp(kChunk * l.ld_b * elem_bytes);
  l.b1 = offset;
  offset += AlignUp(kChunk * l.ld_b * elem_bytes);
  l.main_loop_bytes = offset;
  l.c = 0;
  l.total_bytes = Max(offset, AlignUp(kTileM * l.ld_c * 4));
  return l;
}

// cp.async moves 16-byte pieces of B: a tile row of tile_n elements is this many pieces.
JASPER_HD int BPiecesPerRow(int tile_n, int elem_bytes) { return tile_n * elem_bytes / 16; }

}  // namespace jasper::kernels::cuda

#endif  // JASPER_KERNELS_CUDA_TILING_H_
