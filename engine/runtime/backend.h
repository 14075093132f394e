// Backend: runs a padded batch of features through the acoustic model (fused encoder sub-blocks,
// 1x1 decoder, log-softmax, argmax). Implementations: CPU (always built) and CUDA (built when
// nvcc is found). Both walk the same immutable Model; only the kernels differ.
//
// Ownership: a Backend shares the Model (shared_ptr) and owns its workspaces.
// Thread-safety: NOT thread-safe. One Backend is driven by one worker thread at a time (the
// scheduler runs one worker per backend replica); create several replicas for parallelism.
// Exception: name() and DeviceMemory() are safe from any thread, concurrently with Run().
#ifndef JASPER_ENGINE_RUNTIME_BACKEND_H_
#define JASPER_ENGINE_RUNTIME_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/features/features.h"
#include "engine/model/model.h"
#include "kernels/precision.h"
#include "kernels/sub_block.h"

namespace jasper {

// A padded batch of log-mel features: channels-last [batch, time, features], FP32, host memory,
// borrowed for the duration of Run(). Frames at t >= lengths[b] are ignored (masked).
struct FeatureBatch {
  const float* data = nullptr;
  int batch = 0;
  int time = 0;
  int features = 0;
  const int* lengths = nullptr;
};

// The one copy of features into a batch: several utterances' (or windows') features padded with
// zeros to the longest, [batch, time, features], with their valid lengths. Used by the
// scheduler and the offline recognizer. Owns its tensor; batch() borrows it.
class PaddedFeatureBatch {
 public:
  // `members`: at least one, all with the same num_features (INVALID_ARGUMENT otherwise).
  static absl::StatusOr<PaddedFeatureBatch> Pack(const std::vector<const Features*>& members);
  FeatureBatch batch() const {
    return {data_.data(), static_cast<int>(lengths_.size()), time_, features_, lengths_.data()};
  }

 private:
  std::vector<float> data_;
  std::vector<int> lengths_;
  int time_ = 0;
  int features_ = 0;
};

// Per-frame CTC outputs of one batch, host memory. `time` is the padded encoder time; entries at
// t >= lengths[b] are id -1 / log-prob 0.
struct BackendOutput {
  int batch = 0;
  int time = 0;
  int vocab = 0;                      // num_outputs (labels + blank)
  std::vector<int> lengths;           // [batch] valid encoder frames
  std::vector<int> ids;               // [batch, time] argmax token ids
  std::vector<float> best_log_probs;  // [batch, time] log-probability of the argmax
  std::vector<float> log_probs;       // [batch, time, vocab]; only with keep_log_probs
  // Only with keep_block_outputs (tests): the output of every encoder block,
  // [batch, block_time[i], channels] each.
  std::vector<std::vector<float>> block_outputs;
  std::vector<int> block_time;
};

enum class Device { kAuto, kCpu, kCuda };

// Device memory of a backend that runs on an accelerator (Backend::DeviceMemory()).
struct DeviceMemoryInfo {
  int device = 0;  // the accelerator's ordinal (CUDA device N)
  // The whole device as the driver reports it (every process and context on it): total and
  // used (total - free) bytes. -1 when the query failed (backend_bytes is still valid).
  int64_t total_bytes = -1;
  int64_t used_bytes = -1;
  // Device bytes this backend itself holds: packed weights plus workspaces (activations,
  // lengths, outputs). Excludes the CUDA context, kernels' code and pinned host memory.
  int64_t backend_bytes = 0;
};

// "auto", "cpu" or "cuda".
absl::StatusOr<Device> ParseDevice(const std::string& name);

// GPU precision (kernels/precision.h; FP32 accumulation in every case): kFp32 is CUDA-core
// FMA and matches the CPU backend (~1e-4 relative); kFp16 / kBf16 run on tensor cores.
// "fp32", "fp16" or "bf16".
absl::StatusOr<kernels::Precision> ParseGpuPrecision(const std::string& name);

// CPU precision of the GEMM operands (FP32 accumulation in every case): "fp32"; "bf16" (AMX
// tiles, or vdpbf16ps on a CPU with AVX-512 BF16 but no AMX; kernels/cpu_features.h); "int8"
// (AMX INT8 tiles or AVX-512 VNNI, with the model folder's int8_calibration.json); "auto":
// bf16 where BF16 GEMMs beat FP32 ones (kernels::Bf16GemmFasterThanFp32: AMX, or AMD's fast
// vdpbf16ps, 1.8x FP32 on Zen 5; on Intel's Xeon the vdpbf16ps path is slower than FP32
// AVX-512), else fp32 (int8 is never automatic: it needs a calibration and changes more
// transcripts, docs/PERFORMANCE.md). Resolved here, so the result is never "auto".
absl::StatusOr<kernels::Precision> ParseCpuPrecision(const std::string& name);

// What an INT8 calibration sees of one CPU plan step (CpuStepObserver::BeforeStep). All
// borrowed for the call: x is the step's input [batch, in_time, C_in], residual_x[p] the p-th
// residual branch's input [batch, out_time, residual_channels[p]].
struct CpuStepView {
  int block = 0;      // -1: the decoder
  int sub_block = 0;  // index within the block
  const FoldedSubBlock* sub = nullptr;
  const float* x = nullptr;
  bool x_nonnegative = false;  // x is a ReLU's output (PlanStep::input_nonnegative)
  const float* const* residual_x = nullptr;
  // residual_x[p] is a ReLU's output (PlanStep::residual_nonnegative); null when there are none
  const std::vector<bool>* residual_nonnegative = nullptr;
  kernels::BatchGeometry geometry;
};

class CpuStepObserver {
 public:
  virtual ~CpuStepObserver() = default;
  virtual void BeforeStep(const CpuStepView& step) = 0;
};

struct BackendOptions {
  Device device = Device::kAuto;
  // CPU: intra-op threads per replica (each sub-block's frames split among them; the calling
  // thread is one, cpu_threads - 1 more are started with the backend). Results are
  // bit-identical for any value. Ignored by CUDA. [1, 256]
  int cpu_threads = 1;
  bool keep_log_probs = false;      // fill BackendOutput::log_probs
  bool keep_block_outputs = false;  // fill BackendOutput::block_outputs (tests only)
  // Workspaces are sized for these at creation, so Run() within them never allocates.
  // Larger batches still run (workspaces grow once, with a log line).
  int max_batch = 8;
  int max_feature_frames = 1600;  // 16 s at 10 ms per frame
  int cuda_device = 0;
  // GPU backends only.
  kernels::Precision gpu_precision = kernels::Precision::kFp32;
  // CPU backend only: kFp32, kBf16 (needs a hardware BF16 GEMM: creation fails without it) or
  // kInt8 (needs a hardware INT8 GEMM and an INT8 calibration: int8_calibration, else the
  // model's own).
  kernels::Precision cpu_precision = kernels::Precision::kFp32;
  // CPU kInt8 only: the calibration to use instead of Model::int8_calibration() (benchmarks
  // and tests of models without a folder). Checked against the model at creation.
  std::shared_ptr<const Int8Calibration> int8_calibration;
  // CPU backend only (INT8 calibration): called on the Run() thread before each plan step with
  // that step's inputs. Borrowed; must outlive the backend. Null: none.
  CpuStepObserver* cpu_step_observer = nullptr;
  // CUDA: replay each (batch, frames) shape's whole forward (features in, every launch, results
  // out) as one CUDA graph, captured on the shape's second Run (the first launches directly). Up to
  // kMaxCudaGraphs shapes are kept (then all are dropped and recaptured); growing the workspaces
  // drops them. Off (or with keep_block_outputs): every Run launches each kernel itself. Ignored by
  // the CPU.
  bool cuda_graphs = true;
  static constexpr int kMaxCudaGraphs = 64;

  absl::Status Validate() const;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Errors: shape mismatch (features != model's feat_in), non-positive sizes, lengths outside
  // [1, time]. Never aborts.
  virtual absl::Status Run(const FeatureBatch& input, BackendOutput* output) = 0;
  // "cpu" or "cuda:N".
  virtual std::string name() const = 0;
  // The device memory of a backend on an accelerator; nullopt for host backends (the CPU).
  // Unlike Run(), this may be called from any thread at any time while the backend exists,
  // concurrently with Run() (implementations must keep it lock-free and cheap: metrics scrapes
  // call it).
  virtual std::optional<DeviceMemoryInfo> DeviceMemory() const { return std::nullopt; }
};

// The input checks every Backend::Run makes before touching a kernel: non-null data, lengths
// and output; batch and time >= 1; `input.features` == config.feat_in; every length in
// [0, time]. INVALID_ARGUMENT naming the first violation, else OK. Thread-safe (pure).
absl::Status ValidateFeatureBatch(const FeatureBatch& input, const ModelConfig& config,
                                  const BackendOutput* output);

// Clears `output`'s per-block outputs and sizes them to `num_blocks` empty entries, ready for
// a keep_block_outputs run to fill. Thread-compatible.
void ResetBlockOutputs(int num_blocks, BackendOutput* output);

// Sets `output`'s shape: batch, time and vocab, and lengths copied from `lengths` ([batch]).
// Thread-compatible.
void SetOutputShape(int batch, int time, int vocab, const int* lengths, BackendOutput* output);

// Copies `count` floats of `log_probs` into output->log_probs, or clears them when `log_probs`
// is null (keep_log_probs off). Thread-compatible.
void SetLogProbs(const float* log_probs, std::size_t count, BackendOutput* output);

}  // namespace jasper

#endif  // JASPER_ENGINE_RUNTIME_BACKEND_H_
