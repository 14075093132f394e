#include "engine/streaming/windower.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"

namespace jasper {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<WindowGeometry> WindowGeometry::Create(const Model& model, int chunk_ms,
                                                      int left_context_ms, int right_context_ms) {
  WindowGeometry g;
  g.sample_rate = model.featurizer().config().sample_rate;
  g.samples_per_frame = model.samples_per_encoder_frame();
  const auto to_samples = [&](const char* name, int64_t ms, int64_t* out) {
    const int64_t scaled = ms * g.sample_rate;
    if (scaled % 1000 != 0 || (scaled / 1000) % g.samples_per_frame != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " = ", ms, " must be a multiple of the model's ",
                       model.encoder_frame_ms(), " ms encoder frame"));
    }
    *out = scaled / 1000;
    return absl::OkStatus();
  };
  JASPER_RETURN_IF_ERROR(to_samples("chunk_ms", chunk_ms, &g.chunk_samples));
  JASPER_RETURN_IF_ERROR(to_samples("left_context_ms", left_context_ms, &g.left_samples));
  JASPER_RETURN_IF_ERROR(to_samples("right_context_ms", right_context_ms, &g.right_samples));
  return g;
}

Windower::Windower(const Model* model, const WindowGeometry& geometry, int max_inflight)
    : model_(model), geometry_(geometry), max_inflight_(max_inflight) {}

void Windower::Append(absl::Span<const float> samples, absl::Time now) {
  if (samples.empty()) return;
  // Compact when the dead prefix dominates (amortized O(1) per sample). Here rather than in
  // Cut(): the cuts' views stay valid until the next Append().
  if (buffer_offset_ > 0 && buffer_offset_ >= buffer_.size() / 2) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(buffer_offset_));
    buffer_offset_ = 0;
  }
  buffer_.insert(buffer_.end(), samples.begin(), samples.end());
  audio_end_ += static_cast<int64_t>(samples.size());
  arrivals_.emplace_back(audio_end_, now);
}

void Windower::Flush(WindowSlot::Kind kind, absl::Time now) {
  flush_marks_.push_back({audio_end_, kind, now});
}

int64_t Windower::unprocessed_samples() const {
  return std::max<int64_t>(0, audio_end_ - next_frame_ * geometry_.samples_per_frame);
}

absl::Time Windower::ArrivalTime(int64_t sample, absl::Time fallback) const {
  for (const auto& [end, time] : arrivals_) {
    if (end >= sample) return time;
  }
  return arrivals_.empty() ? fallback : arrivals_.back().second;
}

void Windower::Cut(absl::Time now, std::vector<WindowCut>* cuts) {
  const int64_t frame = geometry_.samples_per_frame;
  for (;;) {
    const int64_t s = next_frame_ * frame;  // chunk start
    const FlushMark* mark = flush_marks_.empty() ? nullptr : &flush_marks_.front();
    if (mark != nullptr && s >= mark->sample) {
      // Everything before the mark is cut: the marker follows those windows in order.
      Pending marker;
      marker.slot.kind = mark->kind;
      marker.slot.first_frame = next_frame_;
      marker.slot.audio_time = mark->time;
      marker.ready = true;
      pipeline_.emplace(next_seq_++, std::move(marker));
      flush_marks_.pop_front();
      continue;
    }
    if (inflight_ >= max_inflight_) break;
    const int64_t chunk_end = s + geometry_.chunk_samples;
    const int64_t window_start = std::max<int64_t>(0, s - geometry_.left_samples);
    Pending pending;
    WindowSlot& slot = pending.slot;
    slot.first_frame = next_frame_;
    slot.chunk_offset = static_cast<int>((s - window_start) / frame);
    int64_t window_end = 0;
    if (mark != nullptr && chunk_end >= mark->sample) {
      // The last window before a flush: a partial chunk, no right context, all its frames.
      window_end = mark->sample;
      const int total =
          model_->EncoderFramesForSamples(static_cast<int>(window_end - window_start));
      slot.chunk_frames = std::max(0, total - slot.chunk_offset);
      slot.lookahead_frames = 0;
      slot.before_flush = true;
      next_frame_ = std::max(next_frame_ + slot.chunk_frames, CeilDiv(mark->sample, frame));
      slot.audio_time = std::max(ArrivalTime(window_end, now), mark->time);
    } else {
      if (mark != nullptr) {
        window_end = std::min(chunk_end + geometry_.right_samples, mark->sample);
      } else {
        window_end = chunk_end + geometry_.right_samples;
        if (audio_end_ < window_end) break;  // wait for the right context
      }
      slot.chunk_frames = static_cast<int>(geometry_.chunk_samples / frame);
      slot.lookahead_frames = static_cast<int>((window_end - chunk_end) / frame);
      next_frame_ += slot.chunk_frames;
      slot.audio_time = ArrivalTime(window_end, now);
      if (mark != nullptr) slot.audio_time = std::max(slot.audio_time, mark->time);
    }
    WindowCut cut;
    cut.seq = next_seq_++;
    cut.first_sample = window_start;
    const size_t from = buffer_offset_ + static_cast<size_t>(window_start - buffer_start_);
    const size_t to = buffer_offset_ + static_cast<size_t>(window_end - buffer_start_);
    cut.audio = absl::MakeConstSpan(buffer_.data() + from, to - from);
    pipeline_.emplace(cut.seq, std::move(pending));
    ++inflight_;
    cuts->push_back(std::move(cut));
  }
  Trim();
}

void Windower::Trim() {
  // Keep the left context of the next chunk; processed audio before it is dropped.
  const int64_t keep_from = std::min(
      audio_end_,
      std::max<int64_t>(0, next_frame_ * geometry_.samples_per_frame - geometry_.left_samples));
  if (keep_from > buffer_start_) {
    buffer_offset_ += static_cast<size_t>(keep_from - buffer_start_);
    buffer_start_ = keep_from;
  }
  while (arrivals_.size() > 1 && arrivals_.front().first < buffer_start_) arrivals_.pop_front();
}

bool Windower::Complete(int64_t seq, absl::StatusOr<WindowResult> result) {
  auto it = pipeline_.find(seq);
  if (it == pipeline_.end() || it->second.ready) return false;
  it->second.ready = true;
  it->second.slot.result = std::move(result);
  --inflight_;
  return true;
}

std::optional<WindowSlot> Windower::PopReady() {
  if (pipeline_.empty() || !pipeline_.begin()->second.ready) return std::nullopt;
  auto node = pipeline_.extract(pipeline_.begin());
  return std::optional<WindowSlot>(std::move(node.mapped().slot));
}

void Windower::Clear() {
  pipeline_.clear();
  flush_marks_.clear();
  buffer_.clear();
  buffer_.shrink_to_fit();
  buffer_offset_ = 0;
  inflight_ = 0;
}

}  // namespace jasper
