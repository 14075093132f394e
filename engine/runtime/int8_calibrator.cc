#include "engine/runtime/int8_calibrator.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cpu_backend.h"
#include "engine/status_macros.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"

namespace jasper {
namespace {

constexpr int kBins = 2048;
constexpr char kMethod[] = "mse-histogram-2048";

struct TensorStats {
  float max_abs = 0.0f;
  std::vector<double> histogram;  // [kBins] over [0, max_abs], second pass
};

struct LayerStats {
  int block = 0;
  int sub_block = 0;
  // A_main, each residual input, then (separable) the depthwise input
  std::vector<TensorStats> tensors;
};

// Collects per-tensor statistics of every step's GEMM inputs (valid frames only).
class StatsObserver final : public CpuStepObserver {
 public:
  // false: max |a|; true: histograms over [0, max].
  void set_histogram_pass(bool on) {
    histogram_pass_ = on;
    for (LayerStats& l : layers_) {
      for (TensorStats& t : l.tensors) t.histogram.assign(kBins, 0.0);
    }
  }
  const std::vector<LayerStats>& layers() const { return layers_; }

  void BeforeStep(const CpuStepView& s) override {
    const kernels::SubBlockDesc& d = s.sub->desc;
    const kernels::BatchGeometry& g = s.geometry;
    LayerStats& l = LayerOf(s);
    auto length = [](const int* lengths, int b, int extent) {
      return std::clamp(lengths[b], 0, extent);
    };
    const std::size_t c_in = static_cast<std::size_t>(d.in_channels);
    if (d.separable) {
      for (int b = 0; b < g.batch; ++b) {
        Observe(s.x + static_cast<std::size_t>(b) * g.in_time * c_in,
                length(g.in_lengths, b, g.in_time) * c_in, &l.tensors.back());
      }
      depthwise_.resize(static_cast<std::size_t>(g.batch) * g.out_time * c_in);
      kernels::DepthwiseReference(d, s.sub->depthwise.data(), s.x, g, depthwise_.data());
      for (int b = 0; b < g.batch; ++b) {
        Observe(depthwise_.data() + static_cast<std::size_t>(b) * g.out_time * c_in,
                length(g.out_lengths, b, g.out_time) * c_in, &l.tensors[0]);
      }
    } else {
      for (int b = 0; b < g.batch; ++b) {
        Observe(s.x + static_cast<std::size_t>(b) * g.in_time * c_in,
                length(g.in_lengths, b, g.in_time) * c_in, &l.tensors[0]);
      }
    }
    for (std::size_t p = 0; p < s.sub->residual_channels.size(); ++p) {
      const std::size_t ch = static_cast<std::size_t>(s.sub->residual_channels[p]);
      for (int b = 0; b < g.batch; ++b) {
        Observe(s.residual_x[p] + static_cast<std::size_t>(b) * g.out_time * ch,
                length(g.out_lengths, b, g.out_time) * ch, &l.tensors[1 + p]);
      }
    }
  }

 private:
  LayerStats& LayerOf(const CpuStepView& s) {
    const auto key = std::make_pair(s.block, s.sub_block);
    auto it = index_.find(key);
    if (it != index_.end()) return layers_[it->second];
    index_.emplace(key, layers_.size());
    LayerStats l;
    l.block = s.block;
    l.sub_block = s.sub_block;
    l.tensors.resize(1 + s.sub->residual_channels.size() + (s.sub->desc.separable ? 1 : 0));
    layers_.push_back(std::move(l));
    return layers_.back();
  }

  void Observe(const float* v, std::size_t n, TensorStats* t) const {
    if (!histogram_pass_) {
      float m = t->max_abs;
      for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));  // NaN ignored
      t->max_abs = m;
      return;
    }
    if (!(t->max_abs > 0.0f)) return;
    const double per_unit = kBins / static_cast<double>(t->max_abs);
    for (std::size_t i = 0; i < n; ++i) {
      const double a = std::fabs(static_cast<double>(v[i]));
      if (!std::isfinite(a)) continue;
      t->histogram[std::min(kBins - 1, static_cast<int>(a * per_unit))] += 1.0;
    }
  }

  bool histogram_pass_ = false;
  std::vector<LayerStats> layers_;  // in plan order
  std::map<std::pair<int, int>, std::size_t> index_;
  std::vector<float> depthwise_;
};

}  // namespace

float ChooseInt8Scale(const std::vector<double>& histogram, float max_abs) {
  const int n = static_cast<int>(histogram.size());
  if (!(max_abs > 0.0f) || !std::isfinite(max_abs) || n == 0) return 1.0f;
  const double width = static_cast<double>(max_abs) / n;
  double best_error = std::numeric_limits<double>::infinity();
  int best = n;
  for (int j = std::max(1, n / 16); j <= n; ++j) {
    const double clip = j * width;
    const double step = clip / 127.0;
    double error = 0.0;
    for (int i = 0; i < n; ++i) {
      if (histogram[i] == 0.0) continue;
      const double center = (i + 0.5) * width;
      const double d =
          center > clip ? center - clip : center - step * std::nearbyint(center / step);
      error += histogram[i] * d * d;
    }
    if (error < best_error) {
      best_error = error;
      best = j;
    }
  }
  return static_cast<float>(best * width / 127.0);
}

Int8Calibrator::Int8Calibrator(std::shared_ptr<const Model> model, int cpu_threads)
    : model_(std::move(model)), cpu_threads_(std::max(1, cpu_threads)) {}

absl::Status Int8Calibrator::AddUtterance(const std::vector<float>& features, int frames) {
  const int feat_in = model_->config().feat_in;
  if (frames < 1 || features.size() != static_cast<std::size_t>(frames) * feat_in) {
    return absl::InvalidArgumentError(absl::StrCat("calibration features: ", features.size(),
                                                   " values are not ", frames, " frames x ",
                                                   feat_in, " features"));
  }
  utterances_.push_back(features);
  frames_.push_back(frames);
  return absl::OkStatus();
}

absl::StatusOr<Int8Calibration> Int8Calibrator::Calibrate(double audio_seconds) {
  if (utterances_.empty()) {
    return absl::FailedPreconditionError("INT8 calibration needs at least one utterance");
  }
  const int feat_in = model_->config().feat_in;
  BackendOptions options;
  options.device = Device::kCpu;
  options.cpu_threads = cpu_threads_;
  options.cpu_precision = kernels::Precision::kFp32;
  options.max_batch = 1;
  options.max_feature_frames = *std::max_element(frames_.begin(), frames_.end());
  // Runs every utterance through `backend`; `each(u, output)` after each.
  auto run_all = [&](Backend& backend, auto each) -> absl::Status {
    BackendOutput output;
    for (std::size_t u = 0; u < utterances_.size(); ++u) {
      const FeatureBatch batch{utterances_[u].data(), 1, frames_[u], feat_in, &frames_[u]};
      JASPER_RETURN_IF_ERROR(backend.Run(batch, &output));
      each(u, output);
    }
    return absl::OkStatus();
  };
  auto ignore = [](std::size_t, const BackendOutput&) {};

  StatsObserver observer;
  // The FP32 greedy tokens for the check, kept from the second pass (the observer only reads).
  std::vector<std::vector<int>> reference(utterances_.size());
  {
    BackendOptions observed = options;
    observed.cpu_step_observer = &observer;
    JASPER_ASSIGN_OR_RETURN(std::unique_ptr<Backend> fp32, CreateCpuBackend(model_, observed));
    JASPER_RETURN_IF_ERROR(run_all(*fp32, ignore));
    observer.set_histogram_pass(true);
    JASPER_RETURN_IF_ERROR(run_all(*fp32, [&](std::size_t u, const BackendOutput& out) {
      reference[u].assign(out.ids.begin(), out.ids.begin() + out.lengths[0]);
    }));
  }
  Int8Calibration calibration;
  calibration.weights_fingerprint = WeightsFingerprint(*model_);
  calibration.method = kMethod;
  calibration.utterances = static_cast<int>(utterances_.size());
  calibration.audio_seconds = audio_seconds;
  for (const LayerStats& l : observer.layers()) {
    Int8SubBlockScales s;
    s.block = l.block;
    s.sub_block = l.sub_block;
    for (const TensorStats& t : l.tensors)
      s.scales.push_back(ChooseInt8Scale(t.histogram, t.max_abs));
    calibration.layers.push_back(std::move(s));
  }
  JASPER_RETURN_IF_ERROR(CheckInt8Calibration(calibration, *model_));
  if (!kernels::HasInt8Gemm()) return calibration;

  // The check: greedy tokens of INT8 against FP32 on the same utterances.
  BackendOptions int8_options = options;
  int8_options.cpu_precision = kernels::Precision::kInt8;
  int8_options.int8_calibration = std::make_shared<const Int8Calibration>(calibration);
  JASPER_ASSIGN_OR_RETURN(std::unique_ptr<Backend> int8, CreateCpuBackend(model_, int8_options));
  std::size_t same = 0, total = 0;
  JASPER_RETURN_IF_ERROR(run_all(*int8, [&](std::size_t u, const BackendOutput& out) {
    for (std::size_t t = 0; t < reference[u].size(); ++t) {
      same += out.ids[t] == reference[u][t];
      ++total;
    }
  }));
  calibration.frame_agreement = total > 0 ? static_cast<double>(same) / total : 1.0;
  return calibration;
}

}  // namespace jasper
