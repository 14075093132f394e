// StreamSession with compressed audio: a FLAC stream gives the same finals as its WAV, in any
// piece sizes; a small FLAC that holds minutes of audio is decoded in bounded steps (the
// session stays within its buffer, finishes, and covers all of the audio), and one longer than
// max_stream_duration_ms ends with OUT_OF_RANGE.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/streaming/stream_session.h"
#include "gtest/gtest.h"
#include "tests/stream_session_test_util.h"

namespace jasper {
namespace {

using test_util::Collector;
using test_util::ReadFileBytes;
using test_util::SourcePath;
using test_util::StreamSessionTest;

std::vector<uint8_t> Bytes(const std::string& rel) {
  const std::string s = ReadFileBytes(SourcePath(rel));
  return std::vector<uint8_t>(s.begin(), s.end());
}

const AudioFormat kSniffed = {AudioEncoding::kLinearPcm16, 0, 1};  // WAV or compressed by magic

double MaxAudioProcessed(Collector* c) {
  double end = 0;
  for (const SessionResult& r : c->finals()) end = std::max(end, r.audio_processed_s);
  for (const SessionResult& r : c->interims()) end = std::max(end, r.audio_processed_s);
  return end;
}

TEST_F(StreamSessionTest, FlacGivesTheSameFinalsAsItsWav) {
  auto scheduler = MakeScheduler();
  const std::vector<uint8_t> wav = Bytes("models/quartznet_en_tts_small/samples/sample_1.wav");
  const std::vector<uint8_t> flac = Bytes("tests/fixtures/codecs/sample_1.flac");
  ASSERT_FALSE(wav.empty());
  ASSERT_FALSE(flac.empty());
  Collector ref;
  auto session = MakeSession(scheduler.get(), &ref, {}, kSniffed);
  ASSERT_TRUE(StreamAll(session.get(), &ref, wav, {3200}).ok());
  ASSERT_FALSE(ref.finals().empty());
  for (std::vector<size_t> pieces : {std::vector<size_t>{flac.size()}, {1001}, {3, 777}}) {
    Collector c;
    auto s = MakeSession(scheduler.get(), &c, {}, kSniffed);
    ASSERT_TRUE(StreamAll(s.get(), &c, flac, pieces).ok());
    ExpectSameFinals(c.finals(), ref.finals());
  }
}

TEST_F(StreamSessionTest, CompressedAudioIsDecodedInBoundedSteps) {
  auto scheduler = MakeScheduler();
  // 13 KiB of FLAC, 120 s of silence: decoded a piece at a time as the windows drain.
  const std::vector<uint8_t> flac = Bytes("tests/fixtures/codecs/silence_120s.flac");
  ASSERT_FALSE(flac.empty());
  StreamingOptions o;
  o.max_buffered_audio_ms = 2000;
  Collector c;
  auto session = MakeSession(scheduler.get(), &c, o, {AudioEncoding::kFlac, 0, 1});
  ASSERT_TRUE(session->CanAcceptAudio());
  ASSERT_TRUE(session->PushAudio(flac).ok());
  // While decoded output is pending the session counts as full: no more audio is accepted.
  int64_t max_buffered = 0;
  for (int i = 0; i < 50; ++i) max_buffered = std::max(max_buffered, session->buffered_audio_ms());
  ASSERT_TRUE(session->Finish().ok());
  ASSERT_TRUE(c.WaitDone().ok());
  EXPECT_NEAR(MaxAudioProcessed(&c), 120.0, 0.5);
  EXPECT_GT(max_buffered, 0);

  // The same audio against a 60 s limit: OUT_OF_RANGE, after at most the limit decoded.
  StreamingOptions limited = o;
  limited.max_stream_duration_ms = 60000;
  Collector c2;
  auto s2 = MakeSession(scheduler.get(), &c2, limited, {AudioEncoding::kFlac, 0, 1});
  ASSERT_TRUE(s2->PushAudio(flac).ok());
  ASSERT_TRUE(s2->Finish().ok());
  EXPECT_EQ(c2.WaitDone().code(), absl::StatusCode::kOutOfRange);
  EXPECT_LE(MaxAudioProcessed(&c2), 60.0);
}

TEST_F(StreamSessionTest, CorruptCompressedAudioEndsTheStreamWithInvalidArgument) {
  auto scheduler = MakeScheduler();
  std::vector<uint8_t> bad = {'f', 'L', 'a', 'C'};
  for (int i = 0; i < 4096; ++i) bad.push_back(static_cast<uint8_t>(i * 131 + 7));
  Collector c;
  auto session = MakeSession(scheduler.get(), &c, {}, kSniffed);
  (void)StreamAll(session.get(), &c, bad, {1000});
  EXPECT_EQ(c.WaitDone().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace jasper
