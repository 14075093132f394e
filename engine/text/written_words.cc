#include "engine/text/written_words.h"

#include <utility>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace jasper {

void WriteWords(const InverseNormalizer& itn, std::string* transcript,
                std::vector<WordInfo>* words) {
  if (words->empty()) {
    *transcript = itn.NormalizeText(*transcript);
    return;
  }
  std::vector<std::string> spoken;
  spoken.reserve(words->size());
  for (const WordInfo& w : *words) spoken.push_back(w.word);
  const std::vector<WrittenSpan> spans = itn.Normalize(spoken);
  std::vector<WordInfo> written;
  written.reserve(spans.size());
  for (const WrittenSpan& span : spans) {
    if (span.text.empty() || span.num_words < 1) continue;
    const WordInfo& first = (*words)[span.first_word];
    const WordInfo& last = (*words)[span.first_word + span.num_words - 1];
    float confidence = 0.0f;
    for (int i = 0; i < span.num_words; ++i) confidence += (*words)[span.first_word + i].confidence;
    written.push_back({span.text, first.start_ms, last.end_ms, confidence / span.num_words});
  }
  *transcript = JoinWritten(spans);
  *words = std::move(written);
}

void WriteFinal(const TextStages& stages, std::string* transcript, std::vector<WordInfo>* words) {
  if (stages.itn != nullptr) WriteWords(*stages.itn, transcript, words);
  if (stages.punctuator == nullptr) return;
  if (words->empty()) {
    *transcript = stages.punctuator->PunctuateText(*transcript, /*complete=*/true);
    return;
  }
  std::vector<std::string> text;
  text.reserve(words->size());
  for (const WordInfo& w : *words) text.push_back(w.word);
  std::vector<std::string> punctuated = stages.punctuator->Punctuate(text, /*complete=*/true);
  for (size_t i = 0; i < words->size(); ++i) (*words)[i].word = std::move(punctuated[i]);
  *transcript = absl::StrJoin(*words, " ", [](std::string* out, const WordInfo& w) {
    if (!w.word.empty()) out->append(w.word);
  });
}

std::string WriteInterim(const TextStages& stages, const std::string& transcript) {
  if (stages.itn == nullptr && stages.punctuator == nullptr) return transcript;
  std::vector<std::string> tokens = absl::StrSplit(transcript, ' ', absl::SkipEmpty());
  if (stages.itn != nullptr) {
    // Written tokens, as finals have them ("may 3 1998" is one token to the punctuator).
    std::vector<std::string> written;
    for (WrittenSpan& span : stages.itn->Normalize(tokens)) {
      if (!span.text.empty()) written.push_back(std::move(span.text));
    }
    tokens = std::move(written);
  }
  if (stages.punctuator != nullptr) tokens = stages.punctuator->Punctuate(tokens, false);
  return absl::StrJoin(tokens, " ");
}

}  // namespace jasper
