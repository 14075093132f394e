#include "engine/text/punctuation_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace jasper {
namespace {

double Ratio(int64_t num, int64_t den) {
  return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
}

// A token's word and its mark index (-1: none).
std::pair<absl::string_view, int> Split(absl::string_view token) {
  static constexpr absl::string_view kMarks = ",.?";
  if (token.size() > 1) {
    const size_t m = kMarks.find(token.back());
    if (m != absl::string_view::npos) {
      return {token.substr(0, token.size() - 1), static_cast<int>(m)};
    }
  }
  return {token, -1};
}

bool HasUpper(absl::string_view w) {
  for (char c : w) {
    if (absl::ascii_isupper(c)) return true;
  }
  return false;
}

void Add(bool predicted, bool actual, bool hit, F1Counts* c) {
  if (predicted && actual && hit) {
    ++c->true_positives;
    return;
  }
  if (predicted) ++c->false_positives;
  if (actual) ++c->false_negatives;
}

}  // namespace

double F1Counts::Precision() const {
  return Ratio(true_positives, true_positives + false_positives);
}
double F1Counts::Recall() const { return Ratio(true_positives, true_positives + false_negatives); }
double F1Counts::F1() const {
  const double p = Precision(), r = Recall();
  return p + r == 0 ? 0.0 : 2 * p * r / (p + r);
}

absl::Status ScorePassage(absl::string_view output, absl::string_view reference,
                          PunctuationScores* scores) {
  const std::vector<absl::string_view> out = absl::StrSplit(output, ' ', absl::SkipEmpty());
  const std::vector<absl::string_view> ref = absl::StrSplit(reference, ' ', absl::SkipEmpty());
  if (out.size() != ref.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(out.size(), " output words, ", ref.size(), " reference words"));
  }
  std::vector<std::pair<absl::string_view, int>> o, r;
  for (size_t i = 0; i < out.size(); ++i) {
    o.push_back(Split(out[i]));
    r.push_back(Split(ref[i]));
    if (absl::AsciiStrToLower(o[i].first) != absl::AsciiStrToLower(r[i].first)) {
      return absl::InvalidArgumentError(
          absl::StrCat("word ", i, ": \"", out[i], "\" vs \"", ref[i], "\""));
    }
  }
  for (size_t i = 0; i < o.size(); ++i) {
    for (int m = 0; m < 3; ++m) {
      Add(o[i].second == m, r[i].second == m, true, &scores->marks[m]);
    }
    Add(HasUpper(o[i].first), HasUpper(r[i].first), o[i].first == r[i].first, &scores->capitals);
  }
  scores->words += static_cast<int64_t>(o.size());
  return absl::OkStatus();
}

}  // namespace jasper
