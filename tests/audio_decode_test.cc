// Tests for engine/wav (RIFF/WAVE parsing, PCM/float/G.711 decoding, malformed files) and
// engine/resample (rate conversion, one-shot and streaming). Literal G.711 values below were
// printed by CPython's audioop. (The front end's FFT and featurizer: features_test.cc.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/audio/resample.h"
#include "engine/audio/wav.h"
#include "gtest/gtest.h"

namespace jasper {
namespace {

constexpr double kPi = 3.14159265358979323846;

// ---------------------------------------------------------------------------------------------
// WAV

void Put16(std::vector<uint8_t>* b, uint32_t v) {
  b->push_back(v & 0xFF);
  b->push_back((v >> 8) & 0xFF);
}
void Put32(std::vector<uint8_t>* b, uint32_t v) {
  Put16(b, v & 0xFFFF);
  Put16(b, v >> 16);
}
void PutTag(std::vector<uint8_t>* b, const char* tag) {
  for (int i = 0; i < 4; ++i) b->push_back(static_cast<uint8_t>(tag[i]));
}
void PutChunk(std::vector<uint8_t>* b, const char* tag, const std::vector<uint8_t>& body,
              uint32_t declared_size) {
  PutTag(b, tag);
  Put32(b, declared_size);
  b->insert(b->end(), body.begin(), body.end());
  if (body.size() % 2 == 1) b->push_back(0);
}

std::vector<uint8_t> FmtBody(uint16_t tag, uint16_t channels, uint32_t rate, uint16_t bits,
                             bool extensible = false) {
  std::vector<uint8_t> f;
  Put16(&f, extensible ? 0xFFFE : tag);
  Put16(&f, channels);
  Put32(&f, rate);
  Put32(&f, rate * channels * (bits / 8));
  Put16(&f, channels * (bits / 8));
  Put16(&f, bits);
  if (extensible) {
    Put16(&f, 22);    // cbSize
    Put16(&f, bits);  // valid bits
    Put32(&f, 0);     // channel mask
    Put16(&f, tag);
    const uint8_t tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                              0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
    f.insert(f.end(), tail, tail + 14);
  }
  return f;
}

// RIFF/WAVE with a LIST chunk of odd size first (exercises the pad byte), then fmt, then data.
std::vector<uint8_t> MakeWav(const std::vector<uint8_t>& fmt, const std::vector<uint8_t>& data,
                             int64_t data_size = -1) {
  std::vector<uint8_t> b;
  PutTag(&b, "RIFF");
  Put32(&b, 0);  // patched below
  PutTag(&b, "WAVE");
  PutChunk(&b, "LIST", {'a', 'b', 'c'}, 3);
  PutChunk(&b, "fmt ", fmt, fmt.size());
  PutChunk(&b, "data", data, data_size < 0 ? data.size() : data_size);
  const uint32_t riff = b.size() - 8;
  std::memcpy(b.data() + 4, &riff, 4);  // little-endian host (x86/ARM)
  return b;
}

TEST(WavTest, Pcm16StereoRoundTrip) {
  std::vector<uint8_t> data;
  const int16_t v[] = {0, -32768, 32767, 1, -1, 12345};
  for (int16_t s : v) Put16(&data, static_cast<uint16_t>(s));
  absl::StatusOr<Audio> a = DecodeWav(MakeWav(FmtBody(1, 2, 16000, 16), data));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->sample_rate, 16000);
  EXPECT_EQ(a->channels, 2);
  EXPECT_EQ(a->num_frames(), 3);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a->samples[i], v[i] / 32768.0f);
  const std::vector<float> mono = DownmixToMono(*a);
  ASSERT_EQ(mono.size(), 3u);
  EXPECT_FLOAT_EQ(mono[0], -0.5f);
  EXPECT_FLOAT_EQ(mono[1], (32767 + 1) / 65536.0f);
}

TEST(WavTest, Pcm8Pcm24Pcm32AndExtensible) {
  absl::StatusOr<Audio> a = DecodeWav(MakeWav(FmtBody(1, 1, 8000, 8), {0, 128, 255}));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->samples, (std::vector<float>{-1.0f, 0.0f, 127 / 128.0f}));

  const int32_t v24[] = {0, -8388608, 8388607, -1, 4660};
  std::vector<uint8_t> d24;
  for (int32_t s : v24) {
    for (int k = 0; k < 3; ++k) d24.push_back((static_cast<uint32_t>(s) >> (8 * k)) & 0xFF);
  }
  for (bool ext : {false, true}) {
    a = DecodeWav(MakeWav(FmtBody(1, 1, 44100, 24, ext), d24));
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->samples.size(), 5u);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(a->samples[i], static_cast<float>(v24[i] / 8388608.0));
  }
  std::vector<uint8_t> d32;
  Put32(&d32, 0x80000000u);
  Put32(&d32, 0x40000000u);
  a = DecodeWav(MakeWav(FmtBody(1, 1, 48000, 32, true), d32));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->samples, (std::vector<float>{-1.0f, 0.5f}));
}

TEST(WavTest, FloatFormats) {
  const float v[] = {0.25f, -1.5f, 1e-6f};
  std::vector<uint8_t> d(sizeof(v));
  std::memcpy(d.data(), v, sizeof(v));
  for (bool ext : {false, true}) {
    absl::StatusOr<Audio> a = DecodeWav(MakeWav(FmtBody(3, 1, 16000, 32, ext), d));
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->samples, std::vector<float>(v, v + 3));
  }
  const double dv[] = {0.125, -0.5};
  std::vector<uint8_t> d64(sizeof(dv));
  std::memcpy(d64.data(), dv, sizeof(dv));
  absl::StatusOr<Audio> a = DecodeWav(MakeWav(FmtBody(3, 1, 16000, 64), d64));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->samples, (std::vector<float>{0.125f, -0.5f}));
  const float nan = std::nanf("");
  std::memcpy(d.data() + 4, &nan, 4);
  EXPECT_FALSE(DecodeWav(MakeWav(FmtBody(3, 1, 16000, 32), d)).ok());
}

TEST(WavTest, G711MatchesReference) {
  // CPython audioop.ulaw2lin / alaw2lin (ITU-T G.711).
  const struct {
    uint8_t byte;
    int mu, a;
  } ref[] = {{0x00, -32124, -5504}, {0x0F, -16764, -6784}, {0x10, -15996, -2752},
             {0x33, -3516, -11520}, {0x5A, -556, -248},    {0x7E, -8, -880},
             {0x7F, 0, -848},       {0x80, 32124, 5504},   {0x9C, 9852, 3264},
             {0xC8, 1372, 472},     {0xD5, 716, 8},        {0xFE, 8, 880},
             {0xFF, 0, 848}};
  for (const auto& r : ref) {
    EXPECT_EQ(MuLawToFloat(r.byte), r.mu / 32768.0f) << int{r.byte};
    EXPECT_EQ(ALawToFloat(r.byte), r.a / 32768.0f) << int{r.byte};
  }
  double mu_sq = 0.0, a_sq = 0.0;
  for (int b = 0; b < 256; ++b) {
    mu_sq += std::pow(MuLawToFloat(b) * 32768.0, 2);
    a_sq += std::pow(ALawToFloat(b) * 32768.0, 2);
  }
  EXPECT_EQ(mu_sq, 26310951424.0);  // sum of squares over all 256 codes, from audioop
  EXPECT_EQ(a_sq, 26719580160.0);

  std::vector<uint8_t> codes = {0x00, 0x80, 0xD5, 0x2A};
  absl::StatusOr<Audio> mu = DecodeWav(MakeWav(FmtBody(7, 2, 8000, 8), codes));
  ASSERT_TRUE(mu.ok()) << mu.status();
  absl::StatusOr<Audio> al = DecodeWav(MakeWav(FmtBody(6, 1, 8000, 8, true), codes));
  ASSERT_TRUE(al.ok()) << al.status();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(mu->samples[i], MuLawToFloat(codes[i]));
    EXPECT_EQ(al->samples[i], ALawToFloat(codes[i]));
  }
}

TEST(WavTest, DataBeforeFmtAndOversizedLastDataChunk) {
  std::vector<uint8_t> data;
  for (int i = 0; i < 5; ++i) Put16(&data, 1000 * i);
  std::vector<uint8_t> b;
  PutTag(&b, "RIFF");
  Put32(&b, 0xFFFFFFFFu);  // ignored
  PutTag(&b, "WAVE");
  PutChunk(&b, "data", data, data.size());
  PutChunk(&b, "fmt ", FmtBody(1, 1, 16000, 16), 16);
  absl::StatusOr<Audio> a = DecodeWav(b);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->samples.size(), 5u);
  // Streaming writers' placeholder size: the data runs to the end of the file.
  a = DecodeWav(MakeWav(FmtBody(1, 1, 16000, 16), data, 0xFFFFFFFFu));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->samples.size(), 5u);
  EXPECT_EQ(a->samples[4], 4000 / 32768.0f);
  // A truncated stereo file: the partial last frame is dropped.
  std::vector<uint8_t> w = MakeWav(FmtBody(1, 2, 16000, 16), data);  // 2.5 frames
  w.pop_back();  // cut one data byte: the chunk now claims more than the file holds
  a = DecodeWav(w);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->num_frames(), 2);
  // Empty data chunk: valid, no samples.
  a = DecodeWav(MakeWav(FmtBody(1, 1, 16000, 16), {}));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->samples.empty());
}

TEST(WavTest, MalformedInputsAreErrors) {
  std::vector<uint8_t> pcm(8, 0);
  const std::vector<uint8_t> good = MakeWav(FmtBody(1, 1, 16000, 16), pcm);
  ASSERT_TRUE(DecodeWav(good).ok());
  auto expect_error = [](const std::vector<uint8_t>& bytes, const char* what) {
    absl::StatusOr<Audio> a = DecodeWav(bytes);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << what;
  };
  expect_error({}, "empty");
  expect_error(std::vector<uint8_t>(good.begin(), good.begin() + 11), "short header");
  std::vector<uint8_t> b = good;
  std::memcpy(b.data(), "RIFX", 4);
  expect_error(b, "RIFX");
  b = good;
  std::memcpy(b.data() + 8, "AVI ", 4);
  expect_error(b, "not WAVE");
  // Truncated inside fmt, and before data.
  expect_error(std::vector<uint8_t>(good.begin(), good.begin() + 36), "truncated fmt");
  expect_error(std::vector<uint8_t>(good.begin(), good.begin() + 48), "no data");
  expect_error(MakeWav({}, pcm), "fmt too small");
  {
    std::vector<uint8_t> nofmt;
    PutTag(&nofmt, "RIFF");
    Put32(&nofmt, 20);
    PutTag(&nofmt, "WAVE");
    PutChunk(&nofmt, "data", pcm, pcm.size());
    expect_error(nofmt, "fmt missing");
  }
  {
    std::vector<uint8_t> lying;  // a LIST chunk claiming far more than the file
    PutTag(&lying, "RIFF");
    Put32(&lying, 100);
    PutTag(&lying, "WAVE");
    PutChunk(&lying, "LIST", {1, 2, 3, 4}, 0x7FFFFFF0u);
    PutChunk(&lying, "fmt ", FmtBody(1, 1, 16000, 16), 16);
    PutChunk(&lying, "data", pcm, pcm.size());
    expect_error(lying, "lying chunk size");
  }
  expect_error(MakeWav(FmtBody(2, 1, 16000, 16), pcm), "ADPCM");
  expect_error(MakeWav(FmtBody(0x55, 1, 16000, 16), pcm), "MP3");
  expect_error(MakeWav(FmtBody(1, 0, 16000, 16), pcm), "0 channels");
  expect_error(MakeWav(FmtBody(1, 1, 0, 16), pcm), "0 Hz");
  expect_error(MakeWav(FmtBody(1, 1, 16000, 12), pcm), "12-bit");
  expect_error(MakeWav(FmtBody(3, 1, 16000, 16), pcm), "16-bit float");
  expect_error(MakeWav(FmtBody(7, 1, 16000, 16), pcm), "16-bit mu-law");
  b = MakeWav(FmtBody(1, 2, 16000, 16), pcm);
  b[12 + 8 + 4 + 8 + 12] = 3;  // block_align 4 -> 3
  expect_error(b, "block_align");
  std::vector<uint8_t> fmt = FmtBody(1, 1, 16000, 16, true);
  fmt[30] ^= 0xFF;  // corrupt the GUID
  expect_error(MakeWav(fmt, pcm), "GUID");
}

TEST(WavTest, TruncationsAndCorruptionNeverCrash) {
  std::vector<uint8_t> data(64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37);
  const std::vector<uint8_t> good = MakeWav(FmtBody(1, 2, 16000, 24, true), data);
  int ok = 0;
  for (size_t n = 0; n <= good.size(); ++n) {
    ok += DecodeWav(absl::MakeConstSpan(good).first(n)).ok();
  }
  EXPECT_GT(ok, 0);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> b = good;
    const int flips = 1 + trial % 4;
    for (int k = 0; k < flips; ++k) b[rng() % 80] = static_cast<uint8_t>(rng());
    absl::StatusOr<Audio> a = DecodeWav(b);
    if (a.ok()) {
      EXPECT_LE(a->samples.size(), b.size());
    }
  }
}

TEST(WavTest, FilesAndSniffing) {
  std::vector<uint8_t> data;
  for (int i = 0; i < 4; ++i) Put16(&data, 100 * i);
  const std::vector<uint8_t> wav = MakeWav(FmtBody(1, 1, 22050, 16), data);
  EXPECT_TRUE(LooksLikeWav(wav));
  EXPECT_FALSE(LooksLikeWav(absl::MakeConstSpan(wav).first(11)));
  EXPECT_FALSE(LooksLikeWav(data));
  const std::string path = ::testing::TempDir() + "/features_test.wav";
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(wav.data(), 1, wav.size(), f);
  std::fclose(f);
  absl::StatusOr<Audio> a = ReadWavFile(path);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->sample_rate, 22050);
  EXPECT_EQ(a->samples.size(), 4u);
  std::remove(path.c_str());
  EXPECT_EQ(ReadWavFile(path).status().code(), absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------------------------
// Resampler

std::vector<float> Sine(double freq, int rate, double seconds, double amplitude = 0.5) {
  std::vector<float> x(static_cast<size_t>(seconds * rate));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(amplitude * std::sin(2 * kPi * freq * i / rate));
  }
  return x;
}

TEST(ResamplerTest, RejectsBadRates) {
  EXPECT_FALSE(Resampler::Create(7999, 16000).ok());
  EXPECT_FALSE(Resampler::Create(16000, 48001).ok());
  EXPECT_FALSE(Resample({}, 0, 16000).ok());
}

TEST(ResamplerTest, IdentityIsExact) {
  const std::vector<float> x = Sine(440, 16000, 0.1);
  absl::StatusOr<std::vector<float>> y = Resample(x, 16000, 16000);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(*y, x);
}

TEST(ResamplerTest, KeepsFrequencyAndAmplitude) {
  for (int in_rate : {8000, 48000, 22050}) {
    SCOPED_TRACE(in_rate);
    const double seconds = 1.0;
    absl::StatusOr<std::vector<float>> y = Resample(Sine(1000, in_rate, seconds), in_rate, 16000);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_NEAR(static_cast<double>(y->size()), seconds * 16000, 2.0);
    // Away from the edges (filter transients): count zero crossings and the peak.
    const size_t begin = 800, end = y->size() - 800;
    int crossings = 0;
    double peak = 0.0;
    for (size_t i = begin; i < end; ++i) {
      crossings += ((*y)[i - 1] < 0) != ((*y)[i] < 0);
      peak = std::max(peak, std::abs(static_cast<double>((*y)[i])));
    }
    const double expected = 2.0 * 1000.0 * (end - begin) / 16000.0;
    EXPECT_NEAR(crossings, expected, 0.01 * expected);
    EXPECT_NEAR(peak, 0.5, 0.005);
  }
}

TEST(ResamplerTest, LengthAndTimeAlignment) {
  // Output length ~ round(n * out / in); soxr compensates the filter delay, so an impulse stays
  // at the same time.
  const struct {
    int in_rate, n, out_len, peak;
  } cases[] = {{8000, 100, 200, 100}, {48000, 4837, 1612, 806}, {44100, 4837, 1755, 877}};
  for (const auto& c : cases) {
    std::vector<float> x(c.n, 0.0f);
    x[c.n / 2] = 1.0f;
    absl::StatusOr<std::vector<float>> y = Resample(x, c.in_rate, 16000);
    ASSERT_TRUE(y.ok());
    EXPECT_EQ(static_cast<int>(y->size()), c.out_len) << c.in_rate;
    const auto peak = std::max_element(y->begin(), y->end(),
                                       [](float a, float b) { return std::abs(a) < std::abs(b); });
    EXPECT_EQ(peak - y->begin(), c.peak) << c.in_rate;
  }
}

TEST(ResamplerTest, StreamingInOddPiecesEqualsOneShot) {
  for (auto [in_rate, out_rate] :
       {std::pair{8000, 16000}, std::pair{48000, 16000}, std::pair{44100, 16000}}) {
    SCOPED_TRACE(in_rate);
    std::vector<float> x = Sine(1000, in_rate, 0.7);
    for (size_t i = 0; i < x.size(); ++i) x[i] += 0.2f * std::sin(0.013f * i * i / in_rate);
    absl::StatusOr<std::vector<float>> once = Resample(x, in_rate, out_rate);
    ASSERT_TRUE(once.ok());
    absl::StatusOr<Resampler> r = Resampler::Create(in_rate, out_rate);
    ASSERT_TRUE(r.ok());
    for (int pass = 0; pass < 2; ++pass) {  // the second pass checks Flush() resets the stream
      std::vector<float> streamed;
      const size_t pieces[] = {1, 7, 333, 1001, 2, 4097, 160};
      size_t pos = 0;
      for (int i = 0; pos < x.size(); ++i) {
        const size_t n = std::min(pieces[i % 7], x.size() - pos);
        ASSERT_TRUE(r->Process(absl::MakeConstSpan(x).subspan(pos, n), &streamed).ok());
        pos += n;
      }
      ASSERT_TRUE(r->Flush(&streamed).ok());
      ASSERT_EQ(streamed.size(), once->size());
      double max_diff = 0.0;
      for (size_t i = 0; i < streamed.size(); ++i) {
        max_diff = std::max(max_diff, std::abs(static_cast<double>(streamed[i]) - (*once)[i]));
      }
      EXPECT_LE(max_diff, 1e-6);  // bit-identical with libsoxr 0.1.3
      if (pass == 0) {
        std::printf("[ resample ] %d->%d streamed vs one-shot max|diff| %.3g\n", in_rate, out_rate,
                    max_diff);
      }
    }
    std::vector<float> sink;
    std::vector<float> bad = {0.0f, std::nanf("")};
    EXPECT_FALSE(r->Process(bad, &sink).ok());
  }
}

}  // namespace
}  // namespace jasper
