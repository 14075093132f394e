// The CPU backend: walks the model's ExecutionPlan (engine/execution_plan.h, shared with the
// CUDA backend) with one fused sub-block kernel per step (kernels::FusedSubBlockCpuPacked: the
// weights packed once at creation for an AVX2/FMA GEMM micro-kernel, residual 1x1 convs
// concatenated along K, rows of a batch stacked into one GEMM) over channels-last activations.
// See backend.h for the contract. The packed kernels are single-threaded: one inference thread
// per backend replica (options.cpu_threads sets only OpenBLAS, which this path does not call).
//
// Ownership: shares the Model; owns the packed weights, activation buffers and the kernel
// workspace, sized at creation for options.max_batch x options.max_feature_frames and grown
// only if a larger batch arrives; Run() within that shape allocates nothing besides the
// caller's BackendOutput vectors. Thread-safety: one thread at a time (see Backend).
#ifndef JASPER_ENGINE_CPU_BACKEND_H_
#define JASPER_ENGINE_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend.h"

namespace jasper {

// `use_reference` runs the plain reference kernels instead of the fused ones (tests).
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(std::shared_ptr<const Model> model,
                                                          const BackendOptions& options,
                                                          bool use_reference = false);

}  // namespace jasper

#endif  // JASPER_ENGINE_CPU_BACKEND_H_
