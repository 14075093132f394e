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

// Fused CPU sub-block: time-tiled (256 output frames). Separable: the tile's depthwise output
// stays in cache and feeds one pointwise GEMM. Dense: one GEMM per tap on shifted views of the
// input, summed into the output tile (no im2col: OpenBLAS re-packs the weights per call, so large
// tiles win and im2col of a large tile would not fit in cache). Residual GEMMs accumulate into
// the same tile; bias + ReLU + mask are applied in one pass. `workspace` must hold
// FusedSubBlockWorkspaceFloats(desc) floats and is not read before it is written. No allocation.
std::size_t FusedSubBlockWorkspaceFloats(const SubBlockDesc& desc);
void FusedSubBlockCpu(const SubBlockDesc& desc, const SubBlockWeights& weights, const float* x,
                      const BatchGeometry& geometry, const ResidualInput* residuals,
                      int num_residuals, float* workspace, float* y);

// CTC head on [batch, time, vocab] logits: per frame log-softmax (written to log_probs, may alias
// logits) and argmax (ids[b*time + t], its log-probability in best_log_probs). Frames at
// t >= lengths[b] are skipped: their outputs are written as 0 / id -1.
void LogSoftmaxArgmax(const float* logits, int batch, int time, int vocab, const int* lengths,
                      float* log_probs, int* ids, float* best_log_probs);

}  // namespace jasper::kernels

#endif  // JASPER_KERNELS_SUB_BLOCK_H_
