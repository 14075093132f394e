// Windower (engine/streaming/windower.h): window cutting, flushes, in-order reassembly,
// flow-control counts and memory, as a plain value: no threads, no clock, no backend.
#include "engine/streaming/windower.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "tests/test_files.h"

namespace jasper {
namespace {

using test_util::SourcePath;

// The fixture model: 16 kHz, 10 ms hop, stride 2 -> 320 samples (20 ms) per encoder frame.
class WindowerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(SourcePath("tests/fixtures/quartznet_small/model"));
    if (m.ok()) model_ = new std::shared_ptr<const Model>(*m);
  }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "fixture model missing";
    ASSERT_EQ((*model_)->samples_per_encoder_frame(), kFrame);
  }
  Windower Make(int chunk_ms = 800, int left_ms = 1600, int right_ms = 800, int inflight = 4) {
    absl::StatusOr<WindowGeometry> g =
        WindowGeometry::Create(**model_, chunk_ms, left_ms, right_ms);
    EXPECT_TRUE(g.ok()) << g.status();
    return Windower(model_->get(), *g, inflight);
  }
  static std::vector<float> Ramp(int64_t from, int64_t n) {  // sample i holds i (exact in float)
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(from + i);
    return v;
  }
  static absl::Time T(int ms) { return absl::FromUnixMillis(1000000 + ms); }
  static WindowResult Result(int frames) {
    WindowResult r;
    r.encoder_frames = frames;
    r.ids.assign(static_cast<size_t>(frames), 0);
    r.best_log_probs.assign(static_cast<size_t>(frames), 0.0f);
    return r;
  }

  static constexpr int64_t kFrame = 320;
  static constexpr int64_t kChunk = 12800, kLeft = 25600, kRight = 12800;  // 800/1600/800 ms
  inline static std::shared_ptr<const Model>* model_ = nullptr;
};

TEST_F(WindowerTest, GeometryMustBeWholeEncoderFrames) {
  absl::StatusOr<WindowGeometry> g = WindowGeometry::Create(**model_, 810, 1600, 800);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("chunk_ms"), std::string::npos);
  g = WindowGeometry::Create(**model_, 800, 1610, 800);
  EXPECT_NE(g.status().message().find("left_context_ms"), std::string::npos);
  g = WindowGeometry::Create(**model_, 800, 1600, 30);
  EXPECT_NE(g.status().message().find("right_context_ms"), std::string::npos);
  g = WindowGeometry::Create(**model_, 800, 1600, 800);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->window_samples(), kLeft + kChunk + kRight);
}

TEST_F(WindowerTest, AWindowWaitsForItsRightContext) {
  Windower w = Make();
  std::vector<WindowCut> cuts;
  w.Append(Ramp(0, kChunk + kRight - 1), T(0));
  w.Cut(T(1), &cuts);
  EXPECT_TRUE(cuts.empty());
  EXPECT_EQ(w.unprocessed_samples(), kChunk + kRight - 1);
  w.Append(Ramp(kChunk + kRight - 1, 1), T(5));
  w.Cut(T(6), &cuts);
  ASSERT_EQ(cuts.size(), 1u);
  EXPECT_EQ(cuts[0].seq, 0);
  EXPECT_EQ(cuts[0].first_sample, 0);
  ASSERT_EQ(cuts[0].audio.size(), static_cast<size_t>(kChunk + kRight));
  EXPECT_EQ(cuts[0].audio.front(), 0.0f);
  EXPECT_EQ(cuts[0].audio.back(), static_cast<float>(kChunk + kRight - 1));
  EXPECT_EQ(w.unprocessed_samples(), kRight);  // the look-ahead is not processed yet
  EXPECT_EQ(w.inflight(), 1);
  // The window's slot: the whole chunk is final, the right context is look-ahead; the audio it
  // needed arrived at T(5).
  ASSERT_TRUE(w.Complete(0, Result(40)));
  std::optional<WindowSlot> slot = w.PopReady();
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(slot->kind, WindowSlot::Kind::kWindow);
  EXPECT_EQ(slot->first_frame, 0);
  EXPECT_EQ(slot->chunk_offset, 0);
  EXPECT_EQ(slot->chunk_frames, kChunk / kFrame);
  EXPECT_EQ(slot->lookahead_frames, kRight / kFrame);
  EXPECT_FALSE(slot->before_flush);
  EXPECT_EQ(slot->audio_time, T(5));
  EXPECT_EQ(w.inflight(), 0);
}

TEST_F(WindowerTest, LaterWindowsCarryTheLeftContext) {
  Windower w = Make();
  std::vector<WindowCut> cuts;
  w.Append(Ramp(0, 5 * kChunk + kRight), T(0));
  w.Cut(T(0), &cuts);
  ASSERT_EQ(cuts.size(), 4u);  // max_inflight
  // Window i's chunk starts at i * chunk; it reaches back left_ms (clamped at the start).
  const int64_t starts[4] = {0, 0, 0, kChunk};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(cuts[i].seq, i);
    EXPECT_EQ(cuts[i].first_sample, starts[i]) << i;
    const int64_t end = (i + 1) * kChunk + kRight;
    EXPECT_EQ(static_cast<int64_t>(cuts[i].audio.size()), end - starts[i]) << i;
    EXPECT_EQ(cuts[i].audio.front(), static_cast<float>(starts[i])) << i;
  }
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(w.Complete(i, Result(100)));
  for (int i = 0; i < 4; ++i) {
    std::optional<WindowSlot> slot = w.PopReady();
    ASSERT_TRUE(slot.has_value());
    EXPECT_EQ(slot->first_frame, i * kChunk / kFrame);
    EXPECT_EQ(slot->chunk_offset, (i * kChunk - starts[i]) / kFrame);
  }
  // Room again: the fifth window.
  cuts.clear();
  w.Cut(T(0), &cuts);
  ASSERT_EQ(cuts.size(), 1u);
  EXPECT_EQ(cuts[0].first_sample, 4 * kChunk - kLeft);
}

TEST_F(WindowerTest, SlotsComeOutInStreamOrder) {
  Windower w = Make(800, 0, 0, 8);
  std::vector<WindowCut> cuts;
  w.Append(Ramp(0, 3 * kChunk), T(0));
  w.Cut(T(0), &cuts);
  ASSERT_EQ(cuts.size(), 3u);
  ASSERT_TRUE(w.Complete(2, Result(40)));
  ASSERT_TRUE(w.Complete(1, Result(40)));
  EXPECT_FALSE(w.PopReady().has_value());   // window 0 is still out
  EXPECT_FALSE(w.Complete(1, Result(40)));  // twice
  EXPECT_FALSE(w.Complete(7, Result(40)));  // never cut
  ASSERT_TRUE(w.Complete(0, absl::InternalError("backend")));
  std::optional<WindowSlot> first = w.PopReady();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->first_frame, 0);
  EXPECT_FALSE(first->result.ok());  // errors pass through in order
  EXPECT_EQ(w.PopReady()->first_frame, kChunk / kFrame);
  EXPECT_EQ(w.PopReady()->first_frame, 2 * kChunk / kFrame);
  EXPECT_FALSE(w.PopReady().has_value());
}

TEST_F(WindowerTest, AFlushCutsThePartialChunkThenItsMarker) {
  Windower w = Make();
  std::vector<WindowCut> cuts;
  const int64_t n = kChunk / 2 + 100;  // half a chunk and a bit: not a whole frame
  w.Append(Ramp(0, n), T(0));
  w.Cut(T(0), &cuts);
  EXPECT_TRUE(cuts.empty());
  w.Flush(WindowSlot::Kind::kForceFinal, T(30));
  w.Cut(T(30), &cuts);
  ASSERT_EQ(cuts.size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(cuts[0].audio.size()), n);  // no right context to wait for
  EXPECT_FALSE(w.PopReady().has_value());                    // the marker waits behind the window
  ASSERT_TRUE(w.Complete(0, Result(21)));
  std::optional<WindowSlot> window = w.PopReady();
  ASSERT_TRUE(window.has_value());
  EXPECT_TRUE(window->before_flush);
  EXPECT_EQ(window->lookahead_frames, 0);
  EXPECT_EQ(window->chunk_frames, (*model_)->EncoderFramesForSamples(static_cast<int>(n)));
  EXPECT_EQ(window->audio_time, T(30));  // the flush allowed it
  std::optional<WindowSlot> marker = w.PopReady();
  ASSERT_TRUE(marker.has_value());
  EXPECT_EQ(marker->kind, WindowSlot::Kind::kForceFinal);
  EXPECT_EQ(marker->first_frame,
            std::max<int64_t>(window->chunk_frames, (n + kFrame - 1) / kFrame));
  EXPECT_EQ(w.unprocessed_samples(), 0);
  // The next utterance starts at the frame after the flush.
  w.Append(Ramp(n, kChunk + kRight + kFrame), T(40));
  cuts.clear();
  w.Cut(T(40), &cuts);
  ASSERT_EQ(cuts.size(), 1u);
  ASSERT_TRUE(w.Complete(cuts[0].seq, Result(100)));
  EXPECT_EQ(w.PopReady()->first_frame, marker->first_frame);
}

TEST_F(WindowerTest, AFlushWithNothingBeforeItIsReadyAtOnce) {
  Windower w = Make();
  std::vector<WindowCut> cuts;
  w.Flush(WindowSlot::Kind::kFinish, T(7));
  w.Cut(T(7), &cuts);
  EXPECT_TRUE(cuts.empty());
  std::optional<WindowSlot> marker = w.PopReady();
  ASSERT_TRUE(marker.has_value());
  EXPECT_EQ(marker->kind, WindowSlot::Kind::kFinish);
  EXPECT_EQ(marker->first_frame, 0);
  EXPECT_EQ(marker->audio_time, T(7));
}

TEST_F(WindowerTest, MemoryStaysBoundedOverALongStream) {
  Windower w = Make();
  const int64_t piece = 1600;  // 100 ms
  int64_t appended = 0, max_held = 0;
  std::vector<WindowCut> cuts;
  for (int i = 0; i < 6000; ++i) {  // 10 minutes
    w.Append(Ramp(appended, piece), T(i));
    appended += piece;
    w.Cut(T(i), &cuts);
    for (const WindowCut& c : cuts) {
      ASSERT_TRUE(w.Complete(c.seq, Result(160)));
      EXPECT_EQ(c.audio.front(), static_cast<float>(c.first_sample));
    }
    cuts.clear();
    while (w.PopReady().has_value()) {
    }
    max_held = std::max(max_held, w.buffered_samples());
    ASSERT_LT(w.unprocessed_samples(), kChunk + kRight + piece);
  }
  EXPECT_EQ(w.audio_end(), appended);
  // Left context + chunk + look-ahead + one piece, at most twice that before compaction.
  EXPECT_LE(max_held, 2 * (kLeft + kChunk + kRight + piece));
}

TEST_F(WindowerTest, ClearForgetsEverything) {
  Windower w = Make();
  std::vector<WindowCut> cuts;
  w.Append(Ramp(0, 3 * kChunk), T(0));
  w.Cut(T(0), &cuts);
  w.Flush(WindowSlot::Kind::kFinish, T(1));
  w.Clear();
  EXPECT_EQ(w.inflight(), 0);
  EXPECT_EQ(w.buffered_samples(), 0);
  EXPECT_FALSE(w.Complete(0, Result(10)));
  EXPECT_FALSE(w.PopReady().has_value());
}

}  // namespace
}  // namespace jasper
