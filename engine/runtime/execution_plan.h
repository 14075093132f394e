// ExecutionPlan: the device-independent walk over a Model that every backend runs. It fixes,
// once per model, the order of the sub-blocks, which buffer each one reads and writes (the
// features, a block-output slot reused by liveness, one of two scratch buffers for the
// intermediate sub-blocks of a block, or the logits), and where its residual branches read.
// Per batch, ComputeShapes gives the padded time and per-utterance lengths of every activation.
//
// Length sets: set 0 = the input features; set 1 + i = the output of encoder sub-block i (the
// decoder, a 1x1 conv, keeps the last set). Lengths are stored [set][batch].
//
// Ownership: borrows the Model (which must outlive the plan; backends hold a shared_ptr).
// Thread-safety: immutable after Create; all methods are const and reentrant.
#ifndef JASPER_ENGINE_RUNTIME_EXECUTION_PLAN_H_
#define JASPER_ENGINE_RUNTIME_EXECUTION_PLAN_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/model.h"

namespace jasper {

// A buffer named independently of the device: the backend maps it to its own memory.
struct PlanBuffer {
  enum class Kind { kInput, kSlot, kScratch, kLogits };
  Kind kind = Kind::kInput;
  int index = 0;  // slot or scratch index (0 or 1); 0 otherwise

  bool operator==(const PlanBuffer& o) const { return kind == o.kind && index == o.index; }
};

// One kernel call: a sub-block (or the decoder) with its inputs, output and shapes.
struct PlanStep {
  const FoldedSubBlock* sub = nullptr;  // borrowed from the Model
  int block = -1;                       // encoder block; -1 = the decoder
  int sub_block = 0;                    // index within the block
  bool ends_block = false;              // output is block `block`'s output
  int in_set = 0;                       // length set of the input
  int out_set = 0;                      // length set of the output
  PlanBuffer input;
  // The input is the previous step's output and that step ends in a ReLU: every value >= 0 (INT8
  // then quantizes it on the unsigned grid: kernels::Int8PackOptions::nonnegative_input).
  bool input_nonnegative = false;
  PlanBuffer output;
  std::vector<PlanBuffer> residual_inputs;  // per sub->residual_sources[p]
  std::vector<int> residual_sets;           // their length sets
  // Per residual input: it is a block's output whose last sub-block ends in a ReLU (every value
  // >= 0; INT8 quantizes it on the unsigned grid: kernels::ResidualInput::nonnegative). The
  // features (source -1) are not.
  std::vector<bool> residual_nonnegative;
};

class ExecutionPlan {
 public:
  // Errors: a residual source that names a later block or is out of range (INTERNAL).
  static absl::StatusOr<ExecutionPlan> Create(const Model& model);

  // Encoder sub-blocks in order, then the decoder (always last).
  const std::vector<PlanStep>& steps() const { return steps_; }
  int num_slots() const { return num_slots_; }
  int num_length_sets() const { return num_length_sets_; }
  // Largest channel count of any buffer (features, block outputs, logits).
  int max_channels() const { return max_channels_; }
  int max_residuals() const { return max_residuals_; }
  // Largest padded time of any activation for `frames` input frames.
  int MaxTime(int frames) const;

  // For a batch of `batch` utterances of padded time `time` and lengths `lengths[batch]`, fills
  // set_time[num_length_sets()] and set_lengths[num_length_sets() * batch]. Errors:
  // INVALID_ARGUMENT when the input is too short for a block; INTERNAL when a residual branch's
  // input does not match its sub-block's output shape.
  absl::Status ComputeShapes(int time, const int* lengths, int batch, int* set_time,
                             int* set_lengths) const;

 private:
  const Model* model_ = nullptr;
  std::vector<PlanStep> steps_;
  int num_slots_ = 0;
  int num_length_sets_ = 1;
  int max_channels_ = 0;
  int max_residuals_ = 0;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_RUNTIME_EXECUTION_PLAN_H_
