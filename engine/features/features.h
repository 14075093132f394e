// Log-mel featurizer equal to NeMo's AudioToMelSpectrogramPreprocessor at inference (no
// dither): pre-emphasis, centred framing (reflect or zero padding per StftMode), symmetric Hann
// window zero-padded to n_fft, FFT, |X|^mag_power, Slaney mel filterbank, log(x + guard),
// per-feature normalisation over valid frames (unbiased std + 1e-5), zero past the valid
// length, pad to a multiple of pad_to.
//
// Output layout: channels-last [frames, features] FP32, host memory. The arithmetic after the
// (float32, like torch) pre-emphasis is double; results match torch.stft-based references to
// ~2e-6 and NeMo's own float32 run to ~2e-5 (tests/features_test.cc).
// Thread-safety: immutable after Create(); Compute() is const and reentrant. Copies share the
// immutable FFT tables.
#ifndef JASPER_ENGINE_FEATURES_FEATURES_H_
#define JASPER_ENGINE_FEATURES_FEATURES_H_

#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/features/featurizer_config.h"
#include "engine/features/fft.h"

namespace jasper {

struct Features {
  std::vector<float> data;  // [padded_frames, num_features]
  int padded_frames = 0;
  int valid_frames = 0;  // NeMo's seq_len
  int num_features = 0;
};

// The log-mel rows of one stream's previous window, kept by Featurizer::ComputeStreaming() so
// that overlapping windows compute each shared frame once. One per stream; not thread-safe (the
// caller serialises the calls that share it). Size: one window of doubles before normalisation
// ([frames, features]: 160 KiB for a 3.2 s window at 64 features) plus a byte per frame.
struct FrameCache {
  std::vector<double> logmel;     // [frames, features]: the last window's log-mel
  std::vector<uint8_t> interior;  // [frames]: 1 where the frame lay wholly inside that window
  int64_t first_sample = -1;      // that window's first sample in the stream; -1: empty
  int64_t reused_frames = 0;      // running count of frames taken from the cache
};

class Featurizer {
 public:
  // `filterbank` ([features, n_fft/2+1], e.g. from the checkpoint) is used when non-empty;
  // otherwise the Slaney filterbank is computed as librosa.filters.mel does. n_fft == 0 is
  // resolved to NeMo's default (next power of two >= win_length); config() reports it.
  // Errors (InvalidArgument): config.Validate() failures, n_fft < win_length, a window other than
  // "hann", unknown normalize/mel_norm, a filterbank of the wrong size or with non-finite values.
  static absl::StatusOr<Featurizer> Create(const FeaturizerConfig& config,
                                           const std::vector<float>& filterbank = {});

  // Number of valid frames NeMo reports for `num_samples` samples.
  int ValidFrames(int num_samples) const;

  // The padded_frames Compute() gives for `num_samples` samples, with Compute()'s length errors
  // (empty, too long, too short), without computing anything.
  absl::StatusOr<int> PaddedFrames(size_t num_samples) const;

  // samples: mono audio at config.sample_rate, float in [-1, 1].
  // padded_frames = the STFT frame count 1 + L/hop rounded up to a multiple of pad_to (as NeMo:
  // in kNemo25 mode the last STFT frame is beyond seq_len and holds pad_value).
  // Errors (InvalidArgument, message says "audio too short" where relevant): empty input;
  // kLegacy and L <= n_fft/2 (torch's reflect padding needs L > pad); fewer than 2 valid frames
  // with per_feature normalisation (fewer than 1 without); a non-finite sample.
  absl::StatusOr<Features> Compute(absl::Span<const float> samples) const;

  // Compute() of a streaming window whose first sample is sample `first_sample` of its stream.
  // A frame whose samples (after pre-emphasis) lie wholly inside the window depends only on the
  // stream's audio, so one that also lay wholly inside the previous window in `cache` is copied
  // from there instead of recomputed; the result is bitwise identical to Compute(samples). The
  // window's rows then replace the cache's. Windows may come in any order or repeat (a frame is
  // reused only when its absolute position matches); an error leaves `cache` unchanged.
  absl::StatusOr<Features> ComputeStreaming(absl::Span<const float> samples, int64_t first_sample,
                                            FrameCache* cache) const;

  // Log-mel without normalisation or pad_to ([valid_frames, features], padded_frames ==
  // valid_frames); streaming normalises each window itself. Errors as Compute, needing 1 frame.
  absl::StatusOr<Features> ComputeUnnormalized(absl::Span<const float> samples) const;

  const FeaturizerConfig& config() const { return config_; }
  const std::vector<float>& filterbank() const { return filterbank_; }

 private:
  Featurizer() = default;
  // Log-mel (or mel when !config_.log) of the first `num_frames` STFT frames, [num_frames,
  // features], in double. `samples` is already validated (non-empty, finite, long enough).
  // With `reuse`, frames that lie wholly inside the signal (`interior`, when given, records which
  // do) are copied from `reuse` where it holds the same absolute frame; returns the number
  // copied. `first_sample`: the stream position of samples[0].
  int LogMel(absl::Span<const float> samples, int num_frames, std::vector<double>* out,
             const FrameCache* reuse = nullptr, int64_t first_sample = 0,
             std::vector<uint8_t>* interior = nullptr) const;
  // Buffers for FrameLogMel: frame [n_fft], spectrum and power [n_fft/2+1].
  struct FrameScratch {
    std::vector<double> frame;
    std::vector<std::complex<double>> spectrum;
    std::vector<double> power;
  };
  // Log-mel (or mel) of STFT frame `t` of the pre-emphasised signal `y` into dst[0, features):
  // window, FFT, power, filterbank, log. Pure arithmetic over fixed sizes, so the fuzz build
  // leaves it out of coverage instrumentation (fuzz/coverage_ignorelist.txt).
  void FrameLogMel(absl::Span<const float> y, int t, FrameScratch* scratch, double* dst) const;
  // Compute()'s tail: the padded FP32 result of `stft_frames` STFT frames from the `valid` rows
  // of `logmel`, normalised per feature when the config says so (`logmel` is left unchanged).
  Features Finish(const std::vector<double>& logmel, int valid, int stft_frames) const;
  // Valid frames Compute() needs: 2 with per_feature normalisation (unbiased std), else 1.
  int MinValidFrames() const { return config_.normalize == "per_feature" ? 2 : 1; }
  // Shared checks of Compute/ComputeUnnormalized; returns the valid frame count (>= min_valid).
  absl::StatusOr<int> CheckInput(absl::Span<const float> samples, int min_valid) const;
  // The length part of CheckInput.
  absl::StatusOr<int> CheckLength(size_t num_samples, int min_valid) const;
  // `frames` rounded up to a multiple of pad_to.
  int PadFrames(int frames) const;
  // Number of frames torch.stft(center=True) yields: 1 + (L + 2*(n_fft/2) - n_fft) / hop.
  int StftFrames(int num_samples) const;

  FeaturizerConfig config_;             // n_fft resolved (never 0)
  std::vector<float> filterbank_;       // [features, n_fft/2+1]
  std::vector<float> window_;           // [n_fft], Hann of win_length centred, zeros elsewhere
  int win_length_ = 0;                  // samples
  int win_begin_ = 0;                   // first nonzero tap of window_: (n_fft - win_length) / 2
  int hop_length_ = 0;                  // samples
  std::shared_ptr<const RealFft> fft_;  // size n_fft; immutable, shared by copies
  std::vector<std::pair<int, int>> fb_support_;  // per mel row: [first, last+1) nonzero bin
};

// librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=False, norm='slaney' or None):
// returns [n_mels, n_fft/2+1]. Exposed for tests.
std::vector<float> SlaneyMelFilterbank(int sample_rate, int n_fft, int n_mels, double fmin_hz,
                                       double fmax_hz, bool slaney_norm);

}  // namespace jasper

#endif  // JASPER_ENGINE_FEATURES_FEATURES_H_
