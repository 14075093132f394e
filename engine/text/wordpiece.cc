#include "engine/text/wordpiece.h"

#include <algorithm>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace jasper {

absl::StatusOr<WordPiece> WordPiece::Load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  auto invalid = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", what));
  };
  WordPiece wp;
  std::string line;
  int row = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) return invalid(absl::StrCat("line ", row + 1, " is empty"));
    if (row >= 1000000) return invalid("more than 1,000,000 tokens");
    if (!wp.ids_.emplace(line, row).second) {
      return invalid(absl::StrCat("line ", row + 1, ": \"", line, "\" twice"));
    }
    wp.longest_ = std::max(wp.longest_, line.size());
    ++row;
  }
  for (auto [name, id] : {std::pair<const char*, int*>{"[UNK]", &wp.unk_},
                          {"[CLS]", &wp.cls_},
                          {"[SEP]", &wp.sep_}}) {
    auto it = wp.ids_.find(name);
    if (it == wp.ids_.end()) return invalid(absl::StrCat("no ", name, " token"));
    *id = it->second;
  }
  return wp;
}

void WordPiece::Part(absl::string_view part, std::vector<int>* ids) const {
  const size_t first = ids->size();
  std::string piece;
  size_t start = 0;
  while (start < part.size()) {
    const size_t prefix = start == 0 ? 0 : 2;
    size_t end = std::min(part.size(), start + (longest_ > prefix ? longest_ - prefix : 0));
    int found = -1;
    for (; end > start; --end) {
      piece.assign(start == 0 ? "" : "##");
      piece.append(part.data() + start, end - start);
      if (auto it = ids_.find(piece); it != ids_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {
      ids->resize(first);
      ids->push_back(unk_);
      return;
    }
    ids->push_back(found);
    start = end;
  }
}

void WordPiece::Tokenize(absl::string_view word, int max_pieces, std::vector<int>* ids) const {
  const size_t first = ids->size();
  std::string part;
  for (const char ch : word) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80 || absl::ascii_isalnum(c)) {
      part.push_back(absl::ascii_tolower(c));
      continue;
    }
    if (!part.empty()) Part(part, ids);
    part.clear();
    Part(absl::string_view(&ch, 1), ids);
  }
  if (!part.empty()) Part(part, ids);
  if (ids->size() == first) ids->push_back(unk_);
  if (ids->size() - first > static_cast<size_t>(std::max(max_pieces, 1))) {
    ids->resize(first + std::max(max_pieces, 1));
  }
}

}  // namespace jasper
