#include "engine/text/punctuator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/text/manifest_files.h"
#include "engine/text/punct_cnn.h"
#include "engine/text/punct_transformer.h"
#include "kernels/cpu_features.h"
#include "nlohmann/json.hpp"

namespace jasper {
namespace {

constexpr int kFormatVersion = 1;
constexpr char kMarks[3] = {',', '.', '?'};
constexpr int kNoMark = -1;

bool IsTerminal(int mark) { return mark == 1 || mark == 2; }

bool HasDigit(absl::string_view word) {
  return std::any_of(word.begin(), word.end(), [](char c) { return absl::ascii_isdigit(c); });
}

bool HasUpper(absl::string_view word) {
  return std::any_of(word.begin(), word.end(), [](char c) { return absl::ascii_isupper(c); });
}

// An LM state as a hash key: hypotheses with equal states have equal futures, so only the best
// of them is kept (Viterbi recombination).
// The sentence's first word is part of the key: it decides the closing mark's evidence.
struct StateKey {
  int32_t words[NgramLm::kMaxOrder - 1];
  int length;
  int sentence_start;
  StateKey(const NgramLm::State& s, int start) : length(s.length), sentence_start(start) {
    std::copy(s.words, s.words + NgramLm::kMaxOrder - 1, words);
    std::fill(words + length, words + NgramLm::kMaxOrder - 1, 0);
  }
  bool operator==(const StateKey& o) const {
    return length == o.length && sentence_start == o.sentence_start &&
           std::equal(words, words + length, o.words);
  }
  template <typename H>
  friend H AbslHashValue(H h, const StateKey& k) {
    return H::combine(H::combine_contiguous(std::move(h), k.words, k.length), k.length,
                      k.sentence_start);
  }
};

// One hypothesis after a word: its LM state and score, and how it got there (for the
// backtrace): the previous word's node, the chosen form and mark.
struct Node {
  int parent;
  int16_t form;
  int16_t mark;
};

struct Hyp {
  NgramLm::State state;
  double score;
  int node;
  int sentence_start;  // index of the current sentence's first word
};

struct Expansion {
  NgramLm::State state;
  double score;
  int sentence_start;
  int parent;
  int16_t form;
  int16_t mark;
};

// A sentence-start key's word: lower case, a number as <num>.
std::string StartWord(absl::string_view word) {
  return HasDigit(word) ? std::string("<num>") : absl::AsciiStrToLower(word);
}

bool FiniteIn(const nlohmann::json& v, double lo, double hi) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= lo &&
         v.get<double>() <= hi;
}

absl::StatusOr<std::ifstream> OpenText(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  return in;
}

// case.tsv: word<TAB>Form[<TAB>form...]. With an LM, every form must be one of its words.
absl::StatusOr<absl::flat_hash_map<std::string, Punctuator::Forms>> LoadCaseTable(
    const std::filesystem::path& path, const NgramLm* lm) {
  absl::StatusOr<std::ifstream> in = OpenText(path);
  if (!in.ok()) return in.status();
  absl::flat_hash_map<std::string, Punctuator::Forms> cases;
  std::string line;
  for (int number = 1; std::getline(*in, line); ++number) {
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(path.string(), ":", number, ": ", what));
    };
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    if (fields.size() < 2) return bad("want word<TAB>Form[<TAB>form...]");
    const std::string& key = fields[0];
    if (key.empty() || HasUpper(key) ||
        std::any_of(key.begin(), key.end(), [](char c) { return absl::ascii_isspace(c); })) {
      return bad("the word must be lower case, without spaces");
    }
    Punctuator::Forms forms;
    for (size_t f = 1; f < fields.size(); ++f) {
      if (absl::AsciiStrToLower(fields[f]) != key) {
        return bad(absl::StrCat("\"", fields[f], "\" is not a cased form of \"", key, "\""));
      }
      if (std::find(forms.text.begin(), forms.text.end(), fields[f]) != forms.text.end()) {
        return bad(absl::StrCat("\"", fields[f], "\" twice"));
      }
      const int id = lm == nullptr ? 0 : lm->WordId(fields[f]);
      if (lm != nullptr && id == lm->unk_id()) {
        return bad(absl::StrCat("\"", fields[f], "\" is not in the language model"));
      }
      forms.text.push_back(fields[f]);
      forms.ids.push_back(id);
    }
    if (!cases.emplace(key, std::move(forms)).second) return bad("the word is listed twice");
  }
  return cases;
}

// starts.tsv: start<TAB>log10 ratio for .<TAB>log10 ratio for ?
absl::StatusOr<absl::flat_hash_map<std::string, Punctuator::StartEvidence>> LoadStarts(
    const std::filesystem::path& path) {
  absl::StatusOr<std::ifstream> in = OpenText(path);
  if (!in.ok()) return in.status();
  absl::flat_hash_map<std::string, Punctuator::StartEvidence> starts;
  std::string line;
  for (int number = 1; std::getline(*in, line); ++number) {
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(path.string(), ":", number, ": ", what));
    };
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    Punctuator::StartEvidence e;
    if (fields.size() != 3 || fields[0].empty() || !absl::SimpleAtof(fields[1], &e.period) ||
        !absl::SimpleAtof(fields[2], &e.question) || !std::isfinite(e.period) ||
        !std::isfinite(e.question) || std::abs(e.period) > 10 || std::abs(e.question) > 10) {
      return bad("want start<TAB>log10 ratio for .<TAB>log10 ratio for ? (finite, |x| <= 10)");
    }
    if (HasUpper(fields[0])) return bad("the start must be lower case");
    if (!starts.emplace(fields[0], e).second) return bad("the start is listed twice");
  }
  return starts;
}

}  // namespace

kernels::Precision Punctuator::DefaultPrecision() {
  return kernels::Bf16GemmFasterThanFp32() ? kernels::Precision::kBf16 : kernels::Precision::kFp32;
}

absl::StatusOr<std::unique_ptr<const Punctuator>> Punctuator::Load(const std::string& dir) {
  return Load(dir, DefaultPrecision());
}

absl::StatusOr<std::unique_ptr<const Punctuator>> Punctuator::Load(const std::string& dir,
                                                                   kernels::Precision precision) {
  if (precision != kernels::Precision::kFp32 && precision != kernels::Precision::kBf16) {
    return absl::InvalidArgumentError("punctuation runs in fp32 or bf16");
  }
  const std::filesystem::path root(dir);
  const std::filesystem::path manifest_path = root / "punct.json";
  std::ifstream in(manifest_path);
  if (!in) return absl::NotFoundError(absl::StrCat(manifest_path.string(), ": cannot open"));
  const nlohmann::json manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(manifest_path.string(), ": not a JSON object"));
  }
  auto invalid = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(manifest_path.string(), ": ", what));
  };
  if (!manifest.contains("format_version") || manifest["format_version"] != kFormatVersion) {
    return invalid(absl::StrCat("format_version must be ", kFormatVersion));
  }
  if (!manifest.contains("marks") || manifest["marks"] != nlohmann::json({",", ".", "?"})) {
    return invalid("marks must be [\",\", \".\", \"?\"]");
  }
  std::string method = "hidden_event_lm";
  if (manifest.contains("method")) {
    if (!manifest["method"].is_string()) return invalid("method: a string");
    method = manifest["method"].get<std::string>();
    if (method != "hidden_event_lm" && method != "token_cnn" && method != "token_transformer") {
      return invalid("method must be \"hidden_event_lm\", \"token_cnn\" or \"token_transformer\"");
    }
  }
  auto punctuator = std::unique_ptr<Punctuator>(new Punctuator());
  if (!manifest.contains("mark_bias") || !manifest["mark_bias"].is_object()) {
    return invalid("mark_bias: required ({\",\": b, \".\": b, \"?\": b}, log10 units)");
  }
  for (int m = 0; m < 3; ++m) {
    const std::string mark(1, kMarks[m]);
    if (!manifest["mark_bias"].contains(mark) || !FiniteIn(manifest["mark_bias"][mark], -10, 10)) {
      return invalid(absl::StrCat("mark_bias[\"", mark, "\"]: a number in [-10, 10]"));
    }
    punctuator->mark_bias_[m] = manifest["mark_bias"][mark].get<float>();
  }
  if (!manifest.contains("files")) return invalid("files: required (an object)");
  // Every file the method reads: named by the manifest, listed with its size.
  const std::vector<const char*> keys =
      method == "token_cnn"
          ? std::vector<const char*>{"case_table", "weights", "vocabulary", "suffixes"}
      : method == "token_transformer"
          ? std::vector<const char*>{"case_table", "weights", "vocabulary"}
          : std::vector<const char*>{"case_table", "language_model", "sentence_starts"};
  absl::flat_hash_map<std::string, std::filesystem::path> files;
  for (const char* key : keys) {
    absl::StatusOr<std::string> name = ManifestFileName(manifest, key, manifest_path);
    if (!name.ok()) return name.status();
    if (absl::Status s = CheckListedFile(root / *name, manifest["files"], "punct.json"); !s.ok()) {
      return s;
    }
    files[key] = root / *name;
  }

  if (method != "hidden_event_lm") {
    absl::StatusOr<std::unique_ptr<const TokenClassifier>> classifier;
    if (method == "token_cnn") {
      classifier = TokenCnn::Load(root, manifest);
    } else {
      classifier = TokenTransformer::Load(root, manifest, precision);
    }
    if (!classifier.ok()) return classifier.status();
    punctuator->classifier_ = *std::move(classifier);
    punctuator->method_ = method == "token_cnn" ? "token_cnn" : "token_transformer";
    absl::StatusOr<absl::flat_hash_map<std::string, Forms>> cases =
        LoadCaseTable(files["case_table"], nullptr);
    if (!cases.ok()) return cases.status();
    punctuator->cases_ = *std::move(cases);
    return std::unique_ptr<const Punctuator>(std::move(punctuator));
  }

  if (!manifest.contains("question_weight") || !FiniteIn(manifest["question_weight"], 0, 10)) {
    return invalid("question_weight: a number in [0, 10]");
  }
  punctuator->question_weight_ = manifest["question_weight"].get<float>();
  const std::string lm_path = files["language_model"].string();
  absl::StatusOr<std::shared_ptr<const NgramLm>> lm = NgramLm::LoadFile(lm_path);
  if (!lm.ok()) return lm.status();
  for (int m = 0; m < 3; ++m) {
    punctuator->mark_ids_[m] = (*lm)->WordId(absl::string_view(&kMarks[m], 1));
    if (punctuator->mark_ids_[m] == (*lm)->unk_id()) {
      return absl::InvalidArgumentError(absl::StrCat(lm_path, ": no token for the mark \"",
                                                     absl::string_view(&kMarks[m], 1),
                                                     "\" (not a punctuation model)"));
    }
  }
  punctuator->number_id_ = (*lm)->WordId("<num>");
  absl::StatusOr<absl::flat_hash_map<std::string, Forms>> cases =
      LoadCaseTable(files["case_table"], lm->get());
  if (!cases.ok()) return cases.status();
  punctuator->cases_ = *std::move(cases);
  absl::StatusOr<absl::flat_hash_map<std::string, StartEvidence>> starts =
      LoadStarts(files["sentence_starts"]);
  if (!starts.ok()) return starts.status();
  punctuator->starts_ = *std::move(starts);
  punctuator->lm_ = *std::move(lm);
  return std::unique_ptr<const Punctuator>(std::move(punctuator));
}

std::vector<Punctuator::SentenceStart> Punctuator::SentenceStarts(
    absl::Span<const std::string> words) const {
  std::vector<SentenceStart> starts(words.size());
  std::vector<std::string> keys(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    if (!words[i].empty()) keys[i] = StartWord(words[i]);
  }
  for (size_t i = 0; i < words.size(); ++i) {
    size_t first = i;
    while (first < words.size() && words[first].empty()) ++first;
    if (first == words.size()) break;
    SentenceStart& s = starts[i];
    if (auto it = starts_.find(keys[first]); it != starts_.end()) s.one = it->second;
    s.two = s.one;
    size_t second = first + 1;
    while (second < words.size() && words[second].empty()) ++second;
    s.second = static_cast<int>(second);
    if (second < words.size()) {
      if (auto it = starts_.find(absl::StrCat(keys[first], " ", keys[second]));
          it != starts_.end()) {
        s.two = it->second;
      }
    }
  }
  return starts;
}

std::vector<std::string> Punctuator::Punctuate(absl::Span<const std::string> words, bool complete,
                                               int beam) const {
  return classifier_ != nullptr ? ClassifyTokens(words, complete) : SearchLm(words, complete, beam);
}

std::vector<std::string> Punctuator::ClassifyTokens(absl::Span<const std::string> words,
                                                    bool complete) const {
  std::vector<std::string> out(words.size());
  std::vector<std::string> present;  // the non-empty words, in order
  std::vector<size_t> where;
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i].empty()) continue;
    present.push_back(words[i]);
    where.push_back(i);
  }
  if (present.empty()) return out;
  const TokenClassifier::Logits logits = classifier_->Forward(present);
  bool sentence_start = true;
  for (size_t t = 0; t < present.size(); ++t) {
    const float* marks = logits.marks.data() + t * TokenClassifier::kClasses;
    const float* cases = logits.cases.data() + t * TokenClassifier::kClasses;
    // Class 0 is "no mark"; classes 1-3 are , . ? with their bias.
    int mark = kNoMark;
    const bool last = t + 1 == present.size();
    if (last && complete) {
      mark = marks[2] + mark_bias_[1] >= marks[3] + mark_bias_[2] ? 1 : 2;
    } else if (!last) {
      float best = marks[0];
      for (int m = 0; m < 3; ++m) {
        if (marks[m + 1] + mark_bias_[m] > best) {
          best = marks[m + 1] + mark_bias_[m];
          mark = m;
        }
      }
    }
    const std::string& w = present[t];
    std::string text = w;
    if (!HasDigit(w) && !HasUpper(w)) {
      const int c =
          static_cast<int>(std::max_element(cases, cases + TokenClassifier::kClasses) - cases);
      if (c == 1) {
        text[0] = absl::ascii_toupper(text[0]);
      } else if (c == 2) {
        absl::AsciiStrToUpper(&text);
      } else if (c == 3) {
        auto it = cases_.find(w);
        if (it != cases_.end()) {
          text = it->second.text.front();
        } else {
          text[0] = absl::ascii_toupper(text[0]);
        }
      }
    }
    if (sentence_start && absl::ascii_islower(text[0])) text[0] = absl::ascii_toupper(text[0]);
    if (mark != kNoMark && text.back() != kMarks[mark]) text.push_back(kMarks[mark]);
    sentence_start = IsTerminal(mark);
    out[where[t]] = std::move(text);
  }
  return out;
}

std::vector<std::string> Punctuator::SearchLm(absl::Span<const std::string> words, bool complete,
                                              int beam) const {
  beam = std::max(beam, 1);
  const NgramLm& lm = *lm_;
  int last = -1;
  for (size_t i = 0; i < words.size(); ++i) {
    if (!words[i].empty()) last = static_cast<int>(i);
  }
  std::vector<std::string> out(words.size());
  if (last < 0) return out;

  // Each word's candidates: its cased forms (display text, LM id).
  struct Candidate {
    absl::string_view text;
    int id;
  };
  std::vector<std::vector<Candidate>> candidates(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.empty()) continue;
    if (HasDigit(w)) {
      candidates[i].push_back({w, number_id_});
    } else if (HasUpper(w)) {
      candidates[i].push_back({w, lm.WordId(w)});
    } else if (auto it = cases_.find(w); it != cases_.end()) {
      for (size_t f = 0; f < it->second.text.size(); ++f) {
        candidates[i].push_back({it->second.text[f], it->second.ids[f]});
      }
    } else {
      candidates[i].push_back({w, lm.WordId(w)});
    }
  }

  // The evidence of each possible sentence start, looked up once.
  const std::vector<SentenceStart> sentence_starts = SentenceStarts(words);
  std::vector<Node> nodes;
  nodes.reserve(words.size() * beam);
  std::vector<Hyp> hyps = {{lm.BeginSentence(), 0.0, -1, 0}};
  std::vector<Expansion> expansions;
  absl::flat_hash_map<StateKey, int> merged;
  std::vector<int> node_of_word(words.size(), -1);
  for (int i = 0; i <= last; ++i) {
    if (candidates[i].empty()) continue;
    const bool final_word = i == last;
    expansions.clear();
    merged.clear();
    auto offer = [&](const NgramLm::State& state, double score, int start, int parent, int form,
                     int mark) {
      const Expansion e{
          state, score, start, parent, static_cast<int16_t>(form), static_cast<int16_t>(mark)};
      auto [it, inserted] =
          merged.try_emplace(StateKey(state, start), static_cast<int>(expansions.size()));
      if (inserted) {
        expansions.push_back(e);
      } else if (score > expansions[it->second].score) {
        expansions[it->second] = e;
      }
    };
    for (const Hyp& h : hyps) {
      // A sentence's closing evidence: its first two words', once the second is in it.
      const SentenceStart& start = sentence_starts[h.sentence_start];
      const StartEvidence evidence = start.second <= i ? start.two : start.one;
      for (size_t f = 0; f < candidates[i].size(); ++f) {
        NgramLm::State after_word;
        const double word_score = h.score + lm.Score(h.state, candidates[i][f].id, &after_word);
        if (!(final_word && complete)) {
          offer(after_word, word_score, h.sentence_start, h.node, f, kNoMark);
        }
        if (final_word && !complete) continue;  // an interim's last word: no mark yet
        for (int m = 0; m < 3; ++m) {
          if (final_word && !IsTerminal(m)) continue;
          NgramLm::State after_mark;
          double score =
              word_score + lm.Score(after_word, mark_ids_[m], &after_mark) + mark_bias_[m];
          if (IsTerminal(m)) {
            score += question_weight_ * (m == 1 ? evidence.period : evidence.question);
          }
          if (final_word) {
            NgramLm::State end;
            score += lm.Score(after_mark, lm.eos_id(), &end);
          }
          offer(after_mark, score, IsTerminal(m) ? i + 1 : h.sentence_start, h.node, f, m);
        }
      }
    }
    const size_t keep = std::min<size_t>(beam, expansions.size());
    std::partial_sort(expansions.begin(), expansions.begin() + keep, expansions.end(),
                      [](const Expansion& a, const Expansion& b) { return a.score > b.score; });
    hyps.clear();
    for (size_t k = 0; k < keep; ++k) {
      const Expansion& e = expansions[k];
      nodes.push_back({e.parent, e.form, e.mark});
      hyps.push_back({e.state, e.score, static_cast<int>(nodes.size()) - 1, e.sentence_start});
    }
  }

  // Backtrace from the best hypothesis: the forms and marks, last word first.
  std::vector<std::pair<int, int>> chosen(words.size(), {0, kNoMark});
  int node = hyps.front().node;
  for (int i = last; i >= 0; --i) {
    if (candidates[i].empty()) continue;
    chosen[i] = {nodes[node].form, nodes[node].mark};
    node = nodes[node].parent;
  }
  bool sentence_start = true;
  for (size_t i = 0; i < words.size(); ++i) {
    if (candidates[i].empty()) continue;
    std::string text(candidates[i][chosen[i].first].text);
    if (sentence_start && absl::ascii_islower(text[0])) text[0] = absl::ascii_toupper(text[0]);
    const int mark = chosen[i].second;
    if (mark != kNoMark && text.back() != kMarks[mark]) text.push_back(kMarks[mark]);
    sentence_start = IsTerminal(mark);
    out[i] = std::move(text);
  }
  return out;
}

std::string Punctuator::PunctuateText(absl::string_view text, bool complete) const {
  const std::vector<std::string> words = absl::StrSplit(text, ' ', absl::SkipEmpty());
  return absl::StrJoin(Punctuate(words, complete), " ");
}

}  // namespace jasper
