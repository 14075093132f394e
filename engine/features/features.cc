// NeMo FilterbankFeatures (nemo/collections/asr/parts/preprocessing/features.py) at inference.
// Verified against NeMo v2.4.0 (legacy) and HEAD 8cfedd72 / commit 0fd4de53 (NeMo >= 2.5):
//
//   get_seq_len:  floor((L + 2*(n_fft//2) - n_fft) / hop) + 1     (<= 2.4)
//                 floor((L + 2*(n_fft//2) - n_fft) / hop)         (>= 2.5)
//                 and 0 when L == 0 (torch.where(seq_len == 0, 0, ...)).
//   preemphasis:  y[0] = x[0], y[n] = x[n] - preemph * x[n-1]; >= 2.5 also zeroes y[n >= L]
//                 (only padded batch rows have such samples; a single utterance has none).
//   torch.stft:   n_fft, hop, win_length, center=True, window = hann_window(win, periodic=False)
//                 zero-padded centred to n_fft (left = (n_fft - win) / 2), pad n_fft//2 per side
//                 with "reflect" (<= 2.4, torch's default) or "constant" zeros (>= 2.5);
//                 frames = 1 + (L + 2*(n_fft//2) - n_fft) // hop.
//   magnitude:    sqrt(re^2 + im^2), then .pow(mag_power) when mag_power != 1.
//   mel:          fb @ power, fb = librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, norm).
//   log:          log(mel + log_zero_guard_value)  (log_zero_guard_type "add").
//   normalize_batch("per_feature"): over t < seq_len, mean, std = sqrt(sum((x-mean)^2)/(N-1)),
//                 std += 1e-5 (CONSTANT), x = (x - mean) / std.
//   then x[t >= seq_len] = pad_value, and the time axis (stft frames, not seq_len) is padded to
//   a multiple of pad_to with pad_value.
//
// torch does all of this in float32; here everything after pre-emphasis is double (the
// pre-emphasis itself is float, as in torch), and the result is rounded to float once.
#include "engine/features/features.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <complex>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"

namespace jasper {
namespace {

constexpr double kNormalizeConstant = 1e-5;  // NeMo features.py CONSTANT

// The per-sample and per-element loops of the featurizer, kept out of line so the fuzz build can
// leave them out of coverage instrumentation by name (fuzz/coverage_ignorelist.txt): their loop
// comparisons run once per sample and guide no fuzzer. Raw pointers: the callers have checked
// the sizes, and absl::Span's hardened operator[] (Debian builds absl with ABSL_OPTION_HARDENED)
// would bounds-check every element.

// Index of the first non-finite value in x[0, n), or -1.
ABSL_ATTRIBUTE_NOINLINE int64_t FeatFirstNonFinite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return i;
  }
  return -1;
}

// y[0] = x[0], y[i] = x[i] - preemph * x[i-1] in float32, as torch computes it.
ABSL_ATTRIBUTE_NOINLINE void FeatPreEmphasis(const float* x, int64_t n, float preemph, float* y) {
  if (n > 0) y[0] = x[0];
  for (int64_t i = 1; i < n; ++i) {
    const float scaled = preemph * x[i - 1];
    y[i] = x[i] - scaled;
  }
}

// NeMo's normalize_batch("per_feature") over the first n rows of logmel [rows][features]
// (row-major), written as float into out [rows][features]; n >= 2.
ABSL_ATTRIBUTE_NOINLINE void FeatNormalizePerFeature(const double* logmel, int n, int features,
                                                     float* out) {
  for (int m = 0; m < features; ++m) {
    double sum = 0.0;
    for (int t = 0; t < n; ++t) sum += logmel[static_cast<size_t>(t) * features + m];
    const double mean = sum / n;
    double sq = 0.0;
    for (int t = 0; t < n; ++t) {
      const double d = logmel[static_cast<size_t>(t) * features + m] - mean;
      sq += d * d;
    }
    const double std_dev = std::sqrt(sq / (n - 1.0)) + kNormalizeConstant;
    for (int t = 0; t < n; ++t) {
      const size_t i = static_cast<size_t>(t) * features + m;
      out[i] = static_cast<float>((logmel[i] - mean) / std_dev);
    }
  }
}

// Floor division for a possibly negative numerator (torch.floor_divide), positive divisor.
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && (a < 0)) --q;
  return q;
}

// librosa.hz_to_mel(htk=False): linear below 1 kHz, logarithmic above.
double HzToMelSlaney(double hz) {
  const double f_sp = 200.0 / 3;
  double mel = (hz - 0.0) / f_sp;
  const double min_log_hz = 1000.0;
  const double min_log_mel = (min_log_hz - 0.0) / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  if (hz >= min_log_hz) mel = min_log_mel + std::log(hz / min_log_hz) / logstep;
  return mel;
}

// librosa.mel_to_hz(htk=False).
double MelToHzSlaney(double mel) {
  const double f_sp = 200.0 / 3;
  double hz = 0.0 + f_sp * mel;
  const double min_log_hz = 1000.0;
  const double min_log_mel = (min_log_hz - 0.0) / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  if (mel >= min_log_mel) hz = min_log_hz * std::exp(logstep * (mel - min_log_mel));
  return hz;
}

// numpy.linspace(start, stop, num) (endpoint=True), reproducing its arithmetic.
std::vector<double> Linspace(double start, double stop, int num) {
  std::vector<double> y(num);
  const int div = num - 1;
  const double delta = stop - start;
  const double step = div > 0 ? delta / div : 0.0;
  for (int i = 0; i < num; ++i) {
    if (div > 0 && step == 0.0) {
      y[i] = static_cast<double>(i) / div * delta + start;
    } else {
      y[i] = static_cast<double>(i) * step + start;
    }
  }
  if (num > 1) y[num - 1] = stop;
  return y;
}

// torch.hann_window(n, periodic=False) = 0.5 - 0.5*cos(2*pi*i/(n-1)), [1] for n == 1, with
// torch's float32 arithmetic (ATen hamming_window: arange(n).mul_(2*pi/(n-1)).cos_().mul_(-0.5)
// .add_(0.5), each step rounded to float). A correctly rounded double formula differs from
// torch's buffer in most entries by up to 1.5e-7, which moves low-energy log-mel bins by ~2e-5;
// this emulation leaves only the rare 1-ulp differences of torch's vectorised cosf.
std::vector<float> TorchHannWindow(int n) {
  std::vector<float> w(n, 1.0f);
  if (n == 1) return w;
  const float scale = static_cast<float>(6.283185307179586476925286766559 / (n - 1));
  for (int i = 0; i < n; ++i) {
    const float angle = static_cast<float>(i) * scale;
    const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
    const float scaled = c * -0.5f;
    w[i] = scaled + 0.5f;
  }
  return w;
}

}  // namespace

std::vector<float> SlaneyMelFilterbank(int sample_rate, int n_fft, int n_mels, double fmin_hz,
                                       double fmax_hz, bool slaney_norm) {
  if (sample_rate <= 0 || n_fft <= 0 || n_mels <= 0) return {};
  const int bins = 1 + n_fft / 2;
  // librosa.fft_frequencies = numpy.fft.rfftfreq(n_fft, 1/sr) = k * (1 / (n_fft * (1/sr))).
  const double val = 1.0 / (n_fft * (1.0 / sample_rate));
  std::vector<double> fftfreqs(bins);
  for (int k = 0; k < bins; ++k) fftfreqs[k] = static_cast<double>(k) * val;

  // librosa.mel_frequencies(n_mels + 2, fmin, fmax, htk=False).
  std::vector<double> mel_f = Linspace(HzToMelSlaney(fmin_hz), HzToMelSlaney(fmax_hz), n_mels + 2);
  for (double& m : mel_f) m = MelToHzSlaney(m);

  std::vector<float> weights(static_cast<size_t>(n_mels) * bins);
  for (int i = 0; i < n_mels; ++i) {
    const double fdiff_lo = mel_f[i + 1] - mel_f[i];
    const double fdiff_hi = mel_f[i + 2] - mel_f[i + 1];
    // librosa stores the triangle in a float32 array first, then multiplies it in place by the
    // float64 norm; both roundings are reproduced.
    const double enorm = 2.0 / (mel_f[i + 2] - mel_f[i]);
    for (int k = 0; k < bins; ++k) {
      const double lower = -(mel_f[i] - fftfreqs[k]) / fdiff_lo;
      const double upper = (mel_f[i + 2] - fftfreqs[k]) / fdiff_hi;
      float w = static_cast<float>(std::max(0.0, std::min(lower, upper)));
      if (slaney_norm) w = static_cast<float>(static_cast<double>(w) * enorm);
      weights[static_cast<size_t>(i) * bins + k] = w;
    }
  }
  return weights;
}

absl::StatusOr<Featurizer> Featurizer::Create(const FeaturizerConfig& config,
                                              const std::vector<float>& filterbank) {
  JASPER_RETURN_IF_ERROR(config.Validate());
  Featurizer f;
  f.config_ = config;
  FeaturizerConfig& c = f.config_;
  f.win_length_ = c.WinLength();
  f.hop_length_ = c.HopLength();
  // Defensive checks of what this file relies on (Validate() is expected to cover them too).
  if (c.sample_rate <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("featurizer: sample_rate ", c.sample_rate));
  }
  if (f.win_length_ <= 0 || f.hop_length_ <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("featurizer: window ", f.win_length_, " / hop ",
                                                   f.hop_length_, " samples must be positive"));
  }
  if (c.n_fft == 0) {  // NeMo: n_fft or 2 ** ceil(log2(win_length))
    int n = 1;
    while (n < f.win_length_ && n < RealFft::kMaxSize) n <<= 1;
    c.n_fft = n;
  }
  if (c.n_fft < f.win_length_ || c.n_fft > RealFft::kMaxSize) {
    return absl::InvalidArgumentError(absl::StrCat("featurizer: n_fft ", c.n_fft,
                                                   " must be >= win_length ", f.win_length_,
                                                   " and <= ", RealFft::kMaxSize));
  }
  if (c.features <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("featurizer: features ", c.features));
  }
  if (c.window != "hann") {
    return absl::InvalidArgumentError(
        absl::StrCat("featurizer: window '", c.window, "' unsupported (only 'hann')"));
  }
  if (c.normalize != "per_feature" && c.normalize != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("featurizer: normalize '", c.normalize, "' unsupported"));
  }
  if (c.mel_norm != "slaney" && c.mel_norm != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("featurizer: mel_norm '", c.mel_norm, "' unsupported"));
  }
  if (!(c.mag_power > 0.0) || !std::isfinite(c.mag_power) || c.pad_to < 0 ||
      !std::isfinite(c.preemph) || !std::isfinite(c.pad_value) ||
      !(c.log_zero_guard_value >= 0.0) || !std::isfinite(c.log_zero_guard_value)) {
    return absl::InvalidArgumentError(
        "featurizer: mag_power must be > 0, pad_to >= 0, preemph/pad_value finite, "
        "log_zero_guard_value finite and >= 0");
  }
  const double highfreq = c.highfreq_hz > 0.0 ? c.highfreq_hz : c.sample_rate / 2.0;
  if (!(c.lowfreq_hz >= 0.0) || !(c.lowfreq_hz < highfreq)) {
    return absl::InvalidArgumentError(absl::StrCat("featurizer: need 0 <= lowfreq (", c.lowfreq_hz,
                                                   ") < highfreq (", highfreq, ")"));
  }

  const int bins = c.n_fft / 2 + 1;
  const size_t fb_size = static_cast<size_t>(c.features) * bins;
  if (!filterbank.empty()) {
    if (filterbank.size() != fb_size) {
      return absl::InvalidArgumentError(absl::StrCat("featurizer: filterbank has ",
                                                     filterbank.size(), " values, expected ",
                                                     c.features, " x ", bins, " = ", fb_size));
    }
    for (float v : filterbank) {
      if (!std::isfinite(v)) return absl::InvalidArgumentError("featurizer: non-finite filterbank");
    }
    f.filterbank_ = filterbank;
  } else {
    f.filterbank_ = SlaneyMelFilterbank(c.sample_rate, c.n_fft, c.features, c.lowfreq_hz, highfreq,
                                        c.mel_norm == "slaney");
  }
  f.fb_support_.resize(c.features);
  for (int m = 0; m < c.features; ++m) {
    const float* row = f.filterbank_.data() + static_cast<size_t>(m) * bins;
    int lo = 0;
    while (lo < bins && row[lo] == 0.0f) ++lo;
    int hi = bins;
    while (hi > lo && row[hi - 1] == 0.0f) --hi;
    f.fb_support_[m] = {lo, hi};
  }

  f.window_.assign(c.n_fft, 0.0f);
  const std::vector<float> hann = TorchHannWindow(f.win_length_);
  f.win_begin_ = (c.n_fft - f.win_length_) / 2;  // torch.stft's centring of a short window
  std::copy(hann.begin(), hann.end(), f.window_.begin() + f.win_begin_);

  absl::StatusOr<RealFft> fft = RealFft::Create(c.n_fft);
  if (!fft.ok()) return fft.status();
  f.fft_ = std::make_shared<const RealFft>(*std::move(fft));
  return f;
}

int Featurizer::StftFrames(int num_samples) const {
  const int64_t n_fft = config_.n_fft;
  return static_cast<int>(1 +
                          FloorDiv(int64_t{num_samples} + 2 * (n_fft / 2) - n_fft, hop_length_));
}

int Featurizer::ValidFrames(int num_samples) const {
  if (num_samples <= 0) return 0;
  const int64_t n_fft = config_.n_fft;
  int64_t frames = FloorDiv(int64_t{num_samples} + 2 * (n_fft / 2) - n_fft, hop_length_);
  if (config_.stft_mode == StftMode::kLegacy) frames += 1;
  return static_cast<int>(std::max<int64_t>(frames, 0));
}

absl::StatusOr<int> Featurizer::CheckLength(size_t num_samples, int min_valid) const {
  if (num_samples == 0) return absl::InvalidArgumentError("featurizer: empty audio");
  // Keeps every index (padded length, frame starts) well inside int.
  const size_t max_samples = static_cast<size_t>(INT_MAX / 2) - config_.n_fft;
  if (num_samples > max_samples) {
    return absl::InvalidArgumentError(
        absl::StrCat("featurizer: audio too long (", num_samples, " samples)"));
  }
  const int length = static_cast<int>(num_samples);
  const int pad = config_.n_fft / 2;
  if (config_.stft_mode == StftMode::kLegacy && length <= pad) {
    // torch.stft's reflect padding needs the signal to be longer than the pad.
    return absl::InvalidArgumentError(absl::StrCat("featurizer: audio too short: ", length,
                                                   " samples; reflect padding (legacy NeMo STFT) "
                                                   "needs more than n_fft/2 = ",
                                                   pad));
  }
  const int valid = ValidFrames(length);
  if (valid < min_valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "featurizer: audio too short: ", length, " samples give ", valid, " valid frame(s), ",
        min_valid == 2 ? "per_feature normalisation needs at least 2" : "need at least 1"));
  }
  return valid;
}

absl::StatusOr<int> Featurizer::CheckInput(absl::Span<const float> samples, int min_valid) const {
  absl::StatusOr<int> valid = CheckLength(samples.size(), min_valid);
  if (!valid.ok()) return valid.status();
  const int64_t bad = FeatFirstNonFinite(samples.data(), static_cast<int64_t>(samples.size()));
  if (bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("featurizer: sample ", bad, " is not finite"));
  }
  return valid;
}

int Featurizer::PadFrames(int frames) const {
  if (config_.pad_to > 0 && frames % config_.pad_to != 0) {
    frames += config_.pad_to - frames % config_.pad_to;
  }
  return frames;
}

absl::StatusOr<int> Featurizer::PaddedFrames(size_t num_samples) const {
  absl::StatusOr<int> valid = CheckLength(num_samples, MinValidFrames());
  if (!valid.ok()) return valid.status();
  return PadFrames(StftFrames(static_cast<int>(num_samples)));
}

void Featurizer::FrameLogMel(absl::Span<const float> y, int t, FrameScratch* scratch,
                             double* dst) const {
  const int length = static_cast<int>(y.size());
  const int n_fft = config_.n_fft;
  const int pad = n_fft / 2;
  const int bins = n_fft / 2 + 1;
  const int features = config_.features;
  const bool reflect = config_.stft_mode == StftMode::kLegacy;
  const int win_end = win_begin_ + win_length_;
  const double guard = config_.log_zero_guard_value;
  std::vector<double>& frame = scratch->frame;
  std::vector<std::complex<double>>& spectrum = scratch->spectrum;
  std::vector<double>& power = scratch->power;
  std::fill(frame.begin(), frame.end(), 0.0);
  const float* yp = y.data();  // indices are checked below: no hardened Span::operator[]
  for (int i = win_begin_; i < win_end; ++i) {
    // Index into the signal padded by `pad` on each side.
    int j = t * hop_length_ + i - pad;
    float v;
    if (j >= 0 && j < length) {
      v = yp[j];
    } else if (reflect) {
      j = j < 0 ? -j : 2 * (length - 1) - j;  // pad < length, so j is in range
      v = yp[j];
    } else {
      v = 0.0f;
    }
    frame[i] = static_cast<double>(window_[i]) * v;
  }
  fft_->Transform(frame, absl::MakeSpan(spectrum));
  for (int k = 0; k < bins; ++k) {
    const double re = spectrum[k].real();
    const double im = spectrum[k].imag();
    const double mag = std::sqrt(re * re + im * im);
    if (config_.mag_power == 1.0) {
      power[k] = mag;
    } else if (config_.mag_power == 2.0) {
      power[k] = mag * mag;
    } else {
      power[k] = std::pow(mag, config_.mag_power);
    }
  }
  for (int m = 0; m < features; ++m) {
    const float* row = filterbank_.data() + static_cast<size_t>(m) * bins;
    double acc = 0.0;
    for (int k = fb_support_[m].first; k < fb_support_[m].second; ++k) {
      acc += static_cast<double>(row[k]) * power[k];
    }
    dst[m] = config_.log ? std::log(acc + guard) : acc;
  }
}

int Featurizer::LogMel(absl::Span<const float> samples, int num_frames, std::vector<double>* out,
                       const FrameCache* reuse, int64_t first_sample,
                       std::vector<uint8_t>* interior) const {
  const int length = static_cast<int>(samples.size());
  const int n_fft = config_.n_fft;
  const int pad = n_fft / 2;
  const int bins = n_fft / 2 + 1;
  const int features = config_.features;

  // Pre-emphasis in float32, as torch computes it (the scalar is cast to float).
  std::vector<float> y(samples.size());
  FeatPreEmphasis(samples.data(), length, static_cast<float>(config_.preemph), y.data());

  out->assign(static_cast<size_t>(num_frames) * features, 0.0);
  FrameScratch scratch;
  scratch.frame.resize(n_fft);
  scratch.spectrum.resize(bins);
  scratch.power.resize(bins);
  if (interior != nullptr) interior->assign(num_frames, 0);
  const bool can_reuse = reuse != nullptr && reuse->first_sample >= 0;
  int reused = 0;
  for (int t = 0; t < num_frames; ++t) {
    double* dst = out->data() + static_cast<size_t>(t) * features;
    // Frame t reads y[t*hop - pad + i], i in [win_begin_, win_begin_ + win_length_); y[j]
    // needs x[j] and x[j-1].
    const int64_t lo = int64_t{t} * hop_length_ + win_begin_ - pad;
    const int64_t hi = lo + win_length_ - 1;
    const bool inside = lo >= 1 && hi <= length - 1;
    if (interior != nullptr) (*interior)[t] = inside ? 1 : 0;
    if (inside && can_reuse) {
      const int64_t offset = first_sample + int64_t{t} * hop_length_ - reuse->first_sample;
      if (offset >= 0 && offset % hop_length_ == 0) {
        const int64_t prev = offset / hop_length_;
        if (prev < static_cast<int64_t>(reuse->interior.size()) && reuse->interior[prev] != 0) {
          std::copy_n(reuse->logmel.data() + prev * features, features, dst);
          ++reused;
          continue;
        }
      }
    }
    FrameLogMel(y, t, &scratch, dst);
  }
  return reused;
}

absl::StatusOr<Features> Featurizer::Compute(absl::Span<const float> samples) const {
  absl::StatusOr<int> valid = CheckInput(samples, MinValidFrames());
  if (!valid.ok()) return valid.status();
  std::vector<double> logmel;
  LogMel(samples, *valid, &logmel);
  return Finish(logmel, *valid, StftFrames(static_cast<int>(samples.size())));
}

absl::StatusOr<Features> Featurizer::ComputeStreaming(absl::Span<const float> samples,
                                                      int64_t first_sample,
                                                      FrameCache* cache) const {
  absl::StatusOr<int> valid = CheckInput(samples, MinValidFrames());
  if (!valid.ok()) return valid.status();
  std::vector<double> logmel;
  std::vector<uint8_t> interior;
  const int reused = LogMel(samples, *valid, &logmel, cache, first_sample, &interior);
  Features result = Finish(logmel, *valid, StftFrames(static_cast<int>(samples.size())));
  cache->logmel.swap(logmel);  // Finish leaves the rows as they were: no copy needed
  cache->interior.swap(interior);
  cache->first_sample = first_sample;
  cache->reused_frames += reused;
  return result;
}

Features Featurizer::Finish(const std::vector<double>& logmel, int valid, int stft_frames) const {
  const int features = config_.features;
  Features result;
  result.num_features = features;
  result.valid_frames = valid;
  result.padded_frames = PadFrames(stft_frames);
  result.data.assign(static_cast<size_t>(result.padded_frames) * features,
                     static_cast<float>(config_.pad_value));
  if (config_.normalize != "per_feature") {
    std::copy(logmel.begin(), logmel.end(), result.data.begin());  // double -> float
    return result;
  }
  FeatNormalizePerFeature(logmel.data(), valid, features, result.data.data());
  return result;
}

absl::StatusOr<Features> Featurizer::ComputeUnnormalized(absl::Span<const float> samples) const {
  absl::StatusOr<int> valid = CheckInput(samples, 1);
  if (!valid.ok()) return valid.status();
  std::vector<double> logmel;
  LogMel(samples, *valid, &logmel);
  Features result;
  result.num_features = config_.features;
  result.valid_frames = *valid;
  result.padded_frames = *valid;
  result.data.assign(logmel.begin(), logmel.end());
  return result;
}

}  // namespace jasper
