// An immutable, loaded model: config + batch-norm-folded FP32 weights in the canonical
// kernel layouts of kernels/sub_block.h. Loaded once, shared (const) by every backend replica;
// backends pack their own copies from it at their construction.
//
// Thread-safety: immutable after Load(); safe to share across threads.
#ifndef JASPER_ENGINE_MODEL_MODEL_H_
#define JASPER_ENGINE_MODEL_MODEL_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/decoding/ngram_lm.h"
#include "engine/features/features.h"
#include "engine/model/int8_calibration.h"
#include "engine/model/model_config.h"
#include "engine/text/inverse_normalizer.h"
#include "engine/text/punctuator.h"
#include "kernels/sub_block.h"

namespace jasper {

class SafetensorsFile;

// One fused sub-block with its own storage (FP32, canonical layout, BN folded).
struct FoldedSubBlock {
  kernels::SubBlockDesc desc;
  std::vector<float> depthwise;  // [K, C_in] (separable only)
  std::vector<float> weight;     // separable: [C_in, C_out]; dense: [K, C_in, C_out]
  std::vector<float> bias;       // [C_out], includes the residual branches' folded biases
  // Residual branches (last sub-block of a residual block only). residual_weights[p] is
  // [C_pane, C_out]; it reads the activation named by residual_sources[p]: -1 = the encoder
  // input (features), i >= 0 = the output of block i.
  std::vector<std::vector<float>> residual_weights;
  std::vector<int> residual_sources;
  std::vector<int> residual_channels;
};

struct FoldedBlock {
  std::vector<FoldedSubBlock> sub_blocks;  // `repeat` entries
};

class Model {
 public:
  // Loads `dir`/model.json and `dir`/model.safetensors, validates every field and tensor, and
  // folds batch norm (eps 1e-3, NeMo's BatchNorm1d) into the convolutions in FP32.
  static absl::StatusOr<std::shared_ptr<const Model>> Load(const std::string& dir);

  // Builds from an already parsed config and a safetensors file's bytes (tests, fuzzers).
  static absl::StatusOr<std::shared_ptr<const Model>> FromParts(const ModelConfig& config,
                                                                const std::string& weights_bytes);

  const ModelConfig& config() const { return config_; }
  const std::vector<FoldedBlock>& blocks() const { return blocks_; }
  // The decoder: a 1x1 dense conv with bias, identity activation, [C_enc] -> [num_outputs].
  const FoldedSubBlock& decoder() const { return decoder_; }
  // Mel filterbank [features, n_fft/2+1] taken from the checkpoint's
  // preprocessor.featurizer.fb when present (empty otherwise: the featurizer computes it).
  const std::vector<float>& filterbank() const { return filterbank_; }
  // The featurizer of config().featurizer with filterbank(), built once at load (a featurizer
  // config that Featurizer::Create rejects fails the load). Immutable and reentrant: every
  // session and recognizer of this model shares it.
  const Featurizer& featurizer() const { return *featurizer_; }
  // The folder's word LM (config().language_model), mapped at Load(); null when none.
  const std::shared_ptr<const NgramLm>& language_model() const { return language_model_; }
  // The folder's ITN grammars (config().inverse_text_normalization), loaded at Load(); null
  // when none. Shared by every session that asks for written-form results.
  const std::shared_ptr<const InverseNormalizer>& inverse_normalizer() const {
    return inverse_normalizer_;
  }
  // The folder's punctuation model (config().punctuation), loaded at Load(); null when none.
  // Shared by every session that asks for punctuated results.
  const std::shared_ptr<const Punctuator>& punctuator() const { return punctuator_; }
  // The folder's INT8 calibration (int8_calibration.json, read at Load()) when it is present,
  // well-formed and made for these weights; null otherwise, and int8_calibration_status() says
  // why (NOT_FOUND: no file; INVALID_ARGUMENT: malformed; FAILED_PRECONDITION: other weights or
  // sub-blocks). Only --cpu_precision=int8 needs it; a bad file does not fail the load.
  const Int8Calibration* int8_calibration() const {
    return int8_calibration_.has_value() ? &*int8_calibration_ : nullptr;
  }
  const absl::Status& int8_calibration_status() const { return int8_calibration_status_; }

  // Time geometry, the one home of these rules (sessions, the recognizer, the serving engine
  // and the benchmarks use them). An encoder frame is hop x subsampling input samples (20 ms
  // for QuartzNet/Jasper at 16 kHz).
  int subsampling_factor() const { return config_.subsampling_factor(); }
  int64_t samples_per_encoder_frame() const { return samples_per_encoder_frame_; }
  double encoder_frame_ms() const { return encoder_frame_ms_; }
  // Valid encoder frames for `feature_frames` valid feature frames: NeMo's length through every
  // sub-block's convolution (strided ones shrink it). 0 or less when too short.
  int EncoderFrames(int feature_frames) const;
  // Valid encoder frames for `num_samples` audio samples (featurizer, then the encoder).
  int EncoderFramesForSamples(int num_samples) const;
  // Whole encoder frames covering `ms` (rounded up; 0 for 0).
  int EncoderFramesCeil(int64_t ms) const;

 private:
  Model() = default;
  // Validates every tensor of `file` against the (already validated) `config` and folds them.
  static absl::StatusOr<std::shared_ptr<const Model>> Build(const ModelConfig& config,
                                                            const SafetensorsFile& file);
  ModelConfig config_;
  std::vector<FoldedBlock> blocks_;
  FoldedSubBlock decoder_;
  std::vector<float> filterbank_;
  std::optional<Featurizer> featurizer_;  // always set once Build() succeeds
  std::shared_ptr<const NgramLm> language_model_;
  std::shared_ptr<const InverseNormalizer> inverse_normalizer_;
  std::shared_ptr<const Punctuator> punctuator_;
  std::optional<Int8Calibration> int8_calibration_;
  absl::Status int8_calibration_status_ = absl::NotFoundError("no INT8 calibration");
  int64_t samples_per_encoder_frame_ = 0;
  double encoder_frame_ms_ = 0;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_MODEL_MODEL_H_
