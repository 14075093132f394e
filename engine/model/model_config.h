// model.json: the architecture, featurizer parameters and vocabulary of a model folder.
//
// The schema mirrors NeMo's own config (the `preprocessor`, `encoder.jasper` and `decoder`
// sections of model_config.yaml) with NeMo's key names, so the converter copies rather than
// translates. See docs/MODEL_FORMAT.md for every field, its default and its valid range.
//
// Plain value types; thread-compatible.
#ifndef JASPER_ENGINE_MODEL_MODEL_CONFIG_H_
#define JASPER_ENGINE_MODEL_MODEL_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/features/featurizer_config.h"

namespace jasper {

// One NeMo `encoder.jasper[i]` entry (a JasperBlock). Only the features Jasper and QuartzNet use
// are supported; anything else (squeeze-excite, groups > 1, other residual modes) is rejected.
struct BlockConfig {
  int filters = 0;
  int repeat = 1;
  int kernel = 1;
  int stride = 1;
  int dilation = 1;
  bool residual = false;
  bool residual_dense = false;
  bool separable = false;

  absl::Status Validate() const;
};

struct ModelConfig {
  int format_version = 1;
  std::string name;
  // Optional: a file in the model folder holding a word n-gram LM in the binary form of
  // engine/decoding/ngram_lm.h (beam search uses it when the server is given no --lm). A plain
  // file name; empty: none.
  std::string language_model;
  // Optional: a folder in the model folder holding inverse-text-normalization grammars
  // (engine/text/inverse_normalizer.h; itn.json, tagger.fst, verbalizer.fst). A plain folder
  // name; empty: none (results stay verbatim whatever a request asks).
  std::string inverse_text_normalization;
  // Optional: a folder in the model folder holding a punctuation and capitalization model
  // (engine/text/punctuator.h; punct.json, lm.bin, case.tsv). A plain folder name; empty: none
  // (results stay without marks and capitals whatever a request asks).
  std::string punctuation;
  // Optional: the decoder a request gets when neither it nor the server names one: "greedy" or
  // "beam" (CTC prefix beam search, with language_model when there is one). Empty: greedy. A
  // model whose accuracy rests on its LM says "beam" (docs/MODEL_FORMAT.md).
  std::string default_decoder;
  FeaturizerConfig featurizer;
  int feat_in = 64;                 // encoder input channels (== featurizer.features)
  std::string activation = "relu";  // only relu
  bool conv_mask = true;
  std::vector<BlockConfig> blocks;
  int decoder_feat_in = 0;          // == last block's filters
  std::vector<std::string> labels;  // CTC vocabulary; blank = labels.size()

  int blank_id() const { return static_cast<int>(labels.size()); }
  // default_decoder, or "greedy" when the folder names none.
  std::string decoder_or_greedy() const {
    return default_decoder.empty() ? "greedy" : default_decoder;
  }
  int num_outputs() const { return static_cast<int>(labels.size()) + 1; }
  // Total time subsampling: the product over blocks of stride^repeat, since NeMo strides every
  // sub-block of a block (2 for QuartzNet/Jasper, whose strided blocks have repeat 1).
  int subsampling_factor() const;
  absl::Status Validate() const;
};

// Which activations feed each block's residual branches, following NeMo's JasperBlock list
// passing (a dense-residual block hands its input list plus its output to the next block):
// result[b][p] is -1 (the encoder input features) or the index of the earlier block whose output
// residual pane p of block b reads; empty for blocks without a residual. Errors for layouts NeMo
// cannot run (non-consecutive dense-residual blocks, pane channel mismatches). Used by
// ModelConfig::Validate() and the loader.
absl::StatusOr<std::vector<std::vector<int>>> ResidualSources(const ModelConfig& config);

// Parses model.json text. Every error names the offending field.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text);

// Serializes back to model.json text (used by tools and tests).
std::string ModelConfigToJson(const ModelConfig& config);

}  // namespace jasper

#endif  // JASPER_ENGINE_MODEL_MODEL_CONFIG_H_
