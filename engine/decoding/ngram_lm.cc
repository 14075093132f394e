#include "engine/decoding/ngram_lm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace jasper {
namespace {

constexpr char kMagic[8] = {'J', 'S', 'P', 'R', 'L', 'M', '0', '1'};
constexpr uint64_t kMaxCapacity = uint64_t{1} << 32;
constexpr uint32_t kMaxVocab = 1u << 24;

size_t Pad8(size_t n) { return (n + 7) & ~size_t{7}; }

struct Header {
  char magic[8];
  uint32_t order;
  uint32_t vocab_size;
  uint64_t capacity;
  uint64_t strings_bytes;
  uint64_t counts[NgramLm::kMaxOrder];
};
static_assert(sizeof(Header) == 32 + 8 * NgramLm::kMaxOrder, "packed header");

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("language model: ", what));
}

// One parsed n-gram: log10 p and backoff of the word-id sequence.
struct Gram {
  float log10_prob = 0;
  float log10_backoff = 0;
};

// Builds the binary image from a vocabulary (index = id) and n-grams of ids.
absl::StatusOr<std::string> BuildImage(const std::vector<std::string>& vocab, int order,
                                       const std::map<std::vector<int32_t>, Gram>& grams) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.order = static_cast<uint32_t>(order);
  h.vocab_size = static_cast<uint32_t>(vocab.size());
  uint64_t capacity = 16;
  while (capacity < 2 * grams.size()) capacity *= 2;  // load factor <= 0.5
  h.capacity = capacity;
  std::string strings;
  std::vector<uint32_t> offsets;
  for (const std::string& w : vocab) {
    offsets.push_back(static_cast<uint32_t>(strings.size()));
    strings += w;
  }
  offsets.push_back(static_cast<uint32_t>(strings.size()));
  h.strings_bytes = strings.size();
  for (const auto& [ids, g] : grams) ++h.counts[ids.size() - 1];

  struct Entry {
    uint64_t key;
    float log10_prob;
    float log10_backoff;
  };
  std::vector<Entry> table(capacity, Entry{0, 0, 0});
  for (const auto& [ids, g] : grams) {
    const uint64_t key = NgramLm::HashNgram(ids);
    uint64_t i = key & (capacity - 1);
    while (table[i].key != 0) {
      if (table[i].key == key) {
        return Invalid("two n-grams share a 64-bit key (hash collision); rebuild with other words");
      }
      i = (i + 1) & (capacity - 1);
    }
    table[i] = Entry{key, g.log10_prob, g.log10_backoff};
  }
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out.append(reinterpret_cast<const char*>(offsets.data()), offsets.size() * sizeof(uint32_t));
  out.resize(Pad8(out.size()), '\0');
  out += strings;
  out.resize(Pad8(out.size()), '\0');
  out.append(reinterpret_cast<const char*>(table.data()), table.size() * sizeof(Entry));
  return out;
}

bool ParseFloat(absl::string_view s, float* out) {
  double d = 0;
  if (!absl::SimpleAtod(s, &d) || !std::isfinite(d)) return false;
  *out = static_cast<float>(d);
  return true;
}

}  // namespace

uint64_t NgramLm::HashNgram(absl::Span<const int32_t> ids) {
  // FNV-1a over the ids' bytes, then a final mix; the length goes in first so that n-grams of
  // different orders differ.
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(ids.size());
  for (int32_t id : ids) {
    uint32_t v = static_cast<uint32_t>(id);
    for (int b = 0; b < 4; ++b) {
      h ^= (v >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

NgramLm::~NgramLm() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

absl::StatusOr<std::shared_ptr<const NgramLm>> NgramLm::FromArpa(absl::string_view text) {
  std::vector<std::string> vocab;
  absl::flat_hash_map<std::string, int32_t> ids;
  const auto id_of = [&](absl::string_view w) {
    auto [it, inserted] = ids.try_emplace(std::string(w), static_cast<int32_t>(vocab.size()));
    if (inserted) vocab.emplace_back(w);
    return it->second;
  };
  std::map<std::vector<int32_t>, Gram> grams;
  std::vector<int64_t> declared;
  int section = -1;  // -1: before \data\, 0: in \data\, n: in \n-grams:
  bool ended = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || ended) continue;
    const auto bad = [&](absl::string_view what) {
      return Invalid(
          absl::StrCat("ARPA line ", line_no, ": ", what, " ('", line.substr(0, 80), "')"));
    };
    if (line == "\\data\\") {
      section = 0;
      continue;
    }
    if (line == "\\end\\") {
      ended = true;
      continue;
    }
    if (absl::StartsWith(line, "\\") && absl::EndsWith(line, "-grams:")) {
      int n = 0;
      if (!absl::SimpleAtoi(line.substr(1, line.size() - 8), &n) || n < 1 ||
          n > static_cast<int>(declared.size())) {
        return bad("a section with no matching 'ngram N=' count");
      }
      section = n;
      continue;
    }
    if (section == 0) {
      absl::string_view rest = line;
      int64_t count = 0;
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(rest, '=');
      int n = 0;
      if (!absl::ConsumePrefix(&kv.first, "ngram ") ||
          !absl::SimpleAtoi(absl::StripAsciiWhitespace(kv.first), &n) ||
          !absl::SimpleAtoi(absl::StripAsciiWhitespace(kv.second), &count) || count < 0 ||
          n != static_cast<int>(declared.size()) + 1) {
        return bad("expected 'ngram N=COUNT' with N = 1, 2, ...");
      }
      if (n > kMaxOrder) return bad(absl::StrCat("order above ", kMaxOrder));
      declared.push_back(count);
      continue;
    }
    if (section < 1) return bad("text outside the \\data\\ and n-gram sections");
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != static_cast<size_t>(section) + 1 &&
        fields.size() != static_cast<size_t>(section) + 2) {
      return bad(absl::StrCat("expected log10 p, ", section, " words and an optional backoff"));
    }
    Gram g;
    if (!ParseFloat(fields[0], &g.log10_prob)) return bad("log10 p is not a finite number");
    if (fields.size() == static_cast<size_t>(section) + 2 &&
        !ParseFloat(fields.back(), &g.log10_backoff)) {
      return bad("backoff is not a finite number");
    }
    std::vector<int32_t> key;
    for (int i = 1; i <= section; ++i) key.push_back(id_of(fields[i]));
    if (!grams.emplace(std::move(key), g).second) return bad("duplicate n-gram");
  }
  if (declared.empty()) return Invalid("no \\data\\ section with n-gram counts");
  if (!ended) return Invalid("ARPA text without \\end\\");
  std::vector<int64_t> found(declared.size(), 0);
  for (const auto& [k, g] : grams) ++found[k.size() - 1];
  for (size_t n = 0; n < declared.size(); ++n) {
    if (found[n] != declared[n]) {
      return Invalid(absl::StrCat("the \\data\\ section declares ", declared[n], " ", n + 1,
                                  "-grams but ", found[n], " follow"));
    }
  }
  // The markers and <unk> always exist.
  const std::pair<const char*, float> markers[] = {
      {"<unk>", kUnkLog10Prob}, {"<s>", -99.0f}, {"</s>", kUnkLog10Prob}};
  for (const auto& [word, log10_prob] : markers) {
    if (ids.contains(word)) continue;
    Gram g;
    g.log10_prob = log10_prob;
    grams.emplace(std::vector<int32_t>{id_of(word)}, g);
  }
  if (vocab.size() > kMaxVocab) return Invalid("vocabulary too large");
  absl::StatusOr<std::string> image = BuildImage(vocab, static_cast<int>(declared.size()), grams);
  if (!image.ok()) return image.status();
  return FromBinary(*image);
}

absl::StatusOr<std::shared_ptr<const NgramLm>> NgramLm::FromBinary(absl::string_view bytes) {
  std::shared_ptr<NgramLm> lm(new NgramLm());
  lm->owned_.assign(bytes.data(), bytes.size());
  // std::string storage is at least 8-byte aligned (operator new), as the table needs.
  if (absl::Status s = lm->Attach(lm->owned_.data(), lm->owned_.size()); !s.ok()) return s;
  return std::shared_ptr<const NgramLm>(std::move(lm));
}

absl::StatusOr<std::shared_ptr<const NgramLm>> NgramLm::LoadFile(const std::string& path) {
  if (!absl::EndsWith(path, ".arpa")) return LoadBinary(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read LM file ", path));
  std::stringstream text;
  text << in.rdbuf();
  return FromArpa(text.str());
}

absl::StatusOr<std::shared_ptr<const NgramLm>> NgramLm::LoadBinary(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("language model: cannot open ", path));
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return Invalid(absl::StrCat(path, " is empty or unreadable"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return Invalid(absl::StrCat("cannot map ", path));
  std::shared_ptr<NgramLm> lm(new NgramLm());
  lm->mapping_ = map;
  lm->mapping_size_ = size;
  if (absl::Status s = lm->Attach(static_cast<const char*>(map), size); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  return std::shared_ptr<const NgramLm>(std::move(lm));
}

absl::Status NgramLm::Attach(const char* data, size_t size) {
  if (size < sizeof(Header)) return Invalid("binary image shorter than its header");
  Header h;
  std::memcpy(&h, data, sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    return Invalid("not a jasper-serve binary LM (bad magic)");
  }
  if (h.order < 1 || h.order > static_cast<uint32_t>(kMaxOrder)) return Invalid("bad order");
  if (h.vocab_size < 3 || h.vocab_size > kMaxVocab) return Invalid("bad vocabulary size");
  if (h.capacity < 16 || h.capacity > kMaxCapacity || (h.capacity & (h.capacity - 1)) != 0) {
    return Invalid("bad table capacity");
  }
  if (h.strings_bytes > size) return Invalid("strings past the end of the image");
  const size_t offsets_at = sizeof(Header);
  const size_t offsets_bytes = (static_cast<size_t>(h.vocab_size) + 1) * sizeof(uint32_t);
  const size_t strings_at = Pad8(offsets_at + offsets_bytes);
  const size_t table_at = Pad8(strings_at + h.strings_bytes);
  const size_t table_bytes = h.capacity * sizeof(Entry);
  if (table_at > size || size - table_at != table_bytes) {
    return Invalid("image size does not match its header");
  }
  offsets_.resize(h.vocab_size + 1);
  std::memcpy(offsets_.data(), data + offsets_at, offsets_bytes);
  if (offsets_[0] != 0 || offsets_.back() != h.strings_bytes) return Invalid("bad word offsets");
  for (size_t i = 1; i < offsets_.size(); ++i) {
    if (offsets_[i] <= offsets_[i - 1]) return Invalid("empty or unordered words");
  }
  strings_ = absl::string_view(data + strings_at, h.strings_bytes);
  table_ = reinterpret_cast<const Entry*>(data + table_at);
  capacity_ = h.capacity;
  order_ = static_cast<int>(h.order);
  uint64_t stored = 0;
  for (int n = 0; n < kMaxOrder; ++n) {
    counts_[n] = static_cast<int64_t>(h.counts[n]);
    if (n >= order_ && h.counts[n] != 0) return Invalid("n-gram counts above the order");
    stored += h.counts[n];
  }
  if (stored > capacity_ / 2) return Invalid("n-gram counts above the table's load");
  ids_.reserve(h.vocab_size);
  for (int i = 0; i < static_cast<int>(h.vocab_size); ++i) {
    if (!ids_.try_emplace(std::string(Word(i)), i).second) return Invalid("duplicate word");
  }
  std::vector<std::pair<absl::string_view, int32_t>> sorted;
  sorted.reserve(h.vocab_size);
  for (int i = 0; i < static_cast<int>(h.vocab_size); ++i) {
    const absl::string_view w = Word(i);
    if (w != "<s>" && w != "</s>" && w != "<unk>") sorted.emplace_back(w, i);
  }
  std::sort(sorted.begin(), sorted.end());
  sorted_words_.clear();
  sorted_ids_.clear();
  sorted_words_.reserve(sorted.size());
  sorted_ids_.reserve(sorted.size());
  for (const auto& [word, id] : sorted) {
    sorted_words_.push_back(word);
    sorted_ids_.push_back(id);
  }
  const auto marker = [&](const char* w, int* id) {
    auto it = ids_.find(w);
    if (it == ids_.end()) return false;
    *id = it->second;
    return true;
  };
  if (!marker("<unk>", &unk_) || !marker("<s>", &bos_) || !marker("</s>", &eos_)) {
    return Invalid("the vocabulary lacks <unk>, <s> or </s>");
  }
  // Every table entry must hold finite numbers (an LM with NaNs would poison every score).
  uint64_t used = 0;
  for (uint64_t i = 0; i < capacity_; ++i) {
    Entry e;
    std::memcpy(&e, &table_[i], sizeof(e));
    if (e.key == 0) continue;
    ++used;
    if (!std::isfinite(e.log10_prob) || !std::isfinite(e.log10_backoff)) {
      return Invalid("a non-finite probability or backoff in the table");
    }
  }
  if (used != stored) return Invalid("the table does not hold the declared n-grams");
  const int32_t unk = unk_;
  if (Find(absl::MakeConstSpan(&unk, 1)) == nullptr) return Invalid("no unigram for <unk>");
  return absl::OkStatus();
}

std::string NgramLm::ToBinary() const {
  const char* base = mapping_ != nullptr ? static_cast<const char*>(mapping_) : owned_.data();
  const size_t size = mapping_ != nullptr ? mapping_size_ : owned_.size();
  return std::string(base, size);
}

int NgramLm::WordId(absl::string_view word) const {
  auto it = ids_.find(word);
  return it == ids_.end() ? unk_ : it->second;
}

bool NgramLm::IsWordPrefix(absl::string_view prefix) const {
  auto it = std::lower_bound(sorted_words_.begin(), sorted_words_.end(), prefix);
  return it != sorted_words_.end() && absl::StartsWith(*it, prefix);
}

NgramLm::Prefix NgramLm::RootPrefix() const {
  return Prefix{0, static_cast<uint32_t>(sorted_words_.size()), 0};
}

bool NgramLm::ExtendPrefix(Prefix* prefix, char c) const {
  // In [lo, hi) every word shares the first `depth` bytes, so the words sort by their byte at
  // `depth` (a word that ends there first); string_view orders bytes as unsigned char.
  const size_t d = prefix->depth;
  const auto at = [d](absl::string_view w) {
    return w.size() > d ? static_cast<int>(static_cast<unsigned char>(w[d])) : -1;
  };
  const int byte = static_cast<unsigned char>(c);
  const auto first = sorted_words_.begin() + prefix->lo;
  const auto last = sorted_words_.begin() + prefix->hi;
  const auto lo =
      std::partition_point(first, last, [&](absl::string_view w) { return at(w) < byte; });
  const auto hi =
      std::partition_point(lo, last, [&](absl::string_view w) { return at(w) == byte; });
  if (lo == hi) return false;
  prefix->lo = static_cast<uint32_t>(lo - sorted_words_.begin());
  prefix->hi = static_cast<uint32_t>(hi - sorted_words_.begin());
  ++prefix->depth;
  return true;
}

int NgramLm::PrefixWord(const Prefix& prefix) const {
  if (prefix.lo >= prefix.hi || prefix.hi > sorted_words_.size()) return unk_;
  return sorted_words_[prefix.lo].size() == prefix.depth ? sorted_ids_[prefix.lo] : unk_;
}

absl::string_view NgramLm::Word(int id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return strings_.substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
}

const NgramLm::Entry* NgramLm::Find(absl::Span<const int32_t> ids) const {
  const uint64_t key = HashNgram(ids);
  for (uint64_t i = key & (capacity_ - 1);; i = (i + 1) & (capacity_ - 1)) {
    const Entry* e = &table_[i];
    if (e->key == key) return e;
    if (e->key == 0) return nullptr;  // load <= 0.5: an empty slot always ends the probe
  }
}

NgramLm::State NgramLm::BeginSentence() const {
  State s;
  if (order_ > 1) {
    s.words[0] = bos_;
    s.length = 1;
  }
  return s;
}

float NgramLm::Score(const State& state, int word, State* next) const {
  // ngram = state.words + word; try the longest first, backing off by dropping the oldest.
  int32_t ngram[kMaxOrder];
  const int context = std::min(state.length, order_ - 1);
  const int32_t* ctx = state.words + (state.length - context);
  std::copy(ctx, ctx + context, ngram);
  ngram[context] = word < 0 || word >= vocab_size() ? unk_ : word;
  float backoff = 0.0f;
  float log10_prob = 0.0f;
  for (int start = 0; start <= context; ++start) {
    const Entry* e = Find(absl::MakeConstSpan(ngram + start, context + 1 - start));
    if (e != nullptr) {
      log10_prob = e->log10_prob;
      break;
    }
    if (start == context) {  // even the unigram is missing: <unk>'s probability
      const int32_t unk = unk_;
      log10_prob = Find(absl::MakeConstSpan(&unk, 1))->log10_prob;
      break;
    }
    const Entry* ctx_entry = Find(absl::MakeConstSpan(ngram + start, context - start));
    if (ctx_entry != nullptr) backoff += ctx_entry->log10_backoff;
  }
  // The next state: the longest suffix of the n-gram that is itself a context in the model
  // (an entry of it exists), at most order - 1 words.
  if (next != nullptr) {
    State out;
    const int total = context + 1;
    for (int len = std::min(total, order_ - 1); len > 0; --len) {
      if (Find(absl::MakeConstSpan(ngram + total - len, len)) != nullptr) {
        std::copy(ngram + total - len, ngram + total, out.words);
        out.length = len;
        break;
      }
    }
    *next = out;
  }
  return log10_prob + backoff;
}

float NgramLm::ScoreSequence(State state, absl::Span<const int> words, State* end) const {
  float total = 0;
  for (int w : words) total += Score(state, w, &state);
  if (end != nullptr) *end = state;
  return total;
}

}  // namespace jasper
