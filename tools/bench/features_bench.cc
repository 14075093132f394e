// features_bench: CPU cost of the front end (engine/features/features.h), one thread, CPU-time
// clock. For the shipped default model's featurizer (16 kHz, 64 log-mel, n_fft 512, 10 ms hop),
// prints per input length: the median time of Featurizer::Compute, of the FFTs alone (RealFft of
// n_fft per frame, the part Compute spends most of its time in), and the real-time factor.
//
//   build/tools/bench/features_bench [--model_dir=models/quartznet_en_tts_small] [--samples=15]
//
// Not a test: a measuring tool (docs/PERFORMANCE.md, "Front end").
#include <time.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/features/features.h"
#include "engine/features/fft.h"
#include "engine/model/model.h"

ABSL_FLAG(std::string, model_dir, "models/quartznet_en_tts_small", "Model folder (featurizer).");
ABSL_FLAG(int, samples, 15, "Timed samples per row (the median is printed).");

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Median CPU seconds per call of fn(), each sample running `calls` calls.
template <typename Fn>
double MedianSeconds(int samples, int calls, Fn fn) {
  fn();  // warm-up
  std::vector<double> t;
  for (int s = 0; s < samples; ++s) {
    const double c0 = CpuSeconds();
    for (int i = 0; i < calls; ++i) fn();
    t.push_back((CpuSeconds() - c0) / calls);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<std::shared_ptr<const jasper::Model>> model =
      jasper::Model::Load(absl::GetFlag(FLAGS_model_dir));
  if (!model.ok()) {
    std::fprintf(stderr, "features_bench: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const jasper::Featurizer* featurizer = &(*model)->featurizer();
  const jasper::FeaturizerConfig& fc = featurizer->config();
  absl::StatusOr<jasper::RealFft> fft = jasper::RealFft::Create(fc.n_fft);
  if (!fft.ok()) return 1;
  const int samples = std::max(1, absl::GetFlag(FLAGS_samples));

  std::printf("front end of %s: %d Hz, n_fft %d, hop %d, %d features (1 thread, CPU time)\n",
              absl::GetFlag(FLAGS_model_dir).c_str(), fc.sample_rate, fc.n_fft, fc.HopLength(),
              fc.features);
  std::printf("%-10s %10s %10s %12s %10s\n", "audio", "Compute ms", "RTFx", "FFTs only ms",
              "FFT share");
  std::mt19937 rng(1);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  for (double seconds : {0.8, 3.2, 10.0}) {
    std::vector<float> audio(static_cast<size_t>(seconds * fc.sample_rate));
    for (float& x : audio) x = noise(rng);
    const int calls = seconds < 1.0 ? 20 : (seconds < 5.0 ? 5 : 2);
    const double compute = MedianSeconds(samples, calls, [&] {
      absl::StatusOr<jasper::Features> f = featurizer->Compute(audio);
      if (!f.ok()) std::abort();
    });
    const int frames = featurizer->ValidFrames(static_cast<int>(audio.size())) + 1;
    std::vector<double> in(fc.n_fft);
    for (size_t i = 0; i < in.size(); ++i) in[i] = audio[i];
    std::vector<std::complex<double>> out(fft->num_bins());
    const double ffts = MedianSeconds(samples, calls, [&] {
      for (int f = 0; f < frames; ++f) {
        in[f % in.size()] += 1e-9;  // a data dependency between calls
        fft->Transform(in, absl::MakeSpan(out));
      }
    });
    std::printf("%-10.1f %10.3f %10.0f %12.3f %9.0f%%\n", seconds, 1e3 * compute, seconds / compute,
                1e3 * ffts, 100.0 * ffts / compute);
  }

  // Streaming at the server's default geometry: 3.2 s windows (1.6 s left context, 0.8 s chunk,
  // 0.8 s right context) every 0.8 s, through ComputeStreaming with one stream's frame cache.
  const int64_t rate = fc.sample_rate;
  const int64_t window = rate * 32 / 10, step = rate * 8 / 10;
  std::vector<float> stream(static_cast<size_t>(rate * 60));
  for (float& x : stream) x = noise(rng);
  jasper::FrameCache cache;
  int64_t start = 0;
  const double per_window = MedianSeconds(samples, 20, [&] {
    if (start + window > static_cast<int64_t>(stream.size())) start = 0;
    absl::StatusOr<jasper::Features> f = featurizer->ComputeStreaming(
        absl::MakeConstSpan(stream).subspan(start, window), start, &cache);
    if (!f.ok()) std::abort();
    start += step;
  });
  std::printf(
      "streaming: 3.2 s windows every 0.8 s: %.3f ms per window (%.0fx real time), "
      "%.0f%% of frames reused\n",
      1e3 * per_window, 0.8 / per_window,
      100.0 * cache.reused_frames / ((samples + 1) * 20.0 * (window / fc.HopLength())));
  return 0;
}
