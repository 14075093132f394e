// Inverse text normalization (ITN): spoken-form words to written form ("twenty three dollars
// fifty cents" -> "$23.50"), with NeMo's English grammars compiled to OpenFst by
// tools/export_itn.py and applied here as NeMo's InverseNormalizer applies them: the tagger FST
// classifies the sentence into tokens, each token's fields are serialized in NeMo's permutation
// order until the verbalizer FST accepts one, and the verbalizer's shortest path is the written
// token. Both shortest paths come from StringTransducer (string_transducer.h), which searches
// the FSTs without building their composition with the input. No Python at serve time. The
// grammar folder's files: docs/MODEL_FORMAT.md ("itn/").
//
// Unlike NeMo's normalizer, which returns one string, Normalize() returns the written tokens with
// the spoken words each one replaces, so word time offsets stay correct (a written token spans
// the words it came from).
//
// Ownership: owns the two compiled FSTs (immutable after Load). Thread-safety: Normalize() and
// NormalizeText() are const and may run concurrently on one instance.
#ifndef JASPER_ENGINE_TEXT_INVERSE_NORMALIZER_H_
#define JASPER_ENGINE_TEXT_INVERSE_NORMALIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace jasper {

// One written token: `text` replaces spoken words [first_word, first_word + num_words). `text`
// may be empty (a grammar that deletes words); it never holds leading, trailing or double spaces.
struct WrittenSpan {
  std::string text;
  int first_word = 0;
  int num_words = 0;
};

class InverseNormalizer {
 public:
  // Reads DIR/itn.json (format_version 1, input_case "lower_cased"), DIR/tagger.fst and
  // DIR/verbalizer.fst (OpenFst vector FSTs, standard arcs, input-label sorted, sizes as the
  // manifest states). NOT_FOUND: a file is missing; INVALID_ARGUMENT: a malformed manifest, a
  // size mismatch, or an FST OpenFst cannot read or that is not input-label sorted.
  static absl::StatusOr<std::unique_ptr<const InverseNormalizer>> Load(const std::string& dir);
  ~InverseNormalizer();
  InverseNormalizer(const InverseNormalizer&) = delete;
  InverseNormalizer& operator=(const InverseNormalizer&) = delete;

  // `words`: the spoken words (lower case, no spaces inside; empty words are skipped as spaces
  // would be). Returns spans covering every word once, in order. Never fails: where NeMo's
  // normalizer gives the input back (no tagging, no verbalization accepted, a malformed tag),
  // every word is its own span, unchanged.
  std::vector<WrittenSpan> Normalize(absl::Span<const std::string> words) const;

  // The written sentence: the non-empty span texts joined by single spaces, which is what NeMo's
  // InverseNormalizer.inverse_normalize returns for the words joined by spaces.
  std::string NormalizeText(absl::string_view spoken) const;

  // The folder's itn.json "source" (which nemo-text-processing and pynini made the files).
  const std::string& provenance() const { return provenance_; }

 private:
  struct Fsts;
  InverseNormalizer(std::unique_ptr<Fsts> fsts, std::string provenance, int max_permutations);

  std::unique_ptr<Fsts> fsts_;
  std::string provenance_;
  int max_permutations_;  // per token, NeMo's max_number_of_permutations_per_split
};

// Joins the non-empty texts of `spans` with single spaces.
std::string JoinWritten(absl::Span<const WrittenSpan> spans);

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_INVERSE_NORMALIZER_H_
