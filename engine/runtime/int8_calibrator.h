// Int8Calibrator: measures a model's INT8 activation scales (engine/model/int8_calibration.h)
// over some audio's features, then checks them.
//
// Every INT8 input of every sub-block (A_main: the depthwise output of a separable sub-block,
// the input of a dense one; each residual branch's input; a separable sub-block's depthwise
// input) is one tensor with one scale. The
// model runs in FP32 on the CPU backend, one utterance at a time, with a CpuStepObserver that
// sees each step's inputs (valid frames only): a first pass finds each tensor's max |a|; a
// second fills a histogram of |a| (2048 bins over [0, max]); per tensor the clip value c (a bin
// edge, at least 1/16 of the max) minimizing the histogram's total squared error, values above
// c clipped to c and those below rounded to steps of c / 127, gives scale c / 127 (TensorRT's
// and OpenVINO's "MSE" calibration). Then the INT8 and the FP32 backends run the same
// utterances and the share of valid encoder frames with the same greedy token is recorded
// (Int8Calibration::frame_agreement).
//
// The audio should sound like what the server will hear; a few minutes are enough. Calibrate on
// audio that is not a test set the model is measured on.
//
// Ownership: shares the model; owns copies of the added features.
// Thread-safety: one thread at a time.
#ifndef JASPER_ENGINE_RUNTIME_INT8_CALIBRATOR_H_
#define JASPER_ENGINE_RUNTIME_INT8_CALIBRATOR_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/int8_calibration.h"
#include "engine/model/model.h"

namespace jasper {

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
  absl::StatusOr<Int8Calibration> Calibrate(double audio_seconds);

 private:
  std::shared_ptr<const Model> model_;
  int cpu_threads_;
  std::vector<std::vector<float>> utterances_;
  std::vector<int> frames_;
};

// The MSE clip choice, exposed for tests: `histogram` counts |a| in equal bins over [0, max_abs];
// returns the scale (clip / 127; 1 when every count is in an all-zero tensor, max_abs == 0).
float ChooseInt8Scale(const std::vector<double>& histogram, float max_abs);

}  // namespace jasper

#endif  // JASPER_ENGINE_RUNTIME_INT8_CALIBRATOR_H_
