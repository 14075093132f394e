#include "engine/runtime/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/execution_plan.h"
#include "engine/status_macros.h"
#include "kernels/cuda/sub_block_cuda.h"
#include "kernels/cuda/weight_pack.h"
#include "kernels/sub_block.h"

namespace jasper {
namespace {

namespace kc = kernels::cuda;

absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  std::string message = absl::StrCat("CUDA backend: ", what, ": ", cudaGetErrorString(error));
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status KernelStatus(const kc::Result& result, const std::string& what) {
  if (result.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("CUDA backend: ", what, ": ", result.message));
}

// cudaMalloc'd device memory.
struct DeviceMemory {
  static constexpr const char* kAllocName = "cudaMalloc";
  static cudaError_t Allocate(void** ptr, std::size_t bytes) { return cudaMalloc(ptr, bytes); }
  static void Free(void* ptr) { cudaFree(ptr); }
};

// Page-locked host memory (async copies need it).
struct PinnedMemory {
  static constexpr const char* kAllocName = "cudaMallocHost";
  static cudaError_t Allocate(void** ptr, std::size_t bytes) { return cudaMallocHost(ptr, bytes); }
  static void Free(void* ptr) { cudaFreeHost(ptr); }
};

// Owning allocation of `Memory` (DeviceMemory or PinnedMemory); grows (never shrinks) on
// Reserve. Thread-compatible.
template <typename Memory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  ~CudaBuffer() { Release(); }

  absl::Status Reserve(std::size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    Release();
    void* ptr = nullptr;
    JASPER_RETURN_IF_ERROR(CudaStatus(Memory::Allocate(&ptr, bytes), Memory::kAllocName));
    ptr_ = ptr;
    bytes_ = bytes;
    return absl::OkStatus();
  }
  void Release() {
    if (ptr_ != nullptr) Memory::Free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

using DeviceBuffer = CudaBuffer<DeviceMemory>;
using PinnedBuffer = CudaBuffer<PinnedMemory>;

// An instantiated CUDA graph (owning).
class GraphExec {
 public:
  explicit GraphExec(cudaGraphExec_t exec) : exec_(exec) {}
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  }
  cudaGraphExec_t get() const { return exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

// One sub-block's packed weights on the device.
struct DeviceSubBlock {
  DeviceBuffer weight;
  DeviceBuffer depthwise;
  DeviceBuffer bias;
  kc::DeviceSubBlock view;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<const Model> model, ExecutionPlan plan, const BackendOptions& options,
              kernels::Precision precision)
      : model_(std::move(model)),
        plan_(std::move(plan)),
        options_(options),
        precision_(precision),
        elem_bytes_(kc::PrecisionBytes(precision)) {}

  ~CudaBackend() override {
    cudaSetDevice(options_.cuda_device);
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    // The buffers free themselves after this, on the device made current above.
  }

  absl::Status Init();
  std::string name() const override { return absl::StrCat("cuda:", options_.cuda_device); }
  absl::Status Run(const FeatureBatch& input, BackendOutput* output) override;
  std::optional<DeviceMemoryInfo> DeviceMemory() const override;

 private:
  absl::Status Upload(const void* host, std::size_t bytes, DeviceBuffer* buffer);
  absl::Status PackOne(const FoldedSubBlock& sub, DeviceSubBlock* out);
  absl::Status Reserve(int batch, int frames);
  absl::Status ReserveWorkspaces(int batch, int frames);
  // Enqueues the forward of `input` on stream_ (the pinned host buffers are already filled):
  // features and lengths up, every sub-block, the head, the results down. With
  // keep_block_outputs it also downloads (and waits for) each block's output.
  absl::Status Enqueue(const FeatureBatch& input, BackendOutput* output);
  // Enqueue() through the graph of this shape: captured on the shape's second Run (see
  // BackendOptions::cuda_graphs). A capture that CUDA refuses turns graphs off for this backend
  // (one log line) and enqueues directly.
  absl::Status EnqueueGraph(const FeatureBatch& input, BackendOutput* output);
  // Sums the sizes of every device buffer into device_bytes_. Called by the thread that grows
  // the buffers (Init / Run), after each growth.
  void UpdateDeviceBytes();
  const void* Buffer(const PlanBuffer& buffer) const;
  std::size_t ActivationBytes(std::size_t elements) const { return elements * elem_bytes_; }

  std::shared_ptr<const Model> model_;
  ExecutionPlan plan_;
  BackendOptions options_;
  kernels::Precision precision_;
  std::size_t elem_bytes_;
  cudaStream_t stream_ = nullptr;
  int device_smem_limit_ = 0;

  std::vector<DeviceSubBlock> steps_;  // per plan step (the decoder last)
  int num_sub_blocks_ = 0;             // encoder sub-blocks

  std::vector<int> set_time_;  // [num_length_sets], per Run
  std::vector<const void*> residual_x_;
  int max_channels_ = 0;
  int vocab_ = 0;
  int reserved_batch_ = 0;
  int reserved_frames_ = 0;
  // Device bytes held by the buffers below and steps_: written by Init/Run (UpdateDeviceBytes),
  // read by DeviceMemory() from any thread.
  std::atomic<int64_t> device_bytes_{0};

  // Device buffers (elements of the run precision unless stated).
  std::vector<DeviceBuffer> slots_;
  DeviceBuffer scratch_[2];
  DeviceBuffer input_;         // [batch, frames, feat_in]
  DeviceBuffer features_f32_;  // FP32 staging for the cast (FP16/BF16 runs only)
  DeviceBuffer logits_;        // [batch, time, vocab]
  DeviceBuffer lengths_;       // int32 [num_sub_blocks + 1, batch]
  DeviceBuffer ids_;           // int32 [batch, time]
  DeviceBuffer best_;          // FP32 [batch, time]
  DeviceBuffer log_probs_;     // FP32 [batch, time, vocab] (keep_log_probs only)
  // Pinned host staging.
  PinnedBuffer features_host_;
  PinnedBuffer lengths_host_;
  PinnedBuffer ids_host_;
  PinnedBuffer best_host_;
  PinnedBuffer log_probs_host_;

  // Captured forwards by (batch, frames); they hold the buffers' addresses, so they are
  // dropped whenever a buffer is reallocated. Declared last: destroyed before the buffers.
  std::map<std::pair<int, int>, GraphExec> graphs_;
  std::set<std::pair<int, int>> shapes_seen_;  // shapes run at least once
  // options.cuda_graphs, off with keep_block_outputs (those runs sync mid-forward) and after a
  // refused capture.
  bool graphs_enabled_ = options_.cuda_graphs && !options_.keep_block_outputs;
};

absl::Status CudaBackend::Upload(const void* host, std::size_t bytes, DeviceBuffer* buffer) {
  if (bytes == 0) return absl::OkStatus();
  JASPER_RETURN_IF_ERROR(buffer->Reserve(bytes));
  return CudaStatus(cudaMemcpy(buffer->get(), host, bytes, cudaMemcpyHostToDevice),
                    "weight upload");
}

absl::Status CudaBackend::PackOne(const FoldedSubBlock& sub, DeviceSubBlock* out) {
  kernels::SubBlockWeights weights;
  weights.depthwise = sub.depthwise.empty() ? nullptr : sub.depthwise.data();
  weights.weight = sub.weight.data();
  weights.bias = sub.bias.empty() ? nullptr : sub.bias.data();
  std::vector<const float*> residual_weights;
  for (const auto& w : sub.residual_weights) residual_weights.push_back(w.data());
  const int num_residuals = static_cast<int>(sub.residual_channels.size());
  if (static_cast<int>(residual_weights.size()) != num_residuals) {
    return absl::InternalError("CUDA backend: residual weights and channels disagree");
  }
  kc::PackedSubBlock packed;
  std::string error;
  if (!kc::PackSubBlock(sub.desc, weights, residual_weights.data(), sub.residual_channels.data(),
                        num_residuals, precision_, &packed, &error)) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA backend: ", error));
  }
  const int smem = kc::FusedSubBlockSmemBytes(sub.desc, precision_);
  if (smem > device_smem_limit_) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA backend: a sub-block with kernel_size ", sub.desc.kernel_size,
                     " and dilation ", sub.desc.dilation, " needs ", smem,
                     " bytes of shared memory; the device has ", device_smem_limit_));
  }
  JASPER_RETURN_IF_ERROR(Upload(packed.weight.data(), packed.weight.size(), &out->weight));
  JASPER_RETURN_IF_ERROR(
      Upload(packed.depthwise.data(), packed.depthwise.size() * sizeof(float), &out->depthwise));
  JASPER_RETURN_IF_ERROR(
      Upload(packed.bias.data(), packed.bias.size() * sizeof(float), &out->bias));
  kc::DeviceSubBlock& view = out->view;
  view.desc = sub.desc;
  view.n_padded = packed.n_padded;
  view.device = options_.cuda_device;  // both queried once in Init(), not per launch
  view.smem_limit_bytes = device_smem_limit_;
  view.k_steps = packed.k_steps;
  view.num_residuals = num_residuals;
  for (int p = 0; p < num_residuals; ++p) view.residual_channels[p] = sub.residual_channels[p];
  view.weight = out->weight.get();
  view.depthwise = sub.desc.separable ? out->depthwise.as<const float>() : nullptr;
  view.bias = out->bias.as<const float>();
  return absl::OkStatus();
}

absl::Status CudaBackend::Init() {
  const int count = kc::CudaDeviceCount();
  if (count == 0) {
    return absl::FailedPreconditionError(
        "device 'cuda' requested but no CUDA GPU (or driver) is available; use --device=cpu");
  }
  if (options_.cuda_device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda_device ", options_.cuda_device, " does not exist (", count, " GPUs)"));
  }
  JASPER_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.cuda_device), "cudaSetDevice"));
  JASPER_RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&device_smem_limit_, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                             options_.cuda_device),
      "cudaDeviceGetAttribute"));
  int major = 0;
  JASPER_RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, options_.cuda_device),
      "cudaDeviceGetAttribute"));
  if (major < 8) {
    return absl::FailedPreconditionError(
        "CUDA backend needs compute capability 8.0 or newer (cp.async, BF16 tensor cores)");
  }
  JASPER_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));

  const std::vector<PlanStep>& steps = plan_.steps();
  steps_ = std::vector<DeviceSubBlock>(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    JASPER_RETURN_IF_ERROR(PackOne(*steps[i].sub, &steps_[i]));
  }
  num_sub_blocks_ = plan_.num_length_sets() - 1;
  vocab_ = model_->decoder().desc.out_channels;
  max_channels_ = plan_.max_channels();
  slots_ = std::vector<DeviceBuffer>(plan_.num_slots());
  set_time_.assign(plan_.num_length_sets(), 0);
  residual_x_.reserve(plan_.max_residuals());
  JASPER_RETURN_IF_ERROR(Reserve(options_.max_batch, options_.max_feature_frames));
  // The weights went up with cudaMemcpy from pageable memory on the legacy stream, which
  // `stream_` (non-blocking) does not wait for: finish them (and surface any error) here.
  return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

const void* CudaBackend::Buffer(const PlanBuffer& buffer) const {
  switch (buffer.kind) {
    case PlanBuffer::Kind::kInput:
      return input_.get();
    case PlanBuffer::Kind::kSlot:
      return slots_[buffer.index].get();
    case PlanBuffer::Kind::kScratch:
      return scratch_[buffer.index].get();
    case PlanBuffer::Kind::kLogits:
      return logits_.get();
  }
  return nullptr;
}

void CudaBackend::UpdateDeviceBytes() {
  std::size_t total = 0;
  for (const DeviceSubBlock& step : steps_) {
    total += step.weight.bytes() + step.depthwise.bytes() + step.bias.bytes();
  }
  for (const DeviceBuffer& slot : slots_) total += slot.bytes();
  for (const DeviceBuffer& scratch : scratch_) total += scratch.bytes();
  for (const DeviceBuffer* buffer :
       {&input_, &features_f32_, &logits_, &lengths_, &ids_, &best_, &log_probs_}) {
    total += buffer->bytes();
  }
  device_bytes_.store(static_cast<int64_t>(total), std::memory_order_relaxed);
}

std::optional<DeviceMemoryInfo> CudaBackend::DeviceMemory() const {
  DeviceMemoryInfo info;
  info.device = options_.cuda_device;
  info.backend_bytes = device_bytes_.load(std::memory_order_relaxed);
  // cudaMemGetInfo reports on the calling thread's current device: select ours, then restore
  // the caller's so that a scrape thread's state is left as it was.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (cudaSetDevice(options_.cuda_device) == cudaSuccess &&
      cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    info.total_bytes = static_cast<int64_t>(total_bytes);
    info.used_bytes = static_cast<int64_t>(total_bytes - std::min(free_bytes, total_bytes));
  } else {
    cudaGetLastError();  // clear this thread's last error (not sticky); the gauges go absent
  }
  if (previous >= 0 && previous != options_.cuda_device) cudaSetDevice(previous);
  return info;
}

absl::Status CudaBackend::Reserve(int batch, int frames) {
  if (batch <= reserved_batch_ && frames <= reserved_frames_) return absl::OkStatus();
  absl::Status status = ReserveWorkspaces(batch, frames);
  if (!status.ok()) {
    // Some buffers may have been freed before a failed allocation: the next Run reserves
    // again rather than trusting the old sizes.
    reserved_batch_ = 0;
    reserved_frames_ = 0;
  }
  UpdateDeviceBytes();  // also after a failure: some buffers may have been freed or grown
  return status;
}

absl::Status CudaBackend::ReserveWorkspaces(int batch, int frames) {
  if (reserved_batch_ > 0) {
    std::cerr << "jasper: CUDA backend grows its workspaces to batch "
              << std::max(batch, reserved_batch_) << " x " << std::max(frames, reserved_frames_)
              << " frames\n";
  }
  graphs_.clear();  // they hold addresses of the buffers about to be reallocated
  batch = std::max(batch, reserved_batch_);
  frames = std::max(frames, reserved_frames_);
  const std::size_t rows = static_cast<std::size_t>(batch) * plan_.MaxTime(frames);
  const std::size_t act = rows * max_channels_;
  const std::size_t feat = static_cast<std::size_t>(batch) * frames * model_->config().feat_in;
  const std::size_t length_sets = static_cast<std::size_t>(num_sub_blocks_) + 1;
  for (DeviceBuffer& slot : slots_) {
    JASPER_RETURN_IF_ERROR(slot.Reserve(ActivationBytes(act)));
  }
  for (DeviceBuffer& scratch : scratch_) {
    JASPER_RETURN_IF_ERROR(scratch.Reserve(ActivationBytes(act)));
  }
  std::vector<std::pair<DeviceBuffer*, std::size_t>> device = {
      {&input_, ActivationBytes(feat)},
      {&logits_, ActivationBytes(rows * vocab_)},
      {&lengths_, sizeof(int) * length_sets * batch},
      {&ids_, sizeof(int) * rows},
      {&best_, sizeof(float) * rows}};
  if (precision_ != kernels::Precision::kFp32)
    device.push_back({&features_f32_, sizeof(float) * feat});
  if (options_.keep_log_probs) device.push_back({&log_probs_, sizeof(float) * rows * vocab_});
  for (auto& [buffer, bytes] : device) {
    JASPER_RETURN_IF_ERROR(buffer->Reserve(bytes));
  }
  std::vector<std::pair<PinnedBuffer*, std::size_t>> pinned = {
      {&features_host_, sizeof(float) * feat},
      {&lengths_host_, sizeof(int) * length_sets * batch},
      {&ids_host_, sizeof(int) * rows},
      {&best_host_, sizeof(float) * rows}};
  if (options_.keep_log_probs) pinned.push_back({&log_probs_host_, sizeof(float) * rows * vocab_});
  for (auto& [buffer, bytes] : pinned) {
    JASPER_RETURN_IF_ERROR(buffer->Reserve(bytes));
  }
  reserved_batch_ = batch;
  reserved_frames_ = frames;
  return absl::OkStatus();
}

absl::Status CudaBackend::Run(const FeatureBatch& input, BackendOutput* output) {
  JASPER_RETURN_IF_ERROR(ValidateFeatureBatch(input, model_->config(), output));
  JASPER_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.cuda_device), "cudaSetDevice"));
  // A previous Run that failed part-way may have left copies from the pinned buffers in
  // flight; wait for them before refilling those buffers (instant when the stream is idle).
  JASPER_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "previous run"));
  const int batch = input.batch;
  JASPER_RETURN_IF_ERROR(Reserve(batch, input.time));

  // Host-side shapes: the time extent and lengths of every activation (the same plan the CPU
  // backend walks). Length set 0 = the input; set 1 + i = the output of sub-block i.
  int* lengths_host = lengths_host_.as<int>();
  JASPER_RETURN_IF_ERROR(
      plan_.ComputeShapes(input.time, input.lengths, batch, set_time_.data(), lengths_host));
  const std::size_t feat = static_cast<std::size_t>(batch) * input.time * input.features;
  std::memcpy(features_host_.as<float>(), input.data, feat * sizeof(float));
  if (options_.keep_block_outputs) {
    ResetBlockOutputs(static_cast<int>(model_->blocks().size()), output);
  }
  JASPER_RETURN_IF_ERROR(graphs_enabled_ ? EnqueueGraph(input, output) : Enqueue(input, output));
  JASPER_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "run"));

  const int final_set = plan_.steps().back().out_set;
  const int time = set_time_[final_set];
  const std::size_t frames = static_cast<std::size_t>(batch) * time;
  SetOutputShape(batch, time, vocab_, lengths_host + static_cast<std::size_t>(final_set) * batch,
                 output);
  output->ids.assign(ids_host_.as<int>(), ids_host_.as<int>() + frames);
  output->best_log_probs.assign(best_host_.as<float>(), best_host_.as<float>() + frames);
  SetLogProbs(options_.keep_log_probs ? log_probs_host_.as<float>() : nullptr, frames * vocab_,
              output);
  return absl::OkStatus();
}

absl::Status CudaBackend::Enqueue(const FeatureBatch& input, BackendOutput* output) {
  const int batch = input.batch;
  const std::vector<int>& set_time = set_time_;
  int* lengths_host = lengths_host_.as<int>();

  // Features: pinned -> device (cast to the run precision on the device).
  const std::size_t feat = static_cast<std::size_t>(batch) * input.time * input.features;
  void* feature_target =
      precision_ == kernels::Precision::kFp32 ? input_.get() : features_f32_.get();
  JASPER_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(feature_target, features_host_.as<float>(), feat * sizeof(float),
                                 cudaMemcpyHostToDevice, stream_),
                 "features upload"));
  if (precision_ != kernels::Precision::kFp32) {
    JASPER_RETURN_IF_ERROR(KernelStatus(
        kc::LaunchCastFromFloat(features_f32_.as<float>(), precision_, feat, input_.get(), stream_),
        "feature cast"));
  }
  const std::size_t length_ints = static_cast<std::size_t>(num_sub_blocks_ + 1) * batch;
  JASPER_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(lengths_.get(), lengths_host, length_ints * sizeof(int),
                                 cudaMemcpyHostToDevice, stream_),
                 "lengths upload"));
  const int* lengths_device = lengths_.as<const int>();
  auto device_lengths = [&](int set) {
    return lengths_device + static_cast<std::size_t>(set) * batch;
  };
  const std::vector<PlanStep>& steps = plan_.steps();
  for (std::size_t i = 0; i + 1 < steps.size(); ++i) {  // the decoder (last step) below
    const PlanStep& step = steps[i];
    residual_x_.clear();
    for (const PlanBuffer& residual : step.residual_inputs) residual_x_.push_back(Buffer(residual));
    void* y = const_cast<void*>(Buffer(step.output));
    kc::DeviceGeometry geometry;
    geometry.batch = batch;
    geometry.in_time = set_time[step.in_set];
    geometry.out_time = set_time[step.out_set];
    geometry.in_lengths = device_lengths(step.in_set);
    geometry.out_lengths = device_lengths(step.out_set);
    JASPER_RETURN_IF_ERROR(
        KernelStatus(kc::LaunchFusedSubBlock(steps_[i].view, precision_, Buffer(step.input),
                                             geometry, residual_x_.data(), y, stream_),
                     absl::StrCat("block ", step.block, " sub-block ", step.sub_block)));
    if (options_.keep_block_outputs && step.ends_block) {
      const int channels = step.sub->desc.out_channels;
      const std::size_t count = static_cast<std::size_t>(batch) * set_time[step.out_set] * channels;
      std::vector<unsigned char> raw(count * elem_bytes_);
      JASPER_RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(raw.data(), y, raw.size(), cudaMemcpyDeviceToHost, stream_),
                     "block output download"));
      JASPER_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "block output sync"));
      output->block_outputs[step.block].resize(count);
      kc::ConvertToFloat(precision_, raw.data(), count, output->block_outputs[step.block].data());
      output->block_time[step.block] = set_time[step.out_set];
    }
  }

  // Decoder (1x1 conv with bias, identity) + device log-softmax/argmax.
  const PlanStep& decoder = steps.back();
  const int final_set = decoder.out_set;
  const int time = set_time[final_set];
  kc::DeviceGeometry geometry;
  geometry.batch = batch;
  geometry.in_time = time;
  geometry.out_time = time;
  geometry.in_lengths = device_lengths(final_set);
  geometry.out_lengths = device_lengths(final_set);
  JASPER_RETURN_IF_ERROR(
      KernelStatus(kc::LaunchFusedSubBlock(steps_.back().view, precision_, Buffer(decoder.input),
                                           geometry, nullptr, logits_.get(), stream_),
                   "decoder"));
  float* log_probs_device = options_.keep_log_probs ? log_probs_.as<float>() : nullptr;
  JASPER_RETURN_IF_ERROR(
      KernelStatus(kc::LaunchLogSoftmaxArgmax(logits_.get(), precision_, batch, time, vocab_,
                                              device_lengths(final_set), log_probs_device,
                                              ids_.as<int>(), best_.as<float>(), stream_),
                   "log-softmax/argmax"));
  const std::size_t frames = static_cast<std::size_t>(batch) * time;
  std::vector<std::pair<void*, std::pair<const void*, std::size_t>>> downloads = {
      {ids_host_.as<void>(), {ids_.get(), frames * sizeof(int)}},
      {best_host_.as<void>(), {best_.get(), frames * sizeof(float)}}};
  if (options_.keep_log_probs) {
    downloads.push_back(
        {log_probs_host_.as<void>(), {log_probs_.get(), frames * vocab_ * sizeof(float)}});
  }
  for (auto& [dst, src] : downloads) {
    JASPER_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(dst, src.first, src.second, cudaMemcpyDeviceToHost, stream_),
                   "result download"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::EnqueueGraph(const FeatureBatch& input, BackendOutput* output) {
  const std::pair<int, int> key(input.batch, input.time);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    // A shape's first Run launches directly: rare shapes get no graph, and every kernel has
    // done its one-time setup (shared-memory opt-in) before any capture.
    if (shapes_seen_.size() >= 4 * BackendOptions::kMaxCudaGraphs) shapes_seen_.clear();
    if (shapes_seen_.insert(key).second) return Enqueue(input, output);
    if (static_cast<int>(graphs_.size()) >= BackendOptions::kMaxCudaGraphs) graphs_.clear();
    JASPER_RETURN_IF_ERROR(CudaStatus(
        cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "graph capture"));
    const absl::Status enqueued = Enqueue(input, output);
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    cudaGraphExec_t exec = nullptr;
    cudaError_t instantiated = cudaErrorInvalidValue;
    if (enqueued.ok() && ended == cudaSuccess && graph != nullptr) {
      instantiated = cudaGraphInstantiate(&exec, graph, 0);
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!enqueued.ok()) {
      cudaGetLastError();
      return enqueued;  // a launch error: the same as without graphs
    }
    if (ended != cudaSuccess || instantiated != cudaSuccess) {
      // CUDA refused the capture (a driver or runtime without full graph support): run this
      // backend without graphs from now on.
      const cudaError_t error = ended != cudaSuccess ? ended : instantiated;
      cudaGetLastError();
      std::cerr << "jasper: CUDA backend: graph capture failed (" << cudaGetErrorString(error)
                << "); launching kernels directly\n";
      graphs_enabled_ = false;
      graphs_.clear();
      return Enqueue(input, output);
    }
    it = graphs_.emplace(key, exec).first;
  }
  return CudaStatus(cudaGraphLaunch(it->second.get(), stream_), "cudaGraphLaunch");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(std::shared_ptr<const Model> model,
                                                           const BackendOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateCudaBackend: no model");
  JASPER_RETURN_IF_ERROR(options.Validate());
  absl::StatusOr<ExecutionPlan> plan = ExecutionPlan::Create(*model);
  if (!plan.ok()) return plan.status();
  auto backend = std::make_unique<CudaBackend>(std::move(model), *std::move(plan), options,
                                               options.gpu_precision);
  JASPER_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace jasper
