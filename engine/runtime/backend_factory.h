// The backend factory: the CPU backend (engine/runtime/cpu_backend.h) or the CUDA one
// (engine/runtime/cuda_backend.h, in builds with CUDA), behind the Backend interface
// (engine/runtime/backend.h). Thread-safety: both functions may be called from any thread.
#ifndef JASPER_ENGINE_RUNTIME_BACKEND_FACTORY_H_
#define JASPER_ENGINE_RUNTIME_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"

namespace jasper {

// Creates a backend for `options.device`. kAuto picks CUDA when this build has it and a GPU is
// present, else the CPU (logging the choice). kCuda on a CPU-only build or a machine without a
// GPU is FAILED_PRECONDITION with a clear message.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::shared_ptr<const Model> model,
                                                       const BackendOptions& options);

// Whether this build includes the CUDA backend and a usable GPU is present.
bool CudaAvailable();

}  // namespace jasper

#endif  // JASPER_ENGINE_RUNTIME_BACKEND_FACTORY_H_
