#include "engine/runtime/backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cpu_features.h"

namespace jasper {

absl::StatusOr<Device> ParseDevice(const std::string& name) {
  if (name == "auto") return Device::kAuto;
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", name, "' (expected auto, cpu or cuda)"));
}

absl::StatusOr<kernels::Precision> ParseGpuPrecision(const std::string& name) {
  if (name == "fp32") return kernels::Precision::kFp32;
  if (name == "fp16") return kernels::Precision::kFp16;
  if (name == "bf16") return kernels::Precision::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown GPU precision '", name, "' (expected fp32, fp16 or bf16)"));
}

absl::StatusOr<kernels::Precision> ParseCpuPrecision(const std::string& name) {
  if (name == "fp32") return kernels::Precision::kFp32;
  if (name == "bf16") return kernels::Precision::kBf16;
  if (name == "int8") return kernels::Precision::kInt8;
  if (name == "auto") {
    return kernels::Bf16GemmFasterThanFp32() ? kernels::Precision::kBf16
                                             : kernels::Precision::kFp32;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown CPU precision '", name, "' (expected auto, fp32, bf16 or int8)"));
}

absl::Status BackendOptions::Validate() const {
  if (cpu_precision != kernels::Precision::kFp32 && cpu_precision != kernels::Precision::kBf16 &&
      cpu_precision != kernels::Precision::kInt8) {
    return absl::InvalidArgumentError("cpu_precision must be fp32, bf16 or int8");
  }
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

absl::StatusOr<PaddedFeatureBatch> PaddedFeatureBatch::Pack(
    const std::vector<const Features*>& members) {
  if (members.empty()) return absl::InvalidArgumentError("an empty batch");
  PaddedFeatureBatch out;
  out.features_ = members[0]->num_features;
  for (const Features* f : members) {
    if (f->num_features != out.features_) {
      return absl::InvalidArgumentError(absl::StrCat("features with ", f->num_features,
                                                     " channels in a batch of ", out.features_));
    }
    out.time_ = std::max(out.time_, f->padded_frames);
  }
  const size_t stride = static_cast<size_t>(out.time_) * out.features_;
  out.data_.assign(members.size() * stride, 0.0f);
  out.lengths_.reserve(members.size());
  for (size_t b = 0; b < members.size(); ++b) {
    const Features* f = members[b];
    std::copy(f->data.begin(), f->data.end(), out.data_.begin() + b * stride);
    out.lengths_.push_back(f->valid_frames);
  }
  return out;
}

absl::Status ValidateFeatureBatch(const FeatureBatch& input, const ModelConfig& config,
                                  const BackendOutput* output) {
  if (input.data == nullptr || input.lengths == nullptr || output == nullptr) {
    return absl::InvalidArgumentError("Run: null input, lengths or output");
  }
  if (input.batch < 1 || input.time < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Run: empty batch (batch=", input.batch, ", time=", input.time, ")"));
  }
  if (input.features != config.feat_in) {
    return absl::InvalidArgumentError(absl::StrCat("Run: model expects ", config.feat_in,
                                                   " features per frame, got ", input.features));
  }
  for (int b = 0; b < input.batch; ++b) {
    if (input.lengths[b] < 0 || input.lengths[b] > input.time) {
      return absl::InvalidArgumentError(absl::StrCat("Run: length ", input.lengths[b], " of item ",
                                                     b, " outside [0, ", input.time, "]"));
    }
  }
  return absl::OkStatus();
}

void ResetBlockOutputs(int num_blocks, BackendOutput* output) {
  output->block_outputs.assign(num_blocks, {});
  output->block_time.assign(num_blocks, 0);
}

void SetOutputShape(int batch, int time, int vocab, const int* lengths, BackendOutput* output) {
  output->batch = batch;
  output->time = time;
  output->vocab = vocab;
  output->lengths.assign(lengths, lengths + batch);
}

void SetLogProbs(const float* log_probs, std::size_t count, BackendOutput* output) {
  if (log_probs != nullptr) {
    output->log_probs.assign(log_probs, log_probs + count);
  } else {
    output->log_probs.clear();
  }
}

}  // namespace jasper
