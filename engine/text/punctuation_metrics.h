// Scores punctuation and capitalization against reference text: precision, recall and F1 per
// mark (, . ?) over the gaps after words, and for capitals over words (a word is positive when
// its reference has a capital; a hit when the output has the reference's exact form). The
// held-out test (tests/punctuator_test.cc) and tools/bench/punct_bench.cc use it.
// Thread-safety: ScorePassage is a pure function of its arguments and *scores.
#ifndef JASPER_ENGINE_TEXT_PUNCTUATION_METRICS_H_
#define JASPER_ENGINE_TEXT_PUNCTUATION_METRICS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace jasper {

struct F1Counts {
  int64_t true_positives = 0;
  int64_t false_positives = 0;
  int64_t false_negatives = 0;
  double Precision() const;
  double Recall() const;
  double F1() const;
};

struct PunctuationScores {
  F1Counts marks[3];  // , . ?
  F1Counts capitals;
  int64_t words = 0;
};

// Adds one passage. `output` and `reference`: words separated by spaces, each optionally ending
// in one of , . ? (the mark after it). INVALID_ARGUMENT (nothing added) when the two do not
// hold the same words, compared without marks and case.
absl::Status ScorePassage(absl::string_view output, absl::string_view reference,
                          PunctuationScores* scores);

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_PUNCTUATION_METRICS_H_
