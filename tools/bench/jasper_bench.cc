// jasper_bench: CPU speed of the fused sub-block kernel and of the whole QuartzNet 15x5 model.
//
// Sections (FP32 unless --precision=bf16|int8; random weights, channels-last, full-length
// utterances; INT8 models are calibrated first on random features of the benchmark's kind, and
// single sub-blocks take fixed activation scales, as speed does not depend on their values):
//   peak      one-thread FMA peak of this CPU (AVX2+FMA, 12 independent accumulators), the
//             yardstick for "% of FP32 peak".
//   subblock  one separable sub-block (depthwise K taps + pointwise CxC + bias + ReLU) at batch 1:
//             the packed fused kernel (kernels::FusedSubBlockCpuPacked, what the backend runs;
//             with --threads N > 1 split into N parts on a CpuThreadPool, as the backend does)
//             vs the OpenBLAS fused kernel (FusedSubBlockCpu) and the plain reference, plus
//             stage timings: the packed kernel with C_out = 1 minus its 1x1 C->1 path (staging +
//             depthwise), the bare OpenBLAS pointwise SGEMM, and the packed dense 1x1 path.
//   model     QuartzNet 15x5 (encoder + decoder + log-softmax/argmax; random weights from
//             tests/random_model.h) through the CPU backend: a 10 s utterance and 3.2 s
//             streaming windows at batch 1 and 8; --threads sets BackendOptions::cpu_threads
//             (intra-op threads: each sub-block's stacked frames split among a pool of that
//             many threads); RTFx = audio seconds per compute second.
//   profile   every encoder sub-block of the same model timed on its own (1 thread, 10 s
//             utterance), summed per block group, with the depthwise-stage proxy alongside.
//
// Timing: each case runs warm-up calls, then is calibrated so one sample lasts at least a few
// milliseconds (several calls per sample for small shapes), and reports the median and the
// minimum per-call time over the samples. The machine may be shared: the load average is
// recorded at start and end.
//
// Usage: jasper_bench [--quick] [--json=FILE] [--sections=peak,subblock,model,profile]
//                     [--threads=1,2] [--case_name=NAME] [--precision=fp32|bf16|int8]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cpu_backend.h"
#include "engine/runtime/cpu_thread_pool.h"
#include "engine/runtime/int8_calibrator.h"
#include "kernels/blas_sub_block.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"
#include "nlohmann/json.hpp"
#include "tests/random_model.h"

extern "C" void openblas_set_num_threads(int num_threads);

ABSL_FLAG(bool, quick, false, "Fewer samples and shorter samples (about 3x faster, noisier).");
ABSL_FLAG(std::string, json, "", "Also write the results as JSON to this file.");
ABSL_FLAG(std::string, sections, "peak,subblock,model,profile",
          "Comma-separated sections to run: peak, subblock, model, profile.");
ABSL_FLAG(std::string, threads, "1,2",
          "Comma-separated thread counts to measure: intra-op threads of the packed kernel and "
          "the CPU backend (BackendOptions::cpu_threads), and OpenBLAS threads of the 'blas' "
          "comparison.");
ABSL_FLAG(std::string, precision, "fp32",
          "GEMM operands of the packed kernel and the CPU backend: fp32, bf16 (AMX or AVX-512 "
          "BF16) or int8 (AMX-INT8 or AVX-512 VNNI); refused without the hardware. The ISA level "
          "follows kernels/cpu_features.h (JASPER_CPU_ISA=avx2 etc. caps it).");
ABSL_FLAG(std::string, case_name, "",
          "Run only this case: a sub-block name (sep_c256_k33_t100) or a model case with its "
          "batch (offline_10s_b1, stream_3.2s_b8). Used by tools/bench_peers.py to interleave.");

namespace jasper {
namespace {

// --precision, for every packed kernel and backend the benchmark builds.
kernels::Precision g_precision = kernels::Precision::kFp32;

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// Timing.

struct Timing {
  double median_s = 0.0;
  double min_s = 0.0;
  // Process CPU time per call (all threads): on a shared machine, the time this process was
  // actually running. Equals wall time for an uncontended single-threaded call; with more
  // threads it also counts spinning workers.
  double cpu_median_s = 0.0;
  double cpu_min_s = 0.0;
  int calls_per_sample = 1;
  int samples = 0;
};

struct TimingPlan {
  int warmup = 2;
  int samples = 11;
  double min_sample_s = 0.01;
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Per-call time of `fn`: warm-up, calibration, then `plan.samples` samples.
Timing Measure(const std::function<void()>& fn, const TimingPlan& plan) {
  double one = 1e30;
  for (int i = 0; i < std::max(1, plan.warmup); ++i) {
    const auto t0 = Clock::now();
    fn();
    one = std::min(one, Seconds(t0, Clock::now()));
  }
  Timing timing;
  timing.calls_per_sample =
      std::max(1, static_cast<int>(std::ceil(plan.min_sample_s / std::max(one, 1e-9))));
  std::vector<double> per_call, cpu_per_call;
  for (int s = 0; s < plan.samples; ++s) {
    const double c0 = ProcessCpuSeconds();
    const auto t0 = Clock::now();
    for (int i = 0; i < timing.calls_per_sample; ++i) fn();
    per_call.push_back(Seconds(t0, Clock::now()) / timing.calls_per_sample);
    cpu_per_call.push_back((ProcessCpuSeconds() - c0) / timing.calls_per_sample);
  }
  timing.samples = plan.samples;
  timing.min_s = *std::min_element(per_call.begin(), per_call.end());
  timing.median_s = Median(per_call);
  timing.cpu_median_s = Median(cpu_per_call);
  timing.cpu_min_s = *std::min_element(cpu_per_call.begin(), cpu_per_call.end());
  return timing;
}

// ---------------------------------------------------------------------------------------------
// Machine description.

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// ---------------------------------------------------------------------------------------------
// FMA peak, one thread: 12 independent 8-wide FMA chains (covers latency x throughput on Zen 2-4
// and recent Intel cores with AVX2). Falls back to 0 without AVX2+FMA.

typedef float Vec8 __attribute__((vector_size(32)));

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"), noinline)) float FmaLoop(long iterations, float seed) {
  // Named accumulators: GCC keeps an array of vectors on the stack across the loop.
  Vec8 a0 = Vec8{} + seed, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3, a4 = a0 + 4, a5 = a0 + 5;
  Vec8 a6 = a0 + 6, a7 = a0 + 7, a8 = a0 + 8, a9 = a0 + 9, a10 = a0 + 10, a11 = a0 + 11;
  const Vec8 m = Vec8{} + 0.999999f;
  const Vec8 b = Vec8{} + 1e-7f;
  for (long it = 0; it < iterations; ++it) {
    a0 = __builtin_ia32_vfmaddps256(a0, m, b);
    a1 = __builtin_ia32_vfmaddps256(a1, m, b);
    a2 = __builtin_ia32_vfmaddps256(a2, m, b);
    a3 = __builtin_ia32_vfmaddps256(a3, m, b);
    a4 = __builtin_ia32_vfmaddps256(a4, m, b);
    a5 = __builtin_ia32_vfmaddps256(a5, m, b);
    a6 = __builtin_ia32_vfmaddps256(a6, m, b);
    a7 = __builtin_ia32_vfmaddps256(a7, m, b);
    a8 = __builtin_ia32_vfmaddps256(a8, m, b);
    a9 = __builtin_ia32_vfmaddps256(a9, m, b);
    a10 = __builtin_ia32_vfmaddps256(a10, m, b);
    a11 = __builtin_ia32_vfmaddps256(a11, m, b);
  }
  const Vec8 sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
  float total = 0.0f;
  for (int j = 0; j < 8; ++j) total += sum[j];
  return total;
}
#endif

double MeasurePeakGflops(const TimingPlan& plan) {
#if defined(__GNUC__) && defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0.0;
  constexpr long kIterations = 20'000'000;
  volatile float sink = 0.0f;
  const Timing t = Measure([&] { sink = sink + FmaLoop(kIterations, 1.0f); }, plan);
  const double flops = 2.0 * 8 * 12 * static_cast<double>(kIterations);
  // Peak: the fastest sample on either clock (CPU time is immune to preemption on a shared
  // machine; the wall clock guards against CPU-time accounting granularity).
  return flops / std::max(std::min(t.min_s, t.cpu_min_s), 1e-9) * 1e-9;
#else
  return 0.0;
#endif
}

// ---------------------------------------------------------------------------------------------
// Random data.

std::vector<float> Uniform(std::mt19937& rng, std::size_t n, float bound) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Sub-block section.

struct SubBlockCase {
  int channels;
  int kernel;
  int frames;
};

double SeparableFlops(const SubBlockCase& c) {
  return 2.0 * c.frames *
         (static_cast<double>(c.channels) * c.kernel +
          static_cast<double>(c.channels) * c.channels);
}

std::string CaseName(const SubBlockCase& c) {
  return absl::StrFormat("sep_c%d_k%d_t%d", c.channels, c.kernel, c.frames);
}

// Runs one sub-block (full-length utterances) through the packed fused kernel (ours, the
// backend's path), the OpenBLAS fused kernel or the reference. Owns workspaces and output.
class FusedRunner {
 public:
  FusedRunner(const kernels::SubBlockDesc& desc, const kernels::SubBlockWeights& weights,
              const float* x, int batch, int in_time,
              std::vector<kernels::ResidualInput> residuals = {})
      : desc_(desc), weights_(weights), x_(x), residuals_(std::move(residuals)) {
    out_time_ = kernels::ConvOutputLength(desc, in_time);
    in_lengths_.assign(batch, in_time);
    out_lengths_.assign(batch, out_time_);
    geometry_ = {batch, in_time, out_time_, in_lengths_.data(), out_lengths_.data()};
    workspace_.assign(kernels::FusedSubBlockWorkspaceFloats(desc) + 64, 0.0f);
    y_.assign(static_cast<std::size_t>(batch) * out_time_ * desc.out_channels, 0.0f);
    const std::vector<float> int8_scales(2 + residuals_.size(), 0.05f);  // + depthwise input
    packed_ =
        kernels::PackSubBlock(desc, weights, residuals_.data(), static_cast<int>(residuals_.size()),
                              g_precision, int8_scales.data());
    packed_workspace_.assign(kernels::PackedSubBlockWorkspaceFloats(packed_), 0.0f);
    for (const auto& r : residuals_) residual_x_.push_back(r.x);
  }
  // Fused() runs on `threads` intra-op threads, as the CPU backend does with cpu_threads.
  void SetThreads(int threads) {
    pool_ = std::make_unique<CpuThreadPool>(threads);
    part_workspaces_.assign(threads, kernels::AlignedFloats(packed_workspace_.size(), 0.0f));
  }
  void Fused() {
    if (pool_ == nullptr || pool_->num_threads() == 1) {
      kernels::FusedSubBlockCpuPacked(packed_, x_, geometry_, residual_x_.data(),
                                      packed_workspace_.data(), y_.data());
      return;
    }
    const int parts = pool_->num_threads();
    auto part_step = [&](int part) {
      kernels::FusedSubBlockCpuPackedPart(packed_, x_, geometry_, residual_x_.data(), parts, part,
                                          part_workspaces_[part].data(), y_.data());
    };
    pool_->Run(part_step);
  }
  void Blas() {
    kernels::FusedSubBlockCpu(desc_, weights_, x_, geometry_, residuals_.data(),
                              static_cast<int>(residuals_.size()), workspace_.data(), y_.data());
  }
  void Reference() {
    kernels::SubBlockReference(desc_, weights_, x_, geometry_, residuals_.data(),
                               static_cast<int>(residuals_.size()), y_.data());
  }
  const std::vector<float>& y() const { return y_; }
  int out_time() const { return out_time_; }

 private:
  kernels::SubBlockDesc desc_;
  kernels::SubBlockWeights weights_;
  const float* x_;
  std::vector<kernels::ResidualInput> residuals_;
  std::vector<const float*> residual_x_;
  int out_time_ = 0;
  std::vector<int> in_lengths_, out_lengths_;
  kernels::BatchGeometry geometry_{};
  std::unique_ptr<CpuThreadPool> pool_;
  std::vector<kernels::AlignedFloats> part_workspaces_;
  std::vector<float> workspace_;
  kernels::PackedSubBlock packed_;
  std::vector<float> packed_workspace_;
  std::vector<float> y_;
};

kernels::SubBlockDesc SeparableDesc(int c_in, int c_out, int kernel, int stride, int dilation) {
  kernels::SubBlockDesc d;
  d.in_channels = c_in;
  d.out_channels = c_out;
  d.kernel_size = kernel;
  d.stride = stride;
  d.dilation = dilation;
  d.padding = dilation * (kernel - 1) / 2;
  d.separable = true;
  d.activation = kernels::Activation::kRelu;
  return d;
}

Json RunSubBlockCase(const SubBlockCase& c, int threads, const TimingPlan& plan,
                     bool with_reference, double peak_gflops) {
  openblas_set_num_threads(threads);
  std::mt19937 rng(1234 + c.channels + c.kernel);
  const int ch = c.channels;
  const std::vector<float> x = Uniform(rng, static_cast<std::size_t>(c.frames) * ch, 1.0f);
  const std::vector<float> dw =
      Uniform(rng, static_cast<std::size_t>(c.kernel) * ch, std::sqrt(3.0f / c.kernel));
  const std::vector<float> pw =
      Uniform(rng, static_cast<std::size_t>(ch) * ch, std::sqrt(3.0f / ch));
  const std::vector<float> bias = Uniform(rng, ch, 0.1f);
  const std::vector<float> pw_one = Uniform(rng, ch, std::sqrt(3.0f / ch));

  // Full fused sub-block and its reference.
  const kernels::SubBlockDesc desc = SeparableDesc(ch, ch, c.kernel, 1, 1);
  FusedRunner full(desc, {dw.data(), pw.data(), bias.data()}, x.data(), 1, c.frames);
  full.SetThreads(threads);
  const Timing fused = Measure([&] { full.Fused(); }, plan);
  // The same sub-block through the OpenBLAS fused kernel (FusedSubBlockCpu, unpacked weights).
  const Timing blas = Measure([&] { full.Blas(); }, plan);
  Timing reference;
  double max_abs_diff = -1.0;
  if (with_reference) {
    FusedRunner ref(desc, {dw.data(), pw.data(), bias.data()}, x.data(), 1, c.frames);
    TimingPlan ref_plan = plan;
    ref_plan.samples = std::max(3, plan.samples / 2);
    reference = Measure([&] { ref.Reference(); }, ref_plan);
    full.Fused();
    max_abs_diff = 0.0;
    for (std::size_t i = 0; i < full.y().size(); ++i) {
      max_abs_diff = std::max(max_abs_diff, std::fabs(static_cast<double>(full.y()[i]) -
                                                      static_cast<double>(ref.y()[i])));
    }
  }

  // Depthwise stage proxy: the same kernel with one output channel, minus the same kernel's
  // dense 1x1 path with one output channel (its N=1 GEMM + epilogue).
  const kernels::SubBlockDesc dw_desc = SeparableDesc(ch, 1, c.kernel, 1, 1);
  FusedRunner dw_only(dw_desc, {dw.data(), pw_one.data(), bias.data()}, x.data(), 1, c.frames);
  const Timing dw_stage = Measure([&] { dw_only.Fused(); }, plan);
  kernels::SubBlockDesc n1_desc;
  n1_desc.in_channels = ch;
  n1_desc.out_channels = 1;
  n1_desc.kernel_size = 1;
  FusedRunner n1_only(n1_desc, {nullptr, pw_one.data(), bias.data()}, x.data(), 1, c.frames);
  const Timing gemm_n1 = Measure([&] { n1_only.Fused(); }, plan);
  std::vector<float> gemm_out(static_cast<std::size_t>(c.frames) * ch);
  // Pointwise stage: bare SGEMM [T, C] x [C, C], and the fused dense 1x1 path (+bias+ReLU).
  const Timing gemm = Measure(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c.frames, ch, ch, 1.0f, x.data(), ch,
                    pw.data(), ch, 0.0f, gemm_out.data(), ch);
      },
      plan);
  kernels::SubBlockDesc pw_desc;
  pw_desc.in_channels = ch;
  pw_desc.out_channels = ch;
  pw_desc.kernel_size = 1;
  pw_desc.activation = kernels::Activation::kRelu;
  FusedRunner pw_only(pw_desc, {nullptr, pw.data(), bias.data()}, x.data(), 1, c.frames);
  const Timing pw_fused = Measure([&] { pw_only.Fused(); }, plan);

  const double flops = SeparableFlops(c);
  const double dw_flops = 2.0 * c.frames * ch * c.kernel;
  const double pw_flops = 2.0 * c.frames * static_cast<double>(ch) * ch;
  // Stage times on the primary clock (see time_ms below).
  auto primary = [threads](const Timing& t) { return threads == 1 ? t.cpu_median_s : t.median_s; };
  const double dw_s = std::max(1e-9, primary(dw_stage) - primary(gemm_n1));
  Json j;
  j["name"] = CaseName(c);
  j["channels"] = ch;
  j["kernel"] = c.kernel;
  j["frames"] = c.frames;
  j["batch"] = 1;
  j["threads"] = threads;
  j["flops"] = flops;
  // Primary time: CPU time on one thread (robust to other processes on a shared machine), wall
  // median otherwise. The peer script (tools/bench_peers.py) uses the same rule.
  const double primary_s = threads == 1 ? fused.cpu_median_s : fused.median_s;
  j["clock"] = threads == 1 ? "cpu" : "wall";
  j["time_ms"] = primary_s * 1e3;
  j["gflops"] = flops / primary_s * 1e-9;
  j["fused_ms"] = fused.median_s * 1e3;
  j["fused_ms_min"] = fused.min_s * 1e3;
  j["fused_gflops"] = flops / fused.median_s * 1e-9;
  j["fused_gflops_best"] = flops / fused.min_s * 1e-9;
  j["fused_cpu_ms"] = fused.cpu_median_s * 1e3;
  j["fused_gflops_cpu"] = flops / fused.cpu_median_s * 1e-9;
  j["blas_fused_ms"] = primary(blas) * 1e3;
  j["blas_fused_gflops"] = flops / primary(blas) * 1e-9;
  if (with_reference) {
    j["reference_ms"] = reference.median_s * 1e3;
    j["reference_cpu_ms"] = reference.cpu_median_s * 1e3;
    j["reference_gflops"] = flops / reference.cpu_median_s * 1e-9;
    j["speedup_vs_reference"] = reference.cpu_median_s / fused.cpu_median_s;
    j["max_abs_diff_vs_reference"] = max_abs_diff;
  }
  j["dw_stage_ms"] = dw_s * 1e3;
  j["dw_stage_gflops"] = dw_flops / dw_s * 1e-9;
  j["dw_stage_gflops_best"] = dw_flops / std::max(1e-9, dw_stage.min_s - gemm_n1.min_s) * 1e-9;
  j["pw_sgemm_ms"] = primary(gemm) * 1e3;
  j["pw_sgemm_gflops"] = pw_flops / primary(gemm) * 1e-9;
  j["pw_fused_1x1_ms"] = primary(pw_fused) * 1e3;
  j["pw_fused_1x1_gflops"] = pw_flops / primary(pw_fused) * 1e-9;
  if (peak_gflops > 0) {
    j["dw_stage_pct_of_1t_peak"] = 100.0 * dw_flops / dw_s * 1e-9 / peak_gflops;
    j["fused_pct_of_peak"] = 100.0 * flops / primary_s * 1e-9 / (peak_gflops * threads);
  }
  return j;
}

// ---------------------------------------------------------------------------------------------
// QuartzNet 15x5 with random weights.

// Random variance-preserving weights (tests/random_model.h, shared with the tests).
absl::StatusOr<std::shared_ptr<const Model>> BuildQuartzNet() {
  const ModelConfig config = test_util::QuartzNet15x5Config();
  return test_util::MakeRandomModel(config, 20261202, test_util::WeightInit::kUnitVariance);
}

struct ModelCase {
  std::string name;
  int batch;
  int frames;  // feature frames (10 ms each)
};

// Encoder + decoder FLOPs of a forward, counting every weight once per output frame (the
// padded frames are all valid here).
double ModelFlops(const Model& model, int frames) {
  double flops = 0.0;
  int t = frames;
  auto sub_flops = [](const FoldedSubBlock& s, int out_t) {
    const auto& d = s.desc;
    double macs = d.separable ? static_cast<double>(d.in_channels) * d.kernel_size +
                                    static_cast<double>(d.in_channels) * d.out_channels
                              : static_cast<double>(d.in_channels) * d.kernel_size * d.out_channels;
    for (int c : s.residual_channels) macs += static_cast<double>(c) * d.out_channels;
    return 2.0 * macs * out_t;
  };
  for (const FoldedBlock& block : model.blocks()) {
    for (const FoldedSubBlock& sub : block.sub_blocks) {
      t = kernels::ConvOutputLength(sub.desc, t);
      flops += sub_flops(sub, t);
    }
  }
  flops += sub_flops(model.decoder(), t);
  return flops;
}

// The INT8 calibration of `model` over four 10 s utterances of the uniform random features the
// model cases run (once per model).
std::shared_ptr<const Int8Calibration> BenchCalibration(const std::shared_ptr<const Model>& model) {
  static std::map<const Model*, std::shared_ptr<const Int8Calibration>> cache;
  std::shared_ptr<const Int8Calibration>& cached = cache[model.get()];
  if (cached != nullptr) return cached;
  Int8Calibrator calibrator(model);
  std::mt19937 rng(98);
  const int features = model->config().feat_in;
  for (int u = 0; u < 4; ++u) {
    const absl::Status added = calibrator.AddUtterance(
        Uniform(rng, static_cast<std::size_t>(1000) * features, 1.0f), 1000);
    if (!added.ok()) {
      std::fprintf(stderr, "calibration: %s\n", added.ToString().c_str());
      std::exit(1);
    }
  }
  absl::StatusOr<Int8Calibration> calibration = calibrator.Calibrate(40.0);
  if (!calibration.ok()) {
    std::fprintf(stderr, "calibration: %s\n", calibration.status().ToString().c_str());
    std::exit(1);
  }
  cached = std::make_shared<const Int8Calibration>(*std::move(calibration));
  return cached;
}

Json RunModelCase(const std::shared_ptr<const Model>& model, const ModelCase& c, int threads,
                  const TimingPlan& plan) {
  BackendOptions options;
  options.device = Device::kCpu;
  options.cpu_threads = threads;
  options.cpu_precision = g_precision;
  if (g_precision == kernels::Precision::kInt8) options.int8_calibration = BenchCalibration(model);
  options.max_batch = std::max(8, c.batch);
  options.max_feature_frames = std::max(1600, c.frames);
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(model, options);
  if (!backend.ok()) {
    std::fprintf(stderr, "CreateCpuBackend: %s\n", backend.status().ToString().c_str());
    std::exit(1);
  }
  std::mt19937 rng(99);
  const int features = model->config().feat_in;
  const std::vector<float> data =
      Uniform(rng, static_cast<std::size_t>(c.batch) * c.frames * features, 1.0f);
  const std::vector<int> lengths(c.batch, c.frames);
  FeatureBatch input{data.data(), c.batch, c.frames, features, lengths.data()};
  BackendOutput output;
  const Timing t = Measure(
      [&] {
        absl::Status s = (*backend)->Run(input, &output);
        if (!s.ok()) {
          std::fprintf(stderr, "Run: %s\n", s.ToString().c_str());
          std::exit(1);
        }
      },
      plan);
  bool finite = true;
  for (float v : output.best_log_probs) finite = finite && std::isfinite(v);
  const double audio_s = 0.01 * c.frames * c.batch;
  const double flops = ModelFlops(*model, c.frames) * c.batch;
  Json j;
  j["name"] = c.name;
  j["batch"] = c.batch;
  j["frames"] = c.frames;
  j["threads"] = threads;
  j["audio_s"] = audio_s;
  j["flops"] = flops;
  const double primary_s = threads == 1 ? t.cpu_median_s : t.median_s;
  j["clock"] = threads == 1 ? "cpu" : "wall";
  j["time_ms"] = primary_s * 1e3;
  j["rtfx_primary"] = audio_s / primary_s;
  j["ms"] = t.median_s * 1e3;
  j["ms_min"] = t.min_s * 1e3;
  j["cpu_ms"] = t.cpu_median_s * 1e3;
  j["rtfx"] = audio_s / t.median_s;
  j["rtfx_best"] = audio_s / t.min_s;
  j["gflops"] = flops / t.median_s * 1e-9;
  j["samples"] = t.samples;
  j["outputs_finite"] = finite;
  return j;
}

// ---------------------------------------------------------------------------------------------
// Per-layer profile: each encoder sub-block of the model run alone on the activations' shapes.

std::string GroupName(int block, int num_blocks) {
  if (block == 0) return "C1";
  if (block == num_blocks - 2) return "C2";
  if (block == num_blocks - 1) return "C3";
  return "B" + std::to_string((block - 1) / 3 + 1);
}

Json RunProfile(const Model& model, int frames, const TimingPlan& plan) {
  openblas_set_num_threads(1);
  std::mt19937 rng(7);
  const int num_blocks = static_cast<int>(model.blocks().size());
  struct Group {
    double ms = 0, dw_ms = 0, flops = 0, dw_flops = 0;
    int sub_blocks = 0;
  };
  std::vector<std::pair<std::string, Group>> groups;
  int t = frames;
  for (int b = 0; b < num_blocks; ++b) {
    const std::string name = GroupName(b, num_blocks);
    if (groups.empty() || groups.back().first != name) groups.push_back({name, Group{}});
    Group& g = groups.back().second;
    for (const FoldedSubBlock& sub : model.blocks()[b].sub_blocks) {
      const auto& d = sub.desc;
      const std::vector<float> x = Uniform(rng, static_cast<std::size_t>(t) * d.in_channels, 1.0f);
      kernels::SubBlockWeights w{sub.depthwise.empty() ? nullptr : sub.depthwise.data(),
                                 sub.weight.data(), sub.bias.data()};
      const int out_t = kernels::ConvOutputLength(d, t);
      std::vector<std::vector<float>> res_x;
      std::vector<kernels::ResidualInput> residuals;
      for (std::size_t p = 0; p < sub.residual_weights.size(); ++p) {
        res_x.push_back(
            Uniform(rng, static_cast<std::size_t>(out_t) * sub.residual_channels[p], 1.0f));
      }
      for (std::size_t p = 0; p < sub.residual_weights.size(); ++p) {
        residuals.push_back(
            {res_x[p].data(), sub.residual_weights[p].data(), sub.residual_channels[p]});
      }
      FusedRunner runner(d, w, x.data(), 1, t, residuals);
      const Timing full = Measure([&] { runner.Fused(); }, plan);
      double macs = d.separable
                        ? static_cast<double>(d.in_channels) * d.kernel_size +
                              static_cast<double>(d.in_channels) * d.out_channels
                        : static_cast<double>(d.in_channels) * d.kernel_size * d.out_channels;
      for (int c : sub.residual_channels) macs += static_cast<double>(c) * d.out_channels;
      g.ms += full.cpu_median_s * 1e3;
      g.flops += 2.0 * macs * out_t;
      ++g.sub_blocks;
      if (d.separable) {
        kernels::SubBlockDesc dw_desc = d;
        dw_desc.out_channels = 1;
        const std::vector<float> one(d.in_channels, 0.01f);
        FusedRunner dw_runner(dw_desc, {sub.depthwise.data(), one.data(), nullptr}, x.data(), 1, t);
        const Timing dw = Measure([&] { dw_runner.Fused(); }, plan);
        g.dw_ms += dw.cpu_median_s * 1e3;
        g.dw_flops += 2.0 * d.in_channels * d.kernel_size * out_t;
      }
      t = out_t;
    }
  }
  Json out = Json::array();
  for (const auto& [name, g] : groups) {
    Json j;
    j["group"] = name;
    j["sub_blocks"] = g.sub_blocks;
    j["ms"] = g.ms;
    j["gflops"] = g.flops / (g.ms * 1e-3) * 1e-9;
    j["dw_stage_ms"] = g.dw_ms;
    j["dw_stage_gflops"] = g.dw_ms > 0 ? g.dw_flops / (g.dw_ms * 1e-3) * 1e-9 : 0.0;
    j["dw_flops"] = g.dw_flops;
    j["flops"] = g.flops;
    out.push_back(j);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Output.

void PrintSubBlocks(const Json& rows) {
  std::printf(
      "\n(a) Separable sub-block, batch 1, packed fused kernel (the backend's path). time = CPU "
      "time per call on 1 thread,\n    wall median on 2 (the other is in the JSON); GF/s = "
      "2T(CK+C^2)/time. ref = plain reference (1 thread, CPU time).\n    Same clock: blas = "
      "FusedSubBlockCpu (OpenBLAS SGEMM, unpacked weights); dw = packed kernel with C_out=1 minus "
      "its\n    1x1 C->1 (staging + depthwise); sgemm = bare OpenBLAS [T,C]x[C,C]; 1x1 = packed "
      "dense 1x1 (GEMM + bias/ReLU).\n");
  std::printf("%-18s %3s %5s %8s %7s %6s %8s %6s %6s %8s | %7s %6s %6s %8s %6s %7s %6s\n", "shape",
              "thr", "clock", "time ms", "GF/s", "%peak", "ref ms", "GF/s", "x ref", "blas ms",
              "dw ms", "GF/s", "%peak", "sgemm ms", "GF/s", "1x1 ms", "GF/s");
  for (const Json& r : rows) {
    const bool ref = r.contains("reference_ms");
    std::printf(
        "%-18s %3d %5s %8.3f %7.1f %5.0f%% %8s %6s %6s %8.3f | %7.3f %6.1f %5.0f%% %8.3f %6.1f "
        "%7.3f %6.1f\n",
        r["name"].get<std::string>().c_str(), r["threads"].get<int>(),
        r["clock"].get<std::string>().c_str(), r["time_ms"].get<double>(),
        r["gflops"].get<double>(), r.value("fused_pct_of_peak", 0.0),
        ref ? absl::StrFormat("%.3f", r["reference_cpu_ms"].get<double>()).c_str() : "-",
        ref ? absl::StrFormat("%.2f", r["reference_gflops"].get<double>()).c_str() : "-",
        ref ? absl::StrFormat("%.1f", r["speedup_vs_reference"].get<double>()).c_str() : "-",
        r["blas_fused_ms"].get<double>(), r["dw_stage_ms"].get<double>(),
        r["dw_stage_gflops"].get<double>(), r.value("dw_stage_pct_of_1t_peak", 0.0),
        r["pw_sgemm_ms"].get<double>(), r["pw_sgemm_gflops"].get<double>(),
        r["pw_fused_1x1_ms"].get<double>(), r["pw_fused_1x1_gflops"].get<double>());
  }
}

void PrintModel(const Json& rows) {
  std::printf(
      "\n(b) QuartzNet 15x5, encoder + decoder + log-softmax/argmax. time = CPU time on 1 thread, "
      "wall median on 2;\n    RTFx = audio s / time. Wall median/min and CPU time (all threads) "
      "for reference.\n");
  std::printf("%-12s %5s %6s %3s %5s %9s %8s %7s | %9s %9s %9s\n", "case", "batch", "frames", "thr",
              "clock", "time ms", "RTFx", "GF/s", "wall med", "wall min", "cpu ms");
  for (const Json& r : rows) {
    std::printf("%-12s %5d %6d %3d %5s %9.1f %8.1f %7.1f | %9.1f %9.1f %9.1f\n",
                r["name"].get<std::string>().c_str(), r["batch"].get<int>(), r["frames"].get<int>(),
                r["threads"].get<int>(), r["clock"].get<std::string>().c_str(),
                r["time_ms"].get<double>(), r["rtfx_primary"].get<double>(),
                r["flops"].get<double>() / r["time_ms"].get<double>() * 1e-6, r["ms"].get<double>(),
                r["ms_min"].get<double>(), r["cpu_ms"].get<double>());
  }
}

void PrintProfile(const Json& rows, int frames) {
  double total = 0, dw_total = 0;
  for (const Json& r : rows) {
    total += r["ms"].get<double>();
    dw_total += r["dw_stage_ms"].get<double>();
  }
  std::printf(
      "\n(c) Per-group profile, 1 thread, %d feature frames (each sub-block timed alone, CPU "
      "time)\n",
      frames);
  std::printf("%-5s %5s %9s %7s %7s %10s %8s %8s\n", "group", "subs", "ms", "share", "GF/s",
              "dw-stage ms", "dw share", "dw GF/s");
  for (const Json& r : rows) {
    const double ms = r["ms"].get<double>();
    const double dw = r["dw_stage_ms"].get<double>();
    std::printf("%-5s %5d %9.2f %6.1f%% %7.1f %10.2f %7.1f%% %8.1f\n",
                r["group"].get<std::string>().c_str(), r["sub_blocks"].get<int>(), ms,
                100.0 * ms / total, r["gflops"].get<double>(), dw, ms > 0 ? 100.0 * dw / ms : 0.0,
                r["dw_stage_gflops"].get<double>());
  }
  std::printf("total %5s %9.2f %7s %7s %10.2f %7.1f%%\n", "", total, "", "", dw_total,
              100.0 * dw_total / total);
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "CPU benchmark of the fused sub-block kernel and the whole QuartzNet 15x5 model.\n"
      "  jasper_bench [--quick] [--json=FILE] [--sections=peak,subblock,model,profile]");
  absl::ParseCommandLine(argc, argv);
  const bool quick = absl::GetFlag(FLAGS_quick);
  std::vector<std::string> sections = absl::StrSplit(absl::GetFlag(FLAGS_sections), ',');
  auto want = [&](const std::string& s) {
    return std::find(sections.begin(), sections.end(), s) != sections.end();
  };
  const std::string only = absl::GetFlag(FLAGS_case_name);
  std::vector<int> thread_counts;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_threads), ',')) {
    int n = 1;
    if (!absl::SimpleAtoi(s, &n) || n < 1) {
      std::fprintf(stderr, "--threads: bad thread count '%s'\n", std::string(s).c_str());
      return 2;
    }
    thread_counts.push_back(n);
  }

  const std::string precision = absl::GetFlag(FLAGS_precision);
  if (precision == "bf16") {
    if (!kernels::HasBf16Gemm()) {
      std::fprintf(stderr, "--precision=bf16 needs AMX or AVX-512 BF16 (%s)\n",
                   kernels::DescribeCpuFeatures().c_str());
      return 2;
    }
    g_precision = kernels::Precision::kBf16;
  } else if (precision == "int8") {
    if (!kernels::HasInt8Gemm()) {
      std::fprintf(stderr, "--precision=int8 needs AMX-INT8 or AVX-512 VNNI (%s)\n",
                   kernels::DescribeCpuFeatures().c_str());
      return 2;
    }
    g_precision = kernels::Precision::kInt8;
  } else if (precision != "fp32") {
    std::fprintf(stderr, "--precision: '%s' is not fp32, bf16 or int8\n", precision.c_str());
    return 2;
  }

  TimingPlan small_plan{quick ? 2 : 3, quick ? 5 : 15, quick ? 0.005 : 0.02};
  TimingPlan model_plan{quick ? 1 : 2, quick ? 3 : 7, 0.0};
  TimingPlan profile_plan{1, quick ? 3 : 5, quick ? 0.003 : 0.01};

  Json out;
  out["machine"]["cpu"] = CpuModelName();
  out["machine"]["hardware_threads"] = std::thread::hardware_concurrency();
  out["machine"]["loadavg_start"] = LoadAverage();
  out["machine"]["cpu_features"] = kernels::DescribeCpuFeatures();
  out["quick"] = quick;
  out["precision"] = precision;
  out["isa"] = kernels::CpuIsaName(kernels::ActiveCpuIsa());
  std::printf("jasper_bench: %s, %u hardware threads, load average %s%s\n", CpuModelName().c_str(),
              std::thread::hardware_concurrency(), LoadAverage().c_str(), quick ? " (quick)" : "");
  std::printf("CPU: %s; precision %s\n", kernels::DescribeCpuFeatures().c_str(), precision.c_str());

  double peak = 0.0;
  if (want("peak") || want("subblock")) {
    peak = MeasurePeakGflops(TimingPlan{1, quick ? 5 : 11, 0.0});
    out["peak_gflops_1t"] = peak;
    std::printf("FP32 FMA peak, 1 thread (AVX2, best of samples): %.1f GFLOP/s\n", peak);
  }

  if (want("subblock")) {
    const SubBlockCase cases[] = {{256, 33, 100}, {256, 33, 25},  {512, 75, 100},
                                  {512, 75, 25},  {256, 33, 500}, {512, 75, 500}};
    Json rows = Json::array();
    for (const SubBlockCase& c : cases) {
      if (!only.empty() && only != CaseName(c)) continue;
      for (int threads : thread_counts) {
        rows.push_back(RunSubBlockCase(c, threads, small_plan, threads == 1, peak));
      }
    }
    out["subblock"] = rows;
    PrintSubBlocks(rows);
  }

  std::shared_ptr<const Model> model;
  if (want("model") || want("profile")) {
    absl::StatusOr<std::shared_ptr<const Model>> built = BuildQuartzNet();
    if (!built.ok()) {
      std::fprintf(stderr, "building QuartzNet 15x5: %s\n", built.status().ToString().c_str());
      return 1;
    }
    model = *built;
  }

  if (want("model")) {
    const ModelCase cases[] = {
        {"offline_10s", 1, 1000}, {"stream_3.2s", 1, 320}, {"stream_3.2s", 8, 320}};
    Json rows = Json::array();
    for (const ModelCase& c : cases) {
      if (!only.empty() && only != absl::StrFormat("%s_b%d", c.name, c.batch)) continue;
      for (int threads : thread_counts) rows.push_back(RunModelCase(model, c, threads, model_plan));
    }
    out["model"] = rows;
    out["model_gflop_per_audio_s"] = ModelFlops(*model, 1000) / 10.0 * 1e-9;
    PrintModel(rows);
  }

  if (want("profile")) {
    constexpr int kProfileFrames = 1000;
    Json rows = RunProfile(*model, kProfileFrames, profile_plan);
    out["profile"] = rows;
    out["profile_frames"] = kProfileFrames;
    PrintProfile(rows, kProfileFrames);
  }

  out["machine"]["loadavg_end"] = LoadAverage();
  std::printf("\nload average at end: %s\n", LoadAverage().c_str());
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace jasper

int main(int argc, char** argv) { return jasper::Main(argc, argv); }
