// StreamSession window arithmetic and endpointing (tests/stream_session_test_util.h): exact
// agreement with the offline pass without normalization, utterances split at silence, and
// look-ahead speech sent as interim text. A VAD-like backend makes endpointing testable
// without a trained model.
#include "engine/streaming/stream_session.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cpu_backend.h"
#include "engine/streaming/recognizer.h"
#include "engine/streaming/scheduler.h"
#include "gtest/gtest.h"
#include "tests/stream_session_test_util.h"

namespace jasper {
namespace {

using test_util::Collector;
using test_util::FromPcm16;
using test_util::ReadFileBytes;
using test_util::SourcePath;
using test_util::ToPcm16;

// The fixture model with per-feature normalization off: each window's features are then the
// whole stream's, so windowed decoding can be compared exactly with the offline pass.
absl::StatusOr<std::shared_ptr<const Model>> FixtureModelWithoutNormalization() {
  absl::StatusOr<std::shared_ptr<const Model>> model =
      Model::Load(SourcePath("tests/fixtures/quartznet_small/model"));
  if (!model.ok()) return model.status();
  ModelConfig config = (*model)->config();
  config.featurizer.normalize = "none";
  return Model::FromParts(
      config, ReadFileBytes(SourcePath("tests/fixtures/quartznet_small/model/model.safetensors")));
}

// The session fixture plus the streaming-versus-offline check both exactness tests use.
class StreamSessionTest : public test_util::StreamSessionTest {
 protected:
  // Streams `bytes` through a session for each chunk size and expects its single final to equal
  // the offline transcript: the text and every word's times, plus the word text and confidence
  // when `words_and_confidence`.
  void ExpectStreamingEqualsOffline(const std::shared_ptr<const Model>& model, Scheduler* scheduler,
                                    const std::vector<uint8_t>& bytes, const Transcript& offline,
                                    const DecoderConfig& decoder, const std::vector<int>& chunks,
                                    bool words_and_confidence) {
    for (int chunk_ms : chunks) {
      Collector c;
      StreamingOptions o;
      o.chunk_ms = chunk_ms;
      o.left_context_ms = 2000;
      o.right_context_ms = 2000;
      o.endpoint_silence_ms = 0;
      o.decoder = decoder;
      auto session = StreamSession::Create(model, scheduler, &frontend_, &delivery_, o,
                                           {AudioEncoding::kLinearPcm16, 16000, 1}, c.Callbacks());
      ASSERT_TRUE(session.ok());
      ASSERT_TRUE(StreamAll(session->get(), &c, bytes, {4096}).ok());
      ASSERT_EQ(c.finals().size(), 1u);
      const SessionResult final_result = c.finals()[0];
      EXPECT_EQ(final_result.transcript, offline.text) << "chunk " << chunk_ms;
      ASSERT_EQ(final_result.words.size(), offline.words.size());
      for (size_t i = 0; i < offline.words.size(); ++i) {
        if (words_and_confidence) {
          EXPECT_EQ(final_result.words[i].word, offline.words[i].word);
        }
        EXPECT_EQ(final_result.words[i].start_ms, offline.words[i].start_ms);
        EXPECT_EQ(final_result.words[i].end_ms, offline.words[i].end_ms);
        if (words_and_confidence) {
          EXPECT_NEAR(final_result.words[i].confidence, offline.words[i].confidence, 1e-4);
        }
      }
    }
  }
};

TEST_F(StreamSessionTest, WindowingIsExactWithoutNormalization) {
  absl::StatusOr<std::shared_ptr<const Model>> raw_model = FixtureModelWithoutNormalization();
  ASSERT_TRUE(raw_model.ok()) << raw_model.status();
  BackendOptions bo;
  bo.device = Device::kCpu;
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(*CreateCpuBackend(*raw_model, bo));
  auto scheduler = *Scheduler::Create(std::move(backends), SchedulerOptions());
  const std::vector<float> audio =
      Concat({*fox_, Silence(0.3), *hello_, Silence(0.4), *fox_, *hello_});
  const std::vector<uint8_t> bytes = ToPcm16(audio);
  auto offline_rec = *OfflineRecognizer::Create(*raw_model, bo);
  const std::vector<float> samples = FromPcm16(bytes);
  const Transcript offline = (*offline_rec->RecognizeBatch({absl::MakeConstSpan(samples)}))[0];
  ExpectStreamingEqualsOffline(*raw_model, scheduler.get(), bytes, offline, DecoderConfig(),
                               {800, 1000, 2000}, /*words_and_confidence=*/true);
}

// Beam search (issue 22) carries its state across windows: without normalization the stream's
// final equals the offline beam-search transcript, words and times included.
TEST_F(StreamSessionTest, BeamSearchStreamingEqualsOffline) {
  absl::StatusOr<std::shared_ptr<const Model>> raw_model = FixtureModelWithoutNormalization();
  ASSERT_TRUE(raw_model.ok()) << raw_model.status();
  BackendOptions bo;
  bo.device = Device::kCpu;
  bo.keep_log_probs = true;
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(*CreateCpuBackend(*raw_model, bo));
  auto scheduler = *Scheduler::Create(std::move(backends), SchedulerOptions());
  const std::vector<uint8_t> bytes = ToPcm16(Concat({*fox_, Silence(0.3), *hello_, *fox_}));
  DecoderConfig decoder;
  decoder.beam = true;
  decoder.beam_options.beam_width = 8;
  auto offline_rec = *OfflineRecognizer::Create(*raw_model, bo);
  ASSERT_TRUE(offline_rec->SetDecoder(decoder).ok());
  const std::vector<float> samples = FromPcm16(bytes);
  const Transcript offline = (*offline_rec->RecognizeBatch({absl::MakeConstSpan(samples)}))[0];
  ASSERT_FALSE(offline.text.empty());
  ExpectStreamingEqualsOffline(*raw_model, scheduler.get(), bytes, offline, decoder, {800, 2000},
                               /*words_and_confidence=*/false);
}

// A backend that "hears" speech wherever the window's features are above the window's
// minimum (digital silence is exactly the minimum log-mel in every bin, normalized or not): it
// emits label 1 ('a') there and blank elsewhere. Makes endpointing testable without a trained
// model. Encoder frames = ceil(frames / 2), as the fixture model's stride-2 prologue gives.
class VadBackend : public Backend {
 public:
  explicit VadBackend(int blank) : blank_(blank) {}
  absl::Status Run(const FeatureBatch& in, BackendOutput* out) override {
    out->batch = in.batch;
    out->time = (in.time + 1) / 2;
    out->vocab = blank_ + 1;
    out->lengths.assign(in.batch, 0);
    out->ids.assign(static_cast<size_t>(in.batch) * out->time, -1);
    out->best_log_probs.assign(out->ids.size(), 0.0f);
    for (int b = 0; b < in.batch; ++b) {
      const float* x = in.data + static_cast<size_t>(b) * in.time * in.features;
      const int n = in.lengths[b];
      std::vector<float> lo(in.features, 1e30f);
      for (int t = 0; t < n; ++t) {
        for (int f = 0; f < in.features; ++f) lo[f] = std::min(lo[f], x[t * in.features + f]);
      }
      out->lengths[b] = (n + 1) / 2;
      for (int t = 0; t < out->lengths[b]; ++t) {
        bool silent = true;
        for (int f = 0; f < in.features && silent; ++f) {
          silent = x[2 * t * in.features + f] <= lo[f] + 1e-4f;
        }
        out->ids[static_cast<size_t>(b) * out->time + t] = silent ? blank_ : 1;
        out->best_log_probs[static_cast<size_t>(b) * out->time + t] = -0.1f;
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "vad"; }

 private:
  int blank_;
};

TEST_F(StreamSessionTest, EndpointingSplitsUtterancesAtSilence) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::make_unique<VadBackend>((*model_)->config().blank_id()));
  auto scheduler = *Scheduler::Create(std::move(backends), SchedulerOptions());
  const std::vector<float> audio =
      Concat({Silence(0.5), *fox_, Silence(1.5), *hello_, Silence(1.5), *fox_, Silence(0.3)});
  const double fox_s = fox_->size() / 16000.0, hello_s = hello_->size() / 16000.0;
  for (int endpoint_ms : {600, 1000}) {
    Collector c;
    StreamingOptions o;
    o.endpoint_silence_ms = endpoint_ms;
    auto session = MakeSession(scheduler.get(), &c, o);
    ASSERT_TRUE(StreamAll(session.get(), &c, ToPcm16(audio), {640}).ok());
    const std::vector<SessionResult> finals = c.finals();
    ASSERT_EQ(finals.size(), 3u) << endpoint_ms;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(finals[i].utterance_index, i);
      EXPECT_FALSE(finals[i].transcript.empty());
      EXPECT_EQ(finals[i].transcript.find_first_not_of('a'), std::string::npos);
    }
    // Utterance ends: the end of the speech plus the endpoint silence (+/- a few frames).
    const double end0 = 0.5 + fox_s + endpoint_ms / 1000.0;
    const double end1 = end0 - endpoint_ms / 1000.0 + 1.5 + hello_s + endpoint_ms / 1000.0;
    EXPECT_NEAR(finals[0].audio_processed_s, end0, 0.1);
    EXPECT_NEAR(finals[1].audio_start_s, finals[0].audio_processed_s, 1e-9);
    EXPECT_NEAR(finals[1].audio_processed_s, end1, 0.1);
    // The last utterance ends with the stream (its trailing silence is shorter than the
    // endpoint), finalized by Finish.
    EXPECT_NEAR(finals[2].audio_processed_s, audio.size() / 16000.0, 0.05);
    // Word times: the words lie inside their utterance.
    for (const SessionResult& r : finals) {
      ASSERT_FALSE(r.words.empty());
      EXPECT_GE(r.words.front().start_ms, r.audio_start_s * 1000 - 1e-6);
      EXPECT_LE(r.words.back().end_ms, r.audio_processed_s * 1000 + 1e-6);
      EXPECT_NEAR(r.confidence, std::exp(-0.1), 1e-4);
    }
    EXPECT_NEAR(finals[0].words.front().start_ms, 500, 60);
  }
}

// Partials need not wait for the look-ahead (DESIGN.md): speech that lies only in the right
// look-ahead of the current window is sent as interim text, with the lower stability, before
// the next window (which would hold it in its chunk) can even be cut; it becomes final later
// and the final is the same as without interim results.
TEST_F(StreamSessionTest, LookAheadSpeechIsInterimBeforeTheNextWindow) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::make_unique<VadBackend>((*model_)->config().blank_id()));
  auto scheduler = *Scheduler::Create(std::move(backends), SchedulerOptions());
  // Window 0 = chunk [0, 0.8 s) of silence + look-ahead [0.8, 1.6 s) with speech from 1.0 s.
  const std::vector<uint8_t> bytes = ToPcm16(Concat({Silence(1.0), *fox_, Silence(0.4)}));
  const size_t window0_bytes = 2 * 16000 * 16 / 10;  // 1.6 s: window 0, not window 1 (2.4 s)
  ASSERT_GT(bytes.size(), window0_bytes);
  std::vector<SessionResult> finals[2];
  StreamingOptions o;
  o.endpoint_silence_ms = 0;  // one utterance
  for (bool interim : {false, true}) {
    o.interim_results = interim;
    Collector c;
    auto session = MakeSession(scheduler.get(), &c, o);
    ASSERT_TRUE(session->PushAudio(absl::MakeConstSpan(bytes).first(window0_bytes)).ok());
    if (interim) {
      ASSERT_TRUE(c.WaitInterims(1)) << "no interim result from the look-ahead of window 0";
      const std::vector<SessionResult> interims = c.interims();
      ASSERT_EQ(interims.size(), 1u);
      // Only look-ahead tokens (the chunk is silent): text, at the lower stability.
      EXPECT_FALSE(interims[0].transcript.empty());
      EXPECT_EQ(interims[0].transcript.find_first_not_of('a'), std::string::npos);
      EXPECT_EQ(interims[0].stability, 0.5f);
      EXPECT_NEAR(interims[0].audio_processed_s, 0.8, 1e-9);  // chunk end: nothing final yet
      EXPECT_TRUE(c.finals().empty());
    }
    ASSERT_TRUE(session->PushAudio(absl::MakeConstSpan(bytes).subspan(window0_bytes)).ok());
    ASSERT_TRUE(session->Finish().ok());
    ASSERT_TRUE(c.WaitDone().ok());
    finals[interim] = c.finals();
    if (interim) {
      // The next windows carry the same speech in their chunks: committed tokens, 0.9 when no
      // look-ahead token is added to them.
      for (const SessionResult& r : c.interims()) {
        EXPECT_TRUE(r.stability == 0.5f || r.stability == 0.9f) << r.stability;
      }
    }
  }
  ASSERT_EQ(finals[0].size(), 1u);
  ASSERT_FALSE(finals[0][0].words.empty());
  EXPECT_NEAR(finals[0][0].words.front().start_ms, 1000, 60);
  ExpectSameFinals(finals[1], finals[0]);
}

}  // namespace
}  // namespace jasper
