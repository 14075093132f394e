// The one precision enum of the project: the element type of activations and GEMM operands on
// the device (the CUDA kernels, the CUDA backend, BackendOptions, the server's --gpu_precision).
// Accumulation is FP32 always (INT32 for kInt8's products); kFp32 runs the GEMM with FP32 FMA on
// CUDA cores, kFp16/kBf16 on tensor cores. The CPU kernels (BackendOptions::cpu_precision, the
// server's --cpu_precision) take kFp32, kBf16 (AMX tiles where the CPU has them) and kInt8
// (INT8 GEMM operands with calibrated scales, AMX or AVX-512 VNNI); the CUDA kernels take kFp32,
// kFp16 and kBf16.
#ifndef JASPER_KERNELS_PRECISION_H_
#define JASPER_KERNELS_PRECISION_H_

namespace jasper::kernels {

enum class Precision { kFp32, kFp16, kBf16, kInt8 };

// "fp32", "fp16", "bf16", "int8".
inline const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
    case Precision::kInt8:
      return "int8";
  }
  return "?";
}

}  // namespace jasper::kernels

#endif  // JASPER_KERNELS_PRECISION_H_
