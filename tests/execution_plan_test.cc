// ExecutionPlan: the device-independent model walk shared by the CPU and CUDA backends. Checked
// by simulating the buffers: every read must find the activation it expects (no slot is reused
// while still live), shapes follow ConvOutputLength, and the CPU backend built on the plan
// matches the folded reference forward.
#include "engine/runtime/execution_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cpu_backend.h"
#include "kernels/sub_block.h"
#include "tests/model_test_util.h"

namespace jasper {
namespace {

using test_util::BuildModel;

// Activation ids as the plan sees them: 0 = features, 1 + b = output of block b; intermediate
// sub-block outputs get ids from 1000 on.
void ExpectBuffersHoldWhatIsRead(const Model& model, const ExecutionPlan& plan) {
  const auto key = [](const PlanBuffer& b) {
    return std::make_pair(static_cast<int>(b.kind), b.index);
  };
  std::map<std::pair<int, int>, int> holds;  // buffer -> activation id
  holds[key({PlanBuffer::Kind::kInput, 0})] = 0;
  const auto& steps = plan.steps();
  int expected_input = 0;
  int intermediate = 1000;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const PlanStep& step = steps[i];
    SCOPED_TRACE(testing::Message() << "step " << i << " block " << step.block);
    ASSERT_NE(step.sub, nullptr);
    ASSERT_EQ(holds.count(key(step.input)), 1u);
    EXPECT_EQ(holds[key(step.input)], expected_input);
    ASSERT_EQ(step.residual_inputs.size(), step.sub->residual_sources.size());
    for (std::size_t p = 0; p < step.residual_inputs.size(); ++p) {
      EXPECT_EQ(holds[key(step.residual_inputs[p])], step.sub->residual_sources[p] + 1);
    }
    EXPECT_NE(step.output.kind, PlanBuffer::Kind::kInput);
    if (step.block < 0) {
      EXPECT_EQ(i, steps.size() - 1) << "the decoder is the last step";
      EXPECT_EQ(step.output.kind, PlanBuffer::Kind::kLogits);
      EXPECT_EQ(step.sub, &model.decoder());
      EXPECT_EQ(step.in_set, plan.num_length_sets() - 1);
      continue;
    }
    EXPECT_EQ(step.sub, &model.blocks()[step.block].sub_blocks[step.sub_block]);
    EXPECT_EQ(step.out_set, step.in_set + 1);
    if (step.ends_block) {
      EXPECT_EQ(step.output.kind, PlanBuffer::Kind::kSlot);
      EXPECT_LT(step.output.index, plan.num_slots());
      expected_input = step.block + 1;  // activation 1 + b
    } else {
      EXPECT_EQ(step.output.kind, PlanBuffer::Kind::kScratch);
      expected_input = ++intermediate;
    }
    EXPECT_FALSE(step.output == step.input) << "a step must not write its own input";
    holds[key(step.output)] = expected_input;
  }
}

// A step's input is non-negative exactly when it is the previous step's output and that step
// ends in a ReLU; the features (step 0's input) are not.
void ExpectNonNegativeInputsMarked(const ExecutionPlan& plan) {
  const std::vector<PlanStep>& steps = plan.steps();
  ASSERT_FALSE(steps.empty());
  EXPECT_FALSE(steps[0].input_nonnegative);
  for (std::size_t i = 1; i < steps.size(); ++i) {
    EXPECT_TRUE(steps[i].input == steps[i - 1].output) << i;
    EXPECT_EQ(steps[i].input_nonnegative,
              steps[i - 1].sub->desc.activation == kernels::Activation::kRelu)
        << i;
  }
  // A residual input is non-negative exactly when it is a block's output (not the features) and
  // that block's last sub-block ends in a ReLU.
  for (const PlanStep& step : steps) {
    const std::vector<int>& sources = step.sub->residual_sources;
    ASSERT_EQ(step.residual_nonnegative.size(), sources.size());
    for (std::size_t p = 0; p < sources.size(); ++p) {
      bool expected = false;
      for (const PlanStep& writer : steps) {
        if (sources[p] >= 0 && writer.block == sources[p] && writer.ends_block) {
          expected = writer.sub->desc.activation == kernels::Activation::kRelu;
        }
      }
      EXPECT_EQ(step.residual_nonnegative[p], expected) << step.block << "/" << step.sub_block;
    }
  }
}

TEST(ExecutionPlanTest, SeparableModelWalk) {
  auto model = BuildModel(test_util::SeparableConfig(), 1);
  ASSERT_NE(model, nullptr);
  absl::StatusOr<ExecutionPlan> plan = ExecutionPlan::Create(*model);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int sub_blocks = 0;
  for (const FoldedBlock& b : model->blocks()) sub_blocks += static_cast<int>(b.sub_blocks.size());
  EXPECT_EQ(plan->steps().size(), static_cast<std::size_t>(sub_blocks) + 1);
  EXPECT_EQ(plan->num_length_sets(), sub_blocks + 1);
  EXPECT_EQ(plan->max_residuals(), 1);
  // Each block reads only its predecessor: two slots suffice.
  EXPECT_LE(plan->num_slots(), 2);
  ExpectBuffersHoldWhatIsRead(*model, *plan);
  ExpectNonNegativeInputsMarked(*plan);
  EXPECT_TRUE(plan->steps().back().input_nonnegative);  // the decoder reads a ReLU's output
}

TEST(ExecutionPlanTest, DenseResidualKeepsEveryPaneLive) {
  auto model = BuildModel(test_util::DenseResidualConfig(), 2);
  ASSERT_NE(model, nullptr);
  absl::StatusOr<ExecutionPlan> plan = ExecutionPlan::Create(*model);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GE(plan->max_residuals(), 3);
  EXPECT_GE(plan->num_slots(), 3);
  ExpectBuffersHoldWhatIsRead(*model, *plan);
  ExpectNonNegativeInputsMarked(*plan);
}

TEST(ExecutionPlanTest, ShapesFollowConvOutputLength) {
  auto model = BuildModel(test_util::SeparableConfig(), 3);
  ASSERT_NE(model, nullptr);
  absl::StatusOr<ExecutionPlan> plan = ExecutionPlan::Create(*model);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<int> lengths = {37, 0, 1, 20};
  const int batch = static_cast<int>(lengths.size());
  const int time = 37;
  std::vector<int> set_time(plan->num_length_sets(), -1);
  std::vector<int> set_lengths(static_cast<std::size_t>(plan->num_length_sets()) * batch, -1);
  ASSERT_TRUE(
      plan->ComputeShapes(time, lengths.data(), batch, set_time.data(), set_lengths.data()).ok());
  EXPECT_EQ(set_time[0], time);
  int t = time;
  std::vector<int> len = lengths;
  int max_time = time;
  for (const PlanStep& step : plan->steps()) {
    if (step.block < 0) break;
    t = kernels::ConvOutputLength(step.sub->desc, t);
    max_time = std::max(max_time, t);
    EXPECT_EQ(set_time[step.out_set], t);
    for (int i = 0; i < batch; ++i) {
      len[i] = kernels::ConvOutputLength(step.sub->desc, len[i]);
      EXPECT_EQ(set_lengths[static_cast<std::size_t>(step.out_set) * batch + i], len[i]);
    }
  }
  EXPECT_EQ(plan->MaxTime(time), max_time);

  // 'Same' padding never runs out of frames: one input frame gives one frame everywhere.
  const int one = 1;
  ASSERT_TRUE(plan->ComputeShapes(1, &one, 1, set_time.data(), set_lengths.data()).ok());
  for (int set = 0; set < plan->num_length_sets(); ++set) EXPECT_EQ(set_time[set], 1);
}

// The CPU backend on the plan (packed kernels) against the folded reference forward, one
// utterance per config, and against the reference backend on a padded batch.
TEST(ExecutionPlanTest, CpuBackendMatchesFoldedForward) {
  for (const ModelConfig& config :
       {test_util::SeparableConfig(), test_util::DenseResidualConfig()}) {
    auto model = BuildModel(config, 4);
    ASSERT_NE(model, nullptr);
    BackendOptions options;
    options.device = Device::kCpu;
    options.keep_log_probs = true;
    auto fast = CreateCpuBackend(model, options);
    auto ref = CreateCpuBackend(model, options, /*use_reference=*/true);
    ASSERT_TRUE(fast.ok() && ref.ok());
    std::mt19937 rng(5);
    const int batch = 3;
    const int time = 41;
    const int features = config.feat_in;
    const std::vector<float> x =
        test_util::Random(rng, std::size_t{batch} * time * features, -1, 1);
    const std::vector<int> lengths = {41, 17, 30};
    FeatureBatch input{x.data(), batch, time, features, lengths.data()};
    BackendOutput out_fast, out_ref;
    ASSERT_TRUE((*fast)->Run(input, &out_fast).ok());
    ASSERT_TRUE((*ref)->Run(input, &out_ref).ok());
    EXPECT_EQ(out_fast.lengths, out_ref.lengths);
    ASSERT_EQ(out_fast.log_probs.size(), out_ref.log_probs.size());
    for (std::size_t i = 0; i < out_fast.log_probs.size(); ++i) {
      ASSERT_NEAR(out_fast.log_probs[i], out_ref.log_probs[i],
                  1e-3 * std::max(1.0f, std::fabs(out_ref.log_probs[i])))
          << "element " << i;
    }
    // Utterance 0 alone through the reference kernels, folded forward (no batch, no padding).
    int t_out = 0;
    const std::vector<float> x0(x.begin(), x.begin() + std::size_t{time} * features);
    const std::vector<float> logits = test_util::FoldedForward(*model, x0, time, &t_out);
    ASSERT_EQ(t_out, out_fast.lengths[0]);
  }
}

}  // namespace
}  // namespace jasper
