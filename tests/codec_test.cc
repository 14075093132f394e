// Compressed audio through AudioInput (engine/audio/codec.h): FLAC bit-exact against its WAV,
// the lossy codecs aligned with theirs, the same samples whatever the push sizes and the
// per-call output bound, the bound itself, and corrupt or mislabelled streams.
// Fixtures: tests/fixtures/codecs (tools/make_codec_fixtures.sh).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/audio/audio_input.h"
#include "engine/audio/codec.h"
#include "engine/audio/wav.h"
#include "gtest/gtest.h"
#include "tests/test_files.h"

namespace jasper {
namespace {

using test_util::ReadFileBytes;
using test_util::SourcePath;

std::vector<uint8_t> Fixture(const std::string& name) {
  const std::string s = ReadFileBytes(SourcePath("tests/fixtures/codecs/" + name));
  return std::vector<uint8_t>(s.begin(), s.end());
}

std::vector<float> WavAt16k(const std::string& sample) {
  absl::StatusOr<Audio> a =
      ReadWavFile(SourcePath("models/quartznet_en_tts_small/samples/" + sample));
  EXPECT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->sample_rate, 16000);
  return a.ok() ? a->samples : std::vector<float>();
}

struct Decoded {
  absl::Status status;
  std::vector<float> samples;
  AudioFormat format;
  int64_t max_step = 0;  // the most samples one call produced
};

// Decodes `bytes` pushed in pieces (sizes from `seed`; 0 = one push), with the per-call bound.
Decoded Decode(const std::vector<uint8_t>& bytes, AudioEncoding encoding, uint32_t seed = 0,
               int64_t max_per_call = 0, size_t max_piece = 4096) {
  Decoded d;
  AudioFormat format;
  format.encoding = encoding;
  auto in = AudioInput::Create(format, 16000, max_per_call);
  if (!in.ok()) {
    d.status = in.status();
    return d;
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> piece(1, max_piece);
  auto step = [&](absl::Status s, size_t before) {
    d.max_step = std::max<int64_t>(d.max_step, static_cast<int64_t>(d.samples.size() - before));
    return s;
  };
  auto drain = [&]() -> absl::Status {
    while ((*in)->has_pending()) {
      const size_t before = d.samples.size();
      absl::Status s = step((*in)->Continue(&d.samples), before);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t n = seed == 0 ? bytes.size() : std::min(piece(rng), bytes.size() - pos);
    const size_t before = d.samples.size();
    d.status = step((*in)->Push(absl::MakeConstSpan(bytes.data() + pos, n), &d.samples), before);
    if (d.status.ok()) d.status = drain();
    if (!d.status.ok()) return d;
    pos += n;
  }
  const size_t before = d.samples.size();
  d.status = step((*in)->Flush(&d.samples), before);
  if (d.status.ok()) d.status = drain();
  d.format = (*in)->format();
  return d;
}

// max over small lags of the normalized correlation (the codecs must be aligned: |lag| <= 2).
double AlignedCorrelation(const std::vector<float>& a, const std::vector<float>& b) {
  double best = -1.0;
  const int64_t n = static_cast<int64_t>(std::min(a.size(), b.size())) - 4;
  for (int lag = -2; lag <= 2; ++lag) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 2; i < n; ++i) {
      ab += static_cast<double>(a[i]) * b[i + lag];
      aa += static_cast<double>(a[i]) * a[i];
      bb += static_cast<double>(b[i + lag]) * b[i + lag];
    }
    best = std::max(best, ab / std::sqrt(aa * bb + 1e-30));
  }
  return best;
}

TEST(CodecTest, SniffsTheContainers) {
  auto sniff = [](const std::string& s) {
    return SniffCodec(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  };
  EXPECT_EQ(sniff("fLaC\x00"), SniffResult::kFlac);
  EXPECT_EQ(sniff("OggS"), SniffResult::kOgg);
  EXPECT_EQ(sniff("ID3\x04"), SniffResult::kMp3);
  EXPECT_EQ(sniff("fL"), SniffResult::kNeedMore);
  EXPECT_EQ(sniff("I"), SniffResult::kNeedMore);
  EXPECT_EQ(sniff("RIFF"), SniffResult::kNone);
  EXPECT_EQ(sniff(std::string("\xFF\xFB\x90\x00", 4)), SniffResult::kNone);  // bare MPEG sync
}

TEST(CodecTest, FlacIsBitExact) {
  const std::vector<float> wav = WavAt16k("sample_1.wav");
  for (AudioEncoding e : {AudioEncoding::kLinearPcm16, AudioEncoding::kFlac}) {
    Decoded d = Decode(Fixture("sample_1.flac"), e);
    ASSERT_TRUE(d.status.ok()) << d.status;
    EXPECT_EQ(d.format.encoding, AudioEncoding::kFlac);
    EXPECT_EQ(d.format.sample_rate_hz, 16000);
    EXPECT_EQ(d.format.channels, 1);
    EXPECT_EQ(d.samples, wav);
  }
}

struct FixtureCase {
  const char* file;
  AudioEncoding encoding;  // as a client would label it
  AudioEncoding decoded_as;
  int rate, channels;
  const char* wav;
  double min_correlation;  // against the source WAV at 16 kHz
};

class FixtureTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(FixtureTest, DecodesAlignedAndTheSameInAnyPieces) {
  const FixtureCase& c = GetParam();
  const std::vector<uint8_t> bytes = Fixture(c.file);
  ASSERT_FALSE(bytes.empty()) << c.file;
  const Decoded whole = Decode(bytes, c.encoding);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  EXPECT_EQ(whole.format.encoding, c.decoded_as);
  EXPECT_EQ(whole.format.sample_rate_hz, c.rate);
  EXPECT_EQ(whole.format.channels, c.channels);
  for (float v : whole.samples) ASSERT_TRUE(v >= -1.0f && v <= 1.0f);

  const std::vector<float> wav = WavAt16k(c.wav);
  // The encoders' padding is trimmed (Opus pre-skip and end granule, the LAME gapless tag):
  // the length is the WAV's within 10 ms.
  EXPECT_NEAR(static_cast<double>(whole.samples.size()), static_cast<double>(wav.size()), 160.0)
      << c.file;
  EXPECT_GE(AlignedCorrelation(whole.samples, wav), c.min_correlation) << c.file;

  for (uint32_t seed : {1u, 2u, 3u}) {
    const Decoded pieces = Decode(bytes, c.encoding, seed);
    ASSERT_TRUE(pieces.status.ok()) << pieces.status;
    EXPECT_EQ(pieces.samples, whole.samples) << c.file << " seed " << seed;
    // And with the output bounded per call (the decoder keeps the rest until Continue).
    const Decoded bounded = Decode(bytes, c.encoding, seed, /*max_per_call=*/700);
    ASSERT_TRUE(bounded.status.ok()) << bounded.status;
    EXPECT_EQ(bounded.samples, whole.samples) << c.file << " bounded, seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, FixtureTest,
    ::testing::Values(FixtureCase{"sample_1.flac", AudioEncoding::kFlac, AudioEncoding::kFlac,
                                  16000, 1, "sample_1.wav", 0.9999},
                      FixtureCase{"sample_2_44k_stereo.flac", AudioEncoding::kLinearPcm16,
                                  AudioEncoding::kFlac, 44100, 2, "sample_2.wav", 0.99},
                      FixtureCase{"sample_1.opus", AudioEncoding::kOggOpus, AudioEncoding::kOggOpus,
                                  16000, 1, "sample_1.wav", 0.9},
                      FixtureCase{"sample_2_44k_stereo.opus", AudioEncoding::kLinearPcm16,
                                  AudioEncoding::kOggOpus, 16000, 2, "sample_2.wav", 0.9},
                      FixtureCase{"sample_1.ogg", AudioEncoding::kLinearPcm16,
                                  AudioEncoding::kOggOpus, 16000, 1, "sample_1.wav", 0.9},
                      FixtureCase{"sample_2_44k_stereo.ogg", AudioEncoding::kOggOpus,
                                  AudioEncoding::kOggOpus, 44100, 2, "sample_2.wav", 0.9},
                      FixtureCase{"sample_1.mp3", AudioEncoding::kLinearPcm16, AudioEncoding::kMp3,
                                  16000, 1, "sample_1.wav", 0.9},
                      FixtureCase{"sample_2_44k_stereo_bare.mp3", AudioEncoding::kMp3,
                                  AudioEncoding::kMp3, 44100, 2, "sample_2.wav", 0.9}),
    [](const ::testing::TestParamInfo<FixtureCase>& info) {
      std::string name = info.param.file;
      std::replace_if(
          name.begin(), name.end(), [](char ch) { return !std::isalnum(ch); }, '_');
      return name;
    });

TEST(CodecTest, OutputPerCallIsBounded) {
  // 13 KiB of FLAC hold two minutes of silence: one push must not decode all of it at once.
  const std::vector<uint8_t> bytes = Fixture("silence_120s.flac");
  ASSERT_LT(bytes.size(), 64u << 10);
  const Decoded d = Decode(bytes, AudioEncoding::kFlac, 0, /*max_per_call=*/16000);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.samples.size(), 120u * 16000u);
  EXPECT_LE(d.max_step, 16000 + 4608);  // the bound plus at most one FLAC frame

  AudioFormat format;
  format.encoding = AudioEncoding::kFlac;
  auto in = AudioInput::Create(format, 16000, 16000);
  ASSERT_TRUE(in.ok());
  std::vector<float> out;
  ASSERT_TRUE((*in)->Push(bytes, &out).ok());
  EXPECT_TRUE((*in)->has_pending());
  EXPECT_EQ((*in)->Push(bytes, &out).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*in)->Flush(&out).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CodecTest, CorruptAndMislabelledStreamsAreInvalidArgument) {
  std::mt19937 rng(7);
  auto random_bytes = [&](const std::string& prefix, size_t n) {
    std::vector<uint8_t> b(prefix.begin(), prefix.end());
    for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(rng()));
    return b;
  };
  const std::vector<uint8_t> flac = Fixture("sample_1.flac");
  const std::vector<uint8_t> wav(flac.size(), 0);
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    AudioEncoding encoding;
  };
  const Case cases[] = {
      {"FLAC magic, then garbage", random_bytes("fLaC", 4000), AudioEncoding::kLinearPcm16},
      {"FLAC cut inside its metadata", std::vector<uint8_t>(flac.begin(), flac.begin() + 30),
       AudioEncoding::kFlac},
      {"Ogg magic, then garbage", random_bytes("OggS", 4000), AudioEncoding::kLinearPcm16},
      {"ID3 magic, then garbage", random_bytes("ID3", 4000), AudioEncoding::kLinearPcm16},
      {"FLAC label on zeros", wav, AudioEncoding::kFlac},
      {"OGGOPUS label on FLAC", flac, AudioEncoding::kOggOpus},
      {"MP3 label on random bytes", random_bytes("", 4000), AudioEncoding::kMp3},
      {"FLAC label on two bytes", random_bytes("fL", 0), AudioEncoding::kFlac},
  };
  for (const Case& c : cases) {
    const Decoded d = Decode(c.bytes, c.encoding, 0);
    EXPECT_EQ(d.status.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << d.status;
    const Decoded pieces = Decode(c.bytes, c.encoding, 5);
    EXPECT_EQ(pieces.status.code(), absl::StatusCode::kInvalidArgument) << c.what;
  }
}

TEST(CodecTest, DamagedFilesDecodeOrFailCleanly) {
  for (const char* file :
       {"sample_1.flac", "sample_1.opus", "sample_2_44k_stereo.ogg", "sample_1.mp3"}) {
    const std::vector<uint8_t> bytes = Fixture(file);
    const Decoded whole = Decode(bytes, AudioEncoding::kLinearPcm16);
    ASSERT_TRUE(whole.status.ok()) << file << ": " << whole.status;
    // Cut short: the frames (Ogg: pages) that are complete decode, the rest is dropped.
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + bytes.size() * 9 / 10);
    const Decoded part = Decode(cut, AudioEncoding::kLinearPcm16, 3);
    ASSERT_TRUE(part.status.ok()) << file << ": " << part.status;
    EXPECT_LT(part.samples.size(), whole.samples.size()) << file;
    // Bytes flipped past the header: decoded (concealed, skipped) or INVALID_ARGUMENT.
    for (uint32_t seed = 1; seed <= 8; ++seed) {
      std::mt19937 rng(seed);
      std::vector<uint8_t> damaged = bytes;
      for (int i = 0; i < 20; ++i) {
        damaged[512 + rng() % (damaged.size() - 512)] ^= static_cast<uint8_t>(1 + rng() % 255);
      }
      const Decoded d = Decode(damaged, AudioEncoding::kLinearPcm16, seed);
      EXPECT_TRUE(d.status.ok() || d.status.code() == absl::StatusCode::kInvalidArgument)
          << file << " seed " << seed << ": " << d.status;
      for (float v : d.samples) ASSERT_TRUE(v >= -1.0f && v <= 1.0f) << file;
    }
  }
}

TEST(CodecTest, RawPcmThatStartsLikeAMagicIsStillPcm) {
  // "fL" then bytes that are not "aC": raw 16-bit PCM, decoded as such.
  std::vector<uint8_t> raw = {'f', 'L', 0x10, 0x00, 'I', 'D', 0x00, 0x01};
  AudioFormat format;
  format.sample_rate_hz = 16000;
  auto in = AudioInput::Create(format, 16000);
  ASSERT_TRUE(in.ok());
  std::vector<float> out;
  ASSERT_TRUE((*in)->Push(absl::MakeConstSpan(raw.data(), 1), &out).ok());
  ASSERT_TRUE((*in)->Push(absl::MakeConstSpan(raw.data() + 1, raw.size() - 1), &out).ok());
  ASSERT_TRUE((*in)->Flush(&out).ok());
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ((*in)->format().encoding, AudioEncoding::kLinearPcm16);
}

}  // namespace
}  // namespace jasper
