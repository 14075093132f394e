// A recognition result's words in written form: inverse text normalization
// (engine/text/inverse_normalizer.h) applied to decoded words with their times, then
// punctuation and capitalization (engine/text/punctuator.h).
// Thread-safety: pure functions over their arguments (the normalizer and punctuator are shared
// and const).
#ifndef JASPER_ENGINE_TEXT_WRITTEN_WORDS_H_
#define JASPER_ENGINE_TEXT_WRITTEN_WORDS_H_

#include <string>
#include <vector>

#include "engine/decoding/ctc.h"
#include "engine/text/inverse_normalizer.h"
#include "engine/text/punctuator.h"

namespace jasper {

// Rewrites *words (spoken, in order, times in ms) as written tokens: a token replacing several
// words starts at the first one's start_ms, ends at the last one's end_ms, and has the mean of
// their confidences; a token with no text drops its words. *transcript becomes the written
// sentence (the tokens joined by single spaces). With no words, only *transcript is rewritten
// (interim results carry none).
void WriteWords(const InverseNormalizer& itn, std::string* transcript,
                std::vector<WordInfo>* words);

// The text stages a session applies to its results, in this order. Both borrowed (the model
// owns them); null: the stage is off.
struct TextStages {
  const InverseNormalizer* itn = nullptr;
  const Punctuator* punctuator = nullptr;
};

// A final result (an ended utterance): ITN (WriteWords), then punctuation over the words, one
// punctuated word per word so their times stay; *transcript becomes the words joined by single
// spaces. With no words (none were decoded), the transcript alone is rewritten.
void WriteFinal(const TextStages& stages, std::string* transcript, std::vector<WordInfo>* words);

// An interim result's transcript: ITN, then punctuation that leaves the last word without a
// mark (the utterance goes on).
std::string WriteInterim(const TextStages& stages, const std::string& transcript);

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_WRITTEN_WORDS_H_
