#include "engine/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/sub_block.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace jasper {
namespace {

// Activation ids: 0 = encoder input (features), 1 + b = output of encoder block b.
int ActivationOfSource(int residual_source) { return residual_source + 1; }

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const Model> model, const BackendOptions& options,
             bool use_reference)
      : model_(std::move(model)), options_(options), use_reference_(use_reference) {
    PlanSlots();
    size_t workspace = 0;
    for (const FoldedBlock& block : model_->blocks()) {
      for (const FoldedSubBlock& sub : block.sub_blocks) {
        workspace = std::max(workspace, kernels::FusedSubBlockWorkspaceFloats(sub.desc));
      }
    }
    workspace = std::max(workspace, kernels::FusedSubBlockWorkspaceFloats(model_->decoder().desc));
    workspace_.assign(workspace, 0.0f);
    Reserve(options_.max_batch, options_.max_feature_frames);
  }

  std::string name() const override { return use_reference_ ? "cpu-reference" : "cpu"; }

  absl::Status Run(const FeatureBatch& input, BackendOutput* output) override;

 private:
  // Assigns each block output to a reusable buffer slot by liveness: an activation stays live
  // until the last block that reads it (as input or residual source).
  void PlanSlots();
  // Grows buffers to hold a batch of `batch` x `frames` input frames (no-op when they already do).
  void Reserve(int batch, int frames);
  void RunSubBlock(const FoldedSubBlock& sub, const float* x, int in_time, const int* in_lengths,
                   int out_time, const int* out_lengths, const kernels::ResidualInput* residuals,
                   int num_residuals, float* y, int batch);

  std::shared_ptr<const Model> model_;
  BackendOptions options_;
  bool use_reference_;

  std::vector<int> slot_of_block_;  // block b's output -> slot index
  int num_slots_ = 0;
  std::vector<std::vector<float>> slots_;
  std::vector<float> scratch_[2];  // intermediate sub-block outputs within a block
  std::vector<float> logits_;
  std::vector<float> workspace_;
  int max_channels_ = 0;
  size_t capacity_floats_ = 0;  // per activation buffer
};

void CpuBackend::PlanSlots() {
  const auto& blocks = model_->blocks();
  const int num_blocks = static_cast<int>(blocks.size());
  // last_use[a]: index of the last consumer (num_blocks = the decoder).
  std::vector<int> last_use(num_blocks + 1, -1);
  max_channels_ = model_->config().feat_in;
  for (int b = 0; b < num_blocks; ++b) {
    last_use[b] = std::max(last_use[b], b);  // block b reads activation b
    for (const FoldedSubBlock& sub : blocks[b].sub_blocks) {
      max_channels_ = std::max({max_channels_, sub.desc.in_channels, sub.desc.out_channels});
      for (int source : sub.residual_sources) {
        int a = ActivationOfSource(source);
        last_use[a] = std::max(last_use[a], b);
      }
    }
  }
  last_use[num_blocks] = num_blocks;
  max_channels_ = std::max(max_channels_, model_->decoder().desc.out_channels);

  slot_of_block_.assign(num_blocks, -1);
  std::vector<int> occupant;  // slot -> activation id it holds
  for (int b = 0; b < num_blocks; ++b) {
    int chosen = -1;
    for (int s = 0; s < static_cast<int>(occupant.size()); ++s) {
      if (last_use[occupant[s]] < b) {
        chosen = s;
        break;
      }
    }
    if (chosen < 0) {
      chosen = static_cast<int>(occupant.size());
      occupant.push_back(0);
    }
    occupant[chosen] = b + 1;
    slot_of_block_[b] = chosen;
  }
  num_slots_ = static_cast<int>(occupant.size());
  slots_.resize(num_slots_);
}

void CpuBackend::Reserve(int batch, int frames) {
  const size_t needed = static_cast<size_t>(batch) * static_cast<size_t>(frames) *
                        static_cast<size_t>(max_channels_);
  if (needed <= capacity_floats_) return;
  capacity_floats_ = needed;
  for (auto& slot : slots_) slot.resize(needed);
  for (auto& scratch : scratch_) scratch.resize(needed);
  logits_.resize(needed);
}

void CpuBackend::RunSubBlock(const FoldedSubBlock& sub, const float* x, int in_time,
                             const int* in_lengths, int out_time, const int* out_lengths,
                             const kernels::ResidualInput* residuals, int num_residuals, float* y,
                             int batch) {
  kernels::SubBlockWeights weights;
  weights.depthwise = sub.depthwise.empty() ? nullptr : sub.depthwise.data();
  weights.weight = sub.weight.data();
  weights.bias = sub.bias.empty() ? nullptr : sub.bias.data();
  kernels::BatchGeometry geometry;
  geometry.batch = batch;
  geometry.in_time = in_time;
  geometry.out_time = out_time;
  geometry.in_lengths = in_lengths;
  geometry.out_lengths = out_lengths;
  if (use_reference_) {
    kernels::SubBlockReference(sub.desc, weights, x, geometry, residuals, num_residuals, y);
  } else {
    kernels::FusedSubBlockCpu(sub.desc, weights, x, geometry, residuals, num_residuals,
                              workspace_.data(), y);
  }
}

absl::Status CpuBackend::Run(const FeatureBatch& input, BackendOutput* output) {
  const ModelConfig& config = model_->config();
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
  const int batch = input.batch;
  Reserve(batch, input.time);

  const auto& blocks = model_->blocks();
  const int num_blocks = static_cast<int>(blocks.size());
  // Per activation: pointer, padded time, lengths.
  std::vector<const float*> act_data(num_blocks + 1);
  std::vector<int> act_time(num_blocks + 1);
  std::vector<std::vector<int>> act_lengths(num_blocks + 1);
  act_data[0] = input.data;
  act_time[0] = input.time;
  act_lengths[0].assign(input.lengths, input.lengths + batch);

  if (options_.keep_block_outputs) {
    output->block_outputs.assign(num_blocks, {});
    output->block_time.assign(num_blocks, 0);
  }

  std::vector<int> lengths_a, lengths_b;
  std::vector<kernels::ResidualInput> residuals;
  for (int b = 0; b < num_blocks; ++b) {
    const FoldedBlock& block = blocks[b];
    const float* x = act_data[b];
    int time = act_time[b];
    std::vector<int> lengths = act_lengths[b];
    float* block_out = slots_[slot_of_block_[b]].data();
    const int repeat = static_cast<int>(block.sub_blocks.size());
    for (int j = 0; j < repeat; ++j) {
      const FoldedSubBlock& sub = block.sub_blocks[j];
      const int out_time = kernels::ConvOutputLength(sub.desc, time);
      if (out_time < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Run: input of ", input.time, " frames is too short for encoder block ", b));
      }
      std::vector<int> out_lengths(batch);
      for (int i = 0; i < batch; ++i) {
        out_lengths[i] = kernels::ConvOutputLength(sub.desc, lengths[i]);
      }
      residuals.clear();
      for (size_t p = 0; p < sub.residual_sources.size(); ++p) {
        const int a = ActivationOfSource(sub.residual_sources[p]);
        if (a < 0 || a > b || act_time[a] != out_time || act_lengths[a] != out_lengths) {
          return absl::InternalError(
              absl::StrCat("Run: residual source of block ", b, " does not match its output"));
        }
        kernels::ResidualInput residual;
        residual.x = act_data[a];
        residual.weight = sub.residual_weights[p].data();
        residual.channels = sub.residual_channels[p];
        residuals.push_back(residual);
      }
      float* y = (j == repeat - 1) ? block_out : scratch_[j % 2].data();
      RunSubBlock(sub, x, time, lengths.data(), out_time, out_lengths.data(), residuals.data(),
                  static_cast<int>(residuals.size()), y, batch);
      x = y;
      time = out_time;
      lengths = std::move(out_lengths);
    }
    act_data[b + 1] = block_out;
    act_time[b + 1] = time;
    act_lengths[b + 1] = lengths;
    if (options_.keep_block_outputs) {
      const int channels = block.sub_blocks.back().desc.out_channels;
      output->block_outputs[b].assign(block_out,
                                      block_out + static_cast<size_t>(batch) * time * channels);
      output->block_time[b] = time;
    }
  }

  // Decoder (1x1 conv with bias, identity) + log-softmax + argmax.
  const FoldedSubBlock& decoder = model_->decoder();
  const int time = act_time[num_blocks];
  const std::vector<int>& lengths = act_lengths[num_blocks];
  const int vocab = decoder.desc.out_channels;
  RunSubBlock(decoder, act_data[num_blocks], time, lengths.data(), time, lengths.data(), nullptr,
              0, logits_.data(), batch);
  output->batch = batch;
  output->time = time;
  output->vocab = vocab;
  output->lengths = lengths;
  output->ids.resize(static_cast<size_t>(batch) * time);
  output->best_log_probs.resize(static_cast<size_t>(batch) * time);
  kernels::LogSoftmaxArgmax(logits_.data(), batch, time, vocab, lengths.data(), logits_.data(),
                            output->ids.data(), output->best_log_probs.data());
  if (options_.keep_log_probs) {
    output->log_probs.assign(logits_.begin(),
                             logits_.begin() + static_cast<size_t>(batch) * time * vocab);
  } else {
    output->log_probs.clear();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(std::shared_ptr<const Model> model,
                                                          const BackendOptions& options,
                                                          bool use_reference) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateCpuBackend: no model");
  if (absl::Status status = options.Validate(); !status.ok()) return status;
  openblas_set_num_threads(options.cpu_threads);
  return std::unique_ptr<Backend>(new CpuBackend(std::move(model), options, use_reference));
}

}  // namespace jasper
