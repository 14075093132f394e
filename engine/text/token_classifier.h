// The interface of the token-classifier punctuation models (punct.json "method" "token_cnn",
// engine/text/punct_cnn.h, and "token_transformer", engine/text/punct_transformer.h): per word,
// scores for the mark after it (none , . ?) and for its case (lower, Capitalized, UPPER, other =
// the case table's form). engine/text/punctuator.cc turns them into text the same way for both.
//
// Tensor shapes: Logits::marks and ::cases [T, kClasses] row-major, T = the number of words.
// Thread-safety: implementations are immutable after loading; Forward() is const and may run
// concurrently on one instance.
#ifndef JASPER_ENGINE_TEXT_TOKEN_CLASSIFIER_H_
#define JASPER_ENGINE_TEXT_TOKEN_CLASSIFIER_H_

#include <string>
#include <vector>

#include "absl/types/span.h"

namespace jasper {

class TokenClassifier {
 public:
  static constexpr int kClasses = 4;  // marks: none , . ?   cases: lower Title UPPER other

  struct Logits {
    std::vector<float> marks;  // [T, 4]
    std::vector<float> cases;  // [T, 4]
  };

  virtual ~TokenClassifier() = default;
  // `words`: non-empty, in order (any case). Never fails.
  virtual Logits Forward(absl::Span<const std::string> words) const = 0;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_TOKEN_CLASSIFIER_H_
