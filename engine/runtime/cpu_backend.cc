#include "engine/runtime/cpu_backend.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/cpu_thread_pool.h"
#include "engine/runtime/execution_plan.h"
#include "engine/status_macros.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"

namespace jasper {
namespace {

using Floats = kernels::AlignedFloats;

class CpuBackend final : public Backend {
 public:
  // `int8` (the checked calibration) is read only when options.cpu_precision is kInt8.
  CpuBackend(std::shared_ptr<const Model> model, ExecutionPlan plan, const BackendOptions& options,
             bool use_reference, const Int8Calibration* int8)
      : model_(std::move(model)),
        plan_(std::move(plan)),
        options_(options),
        use_reference_(use_reference),
        pool_(options.cpu_threads) {
    // Weights packed once for the micro-kernel (residual 1x1 weights concatenated along K).
    std::size_t workspace = 0;
    for (const PlanStep& step : plan_.steps()) {
      const FoldedSubBlock& sub = *step.sub;
      std::vector<kernels::ResidualInput> residuals;
      for (std::size_t p = 0; p < sub.residual_weights.size(); ++p) {
        residuals.push_back({nullptr, sub.residual_weights[p].data(), sub.residual_channels[p],
                             static_cast<bool>(step.residual_nonnegative[p])});
      }
      // The reference mode runs FP32 whatever the precision (and has no INT8 calibration); under
      // INT8 a sub-block the calibration keeps in FP32 runs in FP32 (mixed precision).
      kernels::Precision precision =
          use_reference ? kernels::Precision::kFp32 : options.cpu_precision;
      const Int8SubBlockScales* layer = precision == kernels::Precision::kInt8
                                            ? int8->FindLayer(step.block, step.sub_block)
                                            : nullptr;
      if (layer != nullptr && layer->fp32) {
        precision = kernels::Precision::kFp32;
        layer = nullptr;
      }
      const std::vector<float>* scales = layer == nullptr ? nullptr : &layer->scales;
      kernels::Int8PackOptions int8_options;
      int8_options.nonnegative_input = step.input_nonnegative;
      if (layer != nullptr && !layer->depthwise_channel_scales.empty()) {
        int8_options.input_channel_scales = layer->depthwise_channel_scales.data();
      }
      if (layer != nullptr && !layer->depthwise_output_smoothing.empty()) {
        int8_options.output_smoothing = layer->depthwise_output_smoothing.data();
      }
      packed_.push_back(kernels::PackSubBlock(
          sub.desc, WeightsOf(sub), residuals.data(), static_cast<int>(residuals.size()), precision,
          scales == nullptr ? nullptr : scales->data(), int8_options));
      workspace = std::max(workspace, kernels::PackedSubBlockWorkspaceFloats(packed_.back()));
    }
    // One workspace per part (separate allocations: no false sharing between threads).
    workspaces_.resize(pool_.num_threads());
    for (Floats& w : workspaces_) w.assign(workspace, 0.0f);
    slots_.resize(plan_.num_slots());
    residual_x_.resize(plan_.max_residuals());
    residual_inputs_.resize(plan_.max_residuals());
    Reserve(options_.max_batch, options_.max_feature_frames);
  }

  std::string name() const override { return use_reference_ ? "cpu-reference" : "cpu"; }

  absl::Status Run(const FeatureBatch& input, BackendOutput* output) override;

 private:
  static kernels::SubBlockWeights WeightsOf(const FoldedSubBlock& sub) {
    kernels::SubBlockWeights weights;
    weights.depthwise = sub.depthwise.empty() ? nullptr : sub.depthwise.data();
    weights.weight = sub.weight.data();
    weights.bias = sub.bias.empty() ? nullptr : sub.bias.data();
    return weights;
  }
  // Grows buffers to hold a batch of `batch` x `frames` input frames (no-op when they already
  // do). Everything Run() needs is sized here, so Run() within the reserved shape allocates
  // nothing (the caller's BackendOutput vectors aside).
  void Reserve(int batch, int frames);
  float* Buffer(const PlanBuffer& buffer);

  std::shared_ptr<const Model> model_;
  ExecutionPlan plan_;
  BackendOptions options_;
  bool use_reference_;

  std::vector<kernels::PackedSubBlock> packed_;  // per plan step
  std::vector<Floats> slots_;
  Floats scratch_[2];  // intermediate sub-block outputs within a block
  Floats logits_;
  CpuThreadPool pool_;              // options.cpu_threads parts per sub-block
  std::vector<Floats> workspaces_;  // [pool_.num_threads()] kernel workspaces
  std::vector<int> set_time_;       // [num_length_sets]
  std::vector<int> set_lengths_;    // [num_length_sets, batch]
  std::vector<const float*> residual_x_;
  std::vector<kernels::ResidualInput> residual_inputs_;
  const float* input_data_ = nullptr;  // the current Run's features
  int reserved_batch_ = 0;
  std::size_t capacity_floats_ = 0;  // per activation buffer
};

void CpuBackend::Reserve(int batch, int frames) {
  if (batch > reserved_batch_) {
    reserved_batch_ = batch;
    set_time_.resize(plan_.num_length_sets());
    set_lengths_.resize(static_cast<std::size_t>(plan_.num_length_sets()) * batch);
  }
  const std::size_t needed = static_cast<std::size_t>(batch) *
                             static_cast<std::size_t>(plan_.MaxTime(frames)) *
                             static_cast<std::size_t>(plan_.max_channels());
  if (needed <= capacity_floats_) return;
  capacity_floats_ = needed;
  for (auto& slot : slots_) slot.resize(needed);
  for (auto& scratch : scratch_) scratch.resize(needed);
  logits_.resize(needed);
}

float* CpuBackend::Buffer(const PlanBuffer& buffer) {
  switch (buffer.kind) {
    case PlanBuffer::Kind::kInput:
      return const_cast<float*>(input_data_);  // only ever read
    case PlanBuffer::Kind::kSlot:
      return slots_[buffer.index].data();
    case PlanBuffer::Kind::kScratch:
      return scratch_[buffer.index].data();
    case PlanBuffer::Kind::kLogits:
      return logits_.data();
  }
  return nullptr;
}

absl::Status CpuBackend::Run(const FeatureBatch& input, BackendOutput* output) {
  JASPER_RETURN_IF_ERROR(ValidateFeatureBatch(input, model_->config(), output));
  const int batch = input.batch;
  Reserve(batch, input.time);
  JASPER_RETURN_IF_ERROR(
      plan_.ComputeShapes(input.time, input.lengths, batch, set_time_.data(), set_lengths_.data()));
  input_data_ = input.data;
  auto lengths_of = [&](int set) {
    return set_lengths_.data() + static_cast<std::size_t>(set) * batch;
  };

  if (options_.keep_block_outputs) {
    ResetBlockOutputs(static_cast<int>(model_->blocks().size()), output);
  }
  const std::vector<PlanStep>& steps = plan_.steps();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const PlanStep& step = steps[i];
    const FoldedSubBlock& sub = *step.sub;
    const float* x = Buffer(step.input);
    float* y = Buffer(step.output);
    const int num_residuals = static_cast<int>(step.residual_inputs.size());
    for (int p = 0; p < num_residuals; ++p) {
      residual_x_[p] = Buffer(step.residual_inputs[p]);
      residual_inputs_[p] = {residual_x_[p], sub.residual_weights[p].data(),
                             sub.residual_channels[p]};
    }
    kernels::BatchGeometry geometry;
    geometry.batch = batch;
    geometry.in_time = set_time_[step.in_set];
    geometry.out_time = set_time_[step.out_set];
    geometry.in_lengths = lengths_of(step.in_set);
    geometry.out_lengths = lengths_of(step.out_set);
    if (options_.cpu_step_observer != nullptr) {
      options_.cpu_step_observer->BeforeStep(CpuStepView{step.block, step.sub_block, &sub, x,
                                                         step.input_nonnegative, residual_x_.data(),
                                                         &step.residual_nonnegative, geometry});
    }
    if (use_reference_) {
      kernels::SubBlockReference(sub.desc, WeightsOf(sub), x, geometry, residual_inputs_.data(),
                                 num_residuals, y);
    } else if (pool_.num_threads() == 1) {
      kernels::FusedSubBlockCpuPacked(packed_[i], x, geometry, residual_x_.data(),
                                      workspaces_[0].data(), y);
    } else {
      // Every thread computes its own range of stacked frames (bit-identical to one thread).
      const kernels::PackedSubBlock& packed = packed_[i];
      const int parts = pool_.num_threads();
      auto part_step = [&](int part) {
        kernels::FusedSubBlockCpuPackedPart(packed, x, geometry, residual_x_.data(), parts, part,
                                            workspaces_[part].data(), y);
      };
      pool_.Run(part_step);
    }
    if (options_.keep_block_outputs && step.ends_block) {
      const std::size_t count =
          static_cast<std::size_t>(batch) * geometry.out_time * sub.desc.out_channels;
      output->block_outputs[step.block].assign(y, y + count);
      output->block_time[step.block] = geometry.out_time;
    }
  }
  input_data_ = nullptr;

  // Log-softmax + argmax over the decoder's logits (the last step, on the last length set).
  const PlanStep& decoder = steps.back();
  const int time = set_time_[decoder.out_set];
  const int* lengths = lengths_of(decoder.out_set);
  const int vocab = decoder.sub->desc.out_channels;
  SetOutputShape(batch, time, vocab, lengths, output);
  output->ids.resize(static_cast<std::size_t>(batch) * time);
  output->best_log_probs.resize(static_cast<std::size_t>(batch) * time);
  kernels::LogSoftmaxArgmax(logits_.data(), batch, time, vocab, lengths, logits_.data(),
                            output->ids.data(), output->best_log_probs.data());
  SetLogProbs(options_.keep_log_probs ? logits_.data() : nullptr,
              static_cast<std::size_t>(batch) * time * vocab, output);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(std::shared_ptr<const Model> model,
                                                          const BackendOptions& options,
                                                          bool use_reference) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateCpuBackend: no model");
  JASPER_RETURN_IF_ERROR(options.Validate());
  if (options.cpu_precision == kernels::Precision::kBf16 && !use_reference &&
      !kernels::HasBf16Gemm()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cpu_precision bf16 needs AMX or AVX-512 BF16, which the kernels cannot use "
                     "here (",
                     kernels::DescribeCpuFeatures(), "); use fp32 or auto"));
  }
  const Int8Calibration* int8 = nullptr;
  if (options.cpu_precision == kernels::Precision::kInt8 && !use_reference) {
    if (!kernels::HasInt8Gemm()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cpu_precision int8 needs AMX-INT8 or AVX-512 VNNI, which the kernels cannot use here (",
          kernels::DescribeCpuFeatures(), "); use fp32, bf16 or auto"));
    }
    if (options.int8_calibration != nullptr) {
      JASPER_RETURN_IF_ERROR(CheckInt8Calibration(*options.int8_calibration, *model));
      int8 = options.int8_calibration.get();
    } else if (model->int8_calibration() != nullptr) {
      int8 = model->int8_calibration();
    } else {
      const absl::Status& why = model->int8_calibration_status();
      return absl::FailedPreconditionError(
          absl::StrCat("cpu_precision int8 needs the model's INT8 calibration: ", why.message()));
    }
  }
  absl::StatusOr<ExecutionPlan> plan = ExecutionPlan::Create(*model);
  if (!plan.ok()) return plan.status();
  return std::unique_ptr<Backend>(
      new CpuBackend(std::move(model), *std::move(plan), options, use_reference, int8));
}

}  // namespace jasper
