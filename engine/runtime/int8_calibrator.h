// Int8Calibrator: measures a model's INT8 activation scales (engine/model/int8_calibration.h)
// over some audio's features, then checks them.
//
// Every INT8 input of every sub-block (A_main: the depthwise output of a separable sub-block,
// the input of a dense one; each residual branch's input; a separable sub-block's depthwise
// input) is one tensor with one scale; the depthwise input has one per channel as well
// (Int8CalibrationOptions::per_channel_depthwise: each channel's max / 255, or / 127 on the
// signed grid, from the first pass). A separable sub-block's depthwise output is smoothed into
// its pointwise weights (SmoothQuant; Int8CalibrationOptions::smooth_depthwise_output): the
// factors come from the first pass, and the second pass measures the smoothed output. The
// model runs in FP32 on the CPU backend, one utterance at a time, with a CpuStepObserver that
// sees each step's inputs (valid frames only): a first pass finds each tensor's max |a|; a
// second fills a histogram of |a| (2048 bins over [0, max]); per tensor the clip value c (a bin
// edge, at least 1/16 of the max) minimizing the histogram's total squared error, values above
// c clipped to c and those below rounded to steps of c / 127, gives scale c / 127 (TensorRT's
// and OpenVINO's "MSE" calibration); c / 255 for a depthwise input that is a ReLU's output,
// which the kernels quantize on the unsigned grid [0, 255]. Then the INT8 and the FP32 backends run
// the same utterances and the share of valid encoder frames with the same greedy token is recorded
// (Int8Calibration::frame_agreement_all_int8).
//
// Mixed precision: then, a greedy forward selection keeps in FP32 the sub-blocks whose
// quantization moves the greedy tokens most. Each round tries every sub-block not yet kept
// (that fits the budget: Int8CalibrationOptions::max_fp32_share of the model's multiply-adds
// per frame) in FP32 together with those already kept, and keeps the one that raises the
// agreement most, while that rise is at least min_gain. The final agreement is
// Int8Calibration::frame_agreement. The selection runs on the calibration audio, so the same
// caution holds: never on a test set.
//
// The audio should sound like what the server will hear; a few minutes are enough. Calibrate on
// audio that is not a test set the model is measured on.
//
// Ownership: shares the model; owns copies of the added features.
// Thread-safety: one thread at a time.
#ifndef JASPER_ENGINE_RUNTIME_INT8_CALIBRATOR_H_
#define JASPER_ENGINE_RUNTIME_INT8_CALIBRATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/int8_calibration.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"

namespace jasper {

struct Int8CalibrationOptions {
  // The sub-blocks kept in FP32 do at most this share of the model's multiply-adds per output
  // frame, in [0, 1]. FP32 runs about 3x slower per multiply-add than INT8. Default 0, every
  // sub-block in INT8: on the shipped natural model the disagreement is spread over all of them,
  // and 0.02 / 0.05 / 0.10 raised the agreement on other training audio by only 0.05 / 0.2 /
  // 0.4 points (docs/PERFORMANCE.md); a model with one sensitive layer gains more.
  double max_fp32_share = 0.0;
  // A round keeps a sub-block in FP32 only when the frame agreement rises by at least this.
  double min_gain = 0.001;
  // A separable sub-block's depthwise input gets one scale per channel (each channel's max |x| /
  // 127, or / 255 on the unsigned grid), which the depthwise dequantization absorbs at no cost.
  bool per_channel_depthwise = true;
  // A separable sub-block's depthwise output is smoothed into its pointwise weights
  // (Int8SubBlockScales::depthwise_output_smoothing): m_c = max|a_c|^alpha / max|w_c|^(1 -
  // alpha) from the first pass, the output divided and the weight rows multiplied by m_c. On the
  // shipped model alpha 0.5 agreed most often with FP32 on the calibration audio (0.3 / 0.5 /
  // 0.65 / 0.8 measured, docs/PERFORMANCE.md). alpha in [0, 1].
  bool smooth_depthwise_output = true;
  double smoothing_alpha = 0.5;
  // Told one line per selection round and the outcome when set (e.g. printed by the tool).
  std::function<void(const std::string&)> log;
};

class Int8Calibrator {
 public:
  // `cpu_threads`: intra-op threads of the backends it runs (BackendOptions::cpu_threads).
  explicit Int8Calibrator(std::shared_ptr<const Model> model, int cpu_threads = 1);

  // Adds one utterance's features, [frames, feat_in] row-major (copied). INVALID_ARGUMENT when
  // the size is not frames x the model's feat_in, or frames < 1.
  absl::Status AddUtterance(const std::vector<float>& features, int frames);

  // Calibrates over every utterance added (FAILED_PRECONDITION when there is none), then runs
  // the check (which needs a hardware INT8 GEMM: without one, frame_agreement stays -1).
  // `audio_seconds` is recorded as the audio's duration. Errors from the backends pass through.
  // Then the mixed-precision selection per `options` (INVALID_ARGUMENT when a bound is out of
  // range).
  absl::StatusOr<Int8Calibration> Calibrate(double audio_seconds,
                                            const Int8CalibrationOptions& options = {});

  // The check alone: the share of the added utterances' valid encoder frames whose greedy token
  // is the same with `calibration` (its FP32 sub-blocks included) as in FP32, e.g. on audio
  // other than the calibration's. FAILED_PRECONDITION without utterances, without a hardware
  // INT8 GEMM, or when `calibration` is not made for the model; backend errors pass through.
  absl::StatusOr<double> FrameAgreement(const Int8Calibration& calibration);

 private:
  BackendOptions Fp32Options() const;
  // Runs every utterance through `backend`; `each(u, output)` after each.
  absl::Status RunAll(Backend& backend,
                      const std::function<void(std::size_t, const BackendOutput&)>& each) const;
  void KeepReference(std::size_t u, const BackendOutput& out);
  // The greedy selection (see the top), on `calibration` whose scales and all-INT8 agreement
  // are set.
  absl::Status SelectFp32SubBlocks(const Int8CalibrationOptions& mixed,
                                   Int8Calibration* calibration);

  std::shared_ptr<const Model> model_;
  int cpu_threads_;
  std::vector<std::vector<float>> utterances_;
  std::vector<int> frames_;
  std::vector<std::vector<int>> reference_;  // per utterance: FP32 greedy tokens (valid frames)
};

// The MSE clip choice, exposed for tests: `histogram` counts |a| in equal bins over [0, max_abs];
// returns the scale (clip / levels; 1 when every count is in an all-zero tensor, max_abs == 0).
// `levels`: steps above zero, 127 on the signed grid, 255 for a non-negative tensor on the
// unsigned one (a separable sub-block's depthwise input after a ReLU).
float ChooseInt8Scale(const std::vector<double>& histogram, float max_abs, int levels = 127);

// The multiply-adds per output frame of one sub-block (depthwise, pointwise or dense, residual
// 1x1 weights), the unit of Int8CalibrationOptions::max_fp32_share.
double MultiplyAddsPerFrame(const FoldedSubBlock& sub);

}  // namespace jasper

#endif  // JASPER_ENGINE_RUNTIME_INT8_CALIBRATOR_H_
