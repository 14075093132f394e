// TokenCnn: the token-classifier punctuation model (punct.json "method": "token_cnn", trained by
// tools/train_punct.py): per word, scores for the mark after it (none , . ?) and for its case
// (lower, Capitalized, UPPER, other). Network: a word embedding (lower case; a word with a digit
// is "<num>", an unknown one "<unk>") and a 3-letter-suffix embedding, concatenated -> a 1-D
// convolution over the words (kernel K, zero padding) with ReLU -> residual blocks
// h += ReLU(conv_d(h)) for each dilation d -> two 1x1 heads. Exactly PyTorch's nn.Conv1d
// arithmetic (the tests compare with logits from PyTorch), in FP32 from F16-stored weights.
//
// Tensor shapes (channels last, one passage at a time): words [T]; embeddings [T, E + S];
// hidden [T, C]; Logits::marks and ::cases [T, 4], row-major.
//
// Ownership: owns its weights (immutable after Load). Thread-safety: Forward() is const and may
// run concurrently on one instance.
#ifndef JASPER_ENGINE_TEXT_PUNCT_CNN_H_
#define JASPER_ENGINE_TEXT_PUNCT_CNN_H_

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/text/token_classifier.h"
#include "nlohmann/json.hpp"

namespace jasper {

class TokenCnn : public TokenClassifier {
 public:
  // Reads the files `manifest` names in `dir` ("weights", "vocabulary", "suffixes"; sizes
  // already checked by the caller) with the shapes its "cnn" object gives. NOT_FOUND: a missing
  // file; INVALID_ARGUMENT: a malformed config, vocabulary or tensor (missing, wrong shape, not
  // finite), naming it.
  static absl::StatusOr<std::unique_ptr<const TokenCnn>> Load(const std::filesystem::path& dir,
                                                              const nlohmann::json& manifest);

  Logits Forward(absl::Span<const std::string> words) const override;

 private:
  struct Conv {
    int in = 0, out = 0, dilation = 1;
    std::vector<float> weight;  // [K, in, out]: tap-major, output channels contiguous
    std::vector<float> bias;    // [out]
  };
  TokenCnn() = default;
  // out[t, :] = bias + sum_k W[k] x[t + (k - K/2) * dilation, :] (zero outside [0, T)).
  void Apply(const Conv& conv, const std::vector<float>& x, int frames,
             std::vector<float>* out) const;

  int kernel_ = 5;
  int embedding_ = 0, suffix_embedding_ = 0, channels_ = 0;
  absl::flat_hash_map<std::string, int> words_, suffixes_;  // -> row; 1 is <unk>
  std::vector<float> word_table_;                           // [words, E]
  std::vector<float> suffix_table_;                         // [suffixes, S]
  Conv input_;
  std::vector<Conv> blocks_;
  Conv marks_, cases_;  // 1x1 heads
};

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_PUNCT_CNN_H_
