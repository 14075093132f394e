#include "engine/runtime/execution_plan.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "kernels/sub_block.h"

namespace jasper {

absl::StatusOr<ExecutionPlan> ExecutionPlan::Create(const Model& model) {
  ExecutionPlan plan;
  plan.model_ = &model;
  const auto& blocks = model.blocks();
  const int num_blocks = static_cast<int>(blocks.size());
  // Activation ids: 0 = encoder input (features), 1 + b = output of encoder block b.
  // last_use[a]: the last block reading activation a (as input or residual source);
  // num_blocks = the decoder.
  std::vector<int> last_use(num_blocks + 1, -1);
  plan.max_channels_ = std::max(model.config().feat_in, model.decoder().desc.out_channels);
  for (int b = 0; b < num_blocks; ++b) {
    last_use[b] = std::max(last_use[b], b);  // block b reads activation b
    for (const FoldedSubBlock& sub : blocks[b].sub_blocks) {
      plan.max_channels_ =
          std::max({plan.max_channels_, sub.desc.in_channels, sub.desc.out_channels});
      plan.max_residuals_ =
          std::max(plan.max_residuals_, static_cast<int>(sub.residual_sources.size()));
      if (sub.residual_sources.size() != sub.residual_weights.size() ||
          sub.residual_sources.size() != sub.residual_channels.size()) {
        return absl::InternalError(
            absl::StrCat("plan: residual sources, weights and channels disagree in block ", b));
      }
      for (int source : sub.residual_sources) {
        const int a = source + 1;
        if (a < 0 || a > b) {
          return absl::InternalError(
              absl::StrCat("plan: block ", b, " reads a residual from activation ", a));
        }
        last_use[a] = std::max(last_use[a], b);
      }
    }
  }
  last_use[num_blocks] = num_blocks;

  // Block outputs -> slots by liveness: a slot is reused once its activation's last reader ran.
  std::vector<int> slot_of_block(num_blocks, -1);
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
    slot_of_block[b] = chosen;
  }
  plan.num_slots_ = static_cast<int>(occupant.size());

  auto buffer_of = [&](int activation) {
    if (activation == 0) return PlanBuffer{PlanBuffer::Kind::kInput, 0};
    return PlanBuffer{PlanBuffer::Kind::kSlot, slot_of_block[activation - 1]};
  };
  std::vector<int> set_of(num_blocks + 1, 0);  // activation -> its length set
  // activation -> every value >= 0 (a block's output whose last sub-block ends in a ReLU)
  std::vector<bool> relu_of(num_blocks + 1, false);
  int set = 0;
  // Whether the step writing `input` ends in a ReLU (the features: no).
  bool input_nonnegative = false;
  for (int b = 0; b < num_blocks; ++b) {
    const int repeat = static_cast<int>(blocks[b].sub_blocks.size());
    PlanBuffer input = buffer_of(b);
    for (int j = 0; j < repeat; ++j) {
      const FoldedSubBlock& sub = blocks[b].sub_blocks[j];
      PlanStep step;
      step.sub = &sub;
      step.block = b;
      step.sub_block = j;
      step.ends_block = j == repeat - 1;
      step.in_set = set;
      step.out_set = set + 1;
      step.input = input;
      step.input_nonnegative = input_nonnegative;
      step.output =
          step.ends_block ? buffer_of(b + 1) : PlanBuffer{PlanBuffer::Kind::kScratch, j % 2};
      for (int source : sub.residual_sources) {
        step.residual_inputs.push_back(buffer_of(source + 1));
        step.residual_sets.push_back(set_of[source + 1]);
        step.residual_nonnegative.push_back(relu_of[source + 1]);
      }
      input = step.output;
      input_nonnegative = sub.desc.activation == kernels::Activation::kRelu;
      ++set;
      plan.steps_.push_back(std::move(step));
    }
    set_of[b + 1] = set;
    relu_of[b + 1] = input_nonnegative;  // the block's last sub-block ends in a ReLU
  }
  plan.num_length_sets_ = set + 1;
  PlanStep decoder;
  decoder.sub = &model.decoder();
  decoder.in_set = decoder.out_set = set;
  decoder.input = buffer_of(num_blocks);
  decoder.input_nonnegative = input_nonnegative;
  decoder.output = PlanBuffer{PlanBuffer::Kind::kLogits, 0};
  plan.steps_.push_back(std::move(decoder));
  return plan;
}

int ExecutionPlan::MaxTime(int frames) const {
  int time = frames;
  int max_time = frames;
  for (const PlanStep& step : steps_) {
    if (step.block < 0) break;
    time = kernels::ConvOutputLength(step.sub->desc, time);
    max_time = std::max(max_time, time);
  }
  return max_time;
}

absl::Status ExecutionPlan::ComputeShapes(int time, const int* lengths, int batch, int* set_time,
                                          int* set_lengths) const {
  set_time[0] = time;
  std::copy(lengths, lengths + batch, set_lengths);
  for (const PlanStep& step : steps_) {
    if (step.block < 0) continue;  // the decoder keeps its input's shape
    const kernels::SubBlockDesc& desc = step.sub->desc;
    const int out_time = kernels::ConvOutputLength(desc, set_time[step.in_set]);
    if (out_time < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Run: input of ", time, " frames is too short for encoder block ", step.block));
    }
    set_time[step.out_set] = out_time;
    const int* in = set_lengths + static_cast<std::size_t>(step.in_set) * batch;
    int* out = set_lengths + static_cast<std::size_t>(step.out_set) * batch;
    for (int i = 0; i < batch; ++i) out[i] = kernels::ConvOutputLength(desc, in[i]);
    for (int rs : step.residual_sets) {
      const int* res = set_lengths + static_cast<std::size_t>(rs) * batch;
      if (set_time[rs] != out_time || !std::equal(res, res + batch, out)) {
        return absl::InternalError(absl::StrCat("Run: residual source of block ", step.block,
                                                " does not match its output"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace jasper
