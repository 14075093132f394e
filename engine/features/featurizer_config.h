// FeaturizerConfig: the parameters of NeMo's AudioToMelSpectrogramPreprocessor, owned by the
// featurizer (engine/features/) so that features/ does not depend on model/; model.json's
// `preprocessor` section (engine/model/model_config.h) holds one. Every field, its default and
// its valid range: docs/MODEL_FORMAT.md.
//
// Plain value types; thread-compatible.
#ifndef JASPER_ENGINE_FEATURES_FEATURIZER_CONFIG_H_
#define JASPER_ENGINE_FEATURES_FEATURIZER_CONFIG_H_

#include <string>

#include "absl/status/status.h"

namespace jasper {

// Which NeMo FilterbankFeatures behaviour to reproduce. NeMo 2.5 (PR #13827) changed the STFT
// padding from reflect to zeros, the valid frame count from L/hop+1 to L/hop, and zeroes
// pre-emphasised samples past the length. Published QuartzNet/Jasper checkpoints predate it.
enum class StftMode {
  kLegacy,  // NeMo <= 2.4: reflect padding, seq_len = L / hop + 1
  kNemo25,  // NeMo >= 2.5: zero padding, seq_len = L / hop
};

// NeMo AudioToMelSpectrogramPreprocessor parameters (inference: no dither).
struct FeaturizerConfig {
  int sample_rate = 16000;
  double window_size_s = 0.02;    // -> win_length = int(window_size_s * sample_rate) samples
  double window_stride_s = 0.01;  // -> hop_length = int(window_stride_s * sample_rate) samples
  int n_fft = 512;                // 0 in JSON (null) -> next power of two >= win_length
  int features = 64;              // mel bins
  std::string window = "hann";    // only "hann" (symmetric, torch periodic=False) is supported
  double preemph = 0.97;          // 0 disables pre-emphasis
  double lowfreq_hz = 0.0;
  double highfreq_hz = 0.0;                             // 0 (null in JSON) -> sample_rate / 2
  double log_zero_guard_value = 5.960464477539063e-08;  // 2^-24, added before the log
  bool log = true;
  double mag_power = 2.0;
  std::string normalize = "per_feature";  // "per_feature" or "none"
  int pad_to = 16;                        // pad time to a multiple of this (0: no padding)
  double pad_value = 0.0;
  std::string mel_norm = "slaney";  // "slaney" or "none"
  StftMode stft_mode = StftMode::kLegacy;

  int WinLength() const;  // samples
  int HopLength() const;  // samples
  absl::Status Validate() const;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_FEATURES_FEATURIZER_CONFIG_H_
