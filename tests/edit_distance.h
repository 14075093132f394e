// Levenshtein distance between two sequences (characters of a string, words of a transcript),
// for the tests' CER and WER. Header-only, pure.
#ifndef JASPER_TESTS_EDIT_DISTANCE_H_
#define JASPER_TESTS_EDIT_DISTANCE_H_

#include <algorithm>
#include <utility>
#include <vector>

namespace jasper::test_util {

// Insertions, deletions and substitutions that turn `hyp` into `ref`. Seq: a random-access
// container whose elements compare with !=. O(|hyp| * |ref|) time, O(|ref|) memory.
template <typename Seq>
int EditDistance(const Seq& hyp, const Seq& ref) {
  std::vector<int> prev(ref.size() + 1), cur(ref.size() + 1);
  for (size_t j = 0; j <= ref.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= hyp.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= ref.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (hyp[i - 1] != ref[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[ref.size()];
}

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_EDIT_DISTANCE_H_
