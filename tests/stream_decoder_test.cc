// StreamDecoder and EndpointRule (engine/streaming/stream_decoder.h) on hand-made window results:
// final tokens carried across windows, interim text from the look-ahead, endpointing, the results'
// times and latencies. No threads, no clock, no backend.
#include "engine/streaming/stream_decoder.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "engine/model/model.h"
#include "engine/streaming/windower.h"
#include "gtest/gtest.h"
#include "tests/test_files.h"

namespace jasper {
namespace {

using test_util::SourcePath;

TEST(EndpointRuleTest, EndsAfterEnoughBlankFramesOfSpeech) {
  EndpointRule rule(3);
  EXPECT_FALSE(rule.Update(true, false));
  EXPECT_FALSE(rule.Update(true, false));
  EXPECT_FALSE(rule.Update(true, false));  // silence before any speech never ends
  EXPECT_FALSE(rule.Update(false, true));
  EXPECT_FALSE(rule.Update(true, true));
  EXPECT_FALSE(rule.Update(true, true));
  EXPECT_TRUE(rule.Update(true, true));
  rule.Reset();
  EXPECT_FALSE(rule.Update(true, true));
  EndpointRule off(0);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(off.Update(true, true));
}

// Labels of the fixture model: " " = 0, a..z = 1..26, "'" = 27, blank = 28; 20 ms frames.
class StreamDecoderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(SourcePath("tests/fixtures/quartznet_small/model"));
    if (m.ok()) model_ = new std::shared_ptr<const Model>(*m);
  }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "fixture model missing";
    ASSERT_EQ((*model_)->config().blank_id(), kB);
    ASSERT_EQ((*model_)->encoder_frame_ms(), 20.0);
  }
  // ids from text: letters, ' ' for the space label, '_' for blank.
  static std::vector<int> Ids(const std::string& s) {
    std::vector<int> ids;
    for (char c : s) ids.push_back(c == '_' ? kB : c == ' ' ? 0 : c == '\'' ? 27 : c - 'a' + 1);
    return ids;
  }
  // A window whose output frames are `ids`: the chunk is frames [offset, offset + chunk), the
  // look-ahead the `lookahead` frames after it.
  static std::pair<WindowSlot, WindowResult> Window(int64_t first_frame, const std::string& text,
                                                    int offset, int chunk, int lookahead,
                                                    absl::Time audio_time) {
    WindowSlot slot;
    slot.first_frame = first_frame;
    slot.chunk_offset = offset;
    slot.chunk_frames = chunk;
    slot.lookahead_frames = lookahead;
    slot.audio_time = audio_time;
    WindowResult r;
    r.ids = Ids(text);
    r.best_log_probs.assign(r.ids.size(), -0.1f);
    r.encoder_frames = static_cast<int>(r.ids.size());
    return {slot, r};
  }
  static absl::Time T(int ms) { return absl::FromUnixMillis(2000000 + ms); }

  static constexpr int kB = 28;
  inline static std::shared_ptr<const Model>* model_ = nullptr;
};

TEST_F(StreamDecoderTest, TokensCarryAcrossWindowsAndInterimComesFromTheLookAhead) {
  StreamDecoder d(model_->get(), /*endpoint_silence_frames=*/0, /*interim_results=*/true);
  std::vector<SessionResult> out;
  // Window 0: chunk "hh_e" (frames 0-3), look-ahead "ll" (interim only).
  auto [s0, r0] = Window(0, "hh_ell", 0, 4, 2, T(100));
  ASSERT_TRUE(d.DecodeWindow(s0, r0, T(130), &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].is_final);
  EXPECT_EQ(out[0].transcript, "hel");
  EXPECT_EQ(out[0].stability, 0.5f);  // look-ahead tokens in it
  EXPECT_DOUBLE_EQ(out[0].processing_latency_ms, 30.0);
  EXPECT_DOUBLE_EQ(out[0].audio_processed_s, 0.08);  // 4 frames committed
  EXPECT_TRUE(out[0].words.empty());
  // Window 1: left context frames 0-3 again, then the chunk "ell_" (frames 4-7): its "e"
  // follows window 0's last chunk token "e" and merges with it (the previous token carries
  // across windows), "ll" is one "l"; the look-ahead "l" after a blank is a second "l".
  auto [s1, r1] = Window(4, "hh_eell_l", 4, 4, 1, T(200));
  out.clear();
  ASSERT_TRUE(d.DecodeWindow(s1, r1, T(210), &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].transcript, "hell");
  EXPECT_EQ(out[0].stability, 0.5f);
  // Window 2: the same committed text and no new look-ahead token: 0.9; unchanged text is not
  // sent twice.
  auto [s2, r2] = Window(8, "lo__", 0, 2, 2, T(300));
  out.clear();
  ASSERT_TRUE(d.DecodeWindow(s2, r2, T(300), &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].transcript, "hello");
  EXPECT_EQ(out[0].stability, 0.9f);
  out.clear();
  auto [s3, r3] = Window(10, "____", 0, 2, 2, T(400));
  ASSERT_TRUE(d.DecodeWindow(s3, r3, T(400), &out).ok());
  EXPECT_TRUE(out.empty());
  // Finish: the final has the words with their times (ms = frame x 20).
  d.EndUtterance(/*finish=*/true, 12, T(500), T(520), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].is_final);
  EXPECT_EQ(out[0].transcript, "hello");
  EXPECT_EQ(out[0].stability, 1.0f);
  ASSERT_EQ(out[0].words.size(), 1u);
  EXPECT_EQ(out[0].words[0].word, "hello");
  EXPECT_EQ(out[0].words[0].start_ms, 0);
  EXPECT_EQ(out[0].words[0].end_ms, 10 * 20);  // the last token, "o", is at frame 9
  EXPECT_DOUBLE_EQ(out[0].audio_processed_s, 12 * 0.02);
  EXPECT_DOUBLE_EQ(out[0].processing_latency_ms, 20.0);
  EXPECT_GT(out[0].confidence, 0.0f);
}

TEST_F(StreamDecoderTest, EndpointsSplitUtterances) {
  StreamDecoder d(model_->get(), /*endpoint_silence_frames=*/3, /*interim_results=*/false);
  std::vector<SessionResult> out;
  auto [s0, r0] = Window(0, "hi___yo__", 0, 9, 0, T(0));
  ASSERT_TRUE(d.DecodeWindow(s0, r0, T(5), &out).ok());
  ASSERT_EQ(out.size(), 1u);  // no interim results asked for
  EXPECT_TRUE(out[0].is_final);
  EXPECT_EQ(out[0].transcript, "hi");
  EXPECT_EQ(out[0].utterance_index, 0);
  EXPECT_DOUBLE_EQ(out[0].audio_start_s, 0.0);
  EXPECT_DOUBLE_EQ(out[0].audio_processed_s, 5 * 0.02);  // ended at the third blank
  auto [s1, r1] = Window(9, "_", 0, 1, 0, T(10));
  out.clear();
  ASSERT_TRUE(d.DecodeWindow(s1, r1, T(10), &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].transcript, "yo");
  EXPECT_EQ(out[0].utterance_index, 1);
  EXPECT_DOUBLE_EQ(out[0].audio_start_s, 5 * 0.02);
  EXPECT_EQ(out[0].words[0].start_ms, 5 * 20);  // stream times, not utterance times
  // Finish after the last final with nothing new: no empty final.
  out.clear();
  d.EndUtterance(/*finish=*/true, 10, T(20), T(20), &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(d.utterance_index(), 2);
}

TEST_F(StreamDecoderTest, ForceFinalAlwaysGivesAFinalAndFinishGivesOneIfNoneCame) {
  StreamDecoder d(model_->get(), 0, true);
  std::vector<SessionResult> out;
  d.EndUtterance(/*finish=*/false, 0, T(0), T(1), &out);  // ForceFinal on silence: empty final
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].is_final);
  EXPECT_EQ(out[0].transcript, "");
  out.clear();
  StreamDecoder fresh(model_->get(), 0, true);
  fresh.EndUtterance(/*finish=*/true, 0, T(0), T(1), &out);
  ASSERT_EQ(out.size(), 1u);  // a stream with no final so far gets one
  EXPECT_EQ(out[0].transcript, "");
}

TEST_F(StreamDecoderTest, NoInterimForTheLastWindowBeforeAFlush) {
  StreamDecoder d(model_->get(), 0, true);
  std::vector<SessionResult> out;
  auto [s0, r0] = Window(0, "ok", 0, 2, 0, T(0));
  s0.before_flush = true;
  ASSERT_TRUE(d.DecodeWindow(s0, r0, T(0), &out).ok());
  EXPECT_TRUE(out.empty());
  d.EndUtterance(false, 2, T(0), T(0), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].transcript, "ok");
}

TEST_F(StreamDecoderTest, BadBeamOptionsRefuseEveryWindow) {
  DecoderConfig config;
  config.beam = true;
  config.beam_options.beam_width = 0;
  StreamDecoder d(model_->get(), 0, true, config);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<SessionResult> out;
  auto [s0, r0] = Window(0, "ok", 0, 2, 0, T(0));
  EXPECT_EQ(d.DecodeWindow(s0, r0, T(0), &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.empty());
}

TEST_F(StreamDecoderTest, BeamSearchNeedsLogProbs) {
  DecoderConfig config;
  config.beam = true;
  StreamDecoder d(model_->get(), 0, true, config);
  ASSERT_TRUE(d.status().ok());
  std::vector<SessionResult> out;
  auto [s0, r0] = Window(0, "ok", 0, 2, 0, T(0));  // no log_probs
  const absl::Status s = d.DecodeWindow(s0, r0, T(0), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "beam search needs the backend's log-probabilities (keep_log_probs)");
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace jasper
