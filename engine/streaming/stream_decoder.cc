#include "engine/streaming/stream_decoder.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/status_macros.h"
#include "engine/text/written_words.h"

namespace jasper {
namespace {

// The words of `text` joined by single spaces: texts that differ only in spacing read the same.
std::string CollapseSpaces(const std::string& text) {
  return absl::StrJoin(absl::StrSplit(text, ' ', absl::SkipEmpty()), " ");
}

}  // namespace

StreamDecoder::StreamDecoder(const Model* model, int endpoint_silence_frames, bool interim_results,
                             const DecoderConfig& decoder, const TextStages& text)
    : model_(model),
      text_(text),
      interim_results_(interim_results),
      max_alternatives_(decoder.max_alternatives),
      blank_id_(model->config().blank_id()),
      endpoint_(endpoint_silence_frames) {
  absl::StatusOr<std::unique_ptr<CtcDecoder>> created =
      CreateCtcDecoder(decoder, &model->config().labels, blank_id_);
  if (created.ok()) {
    decoder_ = *std::move(created);
  } else {
    status_ = created.status();
  }
}

double StreamDecoder::FramesToSeconds(int64_t frames) const {
  return static_cast<double>(frames) * model_->encoder_frame_ms() / 1000.0;
}

void StreamDecoder::Describe(const std::vector<CtcToken>& tokens, bool with_words,
                             SessionResult* res) const {
  TokensDescription d = DescribeTokens(tokens, model_->config().labels, model_->encoder_frame_ms());
  res->transcript = std::move(d.text);
  res->confidence = d.confidence;
  if (with_words) res->words = std::move(d.words);
}

absl::Status StreamDecoder::DecodeWindow(const WindowSlot& slot, const WindowResult& r,
                                         absl::Time now, std::vector<SessionResult>* out) {
  JASPER_RETURN_IF_ERROR(status_);
  const int total = std::min<int>(r.encoder_frames, static_cast<int>(r.ids.size()));
  const int begin = std::min(slot.chunk_offset, total);
  const int end = std::min(total, slot.chunk_offset + slot.chunk_frames);
  // The window's frames; window frame j is global frame slot.first_frame + (j - chunk_offset).
  CtcFrames window;
  window.ids = r.ids;
  window.best_log_probs = r.best_log_probs;
  window.log_probs = r.log_probs;
  window.vocab = r.vocab;
  window.first_frame = static_cast<int>(slot.first_frame - slot.chunk_offset);
  window.frames = total;
  JASPER_RETURN_IF_ERROR(decoder_->CheckFrames(window));  // before anything is decoded
  for (int j = begin; j < end; ++j) {
    const int64_t frame = slot.first_frame + (j - slot.chunk_offset);
    JASPER_RETURN_IF_ERROR(decoder_->Feed(window.Slice(j, j + 1)));
    processed_frames_ = frame + 1;
    if (endpoint_.Update(r.ids[j] == blank_id_, decoder_->HasSpeech())) {
      EndUtterance(/*finish=*/false, frame + 1, slot.audio_time, now, out);
    }
  }
  if (!interim_results_ || slot.before_flush) return absl::OkStatus();
  // Interim: the committed tokens, with the look-ahead frames decoded after them (not kept).
  const int la_end = std::min(total, end + slot.lookahead_frames);
  const std::vector<CtcToken> committed = decoder_->Best();
  if (la_end <= end) {
    EmitInterim(committed, /*from_lookahead=*/false, slot, now, out);
    return absl::OkStatus();
  }
  JASPER_ASSIGN_OR_RETURN(const std::vector<CtcToken> tokens,
                          decoder_->Peek(window.Slice(end, la_end)));
  EmitInterim(tokens, tokens.size() != committed.size(), slot, now, out);
  return absl::OkStatus();
}

void StreamDecoder::EmitInterim(const std::vector<CtcToken>& tokens, bool from_lookahead,
                                const WindowSlot& slot, absl::Time now,
                                std::vector<SessionResult>* out) {
  SessionResult res;
  Describe(tokens, /*with_words=*/false, &res);
  if (res.transcript.empty() || res.transcript == last_interim_) return;
  last_interim_ = res.transcript;
  res.transcript = WriteInterim(text_, res.transcript);
  res.is_final = false;
  res.stability = from_lookahead ? 0.5f : 0.9f;
  res.utterance_index = utterance_index_;
  res.audio_start_s = FramesToSeconds(utterance_start_frame_);
  res.audio_processed_s = FramesToSeconds(processed_frames_);
  res.processing_latency_ms = absl::ToDoubleMilliseconds(now - slot.audio_time);
  out->push_back(std::move(res));
}

void StreamDecoder::EndUtterance(bool finish, int64_t end_frame, absl::Time audio_time,
                                 absl::Time now, std::vector<SessionResult>* out) {
  // With alternatives asked for, every prefix the beam holds: they are told apart by their
  // text below, and the beam often holds prefixes that read the same (two spaces for one).
  std::vector<std::vector<CtcToken>> nbest;
  if (decoder_ != nullptr) {
    nbest = decoder_->FinishNBest(max_alternatives_ > 1 ? std::numeric_limits<int>::max() : 1);
  }
  const std::vector<CtcToken> tokens = nbest.empty() ? std::vector<CtcToken>() : nbest.front();
  if (!finish || !tokens.empty() || !any_final_) {
    SessionResult res;
    Describe(tokens, /*with_words=*/true, &res);
    std::vector<std::string> seen = {CollapseSpaces(res.transcript)};
    for (size_t i = 1;
         i < nbest.size() && static_cast<int>(res.alternatives.size()) + 1 < max_alternatives_;
         ++i) {
      SessionResult alt;
      Describe(nbest[i], /*with_words=*/true, &alt);
      std::string key = CollapseSpaces(alt.transcript);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(std::move(key));
      WriteFinal(text_, &alt.transcript, &alt.words);
      res.alternatives.push_back({std::move(alt.transcript), alt.confidence, std::move(alt.words)});
    }
    WriteFinal(text_, &res.transcript, &res.words);
    res.is_final = true;
    res.stability = 1.0f;
    res.utterance_index = utterance_index_;
    res.audio_start_s = FramesToSeconds(utterance_start_frame_);
    res.audio_processed_s = FramesToSeconds(std::max(processed_frames_, end_frame));
    res.processing_latency_ms = absl::ToDoubleMilliseconds(now - audio_time);
    out->push_back(std::move(res));
    ++utterance_index_;
    any_final_ = true;
  }
  if (decoder_ != nullptr) decoder_->Reset();
  endpoint_.Reset();
  last_interim_.clear();
  utterance_start_frame_ = std::max(processed_frames_, end_frame);
}

}  // namespace jasper
