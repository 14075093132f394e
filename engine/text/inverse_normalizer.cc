#include "engine/text/inverse_normalizer.h"

#include <fst/flags.h>
#include <fst/vector-fst.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/text/manifest_files.h"
#include "engine/text/string_transducer.h"
#include "nlohmann/json.hpp"

namespace jasper {

struct InverseNormalizer::Fsts {
  std::unique_ptr<const StringTransducer> tagger;
  std::unique_ptr<const StringTransducer> verbalizer;
  std::vector<std::string> tagger_labels;  // output label 256 + i writes tagger_labels[i]
};

namespace {

constexpr int kFormatVersion = 2;
constexpr absl::string_view kPreserveOrder = "preserve_order";

// A parsed tag: `key: "value"`, `key: true` (preserve_order), `key { ... }`, or a value NeMo's
// parser returns as None (an empty string), which its permutation step rejects.
struct TagNode {
  enum class Kind { kString, kNull, kBool, kDict };
  Kind kind = Kind::kString;
  std::string key;
  std::string value;
  std::vector<TagNode> children;  // kDict: in NeMo's OrderedDict order, keys unique
};

// NeMo's TokenParser (nemo_text_processing/text_normalization/token_parser.py), step for step,
// its assertions and exceptions as `false`. Top-level token offsets are recorded.
class TagParser {
 public:
  explicit TagParser(const std::string& text) : text_(text), eos_(text.empty()) {}

  // A -> space F space F ... space. `starts` (top level only): offset of each token's key.
  bool Parse(std::vector<TagNode>* out, std::vector<size_t>* starts) {
    while (ParseWs()) {
      const size_t at = index_;
      TagNode token;
      bool found = false;
      if (!ParseToken(&token, &found)) return false;
      if (!found) break;
      if (starts != nullptr) starts->push_back(at);
      out->push_back(std::move(token));
    }
    return true;
  }

 private:
  bool AtEos() const { return eos_; }
  char Char() const { return eos_ ? '\0' : text_[index_]; }
  bool Read() {
    if (index_ + 1 < text_.size()) {
      ++index_;
      return true;
    }
    eos_ = true;
    return false;
  }
  bool ParseWs() {
    bool not_eos = !eos_;
    while (not_eos && Char() == ' ') not_eos = Read();
    return not_eos;
  }
  bool ParseChar(char expected) {
    if (eos_ || Char() != expected) return false;
    Read();
    return true;
  }
  static bool IsKeyChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  // F -> key ws value; *found = false when no key starts here (NeMo's None).
  bool ParseToken(TagNode* node, bool* found) {
    *found = false;
    if (eos_ || Char() == ' ' || Char() == '\t' || Char() == '\n' || Char() == '\r' ||
        Char() == '\v' || Char() == '\f') {
      return false;
    }
    std::string key;
    while (!eos_ && IsKeyChar(Char())) {
      key.push_back(Char());
      if (!Read()) return false;  // NeMo raises at the end of the text inside a key
    }
    if (key.empty()) return true;
    *found = true;
    node->key = std::move(key);
    ParseWs();
    if (node->key == kPreserveOrder) {
      if (!ParseChar(':')) return false;
      ParseWs();
      for (char c : std::string("true")) {
        if (!ParseChar(c)) return false;
      }
      node->kind = TagNode::Kind::kBool;
      return true;
    }
    return ParseValue(node);
  }
  // G -> :"VALUE" | { A }
  bool ParseValue(TagNode* node) {
    if (!eos_ && Char() == ':') {
      ParseChar(':');
      ParseWs();
      if (!ParseChar('"')) return false;
      if (eos_) return false;
      std::string value;
      // The value ends at a quote followed by a space; a quote that ends the text is NeMo's
      // IndexError.
      while (true) {
        if (Char() == '"') {
          if (index_ + 1 >= text_.size()) return false;
          if (text_[index_ + 1] == ' ') break;
        }
        value.push_back(Char());
        if (!Read()) return false;
      }
      if (!ParseChar('"')) return false;
      node->kind = value.empty() ? TagNode::Kind::kNull : TagNode::Kind::kString;
      node->value = std::move(value);
      return true;
    }
    if (!eos_ && Char() == '{') {
      ParseChar('{');
      std::vector<TagNode> items;
      if (!Parse(&items, nullptr)) return false;
      node->kind = TagNode::Kind::kDict;
      for (TagNode& item : items) {  // OrderedDict update: a repeated key keeps its place
        auto same = std::find_if(node->children.begin(), node->children.end(),
                                 [&](const TagNode& c) { return c.key == item.key; });
        if (same != node->children.end()) {
          *same = std::move(item);
        } else {
          node->children.push_back(std::move(item));
        }
      }
      return ParseChar('}');
    }
    return false;
  }

  const std::string& text_;
  size_t index_ = 0;
  bool eos_;
};

// NeMo's _estimate_number_of_permutations_in_nested_dict over a dict's items.
double EstimatePermutations(const std::vector<TagNode>& items) {
  double n = 1;
  for (const TagNode& item : items) {
    if (item.kind == TagNode::Kind::kDict) n *= EstimatePermutations(item.children);
  }
  for (size_t i = 2; i <= items.size(); ++i) n *= static_cast<double>(i);
  return n;
}

// NeMo's Normalizer._permute: every serialization of a dict's items, in itertools.permutations
// order (the item order itself when preserve_order is among the keys). False for a None value.
bool Permute(const std::vector<TagNode>& items, std::vector<std::string>* out) {
  std::vector<int> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  const bool preserve = std::any_of(items.begin(), items.end(),
                                    [](const TagNode& n) { return n.key == kPreserveOrder; });
  do {
    std::vector<std::string> partial = {""};
    for (int i : order) {
      const TagNode& item = items[i];
      switch (item.kind) {
        case TagNode::Kind::kString:
          for (std::string& s : partial) absl::StrAppend(&s, item.key, ": \"", item.value, "\" ");
          break;
        case TagNode::Kind::kBool:
          for (std::string& s : partial) absl::StrAppend(&s, item.key, ": true ");
          break;
        case TagNode::Kind::kDict: {
          std::vector<std::string> inner;
          if (!Permute(item.children, &inner)) return false;
          std::vector<std::string> next;
          next.reserve(partial.size() * inner.size());
          for (const std::string& s : partial) {
            for (const std::string& r : inner) {
              next.push_back(absl::StrCat(s, " ", item.key, " { ", r, " } "));
            }
          }
          partial = std::move(next);
          break;
        }
        case TagNode::Kind::kNull:
          return false;
      }
    }
    for (std::string& s : partial) out->push_back(std::move(s));
  } while (!preserve && std::next_permutation(order.begin(), order.end()));
  return true;
}

// NeMo's SPACE_DUP (' {2,}' -> ' ').
std::string CollapseSpaces(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == ' ' && !out.empty() && out.back() == ' ') continue;
    out.push_back(c);
  }
  return out;
}

std::string StripSpaces(absl::string_view s) {
  const size_t b = s.find_first_not_of(' ');
  if (b == absl::string_view::npos) return "";
  const size_t e = s.find_last_not_of(' ');
  return std::string(s.substr(b, e - b + 1));
}

std::vector<WrittenSpan> Unchanged(absl::Span<const std::string> words) {
  std::vector<WrittenSpan> spans;
  for (size_t i = 0; i < words.size(); ++i) {
    if (!words[i].empty()) spans.push_back({words[i], static_cast<int>(i), 1});
  }
  return spans;
}

absl::StatusOr<std::unique_ptr<fst::StdVectorFst>> ReadFst(const std::filesystem::path& path) {
  std::unique_ptr<fst::StdVectorFst> f(fst::StdVectorFst::Read(path.string()));
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": not an OpenFst vector FST with standard arcs"));
  }
  // Every property computed now: an OpenFst algorithm that tests an unknown property stores it
  // in the FST, which would be a write to an FST that sessions share.
  f->Properties(fst::kFstProperties, true);
  if (f->Properties(fst::kILabelSorted, false) != fst::kILabelSorted) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(),
                     ": arcs are not sorted by input label (tools/export_itn.py "
                     "sorts them)"));
  }
  return f;
}

// tagger_labels.json: a JSON list of strings, one character per byte (U+0000-U+00FF).
absl::StatusOr<std::vector<std::string>> ReadLabels(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  const nlohmann::json list = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  auto invalid = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", what));
  };
  if (list.is_discarded() || !list.is_array()) return invalid("not a JSON list");
  std::vector<std::string> labels;
  labels.reserve(list.size());
  for (const nlohmann::json& item : list) {
    if (!item.is_string()) return invalid("an entry is not a string");
    const std::string& utf8 = item.get_ref<const std::string&>();
    std::string bytes;
    for (size_t i = 0; i < utf8.size(); ++i) {  // code points < 256 back to bytes
      const unsigned char c = static_cast<unsigned char>(utf8[i]);
      if (c < 0x80) {
        bytes.push_back(static_cast<char>(c));
      } else if ((c & 0xFE) == 0xC2 && i + 1 < utf8.size()) {
        bytes.push_back(static_cast<char>(((c & 0x03) << 6) | (utf8[++i] & 0x3F)));
      } else {
        return invalid("a character above U+00FF (entries hold bytes)");
      }
    }
    labels.push_back(std::move(bytes));
  }
  return labels;
}

// Every output label of the tagger is a byte or names an entry of the label list.
absl::Status CheckOutputLabels(const fst::StdVectorFst& tagger, size_t labels,
                               const std::string& path) {
  for (fst::StateIterator<fst::StdVectorFst> s(tagger); !s.Done(); s.Next()) {
    for (fst::ArcIterator<fst::StdVectorFst> a(tagger, s.Value()); !a.Done(); a.Next()) {
      const int64_t label = a.Value().olabel;
      if (label < 0 || label >= 256 + static_cast<int64_t>(labels)) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": output label ", label, " is not a byte or an entry of tagger_labels.json (",
            labels, " entries)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

InverseNormalizer::InverseNormalizer(std::unique_ptr<Fsts> fsts, std::string provenance,
                                     int max_permutations)
    : fsts_(std::move(fsts)),
      provenance_(std::move(provenance)),
      max_permutations_(max_permutations) {}

InverseNormalizer::~InverseNormalizer() = default;

absl::StatusOr<std::unique_ptr<const InverseNormalizer>> InverseNormalizer::Load(
    const std::string& dir) {
  // OpenFst aborts the process on an algorithm error unless told otherwise; a bad grammar must
  // be an error status (the result then has no states), never an abort.
  static std::once_flag not_fatal;
  std::call_once(not_fatal, [] { FLAGS_fst_error_fatal = false; });
  const std::filesystem::path root(dir);
  const std::filesystem::path manifest_path = root / "itn.json";
  std::ifstream in(manifest_path);
  if (!in) return absl::NotFoundError(absl::StrCat(manifest_path.string(), ": cannot open"));
  nlohmann::json manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(manifest_path.string(), ": not a JSON object"));
  }
  auto invalid = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(manifest_path.string(), ": ", what));
  };
  if (!manifest.contains("format_version") || manifest["format_version"] != kFormatVersion) {
    return invalid(absl::StrCat("format_version must be ", kFormatVersion));
  }
  if (!manifest.contains("input_case") || manifest["input_case"] != "lower_cased") {
    return invalid("input_case must be \"lower_cased\"");
  }
  int max_permutations = 729;
  if (manifest.contains("max_permutations_per_split")) {
    const nlohmann::json& m = manifest["max_permutations_per_split"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > 1000000) {
      return invalid("max_permutations_per_split must be an integer in [1, 1000000]");
    }
    max_permutations = m.get<int>();
  }
  if (!manifest.contains("files") || !manifest["files"].is_object()) {
    return invalid("files: required (an object)");
  }
  auto fsts = std::make_unique<Fsts>();
  std::vector<std::unique_ptr<fst::StdVectorFst>> loaded;  // tagger, verbalizer: read, compiled
  for (auto [name, slot] :
       {std::pair{"tagger.fst", &fsts->tagger}, std::pair{"verbalizer.fst", &fsts->verbalizer}}) {
    const std::filesystem::path path = root / name;
    if (absl::Status s = CheckListedFile(path, manifest["files"], "itn.json"); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<fst::StdVectorFst>> f = ReadFst(path);
    if (!f.ok()) return f.status();
    loaded.push_back(*std::move(f));
    absl::StatusOr<std::unique_ptr<const StringTransducer>> compiled =
        StringTransducer::Compile(*loaded.back(), path.string());
    if (!compiled.ok()) return compiled.status();
    *slot = *std::move(compiled);
  }
  const std::filesystem::path labels_path = root / "tagger_labels.json";
  if (absl::Status s = CheckListedFile(labels_path, manifest["files"], "itn.json"); !s.ok())
    return s;
  absl::StatusOr<std::vector<std::string>> labels = ReadLabels(labels_path);
  if (!labels.ok()) return labels.status();
  fsts->tagger_labels = *std::move(labels);
  if (absl::Status s = CheckOutputLabels(*loaded.front(), fsts->tagger_labels.size(),
                                         (root / "tagger.fst").string());
      !s.ok()) {
    return s;
  }
  std::string provenance =
      manifest.contains("source") ? manifest["source"].dump() : std::string("unknown");
  return std::unique_ptr<const InverseNormalizer>(
      new InverseNormalizer(std::move(fsts), std::move(provenance), max_permutations));
}

std::vector<WrittenSpan> InverseNormalizer::Normalize(absl::Span<const std::string> words) const {
  // The sentence as NeMo gets it: the words joined by single spaces. word_of[k] = index in
  // `words` of the k-th non-empty word.
  std::string spoken;
  std::vector<int> word_of;
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i].empty()) continue;
    if (!spoken.empty()) spoken.push_back(' ');
    spoken += words[i];
    word_of.push_back(static_cast<int>(i));
  }
  if (word_of.empty()) return {};
  if (spoken.find('\0') != std::string::npos) return Unchanged(words);

  // Tagging: shortest path of spoken o tagger. started[p]: words begun in the input when the
  // p-th tag byte was written.
  std::vector<PathArc> path;
  if (!fsts_->tagger->ShortestPath(spoken, &path)) return Unchanged(words);
  std::string tagged;
  std::vector<int> started;
  int words_begun = 0;
  int previous_input = ' ';
  for (const PathArc& arc : path) {
    // An arc's output is written before its input byte is read: the tagger folds the tag text
    // inserted before a word ("tokens { name: \"") into the arc that reads the word's first byte.
    if (arc.olabel >= 256) {
      if (static_cast<size_t>(arc.olabel - 256) >= fsts_->tagger_labels.size()) {
        return Unchanged(words);  // checked at load; never for a loaded tagger
      }
      tagged += fsts_->tagger_labels[arc.olabel - 256];
    } else if (arc.olabel != 0) {
      tagged.push_back(static_cast<char>(arc.olabel));
    }
    started.resize(tagged.size(), words_begun);
    if (arc.ilabel != 0) {
      if (arc.ilabel != ' ' && previous_input == ' ') ++words_begun;
      previous_input = arc.ilabel;
    }
  }

  std::vector<TagNode> tokens;
  std::vector<size_t> token_starts;
  if (tagged.empty() || !TagParser(tagged).Parse(&tokens, &token_starts) || tokens.empty()) {
    return Unchanged(words);
  }

  // Verbalization, token by token: the first serialization (in NeMo's order) the verbalizer
  // accepts, and its shortest path. NeMo composes a whole split of tokens at once; its
  // verbalizer is a closure over tokens joined by spaces, so a split is accepted exactly when
  // each of its tokens is, and its output is theirs joined by single spaces.
  std::vector<std::string> outputs;
  outputs.reserve(tokens.size());
  for (const TagNode& token : tokens) {
    const std::vector<TagNode> group = {token};
    if (EstimatePermutations(group) > max_permutations_) return Unchanged(words);
    std::vector<std::string> options;
    if (!Permute(group, &options)) return Unchanged(words);
    bool accepted = false;
    std::vector<PathArc> best;
    for (const std::string& option : options) {
      if (!fsts_->verbalizer->ShortestPath(option, &best)) continue;  // not accepted
      std::string out;
      for (const PathArc& arc : best) {
        if (arc.olabel != 0) out.push_back(static_cast<char>(arc.olabel));
      }
      outputs.push_back(std::move(out));
      accepted = true;
      break;
    }
    if (!accepted) return Unchanged(words);
  }
  const std::string sentence = CollapseSpaces(absl::StrJoin(outputs, " "));

  // Spans: token k covers the words begun between its tag's start and the next token's.
  const int total = static_cast<int>(word_of.size());
  std::vector<WrittenSpan> spans;
  spans.reserve(tokens.size());
  bool spans_ok = words_begun == total;
  for (size_t k = 0; k < tokens.size() && spans_ok; ++k) {
    const int begin = k == 0 ? 0 : started[token_starts[k]];
    const int end = k + 1 < tokens.size() ? started[token_starts[k + 1]] : total;
    if (end <= begin) {
      spans_ok = false;
      break;
    }
    const int first = word_of[begin];
    spans.push_back({StripSpaces(CollapseSpaces(outputs[k])), first, word_of[end - 1] - first + 1});
  }
  if (!spans_ok || JoinWritten(spans) != sentence) {
    // The words cannot be told apart per token: one span keeps the text and the outer times.
    return {
        WrittenSpan{StripSpaces(sentence), word_of.front(), word_of.back() - word_of.front() + 1}};
  }
  return spans;
}

std::string InverseNormalizer::NormalizeText(absl::string_view spoken) const {
  const std::vector<std::string> words = absl::StrSplit(spoken, ' ', absl::SkipEmpty());
  return JoinWritten(Normalize(words));
}

std::string JoinWritten(absl::Span<const WrittenSpan> spans) {
  std::string out;
  for (const WrittenSpan& s : spans) {
    if (s.text.empty()) continue;
    if (!out.empty()) out.push_back(' ');
    out += s.text;
  }
  return out;
}

}  // namespace jasper
