// The one precision enum of the project: the element type of activations and GEMM operands on
// the device (the CUDA kernels, the CUDA backend, BackendOptions, the server's --gpu_precision).
// Accumulation is FP32 always; kFp32 runs the GEMM with FP32 FMA on CUDA cores, kFp16/kBf16 on
// tensor cores. The CPU kernels (BackendOptions::cpu_precision, the server's --cpu_precision)
// take kFp32 and kBf16 (AMX tiles where the CPU has them).
#ifndef JASPER_KERNELS_PRECISION_H_
#define JASPER_KERNELS_PRECISION_H_

namespace jasper::kernels {

enum class Precision { kFp32, kFp16, kBf16 };

// "fp32", "fp16", "bf16".
inline const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

}  // namespace jasper::kernels

#endif  // JASPER_KERNELS_PRECISION_H_
