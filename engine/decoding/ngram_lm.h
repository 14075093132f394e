// NgramLm: a word n-gram language model with ARPA semantics (log10 probabilities and backoff
// weights; a missing n-gram backs off to its shorter context). Read from ARPA text (the
// interchange format, e.g. from tools/build_lm.py or KenLM's lmplz) or from the compact binary
// form (tools/build_lm.py --binary, or ToBinary()), which is read with one mmap and used in
// place: no parsing, so a large LM loads in milliseconds.
//
// Words are mapped to ids once (WordId); the sentence markers <s> and </s> and the unknown word
// <unk> always have ids (an ARPA file without <unk> gets one with log10 p = kUnkLog10Prob).
//
// Binary format, version 1, little-endian, every section 8-byte aligned:
//   char magic[8] = "JSPRLM01"; u32 order (1..kMaxOrder); u32 vocab_size; u64 capacity (a power
//   of two); u64 strings_bytes; u64 counts[kMaxOrder] (n-grams per order, informational);
//   u32 offsets[vocab_size + 1] (into the strings, ascending), padding to 8;
//   char strings[strings_bytes] (the words, concatenated, no separators), padding to 8;
//   Entry table[capacity]: {u64 key; f32 log10_prob; f32 log10_backoff}, key 0 = empty slot,
//   open addressing with linear probing from key & (capacity - 1).
// An n-gram's key is a 64-bit hash of its word ids (HashNgram); distinct n-grams that collide
// would share an entry, which Build refuses, so every stored key is unique.
//
// Ownership: owns its mapping (or its vectors). Thread-safety: immutable after creation; every
// const method is safe to call concurrently.
#ifndef JASPER_ENGINE_DECODING_NGRAM_LM_H_
#define JASPER_ENGINE_DECODING_NGRAM_LM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace jasper {

class NgramLm {
 public:
  static constexpr int kMaxOrder = 6;
  static constexpr float kUnkLog10Prob = -7.0f;  // <unk> when the model has none

  // The words of the context, most recent last, at most order - 1 of them.
  struct State {
    int32_t words[kMaxOrder - 1] = {};
    int length = 0;
  };

  // Parses ARPA text. INVALID_ARGUMENT (with the line) on any malformed line, a count that does
  // not match its section, an order above kMaxOrder, or a non-finite number.
  static absl::StatusOr<std::shared_ptr<const NgramLm>> FromArpa(absl::string_view text);
  // Validates and wraps a binary image (copied). INVALID_ARGUMENT when it is not one.
  static absl::StatusOr<std::shared_ptr<const NgramLm>> FromBinary(absl::string_view bytes);
  // Maps the binary file `path` read-only; NOT_FOUND / INVALID_ARGUMENT.
  static absl::StatusOr<std::shared_ptr<const NgramLm>> LoadBinary(const std::string& path);
  // A file by its name: ARPA text when it ends in ".arpa" (parsed), else the binary form
  // (mapped). NOT_FOUND naming the file / INVALID_ARGUMENT.
  static absl::StatusOr<std::shared_ptr<const NgramLm>> LoadFile(const std::string& path);
  ~NgramLm();
  NgramLm(const NgramLm&) = delete;
  NgramLm& operator=(const NgramLm&) = delete;

  std::string ToBinary() const;

  int order() const { return order_; }
  int vocab_size() const { return static_cast<int>(offsets_.size()) - 1; }
  int64_t num_ngrams(int n) const { return counts_[n - 1]; }
  int unk_id() const { return unk_; }
  int bos_id() const { return bos_; }
  int eos_id() const { return eos_; }
  // The id of `word`, or unk_id() when it is not in the vocabulary.
  int WordId(absl::string_view word) const;
  // Whether some vocabulary word (markers excluded) starts with `prefix` (binary search).
  bool IsWordPrefix(absl::string_view prefix) const;

  // The vocabulary words (markers excluded) that start with the same `depth` bytes: the range
  // [lo, hi) of the sorted vocabulary. A decoder keeps one per open word and narrows it byte by
  // byte, so neither the word's text nor a search of the whole vocabulary is needed per letter.
  struct Prefix {
    uint32_t lo = 0;
    uint32_t hi = 0;
    uint32_t depth = 0;
  };
  // Every word (the empty prefix).
  Prefix RootPrefix() const;
  // Narrows *prefix to the words whose next byte is `c`; false (and *prefix unchanged) when no
  // word continues that way. O(log(hi - lo)).
  bool ExtendPrefix(Prefix* prefix, char c) const;
  // The id of the word that equals the prefix, or unk_id().
  int PrefixWord(const Prefix& prefix) const;
  absl::string_view Word(int id) const;

  // The state after <s> (the start of a sentence).
  State BeginSentence() const;
  // log10 P(word | state), with backoff; *next (may alias nothing else) is the state after it:
  // the longest suffix of (state, word) that the model has as a context.
  float Score(const State& state, int word, State* next) const;
  // log10 probability of a whole sequence of ids from `state` (convenience for tests, tools).
  float ScoreSequence(State state, absl::Span<const int> words, State* end) const;

  // 64-bit key of an n-gram of word ids (never 0).
  static uint64_t HashNgram(absl::Span<const int32_t> ids);

 private:
  struct Entry {
    uint64_t key;
    float log10_prob;
    float log10_backoff;
  };
  NgramLm() = default;
  // Validates the image in bytes_ (or mapping_) and points the views at it.
  absl::Status Attach(const char* data, size_t size);
  const Entry* Find(absl::Span<const int32_t> ids) const;

  int order_ = 0;
  int64_t counts_[kMaxOrder] = {};
  // Views into the image (owned buffer or mapping).
  std::vector<uint32_t> offsets_;  // copied out (small), [vocab_size + 1]
  absl::string_view strings_;
  const Entry* table_ = nullptr;
  uint64_t capacity_ = 0;
  absl::flat_hash_map<std::string, int> ids_;
  // The vocabulary (markers excluded) sorted bytewise, and each one's id: for the prefixes.
  std::vector<absl::string_view> sorted_words_;
  std::vector<int32_t> sorted_ids_;
  int unk_ = 0, bos_ = 0, eos_ = 0;
  std::string owned_;        // FromBinary / FromArpa
  void* mapping_ = nullptr;  // LoadBinary
  size_t mapping_size_ = 0;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_DECODING_NGRAM_LM_H_
