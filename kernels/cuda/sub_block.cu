// The fused sub-block kernel: one CTA = kTileM output frames of one batch item x tile_n output
// channels; one launch per sub-block. See tiling.h for the K-step schedule and shared-memory
// layout, sub_block_cuda.h for the contract.
//
// Per input-channel chunk (kChunk = 32 channels):
//   1. the halo (input window of the tile, (kTileM-1)*stride + (K-1)*dilation + 1 rows) is loaded
//      ONCE into shared memory as FP32, predicated on the length (masked frames read as 0);
//      separable: the chunk's depthwise taps too;
//   2. the A operand of the step is produced in shared memory, in the GEMM's operand layout:
//        separable: depthwise conv on CUDA cores, FP32 accumulation (lane = channel, each
//                   thread kDwFrames frames, register sliding window when stride = dilation = 1)
//        dense:     the halo shifted by tap*dilation (implicit GEMM, one step per tap)
//   3. the GEMM step accumulates A [kTileM x kChunk] * B [kChunk x tile_n] into FP32:
//        FP32:      CUDA-core FMA (exact FP32 products, 1e-4 parity with the CPU reference)
//        FP16/BF16: tensor cores via WMMA 16x16x16, FP32 accumulate.
//   B (the packed weights of the step) is prefetched one step ahead with cp.async.
// Then the residual branches' K-steps (A = residual activation at the output frame), so the
// residual 1x1 GEMMs share the accumulators (K-concatenation). Finally the accumulators go
// through shared memory to a coalesced epilogue: + bias, activation, zero past the length.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/sub_block_cuda.h"
#include "kernels/cuda/tiling.h"

namespace jasper::kernels::cuda {
namespace {

// ---- Element conversions ---------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ float ToFloat(T v);
template <>
__device__ __forceinline__ float ToFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float ToFloat<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// ---- cp.async (sm_80+) -----------------------------------------------------------------------

__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* global_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// ---- Kernel parameters -----------------------------------------------------------------------

struct Params {
  const void* x;
  void* y;
  const void* weight;
  const float* depthwise;
  const float* bias;
  const int* in_lengths;
  const int* out_lengths;
  int in_time, out_time;
  int c_in, c_out, n_padded;
  int kernel_size, stride, dilation, padding;
  int separable, relu;
  int halo_rows, tiles_per_item, k_steps;
  int num_residuals;
  const void* residual_x[kMaxResiduals];
  int residual_channels[kMaxResiduals];
};

// ---- Accumulators ----------------------------------------------------------------------------

// FP32: CUDA-core GEMM, TM x TN accumulators per thread (rows/cols from SimtRow/SimtCol).
template <typename T, int kTileN>
struct SimtAccumulator {
  static constexpr int kTM = kTileM / kSimtThreadsM;
  static constexpr int kTN = kTileN / kSimtThreadsN;
  float acc[kTM][kTN];

  __device__ __forceinline__ void Zero() {
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
#pragma unroll
      for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;
    }
  }

  __device__ __forceinline__ void Mma(const T* a, int ld_a, const T* b, int ld_b) {
    const int tid = threadIdx.x;
#pragma unroll 8
    for (int kk = 0; kk < kChunk; ++kk) {
      float av[kTM];
      float bv[kTN];
#pragma unroll
      for (int i = 0; i < kTM; ++i) av[i] = ToFloat(a[SimtRow(tid, i) * ld_a + kk]);
#pragma unroll
      for (int j = 0; j < kTN; ++j) bv[j] = ToFloat(b[kk * ld_b + SimtCol(tid, j)]);
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
    }
  }

  __device__ __forceinline__ void Store(float* c, int ld_c) const {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
#pragma unroll
      for (int j = 0; j < kTN; ++j) c[SimtRow(tid, i) * ld_c + SimtCol(tid, j)] = acc[i][j];
    }
  }
};

// FP16 / BF16: tensor cores through WMMA m16n16k16, FP32 accumulate.
template <typename T, int kTileN>
struct WmmaAccumulator {
  static constexpr int kFragsM = kTileM / 16 / (kWarps / (kTileN == kWideN ? 4 : 2));
  static constexpr int kFragsN = kTileN / 16 / (kTileN == kWideN ? 4 : 2);
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc[kFragsM][kFragsN];

  __device__ __forceinline__ void Zero() {
#pragma unroll
    for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
    }
  }

  __device__ __forceinline__ void Mma(const T* a, int ld_a, const T* b, int ld_b) {
    using namespace nvcuda;
    const int warp = threadIdx.x / 32;
#pragma unroll
    for (int kk = 0; kk < kChunk; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[kFragsM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[kFragsN];
#pragma unroll
      for (int i = 0; i < kFragsM; ++i) {
        wmma::load_matrix_sync(fa[i], a + WmmaFragRow(warp, i, kTileN) * ld_a + kk, ld_a);
      }
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        wmma::load_matrix_sync(fb[j], b + kk * ld_b + WmmaFragCol(warp, j, kTileN), ld_b);
      }
#pragma unroll
      for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
  }

  __device__ __forceinline__ void Store(float* c, int ld_c) const {
    using namespace nvcuda;
    const int warp = threadIdx.x / 32;
#pragma unroll
    for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        wmma::store_matrix_sync(
            c + WmmaFragRow(warp, i, kTileN) * ld_c + WmmaFragCol(warp, j, kTileN), acc[i][j], ld_c,
            wmma::mem_row_major);
      }
    }
  }
};

template <typename T, int kTileN>
struct AccumulatorFor {
  using Type = WmmaAccumulator<T, kTileN>;
};
template <int kTileN>
struct AccumulatorFor<float, kTileN> {
  using Type = SimtAccumulator<float, kTileN>;
};

// ---- Main-loop pieces ------------------------------------------------------------------------

// Prefetches the packed weights of K-step `step` (rows [step*kChunk, +kChunk), columns
// [n0, n0 + kTileN)) into `b`. Issues nothing past the last step (the caller still commits).
template <typename T, int kTileN>
__device__ __forceinline__ void IssueB(const Params& p, int step, int n0, T* b, int ld_b) {
  if (step >= p.k_steps) return;
  constexpr int kPiecesPerRow = kTileN * static_cast<int>(sizeof(T)) / 16;
  const char* src = static_cast<const char*>(p.weight) +
                    (static_cast<std::size_t>(step) * kChunk * p.n_padded + n0) * sizeof(T);
  char* dst = reinterpret_cast<char*>(b);
  for (int i = threadIdx.x; i < kChunk * kPiecesPerRow; i += kThreads) {
    const int row = i / kPiecesPerRow;
    const int piece = i % kPiecesPerRow;
    CpAsync16(dst + (static_cast<std::size_t>(row) * ld_b * sizeof(T) + piece * 16),
              src + (static_cast<std::size_t>(row) * p.n_padded * sizeof(T) + piece * 16));
  }
}

// Loads the halo of channel chunk `chunk` as FP32; masked and padded elements are 0.
template <typename T>
__device__ __forceinline__ void LoadHalo(const Params& p, const T* xb, int first_input, int in_len,
                                         int chunk, float* halo) {
  const int rows = p.halo_rows;
  for (int i = threadIdx.x; i < rows * kChunk; i += kThreads) {
    const int r = i / kChunk;
    const int lane = i % kChunk;
    const int t = first_input + r;
    float v = 0.0f;
    if (InputFrameValid(t, in_len) && ChannelValid(chunk, lane, p.c_in)) {
      v = ToFloat(xb[static_cast<std::size_t>(t) * p.c_in + chunk * kChunk + lane]);
    }
    halo[i] = v;
  }
}

__device__ __forceinline__ void LoadDepthwise(const Params& p, int chunk, float* dw) {
  const int c_pad = Chunks(p.c_in) * kChunk;
  for (int i = threadIdx.x; i < p.kernel_size * kChunk; i += kThreads) {
    const int k = i / kChunk;
    const int lane = i % kChunk;
    dw[i] = p.depthwise[static_cast<std::size_t>(k) * c_pad + chunk * kChunk + lane];
  }
}

// Depthwise conv of the chunk into A: lane = channel, warp w = frames DwFirstFrame(w) + i.
template <typename T>
__device__ __forceinline__ void DepthwiseToA(const Params& p, const float* halo, const float* dw,
                                             T* a, int ld_a) {
  const int lane = threadIdx.x % 32;
  const int m0 = DwFirstFrame(threadIdx.x / 32);
  const int taps = p.kernel_size;
  float acc[kDwFrames];
#pragma unroll
  for (int i = 0; i < kDwFrames; ++i) acc[i] = 0.0f;
  if (p.stride == 1 && p.dilation == 1) {
    // Register sliding window: window[i] holds halo row m0 + i + k at tap k, so each tap
    // costs one weight load, one halo load and kDwFrames FMAs.
    float window[kDwFrames];
#pragma unroll
    for (int i = 0; i < kDwFrames; ++i) window[i] = halo[(m0 + i) * kChunk + lane];
    for (int k = 0; k < taps; ++k) {
      const float w = dw[k * kChunk + lane];
#pragma unroll
      for (int i = 0; i < kDwFrames; ++i) acc[i] = fmaf(w, window[i], acc[i]);
      if (k + 1 < taps) {
#pragma unroll
        for (int i = 0; i + 1 < kDwFrames; ++i) window[i] = window[i + 1];
        window[kDwFrames - 1] = halo[DwWindowNextRow(m0, k) * kChunk + lane];
      }
    }
  } else {
    for (int k = 0; k < taps; ++k) {
      const float w = dw[k * kChunk + lane];
#pragma unroll
      for (int i = 0; i < kDwFrames; ++i) {
        acc[i] = fmaf(w, halo[HaloRowOf(m0 + i, k, p.stride, p.dilation) * kChunk + lane], acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kDwFrames; ++i) a[(m0 + i) * ld_a + lane] = FromFloat<T>(acc[i]);
}

// Dense implicit GEMM: A = halo rows m*stride + tap*dilation.
template <typename T>
__device__ __forceinline__ void TapToA(const Params& p, const float* halo, int tap, T* a,
                                       int ld_a) {
  for (int i = threadIdx.x; i < kTileM * kChunk; i += kThreads) {
    const int m = i / kChunk;
    const int lane = i % kChunk;
    a[m * ld_a + lane] =
        FromFloat<T>(halo[HaloRowOf(m, tap, p.stride, p.dilation) * kChunk + lane]);
  }
}

// Residual branch: A = residual activation at the tile's output frames, masked by out_len.
template <typename T>
__device__ __forceinline__ void ResidualToA(const T* xr, int channels, int out_time, int b, int t0,
                                            int out_len, int chunk, T* a, int ld_a) {
  const T* base = xr + static_cast<std::size_t>(b) * out_time * channels;
  for (int i = threadIdx.x; i < kTileM * kChunk; i += kThreads) {
    const int m = i / kChunk;
    const int lane = i % kChunk;
    const int t = t0 + m;
    T v = FromFloat<T>(0.0f);
    if (t < out_len && ChannelValid(chunk, lane, channels)) {
      v = base[static_cast<std::size_t>(t) * channels + chunk * kChunk + lane];
    }
    a[m * ld_a + lane] = v;
  }
}

// ---- The kernel ------------------------------------------------------------------------------

template <typename T, int kTileN>
__global__ void __launch_bounds__(kThreads) FusedSubBlockKernel(const Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kElem = static_cast<int>(sizeof(T));
  const SmemLayout layout =
      MakeSmemLayout(kElem, kTileN, p.halo_rows, p.separable ? p.kernel_size : 0);
  float* halo = reinterpret_cast<float*>(smem + layout.halo);
  float* dw = reinterpret_cast<float*>(smem + layout.dw);
  T* a = reinterpret_cast<T*>(smem + layout.a);
  // B buffer of step s: b0 for even s, b1 for odd s (arithmetic, not an array, so it stays in
  // registers).
  auto b_buf = [&](int s) {
    return reinterpret_cast<T*>(smem + ((s & 1) ? layout.b1 : layout.b0));
  };
  float* c = reinterpret_cast<float*>(smem + layout.c);

  const MTile tile = DecodeMTile(static_cast<int>(blockIdx.x), p.tiles_per_item);
  const int b = tile.batch_index;
  const int t0 = tile.first_frame;
  const int n0 = static_cast<int>(blockIdx.y) * kTileN;
  const int in_len = ClampLength(p.in_lengths[b], p.in_time);
  const int out_len = ClampLength(p.out_lengths[b], p.out_time);
  T* yb = static_cast<T*>(p.y) + static_cast<std::size_t>(b) * p.out_time * p.c_out;
  const int rows = StoredRows(t0, p.out_time);
  const int cols = Min(kTileN, p.c_out - n0);

  if (t0 >= out_len) {
    // The whole tile is past the length: zeros, no GEMM.
    for (int i = threadIdx.x; i < kTileM * kTileN; i += kThreads) {
      const int m = i / kTileN;
      const int n = i % kTileN;
      if (m < rows && n < cols) {
        yb[static_cast<std::size_t>(t0 + m) * p.c_out + n0 + n] = FromFloat<T>(0.0f);
      }
    }
    return;
  }

  typename AccumulatorFor<T, kTileN>::Type acc;
  acc.Zero();

  const T* xb = static_cast<const T*>(p.x) + static_cast<std::size_t>(b) * p.in_time * p.c_in;
  const int first_input = HaloFirstInputFrame(t0, p.stride, p.padding);
  const int taps_per_chunk = TapsPerChunk(p.kernel_size, p.separable != 0);

  int step = 0;
  IssueB<T, kTileN>(p, 0, n0, b_buf(0), layout.ld_b);
  CpAsyncCommit();

  const int in_chunks = Chunks(p.c_in);
  for (int chunk = 0; chunk < in_chunks; ++chunk) {
    // The previous step ended with __syncthreads(): nobody reads the old halo any more.
    LoadHalo(p, xb, first_input, in_len, chunk, halo);
    if (p.separable) LoadDepthwise(p, chunk, dw);
    __syncthreads();
    for (int tap = 0; tap < taps_per_chunk; ++tap, ++step) {
      IssueB<T, kTileN>(p, step + 1, n0, b_buf(step + 1), layout.ld_b);
      CpAsyncCommit();
      if (p.separable) {
        DepthwiseToA(p, halo, dw, a, layout.ld_a);
      } else {
        TapToA(p, halo, tap, a, layout.ld_a);
      }
      CpAsyncWait<1>();  // B of this step has landed (only the next step's copy may be pending)
      __syncthreads();
      acc.Mma(a, layout.ld_a, b_buf(step), layout.ld_b);
      __syncthreads();
    }
  }
  for (int r = 0; r < p.num_residuals; ++r) {
    const T* xr = static_cast<const T*>(p.residual_x[r]);
    const int channels = p.residual_channels[r];
    const int chunks = Chunks(channels);
    for (int chunk = 0; chunk < chunks; ++chunk, ++step) {
      IssueB<T, kTileN>(p, step + 1, n0, b_buf(step + 1), layout.ld_b);
      CpAsyncCommit();
      ResidualToA(xr, channels, p.out_time, b, t0, out_len, chunk, a, layout.ld_a);
      CpAsyncWait<1>();
      __syncthreads();
      acc.Mma(a, layout.ld_a, b_buf(step), layout.ld_b);
      __syncthreads();
    }
  }
  CpAsyncWait<0>();
  __syncthreads();

  // Epilogue through shared memory (aliases the main-loop regions, all reads of which ended at
  // the last __syncthreads), so that the global stores are coalesced along channels.
  acc.Store(c, layout.ld_c);
  __syncthreads();
  for (int i = threadIdx.x; i < kTileM * kTileN; i += kThreads) {
    const int m = i / kTileN;
    const int n = i % kTileN;
    if (m >= rows || n >= cols) continue;
    float v = c[m * layout.ld_c + n] + p.bias[n0 + n];
    if (p.relu && v < 0.0f) v = 0.0f;  // NaN propagates, as in the reference
    if (t0 + m >= out_len) v = 0.0f;
    yb[static_cast<std::size_t>(t0 + m) * p.c_out + n0 + n] = FromFloat<T>(v);
  }
}

// ---- Host side -------------------------------------------------------------------------------

Result Invalid(const char* message) { return Result{-1, message}; }

Result FromCuda(cudaError_t error) {
  if (error == cudaSuccess) return Result{};
  return Result{static_cast<int>(error), cudaGetErrorString(error)};
}

// Devices whose opt-in shared-memory limit has been granted to each kernel instantiation.
constexpr int kMaxDevices = 64;

template <typename T, int kTileN>
Result Launch(const Params& params, int smem_bytes, int device, int smem_limit, int m_tiles,
              int n_tiles, Stream stream) {
  auto kernel = FusedSubBlockKernel<T, kTileN>;
  if (smem_bytes > 48 * 1024) {
    // Opting in above 48 KiB is per kernel instantiation and device, and process-wide: grant the
    // device's whole opt-in limit once, so that concurrent launches (one CUDA backend per
    // worker) never lower it under each other. The value never changes, so racing setters agree.
    static std::atomic<bool> granted[kMaxDevices];
    const bool known = device >= 0 && device < kMaxDevices;
    if (!known || !granted[device].load(std::memory_order_acquire)) {
      cudaError_t error =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit);
      if (error != cudaSuccess) return FromCuda(error);
      if (known) granted[device].store(true, std::memory_order_release);
    }
  }
  const dim3 grid(static_cast<unsigned>(m_tiles), static_cast<unsigned>(n_tiles));
  kernel<<<grid, kThreads, smem_bytes, stream>>>(params);
  return FromCuda(cudaGetLastError());
}

template <int kTileN>
Result LaunchPrecision(Precision precision, const Params& params, int smem_bytes, int device,
                       int smem_limit, int m_tiles, int n_tiles, Stream stream) {
  switch (precision) {
    case Precision::kFp32:
      return Launch<float, kTileN>(params, smem_bytes, device, smem_limit, m_tiles, n_tiles,
                                   stream);
    case Precision::kFp16:
      return Launch<__half, kTileN>(params, smem_bytes, device, smem_limit, m_tiles, n_tiles,
                                    stream);
    case Precision::kBf16:
      return Launch<__nv_bfloat16, kTileN>(params, smem_bytes, device, smem_limit, m_tiles, n_tiles,
                                           stream);
    case Precision::kInt8:
      break;
  }
  return Invalid("LaunchFusedSubBlock: unknown precision");
}

int SmemBytes(const SubBlockDesc& desc, Precision precision, int tile_n) {
  const int halo_rows = HaloRows(kTileM, desc.kernel_size, desc.stride, desc.dilation);
  return MakeSmemLayout(PrecisionBytes(precision), tile_n, halo_rows,
                        desc.separable ? desc.kernel_size : 0)
      .total_bytes;
}

}  // namespace

int FusedSubBlockSmemBytes(const SubBlockDesc& desc, Precision precision) {
  if (!IsValid(desc)) return 0;
  return SmemBytes(desc, precision, TileNFor(PaddedOutChannels(desc.out_channels)));
}

Result LaunchFusedSubBlock(const DeviceSubBlock& sub_block, Precision precision, const void* x,
                           const DeviceGeometry& geometry, const void* const* residual_x, void* y,
                           Stream stream) {
  const SubBlockDesc& desc = sub_block.desc;
  if (!IsValid(desc)) return Invalid("LaunchFusedSubBlock: invalid sub-block description");
  if (geometry.batch < 0 || geometry.in_time < 0 || geometry.out_time < 0) {
    return Invalid("LaunchFusedSubBlock: negative batch or time");
  }
  if (geometry.batch == 0 || geometry.out_time == 0) return Result{};
  if (x == nullptr || y == nullptr || geometry.in_lengths == nullptr ||
      geometry.out_lengths == nullptr || sub_block.weight == nullptr || sub_block.bias == nullptr ||
      (desc.separable && sub_block.depthwise == nullptr)) {
    return Invalid("LaunchFusedSubBlock: null pointer");
  }
  if (sub_block.num_residuals < 0 || sub_block.num_residuals > kMaxResiduals ||
      (sub_block.num_residuals > 0 && residual_x == nullptr)) {
    return Invalid("LaunchFusedSubBlock: bad residual branches");
  }
  if (sub_block.n_padded != PaddedOutChannels(desc.out_channels)) {
    return Invalid("LaunchFusedSubBlock: n_padded does not match out_channels");
  }
  int k_steps = MainSteps(desc.in_channels, desc.kernel_size, desc.separable);
  for (int r = 0; r < sub_block.num_residuals; ++r) {
    if (residual_x[r] == nullptr || sub_block.residual_channels[r] <= 0) {
      return Invalid("LaunchFusedSubBlock: residual branch without input or channels");
    }
    k_steps += Chunks(sub_block.residual_channels[r]);
  }
  if (k_steps != sub_block.k_steps) {
    return Invalid("LaunchFusedSubBlock: packed K-steps do not match the description");
  }

  const int tile_n = TileNFor(sub_block.n_padded);
  const int smem_bytes = SmemBytes(desc, precision, tile_n);
  int device = sub_block.device;
  int smem_limit = sub_block.smem_limit_bytes;
  if (device < 0 || smem_limit <= 0) {  // not cached by the caller: ask the current device
    cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) return FromCuda(error);
    error = cudaDeviceGetAttribute(&smem_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (error != cudaSuccess) return FromCuda(error);
  }
  if (smem_bytes > smem_limit) {
    return Invalid(
        "LaunchFusedSubBlock: kernel window (kernel_size x dilation) too large for "
        "shared memory");
  }
  const long long m_tiles =
      static_cast<long long>(geometry.batch) * MTilesPerItem(geometry.out_time);
  if (m_tiles > 0x7fffffffLL) return Invalid("LaunchFusedSubBlock: batch x time too large");

  Params params{};
  params.x = x;
  params.y = y;
  params.weight = sub_block.weight;
  params.depthwise = sub_block.depthwise;
  params.bias = sub_block.bias;
  params.in_lengths = geometry.in_lengths;
  params.out_lengths = geometry.out_lengths;
  params.in_time = geometry.in_time;
  params.out_time = geometry.out_time;
  params.c_in = desc.in_channels;
  params.c_out = desc.out_channels;
  params.n_padded = sub_block.n_padded;
  params.kernel_size = desc.kernel_size;
  params.stride = desc.stride;
  params.dilation = desc.dilation;
  params.padding = desc.padding;
  params.separable = desc.separable ? 1 : 0;
  params.relu = desc.activation == Activation::kRelu ? 1 : 0;
  params.halo_rows = HaloRows(kTileM, desc.kernel_size, desc.stride, desc.dilation);
  params.tiles_per_item = MTilesPerItem(geometry.out_time);
  params.k_steps = k_steps;
  params.num_residuals = sub_block.num_residuals;
  for (int r = 0; r < sub_block.num_residuals; ++r) {
    params.residual_x[r] = residual_x[r];
    params.residual_channels[r] = sub_block.residual_channels[r];
  }
  const int n_tiles = sub_block.n_padded / tile_n;
  if (tile_n == kWideN) {
    return LaunchPrecision<kWideN>(precision, params, smem_bytes, device, smem_limit,
                                   static_cast<int>(m_tiles), n_tiles, stream);
  }
  return LaunchPrecision<kNarrowN>(precision, params, smem_bytes, device, smem_limit,
                                   static_cast<int>(m_tiles), n_tiles, stream);
}

}  // namespace jasper::kernels::cuda
