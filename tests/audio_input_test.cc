// AudioInput tests: raw PCM, odd byte carry, WAV header sniffing (split across pushes),
// G.711 mu-law/A-law, resampling from 8 / 44.1 / 48 kHz, mono-only, format errors.
#include "engine/audio/audio_input.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/audio/wav.h"
#include "gtest/gtest.h"

namespace jasper {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::vector<uint8_t> Pcm16(const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (float v : x) {
    const int s = static_cast<int>(std::lround(std::max(-1.0f, std::min(1.0f, v)) * 32767.0f));
    out.push_back(static_cast<uint8_t>(s & 0xFF));
    out.push_back(static_cast<uint8_t>((s >> 8) & 0xFF));
  }
  return out;
}

void Put16(std::vector<uint8_t>* b, int v) {
  b->push_back(static_cast<uint8_t>(v & 0xFF));
  b->push_back(static_cast<uint8_t>((v >> 8) & 0xFF));
}
void Put32(std::vector<uint8_t>* b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutTag(std::vector<uint8_t>* b, const char* tag) { b->insert(b->end(), tag, tag + 4); }

// A WAV file: fmt (tag, channels, rate, bits), an optional LIST chunk before the data, the data
// chunk with `declared` as its size field (default: the real size), then `trailer` bytes.
std::vector<uint8_t> MakeWav(int tag, int channels, int rate, int bits,
                             const std::vector<uint8_t>& data, int64_t declared = -1,
                             bool list_before = false, const std::vector<uint8_t>& trailer = {}) {
  std::vector<uint8_t> b;
  PutTag(&b, "RIFF");
  Put32(&b, 0);  // ignored
  PutTag(&b, "WAVE");
  PutTag(&b, "fmt ");
  Put32(&b, 16);
  Put16(&b, tag);
  Put16(&b, channels);
  Put32(&b, rate);
  Put32(&b, rate * channels * bits / 8);
  Put16(&b, channels * bits / 8);
  Put16(&b, bits);
  if (list_before) {
    PutTag(&b, "LIST");
    Put32(&b, 5);  // odd: a pad byte follows
    b.insert(b.end(), {'I', 'N', 'F', 'O', 'x', 0});
  }
  PutTag(&b, "data");
  Put32(&b, declared < 0 ? static_cast<uint32_t>(data.size()) : static_cast<uint32_t>(declared));
  b.insert(b.end(), data.begin(), data.end());
  b.insert(b.end(), trailer.begin(), trailer.end());
  return b;
}

std::vector<float> Sine(int rate, double seconds, double hz, double amp = 0.5) {
  std::vector<float> x(static_cast<size_t>(rate * seconds));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(amp * std::sin(2 * kPi * hz * i / rate));
  return x;
}

// Pushes `bytes` in pieces of the given sizes (cycled), then flushes.
std::vector<float> Stream(AudioInput* in, const std::vector<uint8_t>& bytes,
                          const std::vector<size_t>& pieces) {
  std::vector<float> out;
  size_t pos = 0, k = 0;
  while (pos < bytes.size()) {
    const size_t n = std::min(pieces[k++ % pieces.size()], bytes.size() - pos);
    const absl::Status s = in->Push(absl::MakeConstSpan(bytes).subspan(pos, n), &out);
    EXPECT_TRUE(s.ok()) << s;
    pos += n;
  }
  EXPECT_TRUE(in->Flush(&out).ok());
  return out;
}

std::unique_ptr<AudioInput> MakeInput(AudioEncoding enc, int rate, int model_rate = 16000) {
  absl::StatusOr<std::unique_ptr<AudioInput>> in = AudioInput::Create({enc, rate, 1}, model_rate);
  EXPECT_TRUE(in.ok()) << in.status();
  return in.ok() ? *std::move(in) : nullptr;
}

TEST(AudioInputTest, RawPcm16AtTheModelRateIsExact) {
  const std::vector<uint8_t> bytes = {0x00, 0x00, 0xFF, 0x7F, 0x00, 0x80, 0x00, 0x40};
  auto in = MakeInput(AudioEncoding::kLinearPcm16, 16000);
  std::vector<float> out = Stream(in.get(), bytes, {100});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 32767 / 32768.0f);
  EXPECT_EQ(out[2], -1.0f);
  EXPECT_EQ(out[3], 0.5f);
  EXPECT_EQ(in->input_samples(), 4);
}

TEST(AudioInputTest, OddByteIsCarriedToTheNextPush) {
  const std::vector<uint8_t> bytes = Pcm16(Sine(16000, 0.1, 440));
  auto whole = MakeInput(AudioEncoding::kLinearPcm16, 16000);
  const std::vector<float> expected = Stream(whole.get(), bytes, {bytes.size()});
  for (std::vector<size_t> pieces : {std::vector<size_t>{1}, {3}, {7, 2, 1}, {333}}) {
    auto in = MakeInput(AudioEncoding::kLinearPcm16, 16000);
    EXPECT_EQ(Stream(in.get(), bytes, pieces), expected);
  }
  // A dangling last byte is dropped at Flush.
  auto in = MakeInput(AudioEncoding::kLinearPcm16, 16000);
  std::vector<float> out;
  ASSERT_TRUE(in->Push({0x00, 0x40, 0x12}, &out).ok());
  ASSERT_TRUE(in->Flush(&out).ok());
  EXPECT_EQ(out, std::vector<float>{0.5f});
}

TEST(AudioInputTest, G711MuLawAndALaw) {
  std::vector<uint8_t> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[i] = static_cast<uint8_t>(i);
  auto mu = MakeInput(AudioEncoding::kMulaw, 16000);
  auto a = MakeInput(AudioEncoding::kAlaw, 16000);
  const std::vector<float> mu_out = Stream(mu.get(), bytes, {5});
  const std::vector<float> a_out = Stream(a.get(), bytes, {5});
  ASSERT_EQ(mu_out.size(), 256u);
  ASSERT_EQ(a_out.size(), 256u);
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(mu_out[i], MuLawToFloat(static_cast<uint8_t>(i)));
    EXPECT_EQ(a_out[i], ALawToFloat(static_cast<uint8_t>(i)));
  }
  // Known code points: mu-law 0xFF and A-law 0xD5 are (near) zero; 0x80 / 0xAA the extremes.
  EXPECT_EQ(MuLawToFloat(0xFF), 0.0f);
  EXPECT_NEAR(MuLawToFloat(0x80), 32124 / 32768.0f, 1e-6);
  EXPECT_NEAR(std::fabs(ALawToFloat(0xAA)), 32256 / 32768.0f, 1e-6);
  EXPECT_LT(std::fabs(ALawToFloat(0xD5)), 1e-3);
}

TEST(AudioInputTest, WavHeaderIsDetectedEvenWhenSplitAcrossPushes) {
  const std::vector<float> x = Sine(16000, 0.25, 300);
  const std::vector<uint8_t> pcm = Pcm16(x);
  const std::vector<uint8_t> wav = MakeWav(1, 1, 16000, 16, pcm, -1, /*list_before=*/true);
  absl::StatusOr<Audio> reference = DecodeWav(wav);
  ASSERT_TRUE(reference.ok());
  for (std::vector<size_t> pieces : {std::vector<size_t>{wav.size()}, {1}, {5, 11}, {13}}) {
    // Rate 0 is fine when a WAV header brings it.
    auto in = MakeInput(AudioEncoding::kLinearPcm16, 0);
    EXPECT_EQ(Stream(in.get(), wav, pieces), reference->samples);
    EXPECT_EQ(in->format().sample_rate_hz, 16000);
  }
}

TEST(AudioInputTest, WavHeaderOverridesTheDeclaredFormat) {
  // The client says 8 kHz mu-law, the file is 16 kHz PCM: the header wins.
  const std::vector<uint8_t> pcm = Pcm16(Sine(16000, 0.1, 500));
  const std::vector<uint8_t> wav = MakeWav(1, 1, 16000, 16, pcm);
  auto in = MakeInput(AudioEncoding::kMulaw, 8000);
  const std::vector<float> out = Stream(in.get(), wav, {64});
  EXPECT_EQ(out, DecodeWav(wav)->samples);
  EXPECT_EQ(in->format().encoding, AudioEncoding::kLinearPcm16);
}

TEST(AudioInputTest, MuLawWav) {
  std::vector<uint8_t> codes(800);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> wav = MakeWav(7, 1, 16000, 8, codes);
  auto in = MakeInput(AudioEncoding::kLinearPcm16, 0);
  const std::vector<float> out = Stream(in.get(), wav, {3});
  ASSERT_EQ(out.size(), codes.size());
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(out[i], MuLawToFloat(codes[i]));
  EXPECT_EQ(in->format().encoding, AudioEncoding::kMulaw);
}

TEST(AudioInputTest, WavDataSizeIsHonouredAndUnknownSizesStream) {
  const std::vector<uint8_t> pcm = Pcm16(Sine(16000, 0.05, 200));
  // Trailing chunk after the data: not audio.
  std::vector<uint8_t> trailer = {'L', 'I', 'S', 'T', 4, 0, 0, 0, 'a', 'b', 'c', 'd'};
  auto in = MakeInput(AudioEncoding::kLinearPcm16, 16000);
  EXPECT_EQ(Stream(in.get(), MakeWav(1, 1, 16000, 16, pcm, -1, false, trailer), {50}).size(),
            pcm.size() / 2);
  // Streaming writers put 0 or 0xFFFFFFFF in the size: everything that follows is audio.
  for (int64_t declared : {int64_t{0}, int64_t{0xFFFFFFFF}}) {
    auto in2 = MakeInput(AudioEncoding::kLinearPcm16, 16000);
    EXPECT_EQ(Stream(in2.get(), MakeWav(1, 1, 16000, 16, pcm, declared), {50}).size(),
              pcm.size() / 2);
  }
}

// Several channels are averaged into one: raw (audio_channel_count) and WAV (the header's
// count), pushed in pieces that split sample frames, equal to the mono mean exactly (16-bit
// values whose mean is exact in float), and resampled like mono.
TEST(AudioInputTest, ChannelsAreAveragedIntoOne) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> value(-16000, 16000);
  for (int channels : {2, 3, 8}) {
    const int frames = 1601;
    std::vector<int16_t> interleaved(static_cast<size_t>(frames) * channels);
    for (int16_t& v : interleaved) v = static_cast<int16_t>(2 * value(rng));  // even: exact
    std::vector<uint8_t> bytes;
    for (int16_t v : interleaved) {
      bytes.push_back(static_cast<uint8_t>(v & 0xFF));
      bytes.push_back(static_cast<uint8_t>((v >> 8) & 0xFF));
    }
    std::vector<float> mean(frames);
    for (int f = 0; f < frames; ++f) {
      float sum = 0;
      for (int c = 0; c < channels; ++c) sum += interleaved[f * channels + c] / 32768.0f;
      mean[f] = sum / static_cast<float>(channels);
    }
    absl::StatusOr<std::unique_ptr<AudioInput>> raw =
        AudioInput::Create({AudioEncoding::kLinearPcm16, 16000, channels}, 16000);
    ASSERT_TRUE(raw.ok()) << raw.status();
    EXPECT_EQ(Stream(raw->get(), bytes, {7, 1, 333}), mean) << channels;
    EXPECT_EQ((*raw)->input_samples(), frames);  // sample frames, not values
    auto wav_in = MakeInput(AudioEncoding::kLinearPcm16, 0);
    EXPECT_EQ(Stream(wav_in.get(), MakeWav(1, channels, 16000, 16, bytes), {5, 64}), mean);
    EXPECT_EQ(wav_in->format().channels, channels);
    // At another rate: the same as the mono mean resampled.
    std::vector<uint8_t> mean_bytes;
    for (float v : mean) {
      const int16_t s = static_cast<int16_t>(std::lround(v * 32768.0f));
      mean_bytes.push_back(static_cast<uint8_t>(s & 0xFF));
      mean_bytes.push_back(static_cast<uint8_t>((s >> 8) & 0xFF));
    }
    auto stereo_8k = MakeWav(1, channels, 8000, 16, bytes);
    auto mono_8k = MakeWav(1, 1, 8000, 16, mean_bytes);
    auto a = MakeInput(AudioEncoding::kLinearPcm16, 0);
    auto b = MakeInput(AudioEncoding::kLinearPcm16, 0);
    // (The mono file holds the mean rounded to 16 bits: equal within that rounding.)
    const std::vector<float> from_stereo = Stream(a.get(), stereo_8k, {999});
    const std::vector<float> from_mono = Stream(b.get(), mono_8k, {999});
    ASSERT_EQ(from_stereo.size(), from_mono.size());
    for (size_t i = 0; i < from_stereo.size(); ++i) {
      ASSERT_NEAR(from_stereo[i], from_mono[i], 1e-4) << channels << " channels, sample " << i;
    }
  }
}

// Per-channel recognition: format.channel keeps one channel alone, exactly, raw and WAV, in
// pieces that split sample frames; a channel the audio lacks is INVALID_ARGUMENT once the WAV
// header says so, and a channel outside [-1, 8) at once.
TEST(AudioInputTest, OneChannelIsKeptAlone) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> value(-32768, 32767);
  for (int channels : {2, 3, 8}) {
    const int frames = 1601;
    std::vector<int16_t> interleaved(static_cast<size_t>(frames) * channels);
    for (int16_t& v : interleaved) v = static_cast<int16_t>(value(rng));
    std::vector<uint8_t> bytes;
    for (int16_t v : interleaved) {
      bytes.push_back(static_cast<uint8_t>(v & 0xFF));
      bytes.push_back(static_cast<uint8_t>((v >> 8) & 0xFF));
    }
    for (int c = 0; c < channels; ++c) {
      std::vector<float> want(frames);
      for (int f = 0; f < frames; ++f) want[f] = interleaved[f * channels + c] / 32768.0f;
      AudioFormat format{AudioEncoding::kLinearPcm16, 16000, channels};
      format.channel = c;
      auto raw = AudioInput::Create(format, 16000);
      ASSERT_TRUE(raw.ok()) << raw.status();
      EXPECT_EQ(Stream(raw->get(), bytes, {7, 1, 333}), want) << channels << " " << c;
      format.sample_rate_hz = 0;
      format.channels = 1;  // the header says how many
      auto wav = AudioInput::Create(format, 16000);
      ASSERT_TRUE(wav.ok()) << wav.status();
      EXPECT_EQ(Stream(wav->get(), MakeWav(1, channels, 16000, 16, bytes), {5, 64}), want);
    }
    // A channel beyond the WAV's.
    AudioFormat beyond{AudioEncoding::kLinearPcm16, 0, 8};
    beyond.channel = channels;
    if (channels < 8) {
      auto in = AudioInput::Create(beyond, 16000);
      ASSERT_TRUE(in.ok()) << in.status();
      std::vector<float> out;
      const absl::Status s = (*in)->Push(MakeWav(1, channels, 16000, 16, bytes), &out);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(s.message().find(absl::StrCat("has ", channels)), std::string::npos) << s;
      EXPECT_TRUE(out.empty());
    }
  }
  for (int bad : {-2, 8}) {
    AudioFormat format{AudioEncoding::kLinearPcm16, 16000, 2};
    format.channel = bad;
    EXPECT_EQ(AudioInput::Create(format, 16000).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(AudioInputTest, MoreThanEightChannelsAreRejected) {
  absl::StatusOr<std::unique_ptr<AudioInput>> in =
      AudioInput::Create({AudioEncoding::kLinearPcm16, 16000, 9}, 16000);
  EXPECT_EQ(in.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(in.status().message().find("audio_channel_count must be in [1, 8]"), std::string::npos)
      << in.status();
  // A 9-channel WAV header.
  const std::vector<uint8_t> wav = MakeWav(1, 9, 16000, 16, std::vector<uint8_t>(18 * 20, 0));
  auto mono = MakeInput(AudioEncoding::kLinearPcm16, 16000);
  std::vector<float> out;
  const absl::Status s = mono->Push(wav, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("9 channels; at most 8"), std::string::npos) << s;
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(mono->Push(wav, &out).ok());  // stays failed
}

TEST(AudioInputTest, FormatErrors) {
  // Raw audio without a rate.
  auto in = MakeInput(AudioEncoding::kLinearPcm16, 0);
  std::vector<float> out;
  absl::Status s = in->Push(std::vector<uint8_t>(64, 1), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "sample_rate_hertz is required for raw audio");
  // Rates outside [8000, 48000].
  for (int rate : {4000, 7999, 48001, 96000}) {
    auto bad = AudioInput::Create({AudioEncoding::kLinearPcm16, rate, 1}, 16000);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << rate;
    EXPECT_NE(bad.status().message().find("sample_rate_hertz"), std::string::npos);
  }
  // A WAV header with an out-of-range rate.
  auto w = MakeInput(AudioEncoding::kLinearPcm16, 0);
  EXPECT_EQ(w->Push(MakeWav(1, 1, 96000, 16, std::vector<uint8_t>(100, 0)), &out).code(),
            absl::StatusCode::kInvalidArgument);
  // Unsupported WAV encoding (ADPCM).
  auto adpcm = MakeInput(AudioEncoding::kLinearPcm16, 0);
  EXPECT_EQ(adpcm->Push(MakeWav(2, 1, 16000, 4, std::vector<uint8_t>(100, 0)), &out).code(),
            absl::StatusCode::kInvalidArgument);
  // The stream ends inside the header.
  auto cut = MakeInput(AudioEncoding::kLinearPcm16, 0);
  const std::vector<uint8_t> wav = MakeWav(1, 1, 16000, 16, {});
  ASSERT_TRUE(cut->Push(absl::MakeConstSpan(wav).subspan(0, 30), &out).ok());
  EXPECT_EQ(cut->Flush(&out).code(), absl::StatusCode::kInvalidArgument);
  // Push after Flush.
  auto done = MakeInput(AudioEncoding::kLinearPcm16, 16000);
  ASSERT_TRUE(done->Flush(&out).ok());
  EXPECT_EQ(done->Push({1, 2}, &out).code(), absl::StatusCode::kFailedPrecondition);
  // No audio at all with no rate: nothing to complain about.
  auto empty = MakeInput(AudioEncoding::kLinearPcm16, 0);
  EXPECT_TRUE(empty->Flush(&out).ok());
}

// Resampling: a 440 Hz tone at 8 / 44.1 / 48 kHz comes out as the same tone at 16 kHz, with the
// right length, and the same whatever the push sizes.
class AudioInputResampleTest : public ::testing::TestWithParam<int> {};

TEST_P(AudioInputResampleTest, ToneSurvivesAndPiecesDoNotMatter) {
  const int rate = GetParam();
  const double seconds = 0.5;
  const std::vector<uint8_t> bytes = Pcm16(Sine(rate, seconds, 440));
  auto whole = MakeInput(AudioEncoding::kLinearPcm16, rate);
  const std::vector<float> out = Stream(whole.get(), bytes, {bytes.size()});
  EXPECT_NEAR(static_cast<double>(out.size()), 16000 * seconds, 2);
  const std::vector<float> ideal = Sine(16000, seconds, 440);
  // Away from the edges (filter transients), the output is the tone at 16 kHz.
  double max_err = 0;
  for (size_t i = 800; i + 800 < std::min(out.size(), ideal.size()); ++i) {
    max_err = std::max(max_err, std::fabs(static_cast<double>(out[i]) - ideal[i]));
  }
  EXPECT_LT(max_err, 2e-3) << rate;
  auto pieces = MakeInput(AudioEncoding::kLinearPcm16, rate);
  const std::vector<float> streamed = Stream(pieces.get(), bytes, {1, 999, 37, 4096});
  ASSERT_EQ(streamed.size(), out.size());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(streamed[i], out[i], 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Rates, AudioInputResampleTest, ::testing::Values(8000, 44100, 48000));

TEST(AudioInputTest, ResampledMuLaw8kHz) {
  // Telephony: 8 kHz mu-law upsampled to 16 kHz.
  std::vector<uint8_t> codes(8000, 0xFF);  // 1 s of mu-law silence
  auto in = MakeInput(AudioEncoding::kMulaw, 8000);
  const std::vector<float> out = Stream(in.get(), codes, {160});
  EXPECT_NEAR(static_cast<double>(out.size()), 16000, 2);
  for (float v : out) EXPECT_LT(std::fabs(v), 1e-6);
}

}  // namespace
}  // namespace jasper
