#include "engine/backend.h"

#include "absl/strings/str_cat.h"
#include "engine/cpu_backend.h"
#ifdef JASPER_HAVE_CUDA
#include <iostream>

#include "engine/cuda_backend.h"
#include "kernels/cuda/sub_block_cuda.h"
#endif

namespace jasper {

absl::StatusOr<Device> ParseDevice(const std::string& name) {
  if (name == "auto") return Device::kAuto;
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", name, "' (expected auto, cpu or cuda)"));
}

absl::Status BackendOptions::Validate() const {
  if (cpu_threads < 1 || cpu_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_threads must be in [1, 256], got ", cpu_threads));
  }
  if (max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_batch must be >= 1, got ", max_batch));
  }
  if (max_feature_frames < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_feature_frames must be >= 1, got ", max_feature_frames));
  }
  if (cuda_device < 0) return absl::InvalidArgumentError("cuda_device must be >= 0");
  return absl::OkStatus();
}

#ifdef JASPER_HAVE_CUDA
bool CudaAvailable() { return kernels::cuda::CudaDeviceCount() > 0; }
#else
bool CudaAvailable() { return false; }
#endif

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::shared_ptr<const Model> model,
                                                       const BackendOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateBackend: no model");
  if (absl::Status status = options.Validate(); !status.ok()) return status;
  switch (options.device) {
    case Device::kCuda:
#ifdef JASPER_HAVE_CUDA
      return CreateCudaBackend(std::move(model), options);
#else
      return absl::FailedPreconditionError(
          "device 'cuda' requested but this build has no CUDA backend; use --device=cpu");
#endif
    case Device::kAuto:
#ifdef JASPER_HAVE_CUDA
      if (CudaAvailable()) {
        auto cuda = CreateCudaBackend(model, options);
        if (cuda.ok()) return cuda;
        std::cerr << "jasper: CUDA backend unavailable (" << cuda.status().message()
                  << "); using the CPU backend\n";
      } else {
        std::cerr << "jasper: no CUDA GPU found; using the CPU backend\n";
      }
#endif
      break;
    case Device::kCpu:
      break;
  }
  return CreateCpuBackend(std::move(model), options);
}

}  // namespace jasper
