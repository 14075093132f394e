#include "engine/decoding/phrase_boost.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace jasper {
namespace {

constexpr int kAlphabet = 28;  // a-z, ', space
constexpr int kApostrophe = 26;
constexpr int kSpace = 27;

int AlphabetIndex(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c == '\'') return kApostrophe;
  if (c == ' ') return kSpace;
  return -1;
}

}  // namespace

std::string PhraseBoost::Normalize(const std::string& phrase) {
  std::string out;
  bool pending_space = false;
  for (char raw : phrase) {
    const char c = absl::ascii_tolower(static_cast<unsigned char>(raw));
    if ((c >= 'a' && c <= 'z') || c == '\'') {
      if (pending_space && !out.empty()) out += ' ';
      pending_space = false;
      out += c;
    } else {
      pending_space = true;
    }
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const PhraseBoost>> PhraseBoost::Create(
    const std::vector<BoostPhrase>& phrases, const std::vector<std::string>& labels,
    const PhraseBoostLimits& limits) {
  const auto bad = [](size_t i, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("speech_contexts phrase ", i, ": ", what));
  };
  if (static_cast<int>(phrases.size()) > limits.max_phrases) {
    return absl::InvalidArgumentError(absl::StrCat("speech_contexts: ", phrases.size(),
                                                   " phrases, more than the limit of ",
                                                   limits.max_phrases));
  }
  std::shared_ptr<PhraseBoost> boost(new PhraseBoost());
  boost->label_index_.assign(labels.size(), -1);
  std::vector<bool> emittable(kAlphabet, false);
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i].size() != 1) continue;
    const int a = AlphabetIndex(labels[i][0]);
    boost->label_index_[i] = a;
    if (a >= 0) emittable[a] = true;
    if (a == kSpace) boost->space_label_ = static_cast<int>(i);
  }
  Node root;
  std::fill(std::begin(root.child), std::end(root.child), -1);
  boost->nodes_.push_back(root);
  for (size_t i = 0; i < phrases.size(); ++i) {
    const float b = phrases[i].boost;
    if (!std::isfinite(b)) return bad(i, "the boost is not a finite number");
    if (std::fabs(b) > limits.max_abs_boost) {
      return bad(i, absl::StrCat("the boost ", b, " is beyond +-", limits.max_abs_boost));
    }
    const std::string text = Normalize(phrases[i].phrase);
    if (text.empty()) return bad(i, "no letters after normalization ('" + phrases[i].phrase + "')");
    if (static_cast<int>(text.size()) > limits.max_phrase_chars) {
      return bad(i, absl::StrCat("longer than ", limits.max_phrase_chars, " characters"));
    }
    for (char c : text) {
      if (!emittable[AlphabetIndex(c)]) {
        return bad(i, absl::StrCat("the model cannot emit '", std::string(1, c), "'"));
      }
    }
    int node = kRoot;
    for (size_t k = 0; k < text.size(); ++k) {
      const int a = AlphabetIndex(text[k]);
      int next = boost->nodes_[node].child[a];
      if (next < 0) {
        Node n;
        std::fill(std::begin(n.child), std::end(n.child), -1);
        boost->nodes_.push_back(n);
        next = static_cast<int>(boost->nodes_.size()) - 1;
        boost->nodes_[node].child[a] = next;
      }
      const float earned = b * static_cast<float>(k + 1) / static_cast<float>(text.size());
      Node& n = boost->nodes_[next];
      if (std::fabs(earned) > std::fabs(n.earned)) n.earned = earned;
      node = next;
    }
    boost->nodes_[node].end = true;
  }
  boost->num_phrases_ = static_cast<int>(phrases.size());
  return std::shared_ptr<const PhraseBoost>(std::move(boost));
}

int PhraseBoost::Index(int label) const {
  return label >= 0 && label < static_cast<int>(label_index_.size()) ? label_index_[label] : -1;
}

float PhraseBoost::Pending(int state) const {
  if (state <= kRoot) return 0.0f;
  return nodes_[state].end ? 0.0f : nodes_[state].earned;
}

float PhraseBoost::Step(int* state, int label) const {
  const int a = Index(label);
  if (*state == kNoMatch) {
    if (a == kSpace) *state = kRoot;
    return 0.0f;
  }
  const Node& node = nodes_[*state];
  if (a == kSpace && *state != kRoot && node.end && node.child[kSpace] < 0) {
    *state = kRoot;  // a whole phrase ended at a word boundary: its bonus stays
    return 0.0f;
  }
  if (a == kSpace && *state == kRoot) return 0.0f;  // repeated separators
  const int next = a >= 0 ? node.child[a] : -1;
  if (next >= 0) {
    *state = next;
    return nodes_[next].earned - node.earned;
  }
  // Off every phrase: give back what the partial match earned (a finished phrase keeps it).
  const float lost = node.end ? 0.0f : node.earned;
  *state = a == kSpace ? kRoot : kNoMatch;
  return -lost;
}

}  // namespace jasper
