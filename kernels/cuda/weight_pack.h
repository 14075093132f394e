// Host-side packing of one sub-block's folded FP32 weights (kernels/sub_block.h layouts) into
// the layouts the fused CUDA kernel reads, plus FP32 <-> FP16 / BF16 conversions. Plain C++: no
// CUDA headers, so CPU-only tests exercise it.
//
// Packed layouts (host memory here; the CUDA backend uploads them once at creation):
//   weight     [k_steps, kChunk, n_padded] in the run precision (FP32, FP16 or BF16 bits):
//              the pointwise/dense weights followed by every residual branch's 1x1 weights, in
//              the K-step order of tiling.h; zero rows for padded channels, zero columns for
//              out_channels <= n < n_padded.
//   depthwise  [kernel_size, Chunks(in_channels) * kChunk] FP32 (separable only; zero-padded).
//              Kept in FP32 for every precision: the depthwise runs on CUDA cores in FP32.
//   bias       [n_padded] FP32 (zeros where the model has no bias and past out_channels).
//
// Ownership: PackedSubBlock owns its vectors. Thread-safety: functions are reentrant.
#ifndef JASPER_KERNELS_CUDA_WEIGHT_PACK_H_
#define JASPER_KERNELS_CUDA_WEIGHT_PACK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/tiling.h"
#include "kernels/sub_block.h"

namespace jasper::kernels::cuda {

// IEEE binary16 and bfloat16 bit patterns, round-to-nearest-even (NaN stays NaN).
std::uint16_t FloatToHalfBits(float value);
float HalfBitsToFloat(std::uint16_t bits);
std::uint16_t FloatToBf16Bits(float value);
float Bf16BitsToFloat(std::uint16_t bits);

// Converts `count` FP32 values to `precision` elements written to `dst` (count * bytes), and
// back. Used for weights, features and test data.
void ConvertFromFloat(Precision precision, const float* src, std::size_t count, void* dst);
void ConvertToFloat(Precision precision, const void* src, std::size_t count, float* dst);

struct PackedSubBlock {
  SubBlockDesc desc;
  Precision precision = Precision::kFp32;
  int n_padded = 0;
  int k_steps = 0;
  std::vector<int> residual_channels;  // per branch, in K order
  std::vector<std::uint8_t> weight;    // [k_steps, kChunk, n_padded] elements of `precision`
  std::vector<float> depthwise;        // [kernel_size, Chunks(in_channels) * kChunk]
  std::vector<float> bias;             // [n_padded]
};

// Packs one sub-block. `residual_weights[p]` is [residual_channels[p], out_channels] FP32.
// Returns false with `error` set when the description is invalid, a required weight is null,
// or there are more than kMaxResiduals branches.
bool PackSubBlock(const SubBlockDesc& desc, const SubBlockWeights& weights,
                  const float* const* residual_weights, const int* residual_channels,
                  int num_residuals, Precision precision, PackedSubBlock* packed,
                  std::string* error);

// Total K-steps of a sub-block with these residual channel counts.
int KSteps(const SubBlockDesc& desc, const int* residual_channels, int num_residuals);

}  // namespace jasper::kernels::cuda

#endif  // JASPER_KERNELS_CUDA_WEIGHT_PACK_H_
