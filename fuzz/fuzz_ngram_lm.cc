// Fuzz target: the language model readers (engine/decoding/ngram_lm.h). The input is tried as a
// binary image (FromBinary: header, offsets, strings and table checked against each other and
// the size) and as ARPA text (FromArpa); whatever loads is queried (scores must be finite) and,
// for ARPA, converted to binary and loaded back.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/decoding/ngram_lm.h"

namespace {

void Exercise(const jasper::NgramLm& lm) {
  jasper::NgramLm::State state = lm.BeginSentence();
  for (int i = 0; i < 8; ++i) {
    const int word = (i * 7919) % (lm.vocab_size() + 2) - 1;  // includes -1 and vocab_size
    if (!std::isfinite(lm.Score(state, word, &state))) abort();
    if (state.length < 0 || state.length >= lm.order()) {
      if (!(lm.order() == 1 && state.length == 0)) abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  if (auto lm = jasper::NgramLm::FromBinary(bytes); lm.ok()) Exercise(**lm);
  if (auto lm = jasper::NgramLm::FromArpa(bytes); lm.ok()) {
    Exercise(**lm);
    auto again = jasper::NgramLm::FromBinary((*lm)->ToBinary());
    if (!again.ok()) abort();  // a model we wrote must load back
    Exercise(**again);
  }
  return 0;
}
