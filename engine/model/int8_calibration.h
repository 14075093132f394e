// INT8 calibration of one model: the per-tensor activation scales of every sub-block's INT8
// inputs (kernels/sub_block.h, PackSubBlock's int8_input_scales: the GEMM's A_main, each residual
// branch's input, then for a separable sub-block the depthwise conv's input), measured once over
// some audio by Int8Calibrator
// (engine/runtime/int8_calibrator.h; `jasper-transcribe --calibrate_int8`) and stored in the
// model folder as int8_calibration.json (docs/MODEL_FORMAT.md), which Model::Load reads.
// A sub-block the calibrator found most sensitive to quantization may be marked to run in FP32
// instead (mixed precision: Int8SubBlockScales::fp32); its scales are kept all the same.
//
// A calibration names the weights it was made for (WeightsFingerprint), so a folder whose
// weights changed asks for a new one instead of running with stale scales.
// Thread-safety: a plain value; the functions are reentrant.
#ifndef JASPER_ENGINE_MODEL_INT8_CALIBRATION_H_
#define JASPER_ENGINE_MODEL_INT8_CALIBRATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace jasper {

class Model;

inline constexpr char kInt8CalibrationFile[] = "int8_calibration.json";

// The scales of one sub-block: block -1 is the decoder (sub_block 0).
struct Int8SubBlockScales {
  int block = 0;
  int sub_block = 0;
  // [1 + residual branches (+ 1 when separable)], finite and > 0: PackSubBlock's order
  std::vector<float> scales;
  // Run this sub-block in FP32 under --cpu_precision=int8 (its greedy tokens moved most when it
  // alone was quantized; Int8Calibrator's selection). JSON "fp32": true, absent when false.
  bool fp32 = false;
  // A separable sub-block's depthwise input, one scale per input channel (C_in, finite and > 0;
  // JSON "depthwise_channel_scales", version 3), used instead of the per-tensor one in
  // `scales`, which stays the right choice for readers that predate them. Empty: per tensor.
  std::vector<float> depthwise_channel_scales;
  // A separable sub-block's depthwise output smoothed into the pointwise weights (SmoothQuant's
  // migration; kernels::Int8PackOptions::output_smoothing): C_in factors m_c, finite and
  // > 0 (JSON "depthwise_output_smoothing", version 3); scales[0] is then the scale of the
  // output divided by m. Empty: none.
  std::vector<float> depthwise_output_smoothing;
};

struct Int8Calibration {
  std::string weights_fingerprint;         // WeightsFingerprint of the model it was made for
  std::vector<Int8SubBlockScales> layers;  // encoder sub-blocks in order, then the decoder
  // Where it came from (informational): the calibration audio and how scales were chosen.
  std::string method;  // e.g. "mse-histogram"
  int utterances = 0;
  double audio_seconds = 0.0;
  // The check Int8Calibrator ran on the same audio: the share of valid encoder frames whose
  // greedy token is the same in INT8 as in FP32 (-1: not checked).
  double frame_agreement = -1.0;
  // The same check with every sub-block in INT8, before any was kept in FP32 (-1: not checked).
  double frame_agreement_all_int8 = -1.0;

  // The scales of (block, sub_block); null when absent.
  const std::vector<float>* Find(int block, int sub_block) const;
  // The entry of (block, sub_block); null when absent.
  const Int8SubBlockScales* FindLayer(int block, int sub_block) const;
  // How many sub-blocks run in FP32.
  int Fp32Count() const;
};

// Parses int8_calibration.json. INVALID_ARGUMENT (naming the field) on malformed JSON, a missing
// or mistyped field, or a scale that is not finite and positive.
absl::StatusOr<Int8Calibration> ParseInt8Calibration(const std::string& json_text);

// The JSON text ParseInt8Calibration reads back to the same value.
std::string Int8CalibrationToJson(const Int8Calibration& calibration);

// 16 hex digits: FNV-1a 64 over every sub-block's shape and folded weights (depthwise, weight,
// bias, residual weights) in order, the decoder last.
std::string WeightsFingerprint(const Model& model);

// OK when `calibration` was made for `model`'s weights and has scales for each of its
// sub-blocks and the decoder, one per INT8 input, and depthwise channel scales and output
// smoothing only for separable sub-blocks, one per input channel; FAILED_PRECONDITION saying
// which differs.
absl::Status CheckInt8Calibration(const Int8Calibration& calibration, const Model& model);

}  // namespace jasper

#endif  // JASPER_ENGINE_MODEL_INT8_CALIBRATION_H_
