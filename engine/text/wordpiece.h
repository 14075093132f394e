// BERT's uncased WordPiece tokenizer, as the token-transformer punctuation model
// (engine/text/punct_transformer.h) was trained with it (tools/train_punct_bert.py's WordPiece,
// which is the reference: the same steps on the same bytes).
//
// A word is cut into parts: each run of ASCII letters and digits (lower-cased) and bytes >= 0x80
// (kept as they are) is one part, and every other ASCII character is a part of its own. Each
// part becomes the longest vocabulary entry that starts it, then the longest "##" entry that
// continues it, and so on; a part that cannot be covered this way is one [UNK].
//
// Ownership: owns its vocabulary. Thread-safety: immutable after Load; Tokenize() is const.
#ifndef JASPER_ENGINE_TEXT_WORDPIECE_H_
#define JASPER_ENGINE_TEXT_WORDPIECE_H_

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace jasper {

class WordPiece {
 public:
  // `path`: one token per line, the line's index its id (BERT's vocab.txt); it must hold
  // [UNK], [CLS] and [SEP]. NOT_FOUND: no file; INVALID_ARGUMENT: an empty line, a token twice,
  // a missing special token, more than 1,000,000 lines.
  static absl::StatusOr<WordPiece> Load(const std::filesystem::path& path);

  // Appends the ids of `word`'s tokens to *ids, at most `max_pieces` of them (the rest dropped);
  // an empty word adds [UNK].
  void Tokenize(absl::string_view word, int max_pieces, std::vector<int>* ids) const;

  int size() const { return static_cast<int>(ids_.size()); }
  int unk() const { return unk_; }
  int cls() const { return cls_; }
  int sep() const { return sep_; }

 private:
  WordPiece() = default;
  // Appends one part's pieces (or [UNK]) to *ids.
  void Part(absl::string_view part, std::vector<int>* ids) const;

  absl::flat_hash_map<std::string, int> ids_;
  size_t longest_ = 0;  // bytes of the longest entry, "##" included
  int unk_ = -1, cls_ = -1, sep_ = -1;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_WORDPIECE_H_
