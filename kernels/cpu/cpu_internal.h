// Internal helpers shared by the fused CPU sub-block kernels (fused.cc: OpenBLAS GEMMs on the
// caller's unpacked weights; packed.cc: own micro-kernel on weights packed at load time). Not a
// public interface: include only from kernels/cpu/*.cc.
//
// Layouts: activations are row-major [rows, channels]. "Channel-blocked" buffers hold
// [ceil(C / 16)][rows][16] floats (the padding channels of the last block are zero).
// Thread-safety: every function is reentrant.
#ifndef JASPER_KERNELS_CPU_CPU_INTERNAL_H_
#define JASPER_KERNELS_CPU_CPU_INTERNAL_H_

#include <cstddef>
#include <cstring>

#include "kernels/sub_block.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define JASPER_X86_DISPATCH 1
#else
#define JASPER_X86_DISPATCH 0
#endif
#define JASPER_ALWAYS_INLINE inline __attribute__((always_inline))

namespace jasper::kernels::cpu_internal {

using Index = std::ptrdiff_t;

// GNU vector extension: 8 floats, one AVX register (two SSE registers in the baseline build).
// Used instead of plain loops because GCC keeps an array of accumulators in memory (on the
// stack) across a reduction loop, which ran ~4x slower than register accumulators.
typedef float Vec8 __attribute__((vector_size(32)));
constexpr int kVecWidth = 8;
// Channels per depthwise block (two vectors).
constexpr int kChannelBlock = 2 * kVecWidth;
constexpr Index kLineFloats = 64 / sizeof(float);

// Unaligned load/store. Vectors go by pointer: a by-value 32-byte vector changes the ABI between
// the baseline and the AVX2 build (-Wpsabi), although these are always inlined.
JASPER_ALWAYS_INLINE void LoadVec(const float* p, Vec8* v) { std::memcpy(v, p, sizeof(*v)); }
JASPER_ALWAYS_INLINE void StoreVec(const Vec8* v, float* p) { std::memcpy(p, v, sizeof(*v)); }

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
// the channel-blocked window (block_stride floats per block) and the packed weights. AVX2+FMA
// when the CPU has it (chosen once, thread-safe), else the baseline build.
using DepthwiseTileFn = void (*)(const float* window, Index block_stride, int stride, int dilation,
                                 const float* packed_w, int taps, int channels, int frames,
                                 float* out);
DepthwiseTileFn DepthwiseTile();

// y[rows, cols] = act(y + bias), one pass over the tile.
void Epilogue(const float* bias, Activation activation, int rows, int cols, float* y);

// y[rows, n] (+)= a[rows, k] * b[k, n], all row-major (OpenBLAS).
void Gemm(int rows, int n, int k, const float* a, int lda, const float* b, float beta, float* y);

// Offsets in floats rounded up to whole cache lines.
Index RoundToLine(Index floats);
// First cache-line boundary at or after p (workspace sizes include the slack for it).
float* AlignToLine(float* p);

}  // namespace jasper::kernels::cpu_internal

#endif  // JASPER_KERNELS_CPU_CPU_INTERNAL_H_
