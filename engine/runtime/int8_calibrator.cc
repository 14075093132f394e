#include "engine/runtime/int8_calibrator.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cpu_backend.h"
#include "engine/status_macros.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"

namespace jasper {
namespace {

constexpr int kBins = 2048;
constexpr char kMethod[] = "mse-histogram-2048";
constexpr char kMethodPerChannel[] = "; depthwise inputs per channel (max)";

struct TensorStats {
  float max_abs = 0.0f;
  std::vector<double> histogram;  // [kBins] over [0, max_abs], second pass
};

struct LayerStats {
  int block = 0;
  int sub_block = 0;
  // Per tensor (as `tensors`): quantized on the unsigned grid (a ReLU's output: a dense
  // sub-block's input, a residual input, the depthwise input), its scale chosen over 255 steps.
  std::vector<bool> unsigned_grid;
  // A_main, each residual input, then (separable) the depthwise input
  std::vector<TensorStats> tensors;
  // Separable: the depthwise input's max |x| per channel [C_in] (first pass).
  std::vector<float> channel_max;
  // Separable: the depthwise output's max |a| per channel [C_in] (first pass), the pointwise
  // weight's max |w| per row [C_in], and the smoothing factors chosen from them (empty: none),
  // by which the second pass divides the output before its histogram.
  std::vector<float> output_max;
  std::vector<float> weight_row_max;
  std::vector<float> smoothing;
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
        const float* xb = s.x + static_cast<std::size_t>(b) * g.in_time * c_in;
        Observe(xb, length(g.in_lengths, b, g.in_time) * c_in, &l.tensors.back());
        if (!histogram_pass_)
          ChannelMax(xb, length(g.in_lengths, b, g.in_time), c_in, &l.channel_max);
      }
      depthwise_.resize(static_cast<std::size_t>(g.batch) * g.out_time * c_in);
      kernels::DepthwiseReference(d, s.sub->depthwise.data(), s.x, g, depthwise_.data());
      for (int b = 0; b < g.batch; ++b) {
        float* a = depthwise_.data() + static_cast<std::size_t>(b) * g.out_time * c_in;
        const int frames = length(g.out_lengths, b, g.out_time);
        if (!histogram_pass_) {
          ChannelMax(a, frames, c_in, &l.output_max);
        } else if (!l.smoothing.empty()) {
          for (int t = 0; t < frames; ++t) {
            for (std::size_t c = 0; c < c_in; ++c) a[t * c_in + c] /= l.smoothing[c];
          }
        }
        Observe(a, frames * c_in, &l.tensors[0]);
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
    std::vector<bool> residual_nonnegative(s.sub->residual_channels.size(), false);
    if (s.residual_nonnegative != nullptr) residual_nonnegative = *s.residual_nonnegative;
    l.unsigned_grid = kernels::Int8UnsignedGrid(s.sub->desc, s.x_nonnegative, residual_nonnegative);
    l.tensors.resize(1 + s.sub->residual_channels.size() + (s.sub->desc.separable ? 1 : 0));
    if (s.sub->desc.separable) {
      const std::size_t c_in = static_cast<std::size_t>(s.sub->desc.in_channels);
      const std::size_t c_out = static_cast<std::size_t>(s.sub->desc.out_channels);
      l.channel_max.assign(c_in, 0.0f);
      l.output_max.assign(c_in, 0.0f);
      l.weight_row_max.assign(c_in, 0.0f);
      for (std::size_t c = 0; c < c_in; ++c) {  // the pointwise weight, [C_in, C_out]
        for (std::size_t o = 0; o < c_out; ++o) {
          l.weight_row_max[c] =
              std::max(l.weight_row_max[c], std::fabs(s.sub->weight[c * c_out + o]));
        }
      }
    }
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

  // Rows [0, frames) of x [frames, channels] into m: max |x| per channel.
  static void ChannelMax(const float* x, int frames, std::size_t channels, std::vector<float>* m) {
    for (int t = 0; t < frames; ++t) {
      const float* row = x + t * channels;
      for (std::size_t c = 0; c < channels; ++c) {
        (*m)[c] = std::max((*m)[c], std::fabs(row[c]));  // NaN ignored
      }
    }
  }

 public:
  // After the first pass: each separable sub-block's smoothing factors m_c = max|a_c|^alpha /
  // max|w_c|^(1 - alpha) (SmoothQuant), over their geometric mean (1 where a channel's output or
  // weight row is all zero), and its GEMM input's max becomes the smoothed output's.
  void ChooseSmoothing(double alpha) {
    for (LayerStats& l : layers_) {
      if (l.output_max.empty()) continue;
      const std::size_t n = l.output_max.size();
      std::vector<double> m(n, 0.0);
      double log_sum = 0.0;
      int used = 0;
      for (std::size_t c = 0; c < n; ++c) {
        const double a = l.output_max[c], w = l.weight_row_max[c];
        if (!(a > 0.0 && w > 0.0 && std::isfinite(a) && std::isfinite(w))) continue;
        m[c] = std::pow(a, alpha) / std::pow(w, 1.0 - alpha);
        log_sum += std::log(m[c]);
        ++used;
      }
      if (used == 0) continue;
      const double mean = std::exp(log_sum / used);
      l.smoothing.assign(n, 1.0f);
      float smoothed_max = 0.0f;
      for (std::size_t c = 0; c < n; ++c) {
        const float f = static_cast<float>(m[c] / mean);
        if (m[c] > 0.0 && std::isfinite(f) && f > 0.0f && std::isfinite(1.0f / f)) {
          l.smoothing[c] = f;
        }
        smoothed_max = std::max(smoothed_max, l.output_max[c] / l.smoothing[c]);
      }
      l.tensors[0].max_abs = smoothed_max;
    }
  }

 private:
  bool histogram_pass_ = false;
  std::vector<LayerStats> layers_;  // in plan order
  std::map<std::pair<int, int>, std::size_t> index_;
  std::vector<float> depthwise_;
};

}  // namespace

double MultiplyAddsPerFrame(const FoldedSubBlock& sub) {
  double n = static_cast<double>(sub.depthwise.size()) + static_cast<double>(sub.weight.size());
  for (const std::vector<float>& w : sub.residual_weights) n += static_cast<double>(w.size());
  return n;
}

absl::Status Int8Calibrator::SelectFp32SubBlocks(const Int8CalibrationOptions& mixed,
                                                 Int8Calibration* calibration) {
  // Each layer's share of the model's multiply-adds per output frame.
  std::vector<double> share;
  double total = 0.0;
  for (const Int8SubBlockScales& l : calibration->layers) {
    const FoldedSubBlock& sub =
        l.block < 0 ? model_->decoder() : model_->blocks()[l.block].sub_blocks[l.sub_block];
    share.push_back(MultiplyAddsPerFrame(sub));
    total += share.back();
  }
  for (double& v : share) v = total > 0.0 ? v / total : 0.0;
  auto name = [](const Int8SubBlockScales& l) {
    return l.block < 0 ? std::string("decoder")
                       : absl::StrCat("block ", l.block, " sub-block ", l.sub_block);
  };
  auto log = [&mixed](const std::string& line) {
    if (mixed.log) mixed.log(line);
  };
  log(absl::StrFormat("all sub-blocks INT8: %.3f %% of frames agree with FP32",
                      100.0 * calibration->frame_agreement));
  double used = 0.0;
  for (int round = 1;; ++round) {
    int best = -1;
    double best_agreement = calibration->frame_agreement;
    std::string tried;
    for (std::size_t i = 0; i < calibration->layers.size(); ++i) {
      Int8SubBlockScales& l = calibration->layers[i];
      if (l.fp32 || used + share[i] > mixed.max_fp32_share + 1e-12) continue;
      l.fp32 = true;
      absl::StatusOr<double> a = FrameAgreement(*calibration);
      l.fp32 = false;
      if (!a.ok()) return a.status();
      absl::StrAppend(&tried, tried.empty() ? "" : ", ", name(l),
                      absl::StrFormat(" %.3f", 100.0 * *a));
      if (*a > best_agreement) {
        best_agreement = *a;
        best = static_cast<int>(i);
      }
    }
    if (!tried.empty()) log(absl::StrCat("round ", round, ", adding one in FP32: ", tried));
    if (best < 0 || best_agreement - calibration->frame_agreement < mixed.min_gain) break;
    calibration->layers[best].fp32 = true;
    used += share[best];
    calibration->frame_agreement = best_agreement;
    log(absl::StrFormat("kept %s in FP32 (%.2f %% of the multiply-adds): %.3f %% agree",
                        name(calibration->layers[best]), 100.0 * share[best],
                        100.0 * best_agreement));
  }
  log(absl::StrFormat("%d sub-block(s) in FP32, %.2f %% of the multiply-adds; %.3f %% agree",
                      calibration->Fp32Count(), 100.0 * used,
                      100.0 * calibration->frame_agreement));
  return absl::OkStatus();
}

float ChooseInt8Scale(const std::vector<double>& histogram, float max_abs, int levels) {
  const int n = static_cast<int>(histogram.size());
  if (!(max_abs > 0.0f) || !std::isfinite(max_abs) || n == 0) return 1.0f;
  const double width = static_cast<double>(max_abs) / n;
  double best_error = std::numeric_limits<double>::infinity();
  int best = n;
  for (int j = std::max(1, n / 16); j <= n; ++j) {
    const double clip = j * width;
    const double step = clip / levels;
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
  return static_cast<float>(best * width / levels);
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

BackendOptions Int8Calibrator::Fp32Options() const {
  BackendOptions options;
  options.device = Device::kCpu;
  options.cpu_threads = cpu_threads_;
  options.cpu_precision = kernels::Precision::kFp32;
  options.max_batch = 1;
  options.max_feature_frames = *std::max_element(frames_.begin(), frames_.end());
  return options;
}

absl::Status Int8Calibrator::RunAll(
    Backend& backend, const std::function<void(std::size_t, const BackendOutput&)>& each) const {
  const int feat_in = model_->config().feat_in;
  BackendOutput output;
  for (std::size_t u = 0; u < utterances_.size(); ++u) {
    const FeatureBatch batch{utterances_[u].data(), 1, frames_[u], feat_in, &frames_[u]};
    JASPER_RETURN_IF_ERROR(backend.Run(batch, &output));
    each(u, output);
  }
  return absl::OkStatus();
}

void Int8Calibrator::KeepReference(std::size_t u, const BackendOutput& out) {
  if (reference_.size() < utterances_.size()) reference_.resize(utterances_.size());
  reference_[u].assign(out.ids.begin(), out.ids.begin() + out.lengths[0]);
}

absl::StatusOr<double> Int8Calibrator::FrameAgreement(const Int8Calibration& calibration) {
  if (utterances_.empty()) {
    return absl::FailedPreconditionError("the INT8 check needs at least one utterance");
  }
  // The backend refuses a calibration made for other weights and a CPU without an INT8 GEMM
  // (FAILED_PRECONDITION), before any FP32 pass runs.
  BackendOptions options = Fp32Options();
  options.cpu_precision = kernels::Precision::kInt8;
  options.int8_calibration = std::make_shared<const Int8Calibration>(calibration);
  JASPER_ASSIGN_OR_RETURN(std::unique_ptr<Backend> int8, CreateCpuBackend(model_, options));
  if (reference_.size() != utterances_.size()) {
    JASPER_ASSIGN_OR_RETURN(std::unique_ptr<Backend> fp32, CreateCpuBackend(model_, Fp32Options()));
    JASPER_RETURN_IF_ERROR(
        RunAll(*fp32, [this](std::size_t u, const BackendOutput& out) { KeepReference(u, out); }));
  }
  std::size_t same = 0, total = 0;
  JASPER_RETURN_IF_ERROR(RunAll(*int8, [&](std::size_t u, const BackendOutput& out) {
    for (std::size_t t = 0; t < reference_[u].size(); ++t) {
      same += out.ids[t] == reference_[u][t];
      ++total;
    }
  }));
  return total > 0 ? static_cast<double>(same) / total : 1.0;
}

absl::StatusOr<Int8Calibration> Int8Calibrator::Calibrate(double audio_seconds,
                                                          const Int8CalibrationOptions& mixed) {
  if (!(mixed.max_fp32_share >= 0.0 && mixed.max_fp32_share <= 1.0) ||
      !(mixed.min_gain >= 0.0 && mixed.min_gain <= 1.0) ||
      !(mixed.smoothing_alpha >= 0.0 && mixed.smoothing_alpha <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "INT8 calibration: max_fp32_share (", mixed.max_fp32_share, "), min_gain (", mixed.min_gain,
        ") and smoothing_alpha (", mixed.smoothing_alpha, ") must lie in [0, 1]"));
  }
  if (utterances_.empty()) {
    return absl::FailedPreconditionError("INT8 calibration needs at least one utterance");
  }
  StatsObserver observer;
  {
    BackendOptions observed = Fp32Options();
    observed.cpu_step_observer = &observer;
    JASPER_ASSIGN_OR_RETURN(std::unique_ptr<Backend> fp32, CreateCpuBackend(model_, observed));
    JASPER_RETURN_IF_ERROR(RunAll(*fp32, [](std::size_t, const BackendOutput&) {}));
    if (mixed.smooth_depthwise_output) observer.ChooseSmoothing(mixed.smoothing_alpha);
    observer.set_histogram_pass(true);
    // The FP32 greedy tokens for the check, kept from the second pass (the observer only reads).
    JASPER_RETURN_IF_ERROR(
        RunAll(*fp32, [this](std::size_t u, const BackendOutput& out) { KeepReference(u, out); }));
  }
  Int8Calibration calibration;
  calibration.weights_fingerprint = WeightsFingerprint(*model_);
  calibration.method = kMethod;
  if (mixed.per_channel_depthwise) calibration.method += kMethodPerChannel;
  if (mixed.smooth_depthwise_output) {
    calibration.method +=
        absl::StrFormat("; depthwise outputs smoothed (alpha %g)", mixed.smoothing_alpha);
  }
  calibration.utterances = static_cast<int>(utterances_.size());
  calibration.audio_seconds = audio_seconds;
  for (const LayerStats& l : observer.layers()) {
    Int8SubBlockScales s;
    s.block = l.block;
    s.sub_block = l.sub_block;
    for (std::size_t i = 0; i < l.tensors.size(); ++i) {
      const bool unsigned_grid = l.unsigned_grid[i];
      s.scales.push_back(
          ChooseInt8Scale(l.tensors[i].histogram, l.tensors[i].max_abs, unsigned_grid ? 255 : 127));
    }
    s.depthwise_output_smoothing = l.smoothing;
    if (mixed.per_channel_depthwise) {
      // Each channel's whole range, no clip: on the shipped model this agreed with FP32 more
      // often than each channel's own MSE clip (docs/PERFORMANCE.md). A channel that was 0 on
      // all the audio keeps the per-tensor scale.
      const float levels = l.unsigned_grid.back() ? 255.0f : 127.0f;  // the depthwise input's
      for (const float m : l.channel_max) {
        s.depthwise_channel_scales.push_back(
            m > 0.0f && std::isfinite(m / levels) && m / levels > 0.0f ? m / levels
                                                                       : s.scales.back());
      }
    }
    calibration.layers.push_back(std::move(s));
  }
  JASPER_RETURN_IF_ERROR(CheckInt8Calibration(calibration, *model_));
  if (!kernels::HasInt8Gemm()) return calibration;

  // The check, all in INT8, then the selection of the sub-blocks kept in FP32.
  JASPER_ASSIGN_OR_RETURN(calibration.frame_agreement_all_int8, FrameAgreement(calibration));
  calibration.frame_agreement = calibration.frame_agreement_all_int8;
  JASPER_RETURN_IF_ERROR(SelectFp32SubBlocks(mixed, &calibration));
  return calibration;
}

}  // namespace jasper
