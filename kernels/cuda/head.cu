// Device CTC head (log-softmax + argmax per frame, one warp per frame) and FP32 <-> FP16/BF16
// casts. See sub_block_cuda.h for the contracts.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/sub_block_cuda.h"
#include "kernels/cuda/tiling.h"

namespace jasper::kernels::cuda {
namespace {

constexpr int kHeadThreads = 256;
constexpr int kHeadWarps = kHeadThreads / 32;
constexpr int kCastThreads = 256;

__device__ __forceinline__ float Load(const float* p, std::size_t i) { return p[i]; }
__device__ __forceinline__ float Load(const __half* p, std::size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float Load(const __nv_bfloat16* p, std::size_t i) {
  return __bfloat162float(p[i]);
}

__device__ __forceinline__ void Store(float* p, std::size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void Store(__half* p, std::size_t i, float v) {
  p[i] = __float2half_rn(v);
}
__device__ __forceinline__ void Store(__nv_bfloat16* p, std::size_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

// True when candidate (value, index) beats the current best: larger value, or an equal value
// at a smaller index (torch.argmax / the CPU head keep the first maximum). Index -1 = none.
__device__ __forceinline__ bool Better(float value, int index, float best, int best_index) {
  if (index < 0) return false;
  if (best_index < 0) return true;
  return value > best || (value == best && index < best_index);
}

template <typename T>
__global__ void __launch_bounds__(kHeadThreads)
    LogSoftmaxArgmaxKernel(const T* logits, int batch, int time, int vocab, const int* lengths,
                           float* log_probs, int* ids, float* best_log_probs) {
  const long long frame =
      static_cast<long long>(blockIdx.x) * kHeadWarps + static_cast<int>(threadIdx.x / 32);
  const int lane = threadIdx.x % 32;
  if (frame >= static_cast<long long>(batch) * time) return;  // whole warp exits together
  const int b = static_cast<int>(frame / time);
  const int t = static_cast<int>(frame % time);
  const int len = lengths == nullptr ? time : ClampLength(lengths[b], time);
  const std::size_t row = static_cast<std::size_t>(frame) * vocab;
  if (t >= len) {
    if (lane == 0) {
      ids[frame] = -1;
      best_log_probs[frame] = 0.0f;
    }
    if (log_probs != nullptr) {
      for (int v = lane; v < vocab; v += 32) log_probs[row + v] = 0.0f;
    }
    return;
  }
  // Max and argmax: per lane over v = lane, lane + 32, ... (ascending, strict > keeps the
  // first), then a warp reduction that prefers the smaller index on ties.
  float best = 0.0f;
  int best_index = -1;
  for (int v = lane; v < vocab; v += 32) {
    const float x = Load(logits, row + v);
    if (best_index < 0 || x > best) {
      best = x;
      best_index = v;
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    const int other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
    if (Better(other, other_index, best, best_index)) {
      best = other;
      best_index = other_index;
    }
  }
  // Lane 0's winner for every lane: with NaN logits the comparison is no total order and the
  // lanes could otherwise disagree.
  best = __shfl_sync(0xffffffffu, best, 0);
  best_index = __shfl_sync(0xffffffffu, best_index, 0);
  float sum = 0.0f;
  for (int v = lane; v < vocab; v += 32) sum += expf(Load(logits, row + v) - best);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float log_norm = best + logf(sum);
  if (lane == 0) {
    ids[frame] = best_index;
    best_log_probs[frame] = best - log_norm;
  }
  if (log_probs != nullptr) {
    for (int v = lane; v < vocab; v += 32) log_probs[row + v] = Load(logits, row + v) - log_norm;
  }
}

template <typename From, typename To>
__global__ void __launch_bounds__(kCastThreads)
    CastKernel(const From* src, To* dst, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    Store(dst, i, Load(src, i));
  }
}

Result FromCuda(cudaError_t error) {
  if (error == cudaSuccess) return Result{};
  return Result{static_cast<int>(error), cudaGetErrorString(error)};
}

unsigned CastBlocks(std::size_t count) {
  const std::size_t blocks = (count + kCastThreads - 1) / kCastThreads;
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
}

}  // namespace

Result LaunchLogSoftmaxArgmax(const void* logits, Precision precision, int batch, int time,
                              int vocab, const int* lengths, float* log_probs, int* ids,
                              float* best_log_probs, Stream stream) {
  if (batch < 0 || time < 0 || vocab < 1) {
    return Result{-1, "LaunchLogSoftmaxArgmax: bad shape"};
  }
  if (batch == 0 || time == 0) return Result{};
  if (logits == nullptr || ids == nullptr || best_log_probs == nullptr) {
    return Result{-1, "LaunchLogSoftmaxArgmax: null pointer"};
  }
  const long long frames = static_cast<long long>(batch) * time;
  const long long blocks = (frames + kHeadWarps - 1) / kHeadWarps;
  if (blocks > 0x7fffffffLL) return Result{-1, "LaunchLogSoftmaxArgmax: too many frames"};
  const unsigned grid = static_cast<unsigned>(blocks);
  switch (precision) {
    case Precision::kFp32:
      LogSoftmaxArgmaxKernel<<<grid, kHeadThreads, 0, stream>>>(static_cast<const float*>(logits),
                                                                batch, time, vocab, lengths,
                                                                log_probs, ids, best_log_probs);
      break;
    case Precision::kFp16:
      LogSoftmaxArgmaxKernel<<<grid, kHeadThreads, 0, stream>>>(static_cast<const __half*>(logits),
                                                                batch, time, vocab, lengths,
                                                                log_probs, ids, best_log_probs);
      break;
    case Precision::kBf16:
      LogSoftmaxArgmaxKernel<<<grid, kHeadThreads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(logits), batch, time, vocab, lengths, log_probs, ids,
          best_log_probs);
      break;
    case Precision::kInt8:
      return Result{-1, "LaunchLogSoftmaxArgmax: no INT8 on CUDA"};
  }
  return FromCuda(cudaGetLastError());
}

Result LaunchCastFromFloat(const float* src, Precision precision, std::size_t count, void* dst,
                           Stream stream) {
  if (count == 0) return Result{};
  if (src == nullptr || dst == nullptr) return Result{-1, "LaunchCastFromFloat: null pointer"};
  switch (precision) {
    case Precision::kFp32:
      return FromCuda(
          cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    case Precision::kFp16:
      CastKernel<<<CastBlocks(count), kCastThreads, 0, stream>>>(src, static_cast<__half*>(dst),
                                                                 count);
      break;
    case Precision::kBf16:
      CastKernel<<<CastBlocks(count), kCastThreads, 0, stream>>>(
          src, static_cast<__nv_bfloat16*>(dst), count);
      break;
    case Precision::kInt8:
      return Result{-1, "LaunchCastFromFloat: no INT8 on CUDA"};
  }
  return FromCuda(cudaGetLastError());
}

Result LaunchCastToFloat(const void* src, Precision precision, std::size_t count, float* dst,
                         Stream stream) {
  if (count == 0) return Result{};
  if (src == nullptr || dst == nullptr) return Result{-1, "LaunchCastToFloat: null pointer"};
  switch (precision) {
    case Precision::kFp32:
      return FromCuda(
          cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    case Precision::kFp16:
      CastKernel<<<CastBlocks(count), kCastThreads, 0, stream>>>(static_cast<const __half*>(src),
                                                                 dst, count);
      break;
    case Precision::kBf16:
      CastKernel<<<CastBlocks(count), kCastThreads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(src), dst, count);
      break;
    case Precision::kInt8:
      return Result{-1, "LaunchCastToFloat: no INT8 on CUDA"};
  }
  return FromCuda(cudaGetLastError());
}

int CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return count;
}

const char* CudaErrorName(int code) {
  if (code == 0) return "ok";
  if (code < 0) return "invalid argument (jasper)";
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}  // namespace jasper::kernels::cuda
