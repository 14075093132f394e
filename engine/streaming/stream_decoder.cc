#include "engine/streaming/stream_decoder.h"

#include <algorithm>

namespace jasper {

StreamDecoder::StreamDecoder(const Model* model, int endpoint_silence_frames, bool interim_results,
                             const DecoderConfig& decoder)
    : model_(model),
      interim_results_(interim_results),
      decoder_(model->config().blank_id()),
      endpoint_(endpoint_silence_frames) {
  if (decoder.beam) {
    beam_.emplace(&model->config().labels, model->config().blank_id(), decoder.beam_options,
                  decoder.lm.get(), decoder.boost.get());
  }
}

double StreamDecoder::FramesToSeconds(int64_t frames) const {
  return static_cast<double>(frames) * model_->encoder_frame_ms() / 1000.0;
}

void StreamDecoder::Describe(const std::vector<CtcToken>& tokens, bool with_words,
                             SessionResult* res) const {
  const std::vector<std::string>& labels = model_->config().labels;
  res->transcript = TokensToText(tokens, labels);
  std::vector<WordInfo> words = TokensToWords(tokens, labels, model_->encoder_frame_ms());
  float sum = 0;
  for (const WordInfo& w : words) sum += w.confidence;
  res->confidence = words.empty() ? 0.0f : sum / static_cast<float>(words.size());
  if (with_words) res->words = std::move(words);
}

absl::Status StreamDecoder::DecodeWindow(const WindowSlot& slot, const WindowResult& r,
                                         absl::Time now, std::vector<SessionResult>* out) {
  const int blank = decoder_.blank_id();
  const int total = std::min<int>(r.encoder_frames, static_cast<int>(r.ids.size()));
  const int begin = std::min(slot.chunk_offset, total);
  const int end = std::min(total, slot.chunk_offset + slot.chunk_frames);
  if (beam_) return DecodeWindowBeam(slot, r, now, total, begin, end, out);
  for (int j = begin; j < end; ++j) {
    const int64_t frame = slot.first_frame + (j - slot.chunk_offset);
    decoder_.Feed(absl::MakeConstSpan(&r.ids[j], 1), absl::MakeConstSpan(&r.best_log_probs[j], 1),
                  static_cast<int>(frame), &tokens_);
    processed_frames_ = frame + 1;
    if (endpoint_.Update(r.ids[j] == blank, !tokens_.empty())) {
      EndUtterance(/*finish=*/false, frame + 1, slot.audio_time, now, out);
    }
  }
  if (!interim_results_ || slot.before_flush) return absl::OkStatus();
  // Interim: the look-ahead frames decoded on a copy of the decoder.
  GreedyCtcDecoder lookahead = decoder_;
  std::vector<CtcToken> tokens = tokens_;
  const size_t committed = tokens.size();
  const int la_end = std::min(total, end + slot.lookahead_frames);
  for (int j = end; j < la_end; ++j) {
    const int64_t frame = slot.first_frame + (j - slot.chunk_offset);
    lookahead.Feed(absl::MakeConstSpan(&r.ids[j], 1), absl::MakeConstSpan(&r.best_log_probs[j], 1),
                   static_cast<int>(frame), &tokens);
  }
  EmitInterim(tokens, tokens.size() > committed, slot, now, out);
  return absl::OkStatus();
}

void StreamDecoder::EmitInterim(const std::vector<CtcToken>& tokens, bool from_lookahead,
                                const WindowSlot& slot, absl::Time now,
                                std::vector<SessionResult>* out) {
  SessionResult res;
  Describe(tokens, /*with_words=*/false, &res);
  if (res.transcript.empty() || res.transcript == last_interim_) return;
  last_interim_ = res.transcript;
  res.is_final = false;
  res.stability = from_lookahead ? 0.5f : 0.9f;
  res.utterance_index = utterance_index_;
  res.audio_start_s = FramesToSeconds(utterance_start_frame_);
  res.audio_processed_s = FramesToSeconds(processed_frames_);
  res.processing_latency_ms = absl::ToDoubleMilliseconds(now - slot.audio_time);
  out->push_back(std::move(res));
}

absl::Status StreamDecoder::DecodeWindowBeam(const WindowSlot& slot, const WindowResult& r,
                                             absl::Time now, int total, int begin, int end,
                                             std::vector<SessionResult>* out) {
  const int vocab = r.vocab;
  if (vocab <= 0 || r.log_probs.size() < static_cast<size_t>(total) * vocab) {
    return absl::FailedPreconditionError(
        "beam search needs the backend's log-probabilities (keep_log_probs)");
  }
  const int blank = decoder_.blank_id();
  for (int j = begin; j < end; ++j) {
    const int64_t frame = slot.first_frame + (j - slot.chunk_offset);
    beam_->Feed(r.log_probs.data() + static_cast<size_t>(j) * vocab, 1, vocab,
                static_cast<int>(frame));
    processed_frames_ = frame + 1;
    speech_ = speech_ || r.ids[j] != blank;
    if (endpoint_.Update(r.ids[j] == blank, speech_)) {
      EndUtterance(/*finish=*/false, frame + 1, slot.audio_time, now, out);
    }
  }
  if (!interim_results_ || slot.before_flush) return absl::OkStatus();
  const int la_end = std::min(total, end + slot.lookahead_frames);
  const std::vector<CtcToken> committed = beam_->Best();
  const std::vector<CtcToken> tokens =
      la_end > end
          ? beam_->Peek(r.log_probs.data() + static_cast<size_t>(end) * vocab, la_end - end, vocab,
                        static_cast<int>(slot.first_frame + (end - slot.chunk_offset)))
          : committed;
  EmitInterim(tokens, tokens.size() != committed.size(), slot, now, out);
  return absl::OkStatus();
}

void StreamDecoder::EndUtterance(bool finish, int64_t end_frame, absl::Time audio_time,
                                 absl::Time now, std::vector<SessionResult>* out) {
  if (beam_) tokens_ = beam_->Finish();
  if (!finish || !tokens_.empty() || !any_final_) {
    SessionResult res;
    Describe(tokens_, /*with_words=*/true, &res);
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
  decoder_.Reset();
  tokens_.clear();
  if (beam_) beam_->Reset();
  speech_ = false;
  endpoint_.Reset();
  last_interim_.clear();
  utterance_start_frame_ = std::max(processed_frames_, end_frame);
}

}  // namespace jasper
