// The CPU backend: fused sub-blocks (kernels::FusedSubBlockCpu, OpenBLAS GEMMs) over
// channels-last activations. See backend.h for the contract.
//
// Ownership: shares the Model; owns activation buffers and the kernel workspace, sized at
// creation for options.max_batch x options.max_feature_frames and grown (once, logged) only if
// a larger batch arrives. Thread-safety: one thread at a time (see Backend).
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
