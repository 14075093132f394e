// The CUDA backend: walks the same ExecutionPlan as the CPU backend
// (engine/runtime/execution_plan.h: block loop, residual sources, slot liveness, shapes; then the
// decoder and log-softmax + argmax), with one fused kernel launch per sub-block
// (kernels/cuda/sub_block_cuda.h). Built only with JASPER_HAVE_CUDA.
//
// Device and memory: one CUDA stream per backend on options.cuda_device. At creation, every
// sub-block's weights are packed for the chosen precision and uploaded once; device activation
// buffers, lengths, outputs and pinned host staging buffers are sized for
// options.max_batch x options.max_feature_frames, so Run() within that allocates nothing (a
// larger batch grows them once, with a line on stderr). Per Run: one pinned H2D copy of the
// features, one of all lengths, the kernels, one D2H copy of ids + best log-probs (plus the
// log-probs when keep_log_probs), one stream synchronize. Only ids and scores cross to the host
// unless log-probs or block outputs are requested.
// CUDA Graphs per batch-shape bucket: not yet (each Run launches ~80 kernels directly).
//
// Device memory (DeviceMemory()): the bytes of every device buffer the backend holds (weights
// and workspaces) are summed by the thread that grows them, after each growth, into an atomic;
// DeviceMemory() reads that atomic and calls cudaMemGetInfo (thread-safe) on the backend's
// device, restoring the calling thread's current device afterwards.
//
// Ownership: shares the Model; owns all device/pinned memory and the stream.
// Thread-safety: one thread at a time (see Backend); Run() may be called from any thread (it
// makes the backend's device current first). name() and DeviceMemory() are safe from any
// thread, concurrently with Run(); neither takes a lock.
#ifndef JASPER_ENGINE_RUNTIME_CUDA_BACKEND_H_
#define JASPER_ENGINE_RUNTIME_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/runtime/backend.h"
#include "kernels/cuda/tiling.h"

namespace jasper {

// Errors: FAILED_PRECONDITION when there is no usable GPU or options.cuda_device does not
// exist; RESOURCE_EXHAUSTED / INTERNAL for CUDA allocation or launch failures.
// The precision of activations and GEMM operands is options.gpu_precision.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(std::shared_ptr<const Model> model,
                                                           const BackendOptions& options);

}  // namespace jasper

#endif  // JASPER_ENGINE_RUNTIME_CUDA_BACKEND_H_
