// Tests for engine/fft and engine/features (WAV decoding and resampling: audio_decode_test.cc).
//
// Golden values: tests/fixtures/features_golden.safetensors comes from
// tools/gen_feature_fixture.py (torch.stft + librosa, NeMo's FilterbankFeatures pipeline for both
// the <= 2.4 and >= 2.5 STFT behaviours). Literal filterbank values below were printed by
// librosa 0.11.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/features/features.h"
#include "engine/features/fft.h"
#include "engine/io/safetensors.h"
#include "engine/model/model_config.h"
#include "gtest/gtest.h"

namespace jasper {
namespace {

constexpr double kPi = 3.14159265358979323846;

// ---------------------------------------------------------------------------------------------
// FFT

std::vector<std::complex<long double>> NaiveDft(const std::vector<double>& x) {
  const size_t n = x.size();
  std::vector<std::complex<long double>> out(n / 2 + 1);
  for (size_t k = 0; k < out.size(); ++k) {
    std::complex<long double> acc = 0;
    for (size_t j = 0; j < n; ++j) {
      const long double angle = -2.0L * kPi * static_cast<long double>((k * j) % n) / n;
      acc += static_cast<long double>(x[j]) * std::complex<long double>(cosl(angle), sinl(angle));
    }
    out[k] = acc;
  }
  return out;
}

void ExpectMatchesDft(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> x(n);
  for (double& v : x) v = dist(rng);
  absl::StatusOr<RealFft> fft = RealFft::Create(n);
  ASSERT_TRUE(fft.ok()) << fft.status();
  EXPECT_EQ(fft->num_bins(), n / 2 + 1);
  std::vector<std::complex<double>> got(fft->num_bins());
  fft->Transform(x, absl::MakeSpan(got));
  const auto want = NaiveDft(x);
  double max_err = 0.0;
  for (size_t k = 0; k < got.size(); ++k) {
    max_err = std::max(
        max_err, static_cast<double>(
                     std::abs(std::complex<long double>(got[k].real(), got[k].imag()) - want[k])));
  }
  // Random +-1 input: |X| ~ sqrt(n); double FFT error ~ log2(n) * eps * sqrt(n).
  EXPECT_LT(max_err, 1e-13 * std::sqrt(static_cast<double>(n)) * (1 + std::log2(n))) << n;
}

TEST(FftTest, PowerOfTwoMatchesDirectDft) {
  for (int n : {1, 2, 4, 8, 16, 32, 64, 256, 512, 1024, 2048}) ExpectMatchesDft(n, 17 + n);
}

TEST(FftTest, OtherSizesFallBackToDirectDft) {
  for (int n : {3, 5, 6, 12, 100, 321, 400}) {
    ExpectMatchesDft(n, 5 + n);
    EXPECT_FALSE(RealFft::Create(n)->is_power_of_two());
  }
  EXPECT_TRUE(RealFft::Create(512)->is_power_of_two());
}

TEST(FftTest, KnownTransforms) {
  absl::StatusOr<RealFft> fft = RealFft::Create(8);
  ASSERT_TRUE(fft.ok());
  std::vector<std::complex<double>> out(5);
  std::vector<double> impulse(8, 0.0);
  impulse[0] = 1.0;
  fft->Transform(impulse, absl::MakeSpan(out));
  for (const auto& c : out) EXPECT_NEAR(std::abs(c - std::complex<double>(1.0, 0.0)), 0.0, 1e-15);
  std::vector<double> cosine(8);
  for (int j = 0; j < 8; ++j) cosine[j] = std::cos(2 * kPi * 2 * j / 8);
  fft->Transform(cosine, absl::MakeSpan(out));
  for (int k = 0; k < 5; ++k) EXPECT_NEAR(std::abs(out[k]), k == 2 ? 4.0 : 0.0, 1e-14) << k;
}

TEST(FftTest, RejectsBadSizes) {
  EXPECT_FALSE(RealFft::Create(0).ok());
  EXPECT_FALSE(RealFft::Create(-4).ok());
  EXPECT_FALSE(RealFft::Create(RealFft::kMaxSize + 1).ok());
}

// ---------------------------------------------------------------------------------------------
// Mel filterbank

double HzToMel(double hz) {  // Slaney, written independently of features.cc
  return hz < 1000.0 ? hz * 3.0 / 200.0 : 15.0 + 27.0 * std::log(hz / 1000.0) / std::log(6.4);
}
double MelToHz(double mel) {
  return mel < 15.0 ? mel * 200.0 / 3.0 : 1000.0 * std::exp((mel - 15.0) * std::log(6.4) / 27.0);
}

TEST(MelFilterbankTest, ShapeSupportAndLibrosaValues) {
  const std::vector<float> fb = SlaneyMelFilterbank(16000, 512, 64, 0.0, 8000.0, true);
  ASSERT_EQ(fb.size(), 64u * 257);
  auto at = [&](int m, int k) { return fb[m * 257 + k]; };
  // Rows: {mel, first nonzero bin, last nonzero bin, argmax} from librosa.filters.mel.
  const int rows[][4] = {
      {0, 1, 2, 1}, {1, 2, 4, 3}, {10, 15, 17, 16}, {31, 51, 55, 53}, {63, 233, 255, 244}};
  for (const auto& r : rows) {
    int first = -1, last = -1, argmax = 0;
    for (int k = 0; k < 257; ++k) {
      if (at(r[0], k) != 0.0f) {
        if (first < 0) first = k;
        last = k;
      }
      if (at(r[0], k) > at(r[0], argmax)) argmax = k;
    }
    EXPECT_EQ(first, r[1]) << "mel " << r[0];
    EXPECT_EQ(last, r[2]) << "mel " << r[0];
    EXPECT_EQ(argmax, r[3]) << "mel " << r[0];
  }
  // Literal librosa values (float32).
  const struct {
    int m, k;
    float value;
  } values[] = {{0, 1, 0.014511281624436378f},    {0, 2, 0.014075512066483498f},
                {1, 3, 0.021113267168402672f},    {10, 15, 0.0021788510493934155f},
                {10, 16, 0.01669013313949108f},   {31, 52, 0.008725856430828571f},
                {31, 53, 0.011526945978403091f},  {63, 233, 8.809219434624538e-05f},
                {63, 235, 0.0005684429779648781f}};
  for (const auto& v : values) {
    EXPECT_NEAR(at(v.m, v.k), v.value, 2e-7 * v.value) << v.m << "," << v.k;
  }
  double total = 0.0;
  for (float w : fb) total += w;
  EXPECT_NEAR(total, 2.0461816787719727, 1e-6);
}

TEST(MelFilterbankTest, NoNormAndOtherRates) {
  const std::vector<float> fb = SlaneyMelFilterbank(8000, 256, 40, 20.0, 3800.0, false);
  ASSERT_EQ(fb.size(), 40u * 129);
  auto at = [&](int m, int k) { return fb[m * 129 + k]; };
  EXPECT_NEAR(at(0, 1), 0.20279066264629364f, 1e-7);
  EXPECT_NEAR(at(0, 2), 0.7660980820655823f, 1e-7);
  EXPECT_NEAR(at(20, 37), 0.19837623834609985f, 1e-7);
  EXPECT_NEAR(at(20, 38), 0.662762463092804f, 1e-7);
  EXPECT_NEAR(at(39, 109), 0.08569502085447311f, 1e-7);
  EXPECT_NEAR(at(39, 110), 0.24229693412780762f, 1e-7);
  for (float w : fb) EXPECT_LE(w, 1.0f);  // unnormalised triangles peak at most at 1
}

TEST(MelFilterbankTest, SlaneyAreaNormalisation) {
  const std::vector<float> plain = SlaneyMelFilterbank(16000, 512, 64, 0.0, 8000.0, false);
  const std::vector<float> norm = SlaneyMelFilterbank(16000, 512, 64, 0.0, 8000.0, true);
  const double max_mel = HzToMel(8000.0);
  for (int m = 0; m < 64; ++m) {
    const double f_lo = MelToHz(max_mel * m / 65.0);
    const double f_hi = MelToHz(max_mel * (m + 2) / 65.0);
    const double enorm = 2.0 / (f_hi - f_lo);
    double area = 0.0;
    int width = 0;
    for (int k = 0; k < 257; ++k) {
      const float p = plain[m * 257 + k];
      const float n = norm[m * 257 + k];
      EXPECT_NEAR(n, p * enorm, 1e-7 * enorm) << m << "," << k;
      area += n * (16000.0 / 512);
      width += p > 0.0f;
    }
    // Triangle of unit area in Hz; sampled on the 31.25-Hz grid once it spans several bins.
    if (width >= 8) {
      EXPECT_NEAR(area, 1.0, 0.02) << "mel " << m;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Featurizer

std::vector<float> TestSignal(int n, int sample_rate = 16000) {
  std::vector<float> x(n);
  uint32_t state = 12345;
  for (int i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / sample_rate;
    state = state * 1664525u + 1013904223u;
    const double noise = (state >> 8) / 16777216.0 - 0.5;
    x[i] = static_cast<float>(0.4 * std::sin(2 * kPi * (300.0 * t + 1500.0 * t * t)) *
                                  (0.6 + 0.4 * std::sin(2 * kPi * 2.0 * t)) +
                              0.05 * noise);
  }
  return x;
}

Featurizer MakeFeaturizer(StftMode mode, int pad_to = 16, double pad_value = 0.0,
                          std::string normalize = "per_feature") {
  FeaturizerConfig config;
  config.stft_mode = mode;
  config.pad_to = pad_to;
  config.pad_value = pad_value;
  config.normalize = normalize;
  absl::StatusOr<Featurizer> f = Featurizer::Create(config);
  EXPECT_TRUE(f.ok()) << f.status();
  return *std::move(f);
}

TEST(FeaturizerTest, FrameCountsPerMode) {
  const Featurizer legacy = MakeFeaturizer(StftMode::kLegacy);
  const Featurizer nemo25 = MakeFeaturizer(StftMode::kNemo25);
  EXPECT_EQ(legacy.config().n_fft, 512);
  for (int length : {257, 320, 480, 1000, 1600, 1601, 4837, 16000, 16159, 16160}) {
    SCOPED_TRACE(length);
    EXPECT_EQ(legacy.ValidFrames(length), length / 160 + 1);
    EXPECT_EQ(nemo25.ValidFrames(length), length / 160);
    const std::vector<float> x = TestSignal(length);
    absl::StatusOr<Features> a = legacy.Compute(x);
    ASSERT_TRUE(a.ok()) << a.status();
    const int stft_frames = 1 + length / 160;
    EXPECT_EQ(a->valid_frames, stft_frames);
    EXPECT_EQ(a->padded_frames, (stft_frames + 15) / 16 * 16);
    EXPECT_EQ(a->num_features, 64);
    EXPECT_EQ(a->data.size(), static_cast<size_t>(a->padded_frames) * 64);
    absl::StatusOr<Features> b = nemo25.Compute(x);
    if (length / 160 < 2) {  // per_feature normalisation needs two valid frames
      EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->valid_frames, length / 160);
    EXPECT_EQ(b->padded_frames, (stft_frames + 15) / 16 * 16);  // pads the STFT frame count
  }
  EXPECT_EQ(legacy.ValidFrames(0), 0);
  EXPECT_EQ(nemo25.ValidFrames(0), 0);
}

TEST(FeaturizerTest, PerFeatureNormalisationAndPadding) {
  for (StftMode mode : {StftMode::kLegacy, StftMode::kNemo25}) {
    const Featurizer f = MakeFeaturizer(mode, /*pad_to=*/16, /*pad_value=*/-3.25);
    const std::vector<float> x = TestSignal(12345);
    absl::StatusOr<Features> feats = f.Compute(x);
    ASSERT_TRUE(feats.ok()) << feats.status();
    const int n = feats->valid_frames;
    const int nf = feats->num_features;
    ASSERT_GE(n, 2);
    for (int m = 0; m < nf; ++m) {
      double sum = 0.0, sq = 0.0;
      for (int t = 0; t < n; ++t) sum += feats->data[t * nf + m];
      const double mean = sum / n;
      for (int t = 0; t < n; ++t) sq += std::pow(feats->data[t * nf + m] - mean, 2);
      EXPECT_NEAR(mean, 0.0, 1e-5) << "feature " << m;
      EXPECT_NEAR(std::sqrt(sq / (n - 1)), 1.0, 1e-3) << "feature " << m;  // std/(std+1e-5)
    }
    for (int t = n; t < feats->padded_frames; ++t) {
      for (int m = 0; m < nf; ++m) ASSERT_EQ(feats->data[t * nf + m], -3.25f) << t;
    }
  }
}

TEST(FeaturizerTest, PadTo) {
  const std::vector<float> x = TestSignal(4000);  // 26 STFT frames
  EXPECT_EQ(MakeFeaturizer(StftMode::kLegacy, 0).Compute(x)->padded_frames, 26);
  EXPECT_EQ(MakeFeaturizer(StftMode::kLegacy, 8).Compute(x)->padded_frames, 32);
  EXPECT_EQ(MakeFeaturizer(StftMode::kLegacy, 13).Compute(x)->padded_frames, 26);
  absl::StatusOr<Features> z = MakeFeaturizer(StftMode::kNemo25, 0, 7.0).Compute(x);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->valid_frames, 25);
  EXPECT_EQ(z->padded_frames, 26);  // the last STFT frame is invalid, set to pad_value
  EXPECT_EQ(z->data[25 * 64], 7.0f);
}

TEST(FeaturizerTest, ErrorsForEmptyShortAndNonFiniteAudio) {
  const Featurizer legacy = MakeFeaturizer(StftMode::kLegacy);
  const Featurizer nemo25 = MakeFeaturizer(StftMode::kNemo25);
  EXPECT_EQ(legacy.Compute({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(nemo25.ComputeUnnormalized({}).status().code(), absl::StatusCode::kInvalidArgument);
  // Reflect padding needs more than n_fft/2 = 256 samples.
  const std::vector<float> x = TestSignal(400);
  absl::StatusOr<Features> r = legacy.Compute(absl::MakeConstSpan(x).first(256));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("too short"), std::string::npos) << r.status();
  EXPECT_TRUE(legacy.Compute(absl::MakeConstSpan(x).first(257)).ok());
  // NeMo 2.5: < 160 samples give no valid frame, < 320 give one (normalisation needs two).
  EXPECT_FALSE(nemo25.ComputeUnnormalized(absl::MakeConstSpan(x).first(159)).ok());
  EXPECT_EQ(nemo25.ComputeUnnormalized(absl::MakeConstSpan(x).first(200))->valid_frames, 1);
  r = nemo25.Compute(absl::MakeConstSpan(x).first(319));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("too short"), std::string::npos) << r.status();
  EXPECT_TRUE(nemo25.Compute(absl::MakeConstSpan(x).first(320)).ok());
  // Without normalisation one frame is enough.
  EXPECT_TRUE(MakeFeaturizer(StftMode::kNemo25, 16, 0.0, "none")
                  .Compute(absl::MakeConstSpan(x).first(200))
                  .ok());
  // A non-finite sample anywhere (first, interior, last) is rejected, and the error names it.
  for (const size_t i : {size_t{0}, size_t{17}, x.size() - 1}) {
    for (const float v : {std::nanf(""), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
      std::vector<float> bad = x;
      bad[i] = v;
      r = legacy.Compute(bad);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << i << " " << v;
      EXPECT_NE(r.status().message().find(absl::StrCat("sample ", i, " is not finite")),
                std::string::npos)
          << r.status();
    }
  }
}

// PaddedFrames() must agree with Compute() on every length, success and error alike (the
// streaming session sizes its windows with it).
TEST(FeaturizerTest, PaddedFramesAgreesWithCompute) {
  for (StftMode mode : {StftMode::kLegacy, StftMode::kNemo25}) {
    for (int pad_to : {0, 8, 16, 13}) {
      for (const char* normalize : {"per_feature", "none"}) {
        const Featurizer f = MakeFeaturizer(mode, pad_to, 0.0, normalize);
        for (int length : {0, 1, 159, 160, 200, 256, 257, 319, 320, 321, 4000, 12345, 16160}) {
          SCOPED_TRACE(
              absl::StrCat(static_cast<int>(mode), " ", pad_to, " ", normalize, " ", length));
          const std::vector<float> x = TestSignal(length);
          absl::StatusOr<Features> full = f.Compute(x);
          absl::StatusOr<int> padded = f.PaddedFrames(x.size());
          ASSERT_EQ(padded.status(), full.status());
          if (full.ok()) {
            EXPECT_EQ(*padded, full->padded_frames);
          }
        }
      }
    }
  }
  EXPECT_EQ(MakeFeaturizer(StftMode::kLegacy).PaddedFrames(size_t{1} << 31).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ComputeStreaming() over overlapping windows of one stream equals Compute() of each window bit
// for bit, while reusing the frames the windows share; windows out of order, repeated, or off
// the hop grid still give exact results (they just reuse less).
TEST(FeaturizerTest, ComputeStreamingIsBitwiseComputeAndReusesFrames) {
  const std::vector<float> stream = TestSignal(16000 * 6 + 123);
  for (StftMode mode : {StftMode::kLegacy, StftMode::kNemo25}) {
    const Featurizer f = MakeFeaturizer(mode, 16, -1.5);
    SCOPED_TRACE(static_cast<int>(mode));
    FrameCache cache;
    // Default server geometry: 3.2 s windows every 0.8 s (left 1.6 s, right 0.8 s); the first
    // windows start at 0 and grow; then a window off the hop grid, one out of order, a repeat,
    // and a short last window.
    std::vector<std::pair<int64_t, int64_t>> windows;  // [start, end)
    for (int64_t chunk = 0; chunk + 25600 <= 16000 * 5; chunk += 12800) {
      windows.push_back({std::max<int64_t>(0, chunk - 25600), chunk + 12800 + 12800});
    }
    windows.push_back({12345, 12345 + 51200});
    windows.push_back({25600, 25600 + 51200});
    windows.push_back({25600, 25600 + 51200});
    windows.push_back({0, 51200});
    windows.push_back({16000 * 6 - 4000, 16000 * 6 + 123});
    int64_t reused_before = 0;
    for (size_t w = 0; w < windows.size(); ++w) {
      SCOPED_TRACE(w);
      const auto [begin, end] = windows[w];
      const absl::Span<const float> audio =
          absl::MakeConstSpan(stream).subspan(begin, static_cast<size_t>(end - begin));
      absl::StatusOr<Features> want = f.Compute(audio);
      ASSERT_TRUE(want.ok()) << want.status();
      absl::StatusOr<Features> got = f.ComputeStreaming(audio, begin, &cache);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->valid_frames, want->valid_frames);
      EXPECT_EQ(got->padded_frames, want->padded_frames);
      ASSERT_EQ(got->data.size(), want->data.size());
      EXPECT_EQ(std::memcmp(got->data.data(), want->data.data(), 4 * want->data.size()), 0);
      const int64_t reused = cache.reused_frames - reused_before;
      reused_before = cache.reused_frames;
      if (w >= 1 && w <= 3) {
        EXPECT_GT(reused, 150) << "overlapping grid-aligned windows";
      }
      if (w == windows.size() - 5) {
        EXPECT_EQ(reused, 0) << "off the hop grid";
      }
      if (w == windows.size() - 3) {
        EXPECT_GT(reused, 300) << "a repeated window";
      }
    }
    // An error (too short, non-finite) leaves the cache as it was.
    const FrameCache before = cache;
    std::vector<float> bad(stream.begin(), stream.begin() + 16000);
    bad[5000] = std::nanf("");
    EXPECT_FALSE(f.ComputeStreaming(bad, 0, &cache).ok());
    EXPECT_FALSE(f.ComputeStreaming(absl::MakeConstSpan(stream).first(100), 0, &cache).ok());
    EXPECT_EQ(cache.first_sample, before.first_sample);
    EXPECT_EQ(cache.logmel, before.logmel);
    EXPECT_EQ(cache.interior, before.interior);
  }
}

TEST(FeaturizerTest, CreateValidates) {
  FeaturizerConfig config;
  EXPECT_FALSE(Featurizer::Create(config, std::vector<float>(10, 0.0f)).ok());  // wrong fb size
  config.n_fft = 0;  // NeMo: next power of two >= win_length
  absl::StatusOr<Featurizer> f = Featurizer::Create(config);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->config().n_fft, 512);
  config.n_fft = 256;  // shorter than the 320-sample window
  EXPECT_FALSE(Featurizer::Create(config).ok());
  config.n_fft = 400;  // not a power of two: direct DFT
  config.window_size_s = 0.025;
  f = Featurizer::Create(config);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<Features> feats = f->Compute(TestSignal(4000));
  ASSERT_TRUE(feats.ok()) << feats.status();
  EXPECT_EQ(feats->valid_frames, 26);
}

TEST(FeaturizerTest, ConcurrentComputeIsDeterministic) {
  const Featurizer f = MakeFeaturizer(StftMode::kLegacy);
  const std::vector<float> x = TestSignal(8000);
  const std::vector<float> want = f.Compute(x)->data;
  std::vector<std::vector<float>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { got[i] = f.Compute(x)->data; });
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

// Golden fixture from tools/gen_feature_fixture.py.
class GoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::ReadFile(
        std::string(JASPER_SOURCE_DIR) + "/tests/fixtures/features_golden.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = new SafetensorsFile(*std::move(file));
  }
  static void TearDownTestSuite() {
    delete file_;
    file_ = nullptr;
  }
  static std::vector<float> Get(const std::string& name) {
    absl::StatusOr<std::vector<float>> v = file_->GetFloat(name);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<float>{};
  }
  static FeaturizerConfig CaseConfig(const std::string& c, StftMode mode) {
    FeaturizerConfig config;
    config.stft_mode = mode;
    if (c == "b") {  // see CASES in tools/gen_feature_fixture.py
      config.window_size_s = 0.025;
      config.features = 80;
      config.lowfreq_hz = 20.0;
      config.highfreq_hz = 7600.0;
    }
    return config;
  }
  static double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0.0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
    }
    return d;
  }
  static double MaxAbs(const std::vector<float>& a) {
    double m = 0.0;
    for (float v : a) m = std::max(m, std::abs(static_cast<double>(v)));
    return m;
  }
  static SafetensorsFile* file_;
};
SafetensorsFile* GoldenTest::file_ = nullptr;

TEST_F(GoldenTest, FilterbankEqualsLibrosa) {
  const std::vector<float> fb = Get("a.fb");
  EXPECT_LE(MaxAbsDiff(SlaneyMelFilterbank(16000, 512, 64, 0.0, 8000.0, true), fb), 1e-9);
}

TEST_F(GoldenTest, MatchesTorchBothModes) {
  for (const std::string c : {"a", "b"}) {
    const std::vector<float> audio = Get(c + ".audio");
    for (const auto& [mode, name] : {std::pair{StftMode::kLegacy, std::string("legacy")},
                                     std::pair{StftMode::kNemo25, std::string("nemo25")}}) {
      SCOPED_TRACE(c + "." + name);
      absl::StatusOr<Featurizer> f = Featurizer::Create(CaseConfig(c, mode));
      ASSERT_TRUE(f.ok()) << f.status();
      const int seq_len = static_cast<int>(Get(c + "." + name + ".seq_len")[0]);
      absl::StatusOr<Features> feats = f->Compute(audio);
      ASSERT_TRUE(feats.ok()) << feats.status();
      EXPECT_EQ(feats->valid_frames, seq_len);
      const std::vector<float> want = Get(c + "." + name + ".features");
      const std::vector<float> want32 = Get(c + "." + name + ".features_f32");
      ASSERT_EQ(want.size(), feats->data.size());
      const double scale = std::max(1.0, MaxAbs(want));
      const double err = MaxAbsDiff(feats->data, want);
      const double err32 = MaxAbsDiff(feats->data, want32);
      EXPECT_LE(err, 1e-5 * scale);    // same algorithm in double: only float rounding left
      EXPECT_LE(err32, 1e-4 * scale);  // NeMo's own float32 run
      std::printf("[ golden ] %s.%s: max|err| vs torch f64 %.3g, vs torch f32 %.3g (scale %.3g)\n",
                  c.c_str(), name.c_str(), err, err32, scale);

      absl::StatusOr<Features> raw = f->ComputeUnnormalized(audio);
      ASSERT_TRUE(raw.ok()) << raw.status();
      EXPECT_EQ(raw->valid_frames, seq_len);
      EXPECT_EQ(raw->padded_frames, seq_len);
      const std::vector<float> logmel = Get(c + "." + name + ".logmel");
      EXPECT_LE(MaxAbsDiff(raw->data, logmel), 1e-4 * std::max(1.0, MaxAbs(logmel)));
    }
  }
}

TEST_F(GoldenTest, CheckpointFilterbankGivesSameFeatures) {
  const std::vector<float> audio = Get("a.audio");
  absl::StatusOr<Featurizer> f =
      Featurizer::Create(CaseConfig("a", StftMode::kLegacy), Get("a.fb"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_LE(MaxAbsDiff(f->Compute(audio)->data, Get("a.legacy.features")), 1e-4);
}

}  // namespace
}  // namespace jasper
