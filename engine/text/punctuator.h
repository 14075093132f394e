// Punctuation and capitalization of a recognizer's words: "where is the station i asked him" ->
// "Where is the station? I asked him.". Both methods restore the marks , . ? and capitals, give
// a sentence's first word a capital, and take the other words' capitalized forms from a case
// table (tools/build_punct.py). Which method, by the folder's punct.json "method":
//
// token_transformer (engine/text/punct_transformer.h, tools/train_punct_bert.py: the first layers
// of a pretrained MiniLM encoder, fine-tuned) and token_cnn (engine/text/punct_cnn.h,
// tools/train_punct.py: a small convolutional net): a token classifier scores, per word, the
// mark after it and its case (lower, Capitalized, UPPER, or the case table's form); each word
// takes its best scores plus a per-mark bias, and a final result's last word the better of . and
// ?.
//
// hidden_event_lm (Stolcke & Shriberg 1996): an n-gram LM over cased words with the marks as
// tokens of their own. A beam search (hypotheses that share an LM state merged) finds the most
// probable token string the LM could have produced from the words: one cased form per word and
// at most one mark after it. Two additions to the LM's score, tuned on dev text: a bias per
// placed mark, and for a closing . or ? the evidence of the sentence's first words ("where is
// ..." ends in ?, which an n-gram ending at the mark cannot see).
//
// The folder's files: docs/MODEL_FORMAT.md ("punct/"). Input words are as the recognizer (and,
// when asked, inverse text normalization) wrote them: lower-case words are looked up in the
// case table, a word with a digit is a number, and a word with capitals (written by ITN) keeps
// them. Output words correspond one to one with the input words, so word times stay as they
// were.
//
// Ownership: owns its model (immutable after Load). Thread-safety: Punctuate() and
// PunctuateText() are const and may run concurrently on one instance.
#ifndef JASPER_ENGINE_TEXT_PUNCTUATOR_H_
#define JASPER_ENGINE_TEXT_PUNCTUATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/decoding/ngram_lm.h"
#include "engine/text/token_classifier.h"
#include "kernels/sub_block.h"

namespace jasper {

class Punctuator {
 public:
  // Hypotheses kept per word: 8 is within 0.012 F1 of 64 on every mark of the held-out text, at
  // a quarter of the cost (docs/PERFORMANCE.md).
  static constexpr int kDefaultBeam = 8;

  // Reads DIR/punct.json (format_version 1, marks [",", ".", "?"], mark_bias, question_weight),
  // the LM it names (jasper-lm binary form; ARPA text when the name ends in .arpa), the case
  // table (case.tsv) and the sentence-start table (starts.tsv), checking the sizes the manifest
  // states. NOT_FOUND: a file is missing; INVALID_ARGUMENT: a malformed
  // manifest or case table, a size mismatch, or an LM without the mark tokens.
  // `precision` (fp32 or bf16) is the GEMM precision of a "token_transformer" model's linear
  // layers; without it, DefaultPrecision().
  static absl::StatusOr<std::unique_ptr<const Punctuator>> Load(const std::string& dir);
  static absl::StatusOr<std::unique_ptr<const Punctuator>> Load(const std::string& dir,
                                                                kernels::Precision precision);

  // BF16 where BF16 GEMMs are faster than FP32 ones on this CPU (kernels::
  // Bf16GemmFasterThanFp32: AMX, or AMD's AVX-512 BF16), as --cpu_precision=auto decides for the
  // acoustic model; else FP32. The marks it gives agree with FP32's to within the F1 table of
  // docs/PERFORMANCE.md.
  static kernels::Precision DefaultPrecision();

  // `words`: in order; empty words stay empty and are skipped. `complete`: the words end an
  // utterance (a final result), so the last one gets a closing . or ?; an interim result passes
  // false and its last word gets no mark (more words may follow it). Returns
  // one string per word: its cased form, a mark appended when one follows it. Never fails.
  std::vector<std::string> Punctuate(absl::Span<const std::string> words, bool complete,
                                     int beam = kDefaultBeam) const;

  // The words of `text` (split at spaces) punctuated and joined by single spaces.
  std::string PunctuateText(absl::string_view text, bool complete = true) const;

  // "hidden_event_lm", "token_cnn" or "token_transformer" (punct.json "method").
  const char* method() const { return method_; }

  // A word's cased forms (case.tsv).
  struct Forms {
    std::vector<std::string> text;  // the cased forms, most frequent first
    std::vector<int> ids;           // their LM ids (hidden-event LM only)
  };
  // log10 P(mark | sentence start) / P(mark) for . and ? (starts.tsv).
  struct StartEvidence {
    float period = 0;
    float question = 0;
  };

 private:
  Punctuator() = default;
  // The hidden-event LM's beam search, and a token classifier's per-word choice.
  std::vector<std::string> SearchLm(absl::Span<const std::string> words, bool complete,
                                    int beam) const;
  std::vector<std::string> ClassifyTokens(absl::Span<const std::string> words, bool complete) const;
  // For a sentence starting at words[i] (or the next non-empty word): the evidence of its first
  // word alone, of its first two words, and where the second one is.
  struct SentenceStart {
    StartEvidence one, two;
    int second = 0;
  };
  std::vector<SentenceStart> SentenceStarts(absl::Span<const std::string> words) const;

  const char* method_ = "hidden_event_lm";
  // token_cnn and token_transformer; the LM fields are unused then.
  std::unique_ptr<const TokenClassifier> classifier_;
  std::shared_ptr<const NgramLm> lm_;
  absl::flat_hash_map<std::string, Forms> cases_;  // lower-case word -> forms (not just itself)
  // "first" or "first second" (lower case, numbers as <num>) -> evidence.
  absl::flat_hash_map<std::string, StartEvidence> starts_;
  int mark_ids_[3] = {};       // LM ids of , . ?
  int number_id_ = 0;          // LM id of <num> (or <unk>)
  float mark_bias_[3] = {};    // log10 bonus per placed , . ?
  float question_weight_ = 1;  // weight of StartEvidence
};

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_PUNCTUATOR_H_
