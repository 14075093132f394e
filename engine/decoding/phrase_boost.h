// PhraseBoost: per-request word and phrase boosting for the beam decoder (Riva's
// RecognitionConfig.speech_contexts: phrases with a boost). The phrases are normalized to the
// model's alphabet (lowercase letters, apostrophes, single spaces) and stored in a character
// trie. While a hypothesis spells a phrase from a word boundary, every character of it earns
// boost / length(phrase); a hypothesis that leaves the phrase loses what it earned, so only
// complete phrases keep a bonus (context biasing as in icefall's ContextGraph), and partial
// matches cost one trie step per character.
//
// Ownership: owns the trie. Thread-safety: immutable after Create(); const methods are safe to
// call concurrently (one PhraseBoost per request, shared by its decoders).
#ifndef JASPER_ENGINE_DECODING_PHRASE_BOOST_H_
#define JASPER_ENGINE_DECODING_PHRASE_BOOST_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace jasper {

struct BoostPhrase {
  std::string phrase;
  float boost = 0;  // log-score bonus of the whole phrase
};

struct PhraseBoostLimits {
  int max_phrases = 1000;       // [1, 100000]
  int max_phrase_chars = 100;   // after normalization
  float max_abs_boost = 50.0f;  // |boost|; negative boosts discourage a phrase
};

class PhraseBoost {
 public:
  // `labels`: the model's vocabulary (single characters; " " is the word separator).
  // INVALID_ARGUMENT naming the phrase's index: too many phrases, an empty phrase or one with
  // no letters after normalization, a character the model cannot emit, a phrase too long, a
  // boost that is NaN, infinite or beyond max_abs_boost.
  static absl::StatusOr<std::shared_ptr<const PhraseBoost>> Create(
      const std::vector<BoostPhrase>& phrases, const std::vector<std::string>& labels,
      const PhraseBoostLimits& limits = {});

  // The lowercase form Create() matches: letters and apostrophes kept, other characters
  // become word separators, runs of separators one space, no leading or trailing space.
  static std::string Normalize(const std::string& phrase);

  // The trie state of a hypothesis: a node index; kNoMatch: inside a word that matches no
  // phrase (no bonus until the next word boundary).
  static constexpr int kRoot = 0;
  static constexpr int kNoMatch = -1;

  // Moves `state` by label `label` (the model's id); returns the score change (what this
  // character earns, or minus what the abandoned partial match had earned).
  float Step(int* state, int label) const;
  // The score a hypothesis in `state` holds only provisionally (to take back at the end of the
  // stream if the phrase is not finished).
  float Pending(int state) const;
  int num_phrases() const { return num_phrases_; }

 private:
  struct Node {
    int child[32];     // by alphabet index (a-z, ', space); -1 none
    float earned = 0;  // bonus accumulated from the root to here
    bool end = false;  // a whole phrase ends here
  };
  PhraseBoost() = default;
  int Index(int label) const;  // alphabet index of a model label, -1 when not in it

  std::vector<Node> nodes_;
  std::vector<int> label_index_;  // model label -> alphabet index (-1 none)
  int space_label_ = -1;
  int num_phrases_ = 0;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_DECODING_PHRASE_BOOST_H_
