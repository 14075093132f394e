// FeaturizerConfig's derived sizes and validation (engine/features/featurizer_config.h).
#include "engine/features/featurizer_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace jasper {
namespace {

constexpr int kMaxFeatures = 1024;
constexpr int kMaxFft = 65536;
constexpr int kMinSampleRate = 1000;
constexpr int kMaxSampleRate = 384000;

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}
absl::Status Unsupported(const std::string& field, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat(field, ": ", what));
}

}  // namespace

int FeaturizerConfig::WinLength() const {
  // Python's int(window_size * sample_rate): truncation toward zero.
  const double samples = window_size_s * sample_rate;
  if (!(samples >= 0.0 && samples < 1e9)) return 0;
  return static_cast<int>(samples);
}

int FeaturizerConfig::HopLength() const {
  const double samples = window_stride_s * sample_rate;
  if (!(samples >= 0.0 && samples < 1e9)) return 0;
  return static_cast<int>(samples);
}

absl::Status FeaturizerConfig::Validate() const {
  const std::string p = "preprocessor.";
  if (sample_rate < kMinSampleRate || sample_rate > kMaxSampleRate) {
    return Invalid("sample_rate", absl::StrCat("must be in [", kMinSampleRate, ", ", kMaxSampleRate,
                                               "], got ", sample_rate));
  }
  const int win = WinLength();
  if (!(window_size_s > 0.0) || win < 1 || win > kMaxFft) {
    return Invalid(p + "window_size", absl::StrCat(window_size_s, " s gives ", win,
                                                   " samples; need [1, ", kMaxFft, "]"));
  }
  const int hop = HopLength();
  if (!(window_stride_s > 0.0) || hop < 1 || hop > kMaxFft) {
    return Invalid(p + "window_stride", absl::StrCat(window_stride_s, " s gives ", hop,
                                                     " samples; need [1, ", kMaxFft, "]"));
  }
  if (n_fft != 0 && (n_fft < win || n_fft > kMaxFft)) {
    return Invalid(p + "n_fft", absl::StrCat(n_fft, " must be in [win_length ", win, ", ", kMaxFft,
                                             "] or null"));
  }
  if (features < 1 || features > kMaxFeatures) {
    return Invalid(p + "features",
                   absl::StrCat("must be in [1, ", kMaxFeatures, "], got ", features));
  }
  if (window != "hann") {
    return Unsupported(p + "window", absl::StrCat("'", window, "' (only \"hann\")"));
  }
  if (!(preemph >= 0.0 && preemph < 1.0)) {
    return Invalid(p + "preemph", absl::StrCat("must be in [0, 1) or null, got ", preemph));
  }
  const double nyquist = sample_rate / 2.0;
  if (!(lowfreq_hz >= 0.0 && lowfreq_hz < nyquist)) {
    return Invalid(p + "lowfreq", absl::StrCat("must be in [0, ", nyquist, "), got ", lowfreq_hz));
  }
  if (highfreq_hz != 0.0 && !(highfreq_hz > lowfreq_hz && highfreq_hz <= nyquist)) {
    return Invalid(p + "highfreq",
                   absl::StrCat("must be in (lowfreq, ", nyquist, "] or null, got ", highfreq_hz));
  }
  if (!(log_zero_guard_value > 0.0 && std::isfinite(log_zero_guard_value))) {
    return Invalid(p + "log_zero_guard_value", "must be a positive number");
  }
  if (!(mag_power > 0.0 && std::isfinite(mag_power))) {
    return Invalid(p + "mag_power", absl::StrCat("must be positive, got ", mag_power));
  }
  if (normalize != "per_feature" && normalize != "none") {
    return Unsupported(p + "normalize",
                       absl::StrCat("'", normalize, "' (only \"per_feature\" or \"none\")"));
  }
  if (pad_to < 0 || pad_to > 1024) {
    return Invalid(p + "pad_to", absl::StrCat("must be in [0, 1024], got ", pad_to));
  }
  if (!std::isfinite(pad_value)) return Invalid(p + "pad_value", "must be finite");
  if (mel_norm != "slaney" && mel_norm != "none") {
    return Unsupported(p + "mel_norm", absl::StrCat("'", mel_norm, "' (only \"slaney\" or null)"));
  }
  return absl::OkStatus();
}

}  // namespace jasper
