#include "engine/decoding/ctc_decoder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"

namespace jasper {

CtcFrames CtcFrames::Slice(int begin, int end) const {
  CtcFrames s = *this;
  s.ids = ids.subspan(begin, end - begin);
  s.best_log_probs =
      best_log_probs.subspan(std::min<size_t>(begin, best_log_probs.size()), end - begin);
  if (!log_probs.empty()) {
    const size_t row = static_cast<size_t>(vocab);
    s.log_probs = log_probs.subspan(std::min(begin * row, log_probs.size()), (end - begin) * row);
  }
  s.first_frame = first_frame + begin;
  s.frames = end - begin;
  return s;
}

absl::Status DecoderConfig::Validate() const {
  if (max_alternatives < 1 || max_alternatives > kMaxAlternatives) {
    return absl::InvalidArgumentError(absl::StrCat("max_alternatives must be in [1, ",
                                                   kMaxAlternatives, "], got ", max_alternatives));
  }
  return beam ? beam_options.Validate() : absl::OkStatus();
}

namespace {

// Greedy: the argmax path with repeats merged and blanks dropped (GreedyCtcDecoder).
class GreedyDecoder final : public CtcDecoder {
 public:
  explicit GreedyDecoder(int blank_id) : decoder_(blank_id) {}

  absl::Status CheckFrames(const CtcFrames& /*frames*/) const override { return absl::OkStatus(); }
  absl::Status Feed(const CtcFrames& frames) override {
    FeedTo(frames, &decoder_, &tokens_);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<CtcToken>> Peek(const CtcFrames& lookahead) override {
    GreedyCtcDecoder decoder = decoder_;
    std::vector<CtcToken> tokens = tokens_;
    FeedTo(lookahead, &decoder, &tokens);
    return tokens;
  }
  std::vector<CtcToken> Best() const override { return tokens_; }
  std::vector<CtcToken> Finish() const override { return tokens_; }
  std::vector<std::vector<CtcToken>> FinishNBest(int n) const override {
    if (n < 1) return {};
    return {tokens_};  // one path: no alternatives
  }
  void Reset() override {
    decoder_.Reset();
    tokens_.clear();
  }
  bool HasSpeech() const override { return !tokens_.empty(); }

 private:
  static void FeedTo(const CtcFrames& f, GreedyCtcDecoder* decoder, std::vector<CtcToken>* tokens) {
    decoder->Feed(f.ids.first(f.frames),
                  f.best_log_probs.first(std::min<size_t>(f.frames, f.best_log_probs.size())),
                  f.first_frame, tokens);
  }

  GreedyCtcDecoder decoder_;
  std::vector<CtcToken> tokens_;  // the utterance's
};

// Prefix beam search (CtcBeamDecoder) with the config's LM and boost (kept alive here).
class BeamDecoder final : public CtcDecoder {
 public:
  BeamDecoder(const DecoderConfig& config, const std::vector<std::string>* labels, int blank_id)
      : lm_(config.lm),
        boost_(config.boost),
        blank_id_(blank_id),
        beam_(labels, blank_id, config.beam_options, lm_.get(), boost_.get()) {}

  absl::Status CheckFrames(const CtcFrames& f) const override {
    if (f.frames > 0 &&
        (f.vocab <= 0 || f.log_probs.size() < static_cast<size_t>(f.frames) * f.vocab)) {
      return absl::FailedPreconditionError(
          "beam search needs the backend's log-probabilities (keep_log_probs)");
    }
    return absl::OkStatus();
  }
  absl::Status Feed(const CtcFrames& f) override {
    JASPER_RETURN_IF_ERROR(CheckFrames(f));
    if (f.frames == 0) return absl::OkStatus();
    beam_.Feed(f.log_probs.data(), f.frames, f.vocab, f.first_frame);
    for (int t = 0; t < f.frames && !speech_; ++t) {
      speech_ = static_cast<size_t>(t) < f.ids.size() && f.ids[t] != blank_id_;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<CtcToken>> Peek(const CtcFrames& f) override {
    JASPER_RETURN_IF_ERROR(CheckFrames(f));
    if (f.frames == 0) return beam_.Best();
    return beam_.Peek(f.log_probs.data(), f.frames, f.vocab, f.first_frame);
  }
  std::vector<CtcToken> Best() const override { return beam_.Best(); }
  std::vector<CtcToken> Finish() const override { return beam_.Finish(); }
  std::vector<std::vector<CtcToken>> FinishNBest(int n) const override {
    return beam_.FinishNBest(n);
  }
  void Reset() override {
    beam_.Reset();
    speech_ = false;
  }
  bool HasSpeech() const override { return speech_; }

 private:
  std::shared_ptr<const NgramLm> lm_;
  std::shared_ptr<const PhraseBoost> boost_;
  int blank_id_;
  CtcBeamDecoder beam_;
  bool speech_ = false;  // a committed frame's argmax was not blank
};

}  // namespace

absl::StatusOr<std::unique_ptr<CtcDecoder>> CreateCtcDecoder(const DecoderConfig& config,
                                                             const std::vector<std::string>* labels,
                                                             int blank_id) {
  if (!config.beam) return std::unique_ptr<CtcDecoder>(new GreedyDecoder(blank_id));
  if (labels == nullptr) return absl::InvalidArgumentError("beam search needs the labels");
  JASPER_RETURN_IF_ERROR(config.Validate());
  return std::unique_ptr<CtcDecoder>(new BeamDecoder(config, labels, blank_id));
}

}  // namespace jasper
