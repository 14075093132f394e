// The CPU backend: walks the model's ExecutionPlan (engine/runtime/execution_plan.h, shared with
// the CUDA backend) with one fused sub-block kernel per step (kernels::FusedSubBlockCpuPacked: the
// weights packed once at creation for the GEMM of options.cpu_precision, FP32 on AVX-512 / AVX2
// micro-kernels, BF16 or INT8 on AMX tiles, as kernels/cpu_features.h allows; residual 1x1 convs
// concatenated along K, rows of a batch stacked into one GEMM) over channels-last activations.
// See backend.h for the contract. Intra-op threads: options.cpu_threads (default 1) parts per
// sub-block, run on a CpuThreadPool owned by the replica (the calling thread is part 0; one
// barrier per plan step); each part computes its own range of the batch's stacked output frames
// (kernels::FusedSubBlockCpuPackedPart), so results are bit-identical for any thread count.
// The log-softmax/argmax head runs on the calling thread. The reference mode is single-threaded.
//
// Ownership: shares the Model; owns the packed weights, activation buffers, the thread pool
// (cpu_threads - 1 threads, started at creation, joined at destruction) and one kernel
// workspace per thread, sized at creation for options.max_batch x options.max_feature_frames and
// grown only if a larger batch arrives; Run() within that shape allocates nothing besides the
// caller's BackendOutput vectors and starts no thread. Thread-safety: one thread at a time (see
// Backend); separate replicas may run concurrently.
#ifndef JASPER_ENGINE_RUNTIME_CPU_BACKEND_H_
#define JASPER_ENGINE_RUNTIME_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/runtime/backend.h"

namespace jasper {

// `use_reference` runs the plain reference kernels instead of the fused ones (tests; FP32
// whatever options.cpu_precision says). FAILED_PRECONDITION for cpu_precision kBf16 when the
// kernels have no BF16 GEMM in hardware (kernels::HasBf16Gemm(): AMX or AVX-512 BF16), and for
// kInt8 without a hardware INT8 GEMM (kernels::HasInt8Gemm()) or without an INT8 calibration
// made for this model (options.int8_calibration, else Model::int8_calibration(); the message
// says why there is none).
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(std::shared_ptr<const Model> model,
                                                          const BackendOptions& options,
                                                          bool use_reference = false);

}  // namespace jasper

#endif  // JASPER_ENGINE_RUNTIME_CPU_BACKEND_H_
