// A recognition result's words in written form: inverse text normalization
// (engine/text/inverse_normalizer.h) applied to decoded words with their times.
// Thread-safety: pure functions over their arguments (the normalizer is shared and const).
#ifndef JASPER_ENGINE_TEXT_WRITTEN_WORDS_H_
#define JASPER_ENGINE_TEXT_WRITTEN_WORDS_H_

#include <string>
#include <vector>

#include "engine/decoding/ctc.h"
#include "engine/text/inverse_normalizer.h"

namespace jasper {

// Rewrites *words (spoken, in order, times in ms) as written tokens: a token replacing several
// words starts at the first one's start_ms, ends at the last one's end_ms, and has the mean of
// their confidences; a token with no text drops its words. *transcript becomes the written
// sentence (the tokens joined by single spaces). With no words, only *transcript is rewritten
// (interim results carry none).
void WriteWords(const InverseNormalizer& itn, std::string* transcript,
                std::vector<WordInfo>* words);

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_WRITTEN_WORDS_H_
