// The fused Jasper sub-block: one operation that computes
//
//   y[b, t, :] = act( conv(x)[b, t, :] + bias + sum_p residual_p.x[b, t, :] * residual_p.weight )
//   y[b, t, :] = 0 for t >= out_lengths[b]
//
// where conv is either a dense 1-D convolution (Jasper) or a time-channel separable one
// (QuartzNet: depthwise K-tap conv, then a pointwise 1x1 conv), with batch norm already folded
// into the weights and bias, dropout removed, and the residual branch's 1x1 conv (+ its folded
// batch norm) summed in the epilogue. This is the contract every backend (CPU reference, fused
// CPU, CUDA) implements; `kernels/` knows raw pointers and shapes only.
//
// Tensors (all FP32, row-major, host memory for the CPU functions here):
//   x          [batch, in_time, in_channels]   channels-last activations
//   y          [batch, out_time, out_channels]
//   depthwise  [kernel_size, in_channels]      separable only (no bias, not BN-scaled)
//   weight     separable: [in_channels, out_channels]                 (pointwise, BN folded)
//              dense:     [kernel_size, in_channels, out_channels]    (BN folded)
//   bias       [out_channels]                  folded BN bias + the residual branches' biases
//   residual.x [batch, out_time, channels], residual.weight [channels, out_channels]
//
// Masking (NeMo MaskedConv1d semantics): input frames at t >= in_lengths[b] are read as zero,
// whatever the buffer holds there; output frames at t >= out_lengths[b] are written as zero.
// Residual inputs are read only at t < out_lengths[b] (callers guarantee residual lengths equal
// the output lengths, as NeMo's stride-1 'add' residual does).
//
// Thread-safety: all functions are reentrant; they only write `y` and `workspace`.
#ifndef JASPER_KERNELS_SUB_BLOCK_H_
#define JASPER_KERNELS_SUB_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "kernels/precision.h"

namespace jasper::kernels {

enum class Activation { kIdentity, kRelu };

// Static description of one sub-block. Lengths follow torch.nn.Conv1d:
// out = floor((in + 2*padding - dilation*(kernel_size-1) - 1) / stride) + 1.
struct SubBlockDesc {
  int in_channels = 0;
  int out_channels = 0;
  int kernel_size = 1;
  int stride = 1;
  int dilation = 1;
  int padding = 0;  // symmetric zero padding, in frames
  bool separable = false;
  Activation activation = Activation::kRelu;
};

// Borrowed, folded FP32 weights in the canonical layouts above.
struct SubBlockWeights {
  const float* depthwise = nullptr;  // separable only
  const float* weight = nullptr;
  const float* bias = nullptr;  // may be nullptr: no bias
};

// One residual branch summed into the epilogue (a folded 1x1 conv of an earlier activation).
struct ResidualInput {
  const float* x = nullptr;       // [batch, out_time, channels]
  const float* weight = nullptr;  // [channels, out_channels]
  int channels = 0;
  // The caller guarantees x >= 0 (a ReLU's output): kInt8 quantizes it on the unsigned grid
  // [0, 255] (a negative x would be clipped to 0). The other precisions ignore it.
  bool nonnegative = false;
};

// Batch geometry. Lengths are borrowed host arrays of `batch` entries.
struct BatchGeometry {
  int batch = 0;
  int in_time = 0;   // padded time extent of x
  int out_time = 0;  // padded time extent of y; must be ConvOutputLength(in_time)
  const int* in_lengths = nullptr;
  const int* out_lengths = nullptr;
};

// torch.nn.Conv1d output length for `length` input frames (NeMo's MaskedConv1d.get_seq_len).
// Returns 0 when the input is too short to produce a frame.
int ConvOutputLength(const SubBlockDesc& desc, int length);

// Returns true when the descriptor is self-consistent (positive sizes, stride and dilation >= 1,
// padding >= 0). Kernels require a valid descriptor.
bool IsValid(const SubBlockDesc& desc);

// The plain reference: direct loops in double-free FP32, no tiling, no BLAS. The oracle that
// every fast kernel is tested against.
void SubBlockReference(const SubBlockDesc& desc, const SubBlockWeights& weights, const float* x,
                       const BatchGeometry& geometry, const ResidualInput* residuals,
                       int num_residuals, float* y);

// The depthwise half of a separable sub-block, plainly (the pointwise GEMM's A, which INT8
// calibration measures): out[b, t, c] = sum_k depthwise[k, c] * x[b, t*stride - padding +
// k*dilation, c] over unmasked input frames, for t < out_lengths[b]; 0 past it. out is
// [batch, out_time, in_channels]. Does nothing for a dense or invalid descriptor.
void DepthwiseReference(const SubBlockDesc& desc, const float* depthwise, const float* x,
                        const BatchGeometry& geometry, float* out);

// ---------------------------------------------------------------------------------------------
// Packed CPU path: the weights of one sub-block packed once (at model load) for the CPU GEMM
// micro-kernel, then run many times.

// std::allocator with 64-byte (cache line) alignment, so packed panels and activation rows do
// not split cache lines.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT(runtime/explicit)
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{64}); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const CacheLineAllocator<U>&) const {
    return false;
  }
};
using AlignedFloats = std::vector<float, CacheLineAllocator<float>>;

// One sub-block's weights in the micro-kernels' layouts. The GEMM's B matrix is the pointwise
// (or dense) weight with the residual branches' 1x1 weights concatenated along K:
//   B = [W_main; W_res0; W_res1; ...],  W_main = [C_in, C_out] (separable) or [K*C_in, C_out]
// so one GEMM computes conv + all residual 1x1 convs, and the epilogue (bias, activation) runs
// on the output tile before it is stored. Built by PackSubBlock; owns its memory; immutable
// afterwards, so one instance may be shared by any number of threads.
//
// precision kFp32: B as column panels of 16 FP32, b[p][k][16] for p < n_panels (columns past
//   C_out are zero).
// precision kBf16: B rounded to BF16 (round to nearest even) in the AMX tile layout: K in groups
//   padded to multiples of 32 (W_main: one group of C_in per tap, each padded to c_in_pad;
//   W_res_p: padded to res_k0_pad[p+1] - res_k0_pad[p]), k_pad rows in all; pairs of K rows
//   interleaved per column: b_bf16[p][k / 2][16][2] for p < n_panels rounded up to even (so the
//   GEMM always runs 32-column blocks; padding is zero). The depthwise weights and the bias
//   stay FP32; activations stay FP32 between sub-blocks and are rounded to BF16 as the GEMM
//   reads them, with FP32 accumulation.
// precision kInt8: B quantized symmetrically per output column and per weight group (W_main,
//   each W_res_p: `w_scale` = max |w| / 127 of that group's column), in the AMX INT8 layout: K in
//   groups padded to multiples of 64, quads of K rows interleaved per column:
//   b_int8[p][k / 4][16][4] (p up to n_panels rounded up to even; padding zero). Activations stay
//   FP32 between sub-blocks; the GEMM quantizes A as it reads it, per tensor: A_main with
//   a_scale[0], A_res_p with a_scale[1 + p] (calibrated once per model: q = clamp(round(a /
//   a_scale), -127, 127), or u = clamp(round(a / a_scale), 0, 255) for an input known to be
//   non-negative: a_unsigned), accumulates each weight group's products in INT32 and adds them to
//   the FP32 result times dequant[group][column] = a_scale[group] * w_scale[group][column].
//   Separable: the depthwise conv runs in INT8 too: the input quantized per channel with
//   depthwise_in_inv (1 / the calibration's per-tensor scale for every channel, or / its
//   per-channel scales where it has them), the weights per channel (max |w| / 127 over the taps) in
//   depthwise_int8[C_in/16][ceil(K/4)][16][4] (quads of taps per channel, taps past K zero),
//   INT32 sums dequantized per channel (depthwise_dequant = input scale x weight scale) to the
//   FP32 values the GEMM takes as A_main, which the depthwise stage quantizes with a_scale[0] at
//   once into the GEMM's A (kernels/cpu/int8_depthwise.cc): the same bytes a gather would make.
struct PackedSubBlock {
  SubBlockDesc desc;
  Precision precision = Precision::kFp32;  // kFp32, kBf16 or kInt8
  bool valid = false;                      // false: invalid descriptor, kernels do nothing
  int k_main = 0;                          // rows of W_main
  int k_total = 0;                         // k_main + sum(residual_channels)
  int n_panels = 0;                        // ceil(C_out / 16)
  std::vector<int> residual_channels;      // C of each residual branch, in order
  AlignedFloats b;                         // kFp32: [n_panels][k_total][16]
  // kBf16 and kInt8:
  int c_in_pad = 0;             // C_in rounded up to the K granule (kBf16 32, kInt8 64)
  int k_pad = 0;                // padded K of b_bf16 / b_int8 (W_main and every W_res_p)
  std::vector<int> res_k0_pad;  // [num_residuals + 1]: padded first row of W_res_p; last = k_pad
  std::vector<std::uint16_t, CacheLineAllocator<std::uint16_t>> b_bf16;
  // kInt8 only ("groups" are W_main and each W_res_p; columns are C_out rounded up to 32):
  std::vector<std::int8_t, CacheLineAllocator<std::int8_t>> b_int8;
  std::vector<float> a_scale;  // [1 + num_residuals] activation scale per group
  // [1 + num_residuals]: 1 where the group's input is non-negative and quantized on the unsigned
  // grid u = clamp(round(a / a_scale), 0, 255) (a dense sub-block's input after a ReLU, a
  // residual input after one); its bytes are u for vpdpbusd and u - 128 for the signed kernels,
  // which add 128 x b_int8_col_sums back.
  std::vector<std::uint8_t> a_unsigned;
  AlignedFloats dequant;  // [1 + num_residuals][columns]
  // [1 + num_residuals][columns]: sum over the group's K of the quantized weights (the AVX-512
  // VNNI kernel reads A as unsigned, a + 128, and subtracts 128 x this).
  std::vector<std::int32_t, CacheLineAllocator<std::int32_t>> b_int8_col_sums;
  // kInt8 separable only (channels rounded up to 16; the VNNI depthwise reads its input as
  // unsigned, q + 128, and subtracts 128 x depthwise_int8_sums; with depthwise_in_unsigned the
  // input, known to be non-negative, is quantized to u = clamp(round(x * depthwise_in_inv[c]),
  // 0, 255) and the sums are 0):
  AlignedFloats depthwise_in_inv;  // [C_in rounded up to 64]: 1 / channel c's scale, 0 past C_in
  bool depthwise_in_unsigned = false;
  std::vector<std::int8_t, CacheLineAllocator<std::int8_t>> depthwise_int8;
  AlignedFloats depthwise_dequant;
  std::vector<std::int32_t, CacheLineAllocator<std::int32_t>> depthwise_int8_sums;
  AlignedFloats bias;       // [n_panels * 16], zero when there is no bias
  AlignedFloats depthwise;  // separable kFp32/kBf16: [ceil(C_in/16)][K][16]
  // kBf16 separable, packed where kernels::Bf16DepthwiseFasterThanFp32(): the depthwise conv in
  // BF16 too (its input and weights rounded to BF16, products summed in FP32 by vdpbf16ps), the
  // weights as [ceil(C_in/16)][ceil(K/2)][16][2] pairs of taps (a tap past K zero).
  bool bf16_depthwise = false;
  std::vector<std::uint16_t, CacheLineAllocator<std::uint16_t>> depthwise_bf16;
};

// Packs `weights` and the residual branches' weights (residuals[p].weight, .channels; .x is not
// read) for `precision` (kFp32, kBf16 or kInt8; anything else gives an invalid block).
// Allocates; call once per sub-block at load time. Any CPU can pack and run every precision:
// kBf16 runs on AMX tiles when kernels::ActiveCpuIsa() is kAmx (cpu_features.h), on AVX-512 BF16
// (vdpbf16ps) at kAvx512 where the CPU has it, else on a portable path with the same BF16
// rounding (slow: for tests; kernels::HasBf16Gemm() tells which). kInt8 needs
// `int8_input_scales`: finite positive activation scales, A_main's, then each residual input's,
// then, for a separable sub-block, the depthwise input's (x): 1 + num_residuals (+ 1) values; an
// invalid block without them; `int8` refines them (below), and a residual input marked
// ResidualInput::nonnegative is quantized on the unsigned grid. It runs on AMX INT8 tiles at
// kAmx, on AVX-512 VNNI (vpdpbusd) at kAvx512 where the CPU has it, else on portable loops with
// the same quantization and the same bits (kernels::HasInt8Gemm()). The other precisions ignore
// the INT8 arguments.
struct Int8PackOptions {
  // The caller guarantees x >= 0 (it is a ReLU's output): x is quantized on the unsigned grid
  // [0, 255] with the same scale (a negative x would be clipped to 0), so a scale chosen for 255
  // steps halves the step: a separable sub-block's depthwise input, a dense one's GEMM input.
  bool nonnegative_input = false;
  // C_in finite positive scales of the depthwise input, one per channel, used instead of the
  // per-tensor one (which must still be given); each channel's dequantization takes its own, so
  // they cost nothing at run time. May be null.
  const float* input_channel_scales = nullptr;
  // C_in finite positive factors m_c (SmoothQuant's migration; may be null): the depthwise
  // output's channel c is divided by m_c before the GEMM quantizes it and row c of the pointwise
  // weight multiplied by m_c before its per-column quantization, which is the same product in
  // exact arithmetic and moves quantization difficulty from the activations to the weights.
  // A_main's scale (int8_input_scales[0]) is then the scale of the divided output. Both fold
  // into the packed weights and the depthwise dequantization: no cost at run time.
  const float* output_smoothing = nullptr;
};
PackedSubBlock PackSubBlock(const SubBlockDesc& desc, const SubBlockWeights& weights,
                            const ResidualInput* residuals, int num_residuals,
                            Precision precision = Precision::kFp32,
                            const float* int8_input_scales = nullptr,
                            const Int8PackOptions& int8 = {});

// The one rule for which of a sub-block's INT8 inputs are quantized on the unsigned grid [0, 255]
// (a ReLU's output, so a scale chosen over 255 steps), in `int8_input_scales`' order: A_main (a
// dense sub-block's input, when `input_nonnegative`), each residual input (when
// residual_nonnegative[p]), then, for a separable sub-block, the depthwise input (when
// `input_nonnegative`). PackSubBlock quantizes by it and the INT8 calibration chooses its scales
// by it. residual_nonnegative.size() is the number of residual inputs.
std::vector<bool> Int8UnsignedGrid(const SubBlockDesc& desc, bool input_nonnegative,
                                   const std::vector<bool>& residual_nonnegative);

// Workspace floats FusedSubBlockCpuPacked needs for `packed` (independent of the batch).
std::size_t PackedSubBlockWorkspaceFloats(const PackedSubBlock& packed);

// The fused sub-block on packed weights: same contract and result as FusedSubBlockCpu (up to
// FP32 summation order). residual_x[p] is the p-th residual branch's input, [batch, out_time,
// packed.residual_channels[p]] (may be null when there are none). Rows of several utterances
// are stacked into one GEMM tile (separable and 1x1 sub-blocks), so small T and large batches
// keep the micro-kernel busy. kFp32: the AVX-512 or AVX2+FMA micro-kernel by
// kernels::ActiveCpuIsa(), else portable vector code; kBf16: see PackSubBlock. The result
// matches the reference within FP32 summation-order error (kFp32), the BF16 rounding of the
// GEMM's operands (kBf16: relative 2^-7 per product) or the INT8 quantization of the operands
// (kInt8: at most half a quantization step of each operand per product, in the depthwise conv
// and in the GEMM; values beyond 127 steps clipped). `workspace` must hold
// PackedSubBlockWorkspaceFloats(packed) floats; it is not read before it is written.
// Single-threaded; no allocation.
void FusedSubBlockCpuPacked(const PackedSubBlock& packed, const float* x,
                            const BatchGeometry& geometry, const float* const* residual_x,
                            float* workspace, float* y);

// One part of FusedSubBlockCpuPacked, for intra-op threading (0 <= part < num_parts, else it
// does nothing). The batch's valid output frames, stacked in batch order, are cut into
// num_parts contiguous ranges of near-equal size (whole blocks of 12 rows for kFp32, the FP32
// micro-kernels' row counts, and of 16 for kBf16 and kInt8, an AMX tile's; trailing
// parts may be empty when there are fewer rows than parts); this call computes the frames of its
// range, in tiles of up to 256 rows, and zero-fills the frames past out_lengths[b] of the
// utterances with b % num_parts == part. Running every part once writes every element of `y`
// exactly once and bit-identically to FusedSubBlockCpuPacked (a frame's arithmetic does not
// depend on the tile that holds it), for any num_parts. Parts may run concurrently on different
// threads, each with its own `workspace` (PackedSubBlockWorkspaceFloats floats); they write
// disjoint elements of `y` and only read x, residual_x and `packed`, which must not alias `y`.
// FusedSubBlockCpuPacked(...) is FusedSubBlockCpuPackedPart(..., 1, 0, ...). No allocation.
void FusedSubBlockCpuPackedPart(const PackedSubBlock& packed, const float* x,
                                const BatchGeometry& geometry, const float* const* residual_x,
                                int num_parts, int part, float* workspace, float* y);

// CTC head on [batch, time, vocab] logits: per frame log-softmax (written to log_probs, may alias
// logits) and argmax (ids[b*time + t], its log-probability in best_log_probs). Frames at
// t >= lengths[b] are skipped: their outputs are written as 0 / id -1.
void LogSoftmaxArgmax(const float* logits, int batch, int time, int vocab, const int* lengths,
                      float* log_probs, int* ids, float* best_log_probs);

}  // namespace jasper::kernels

#endif  // JASPER_KERNELS_SUB_BLOCK_H_
