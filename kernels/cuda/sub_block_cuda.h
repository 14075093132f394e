// The CUDA implementation of the fused sub-block contract of kernels/sub_block.h: ONE kernel
// launch per sub-block, plus the device CTC head (log-softmax + argmax) and dtype casts.
//
// This header has no CUDA types: a stream is the opaque `CUstream_st*` (what cudaStream_t is),
// so engine code that only passes streams around compiles without the CUDA headers.
//
// Tensors (ALL device memory unless stated; row-major; element type = the run Precision):
//   x           [batch, in_time, in_channels]          channels-last input activations
//   y           [batch, out_time, out_channels]        output; every element is written
//   residual_x  [batch, out_time, residual_channels[p]] one per residual branch
//   lengths     [batch] int32 (device), in_lengths / out_lengths; clamped to the time extents
//   packed      weights packed by PackSubBlock (weight_pack.h) and uploaded by the caller
// Semantics are exactly SubBlockReference's: input frames at t >= in_lengths[b] read as zero
// (never read from memory), output frames at t >= out_lengths[b] are written as zero,
// residual inputs are read only at t < out_lengths[b]. `y` must not alias x or any residual.
//
// Ownership: every pointer is borrowed; nothing here allocates device memory.
// Thread-safety: launches are reentrant; ordering is the caller's stream's.
#ifndef JASPER_KERNELS_CUDA_SUB_BLOCK_CUDA_H_
#define JASPER_KERNELS_CUDA_SUB_BLOCK_CUDA_H_

#include <cstddef>

#include "kernels/cuda/tiling.h"
#include "kernels/sub_block.h"

struct CUstream_st;

namespace jasper::kernels::cuda {

using Stream = CUstream_st*;  // == cudaStream_t; nullptr = the legacy default stream

// Outcome of a launch: code 0 = success; > 0 = a cudaError_t value; < 0 = invalid arguments.
// `message` is a static string (never freed).
struct Result {
  int code = 0;
  const char* message = "ok";
  bool ok() const { return code == 0; }
};

// Device views of a packed sub-block (see weight_pack.h for the layouts).
struct DeviceSubBlock {
  SubBlockDesc desc;
  int n_padded = 0;
  int k_steps = 0;
  int num_residuals = 0;
  int residual_channels[kMaxResiduals] = {};
  const void* weight = nullptr;      // [k_steps, kChunk, n_padded], Precision elements
  const float* depthwise = nullptr;  // [kernel_size, Chunks(in_channels)*kChunk] (separable)
  const float* bias = nullptr;       // [n_padded], never null
  // The device it runs on and that device's opt-in shared memory per block
  // (cudaDevAttrMaxSharedMemoryPerBlockOptin), as the caller cached them at setup; device < 0
  // or smem_limit_bytes <= 0: LaunchFusedSubBlock queries the current device on every call.
  int device = -1;
  int smem_limit_bytes = 0;
};

struct DeviceGeometry {
  int batch = 0;
  int in_time = 0;
  int out_time = 0;
  const int* in_lengths = nullptr;   // device [batch]
  const int* out_lengths = nullptr;  // device [batch]
};

// Dynamic shared memory one CTA of this sub-block needs, in bytes.
int FusedSubBlockSmemBytes(const SubBlockDesc& desc, Precision precision);

// Enqueues the fused sub-block on `stream`. `residual_x` holds sub_block.num_residuals device
// pointers (host array). Validates shapes first (negative code, nothing launched); a launch
// failure returns the CUDA error. Asynchronous: later kernel faults surface at the next sync.
Result LaunchFusedSubBlock(const DeviceSubBlock& sub_block, Precision precision, const void* x,
                           const DeviceGeometry& geometry, const void* const* residual_x, void* y,
                           Stream stream);

// CTC head on device logits [batch, time, vocab] (Precision elements): per frame log-softmax
// and argmax (first maximum wins). Writes ids [batch*time] int32 and best_log_probs
// [batch*time] FP32, and, when log_probs != nullptr, log_probs [batch, time, vocab] FP32.
// Frames at t >= lengths[b] (device [batch]) get id -1, log-probabilities 0.
Result LaunchLogSoftmaxArgmax(const void* logits, Precision precision, int batch, int time,
                              int vocab, const int* lengths, float* log_probs, int* ids,
                              float* best_log_probs, Stream stream);

// Element-wise casts between FP32 and `precision` (a plain copy for kFp32).
Result LaunchCastFromFloat(const float* src, Precision precision, std::size_t count, void* dst,
                           Stream stream);
Result LaunchCastToFloat(const void* src, Precision precision, std::size_t count, float* dst,
                         Stream stream);

// Number of usable CUDA devices; 0 when there is no driver or no GPU (never fails).
int CudaDeviceCount();

// Text for a Result code: "ok", the CUDA error string, or "invalid argument (jasper)".
const char* CudaErrorName(int code);

}  // namespace jasper::kernels::cuda

#endif  // JASPER_KERNELS_CUDA_SUB_BLOCK_CUDA_H_
