#include "engine/text/written_words.h"

#include <utility>

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

}  // namespace jasper
