// The backend factory: picks the CPU or the CUDA backend (the only file that includes both).
#include "engine/runtime/backend_factory.h"

#include <iostream>
#include <utility>

#include "engine/runtime/cpu_backend.h"
#include "engine/status_macros.h"
#ifdef JASPER_HAVE_CUDA
#include "engine/runtime/cuda_backend.h"
#include "kernels/cuda/sub_block_cuda.h"
#endif

namespace jasper {

#ifdef JASPER_HAVE_CUDA
bool CudaAvailable() { return kernels::cuda::CudaDeviceCount() > 0; }
#else
bool CudaAvailable() { return false; }
#endif

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::shared_ptr<const Model> model,
                                                       const BackendOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateBackend: no model");
  JASPER_RETURN_IF_ERROR(options.Validate());
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
