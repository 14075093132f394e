// GPU tests of the fused CUDA sub-block kernel, the device CTC head and the CUDA backend,
// against the CPU reference (kernels::SubBlockReference, kernels::LogSoftmaxArgmax) and the CPU
// backend. Fresh random inputs with odd sizes (T not a multiple of the 64-frame tile, lengths
// shorter than T, a zero length, batch 1 and batch 33); inputs past the lengths and every
// output buffer are NaN-poisoned before the run, so a masked read or an unwritten element
// fails. Tolerances: FP32 1e-4 of the output's largest magnitude; FP16/BF16 cosine >= 0.999.
//
// Every test skips (GTEST_SKIP) when no GPU is present, so the suite passes on CPU-only CI.
// JASPER_CUDA_TEST_QUICK=1 runs only the small cases (compute-sanitizer runs in gpu_check.sh).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/backend_factory.h"
#include "engine/runtime/cpu_backend.h"
#include "engine/runtime/cuda_backend.h"
#include "gtest/gtest.h"
#include "kernels/cuda/sub_block_cuda.h"
#include "kernels/cuda/weight_pack.h"
#include "kernels/sub_block.h"
#include "tests/model_test_util.h"

namespace jasper::kernels::cuda {

// Readable parameter values in test listings (ctest names).
inline void PrintTo(Precision p, std::ostream* os) {
  *os << (p == Precision::kFp32 ? "fp32" : p == Precision::kFp16 ? "fp16" : "bf16");
}

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool HasGpu() { return CudaDeviceCount() > 0; }

bool QuickMode() {
  const char* quick = std::getenv("JASPER_CUDA_TEST_QUICK");
  return quick != nullptr && std::strcmp(quick, "0") != 0 && quick[0] != '\0';
}

#define SKIP_WITHOUT_GPU()                                                                       \
  do {                                                                                           \
    if (!HasGpu()) GTEST_SKIP() << "no CUDA GPU (or driver) on this machine; CUDA test skipped"; \
  } while (0)

#define CUDA_OK(expr)                                                              \
  do {                                                                             \
    const cudaError_t error_ = (expr);                                             \
    ASSERT_EQ(error_, cudaSuccess) << #expr << ": " << cudaGetErrorString(error_); \
  } while (0)

const char* Name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "Fp32";
    case Precision::kFp16:
      return "Fp16";
    case Precision::kBf16:
      return "Bf16";
    case Precision::kInt8:
      return "Int8";
  }
  return "?";
}

// Owning device allocation for tests.
class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
    bytes_ = bytes;
  }
  ~DeviceMemory() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  bool ok() const { return bytes_ == 0 || ptr_ != nullptr; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Uploads FP32 host data converted to `precision`.
std::unique_ptr<DeviceMemory> UploadAs(Precision precision, const std::vector<float>& host) {
  std::vector<unsigned char> raw(host.size() * PrecisionBytes(precision));
  ConvertFromFloat(precision, host.data(), host.size(), raw.data());
  auto mem = std::make_unique<DeviceMemory>(raw.size());
  if (mem->ok() && !raw.empty()) {
    cudaMemcpy(mem->get(), raw.data(), raw.size(), cudaMemcpyHostToDevice);
  }
  return mem;
}

template <typename T>
std::unique_ptr<DeviceMemory> UploadRaw(const std::vector<T>& host) {
  auto mem = std::make_unique<DeviceMemory>(host.size() * sizeof(T));
  if (mem->ok() && !host.empty()) {
    cudaMemcpy(mem->get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  return mem;
}

struct Comparison {
  double max_abs_err = 0;
  double max_ref = 0;
  double cosine = 1;
  std::size_t nan_count = 0;
};

Comparison Compare(const std::vector<float>& got, const std::vector<float>& expected) {
  Comparison c;
  double dot = 0, gg = 0, ee = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) {
      ++c.nan_count;
      continue;
    }
    c.max_abs_err = std::max(c.max_abs_err, std::fabs(static_cast<double>(got[i]) - expected[i]));
    c.max_ref = std::max(c.max_ref, std::fabs(static_cast<double>(expected[i])));
    dot += static_cast<double>(got[i]) * expected[i];
    gg += static_cast<double>(got[i]) * got[i];
    ee += static_cast<double>(expected[i]) * expected[i];
  }
  c.cosine = (gg == 0 && ee == 0) ? 1.0 : dot / std::sqrt(std::max(gg * ee, 1e-300));
  return c;
}

void ExpectClose(const Comparison& c, Precision precision, const std::string& what) {
  EXPECT_EQ(c.nan_count, 0u) << what << ": unwritten (NaN-poisoned) or NaN elements";
  if (precision == Precision::kFp32) {
    EXPECT_LE(c.max_abs_err, 1e-4 * std::max(1.0, c.max_ref))
        << what << ": max |err| " << c.max_abs_err << " vs max |ref| " << c.max_ref;
  } else {
    EXPECT_GE(c.cosine, 0.999) << what << ": cosine " << c.cosine;
  }
}

// ---- Fused sub-block vs SubBlockReference -----------------------------------------------------

struct KernelCase {
  const char* name;
  int c_in, c_out, k, stride, dilation;
  bool separable;
  bool relu;
  std::vector<int> residual_channels;
  int batch, in_time;
  bool quick;  // part of the reduced (sanitizer) set
};

std::vector<KernelCase> KernelCases() {
  return {
      {"SepResidualB1", 37, 45, 9, 1, 1, true, true, {37}, 1, 70, true},
      {"SepQuartzNetB1Batch33", 256, 256, 33, 1, 1, true, true, {256}, 33, 131, false},
      {"SepStride2Prologue", 20, 48, 11, 2, 1, true, true, {}, 3, 157, true},
      {"SepDilated", 48, 72, 13, 1, 2, true, true, {}, 2, 99, true},
      {"SepK75", 64, 128, 75, 1, 1, true, true, {64}, 2, 200, false},
      {"DenseResiduals", 40, 72, 5, 1, 1, false, true, {40, 33}, 4, 97, true},
      {"DenseStride2", 16, 40, 5, 2, 1, false, true, {}, 2, 129, false},
      {"Dense1x1", 96, 160, 1, 1, 1, false, true, {}, 2, 66, true},
      {"DecoderBatch33", 160, 29, 1, 1, 1, false, false, {}, 33, 50, true},
  };
}

struct KernelParam {
  KernelCase kase;
  Precision precision;
};

void PrintTo(const KernelParam& param, std::ostream* os) {
  *os << param.kase.name << "/";
  cuda::PrintTo(param.precision, os);  // the enum is kernels::Precision: no ADL here
}

class CudaKernelsTest : public ::testing::TestWithParam<KernelParam> {};

TEST_P(CudaKernelsTest, FusedSubBlockMatchesReference) {
  SKIP_WITHOUT_GPU();
  const KernelCase& c = GetParam().kase;
  const Precision precision = GetParam().precision;
  if (QuickMode() && !c.quick) GTEST_SKIP() << "not in the quick set";

  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](std::size_t n, float scale) {
    std::vector<float> v(n);
    for (float& e : v) e = dist(rng) * scale;
    return v;
  };
  SubBlockDesc d;
  d.in_channels = c.c_in;
  d.out_channels = c.c_out;
  d.kernel_size = c.k;
  d.stride = c.stride;
  d.dilation = c.dilation;
  d.padding = c.stride > 1 ? c.k / 2 : c.dilation * (c.k - 1) / 2;
  d.separable = c.separable;
  d.activation = c.relu ? Activation::kRelu : Activation::kIdentity;
  const int out_time = ConvOutputLength(d, c.in_time);
  ASSERT_GT(out_time, 0);

  const int fan_in = c.separable ? c.c_in : c.c_in * c.k;
  std::vector<float> depthwise = random(static_cast<std::size_t>(c.k) * c.c_in, 0.5f);
  std::vector<float> weight =
      random(static_cast<std::size_t>(c.separable ? 1 : c.k) * c.c_in * c.c_out,
             2.0f / std::sqrt(static_cast<float>(fan_in)));
  std::vector<float> bias = random(c.c_out, 0.5f);
  std::vector<float> x = random(static_cast<std::size_t>(c.batch) * c.in_time * c.c_in, 1.0f);
  std::vector<int> in_lengths(c.batch), out_lengths(c.batch);
  for (int b = 0; b < c.batch; ++b) {
    // Item 0 full length, item 1 (if any) empty, the rest random and mostly shorter than T.
    in_lengths[b] = b == 0 ? c.in_time : (b == 1 ? 0 : 1 + static_cast<int>(rng() % c.in_time));
    out_lengths[b] = ConvOutputLength(d, in_lengths[b]);
    for (int t = in_lengths[b]; t < c.in_time; ++t) {
      std::fill_n(x.begin() + (static_cast<std::size_t>(b) * c.in_time + t) * c.c_in, c.c_in, kNaN);
    }
  }
  const int num_res = static_cast<int>(c.residual_channels.size());
  std::vector<std::vector<float>> res_x(num_res), res_w(num_res);
  std::vector<const float*> res_w_ptr;
  std::vector<ResidualInput> residuals;
  for (int p = 0; p < num_res; ++p) {
    const int ch = c.residual_channels[p];
    res_x[p] = random(static_cast<std::size_t>(c.batch) * out_time * ch, 1.0f);
    for (int b = 0; b < c.batch; ++b) {
      for (int t = out_lengths[b]; t < out_time; ++t) {
        std::fill_n(res_x[p].begin() + (static_cast<std::size_t>(b) * out_time + t) * ch, ch, kNaN);
      }
    }
    res_w[p] = random(static_cast<std::size_t>(ch) * c.c_out, 1.0f / std::sqrt(1.0f * ch));
    res_w_ptr.push_back(res_w[p].data());
    residuals.push_back(ResidualInput{res_x[p].data(), res_w[p].data(), ch});
  }

  SubBlockWeights weights{c.separable ? depthwise.data() : nullptr, weight.data(), bias.data()};
  BatchGeometry geometry{c.batch, c.in_time, out_time, in_lengths.data(), out_lengths.data()};
  const std::size_t y_count = static_cast<std::size_t>(c.batch) * out_time * c.c_out;
  std::vector<float> expected(y_count, kNaN);
  SubBlockReference(d, weights, x.data(), geometry, residuals.data(), num_res, expected.data());

  PackedSubBlock packed;
  std::string error;
  ASSERT_TRUE(PackSubBlock(d, weights, res_w_ptr.data(), c.residual_channels.data(), num_res,
                           precision, &packed, &error))
      << error;
  auto d_weight = UploadRaw(packed.weight);
  auto d_depthwise = UploadRaw(packed.depthwise);
  auto d_bias = UploadRaw(packed.bias);
  auto d_x = UploadAs(precision, x);
  auto d_in_len = UploadRaw(in_lengths);
  auto d_out_len = UploadRaw(out_lengths);
  std::vector<std::unique_ptr<DeviceMemory>> d_res;
  std::vector<const void*> d_res_ptr;
  for (int p = 0; p < num_res; ++p) {
    d_res.push_back(UploadAs(precision, res_x[p]));
    d_res_ptr.push_back(d_res.back()->get());
  }
  const std::size_t y_bytes = y_count * PrecisionBytes(precision);
  DeviceMemory d_y(y_bytes);
  ASSERT_TRUE(d_y.ok() && d_weight->ok() && d_x->ok());
  CUDA_OK(cudaMemset(d_y.get(), 0xff, y_bytes));  // all-ones bits = NaN in FP32/FP16/BF16

  DeviceSubBlock view;
  view.desc = d;
  view.n_padded = packed.n_padded;
  view.k_steps = packed.k_steps;
  view.num_residuals = num_res;
  for (int p = 0; p < num_res; ++p) view.residual_channels[p] = c.residual_channels[p];
  view.weight = d_weight->get();
  view.depthwise = c.separable ? d_depthwise->as<const float>() : nullptr;
  view.bias = d_bias->as<const float>();
  DeviceGeometry dg;
  dg.batch = c.batch;
  dg.in_time = c.in_time;
  dg.out_time = out_time;
  dg.in_lengths = d_in_len->as<const int>();
  dg.out_lengths = d_out_len->as<const int>();
  const Result result =
      LaunchFusedSubBlock(view, precision, d_x->get(), dg, d_res_ptr.data(), d_y.get(), nullptr);
  ASSERT_TRUE(result.ok()) << result.message;
  CUDA_OK(cudaDeviceSynchronize());

  std::vector<unsigned char> raw(y_bytes);
  CUDA_OK(cudaMemcpy(raw.data(), d_y.get(), y_bytes, cudaMemcpyDeviceToHost));
  std::vector<float> got(y_count);
  ConvertToFloat(precision, raw.data(), y_count, got.data());

  // Masked output frames are exactly zero.
  for (int b = 0; b < c.batch; ++b) {
    for (int t = out_lengths[b]; t < out_time; ++t) {
      for (int o = 0; o < c.c_out; ++o) {
        const float v = got[(static_cast<std::size_t>(b) * out_time + t) * c.c_out + o];
        ASSERT_EQ(v, 0.0f) << "item " << b << " frame " << t << " channel " << o
                           << " past the length";
      }
    }
  }
  ExpectClose(Compare(got, expected), precision, c.name);
}

std::vector<KernelParam> AllKernelParams() {
  std::vector<KernelParam> params;
  for (const KernelCase& c : KernelCases()) {
    for (Precision p : {Precision::kFp32, Precision::kFp16, Precision::kBf16}) {
      params.push_back({c, p});
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaKernelsTest, ::testing::ValuesIn(AllKernelParams()),
                         [](const ::testing::TestParamInfo<KernelParam>& info) {
                           return std::string(info.param.kase.name) + Name(info.param.precision);
                         });

TEST(CudaKernelsValidation, RejectsMismatchedPackingWithoutLaunching) {
  SKIP_WITHOUT_GPU();
  DeviceSubBlock view;
  view.desc.in_channels = 8;
  view.desc.out_channels = 8;
  view.desc.kernel_size = 3;
  view.desc.padding = 1;
  view.n_padded = 64;
  view.k_steps = 99;  // wrong
  DeviceMemory dummy(1 << 16);
  view.weight = dummy.get();
  view.bias = dummy.as<const float>();
  DeviceGeometry g;
  g.batch = 1;
  g.in_time = 4;
  g.out_time = 4;
  g.in_lengths = dummy.as<const int>();
  g.out_lengths = dummy.as<const int>();
  const Result r =
      LaunchFusedSubBlock(view, Precision::kFp32, dummy.get(), g, nullptr, dummy.get(), nullptr);
  EXPECT_LT(r.code, 0);
}

// ---- Device head vs CPU LogSoftmaxArgmax ------------------------------------------------------

class CudaHeadTest : public ::testing::TestWithParam<Precision> {};

TEST_P(CudaHeadTest, LogSoftmaxArgmaxMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const Precision precision = GetParam();
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-6.0f, 6.0f);
  for (int vocab : {29, 1030}) {
    const int batch = 33;
    const int time = 37;
    std::vector<float> logits(static_cast<std::size_t>(batch) * time * vocab);
    for (float& v : logits) v = dist(rng);
    // Both sides see the same (rounded) logits.
    std::vector<unsigned char> raw(logits.size() * PrecisionBytes(precision));
    ConvertFromFloat(precision, logits.data(), logits.size(), raw.data());
    ConvertToFloat(precision, raw.data(), logits.size(), logits.data());
    std::vector<int> lengths(batch);
    for (int b = 0; b < batch; ++b) lengths[b] = b == 0 ? time : static_cast<int>(rng() % time);

    std::vector<float> cpu_log_probs(logits.size());
    std::vector<int> cpu_ids(static_cast<std::size_t>(batch) * time);
    std::vector<float> cpu_best(cpu_ids.size());
    LogSoftmaxArgmax(logits.data(), batch, time, vocab, lengths.data(), cpu_log_probs.data(),
                     cpu_ids.data(), cpu_best.data());

    auto d_logits = UploadAs(precision, logits);
    auto d_lengths = UploadRaw(lengths);
    DeviceMemory d_log_probs(logits.size() * sizeof(float));
    DeviceMemory d_ids(cpu_ids.size() * sizeof(int));
    DeviceMemory d_best(cpu_ids.size() * sizeof(float));
    CUDA_OK(cudaMemset(d_log_probs.get(), 0xff, logits.size() * sizeof(float)));
    CUDA_OK(cudaMemset(d_ids.get(), 0x7f, cpu_ids.size() * sizeof(int)));
    CUDA_OK(cudaMemset(d_best.get(), 0xff, cpu_ids.size() * sizeof(float)));
    const Result r = LaunchLogSoftmaxArgmax(d_logits->get(), precision, batch, time, vocab,
                                            d_lengths->as<const int>(), d_log_probs.as<float>(),
                                            d_ids.as<int>(), d_best.as<float>(), nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> log_probs(logits.size()), best(cpu_ids.size());
    std::vector<int> ids(cpu_ids.size());
    CUDA_OK(cudaMemcpy(log_probs.data(), d_log_probs.get(), log_probs.size() * sizeof(float),
                       cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(ids.data(), d_ids.get(), ids.size() * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(
        cudaMemcpy(best.data(), d_best.get(), best.size() * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT_EQ(ids, cpu_ids) << "vocab " << vocab;
    for (std::size_t i = 0; i < best.size(); ++i) {
      ASSERT_NEAR(best[i], cpu_best[i], 1e-4) << "frame " << i;
    }
    for (std::size_t i = 0; i < log_probs.size(); ++i) {
      ASSERT_NEAR(log_probs[i], cpu_log_probs[i], 1e-4) << "element " << i;
    }
  }
}

TEST_P(CudaHeadTest, CastsRoundTripLikeTheHost) {
  SKIP_WITHOUT_GPU();
  const Precision precision = GetParam();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  std::vector<float> host(100003);
  for (float& v : host) v = dist(rng);
  auto d_src = UploadRaw(host);
  DeviceMemory d_mid(host.size() * PrecisionBytes(precision));
  DeviceMemory d_back(host.size() * sizeof(float));
  ASSERT_TRUE(
      LaunchCastFromFloat(d_src->as<const float>(), precision, host.size(), d_mid.get(), nullptr)
          .ok());
  ASSERT_TRUE(
      LaunchCastToFloat(d_mid.get(), precision, host.size(), d_back.as<float>(), nullptr).ok());
  std::vector<float> back(host.size());
  CUDA_OK(
      cudaMemcpy(back.data(), d_back.get(), back.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<unsigned char> raw(host.size() * PrecisionBytes(precision));
  std::vector<float> expected(host.size());
  ConvertFromFloat(precision, host.data(), host.size(), raw.data());
  ConvertToFloat(precision, raw.data(), host.size(), expected.data());
  for (std::size_t i = 0; i < host.size(); ++i) ASSERT_EQ(back[i], expected[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaHeadTest,
                         ::testing::Values(Precision::kFp32, Precision::kFp16, Precision::kBf16),
                         [](const ::testing::TestParamInfo<Precision>& info) {
                           return std::string(Name(info.param));
                         });

// ---- Whole model: CUDA backend vs CPU backend -------------------------------------------------

// Random NeMo-named checkpoint (tests/model_test_util.h) with conv weights rescaled to unit
// fan-in gain, so activations stay O(1) through the depth (FP16 range) on every precision.
std::shared_ptr<const Model> MakeModel(const ModelConfig& config, unsigned seed) {
  test_util::Tensors tensors = test_util::MakeTensors(config, seed);
  for (auto& [name, tensor] : tensors) {
    const std::string suffix = "conv.weight";
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const auto& shape = tensor.first;  // [C_out, C_in or 1, K]
    const float fan_in = static_cast<float>(shape[1] * shape[2]);
    for (float& w : tensor.second) w *= 1.5f / std::sqrt(fan_in);
  }
  auto model = Model::FromParts(config, SerializeSafetensors(tensors));
  if (!model.ok()) {
    ADD_FAILURE() << "synthetic model: " << model.status();
    return nullptr;
  }
  return *model;
}

ModelConfig QuartzNetLike() {
  using test_util::Block;
  return test_util::ConfigWith(
      {Block(48, 1, 11, 2, 1, false, false, true), Block(48, 3, 7, 1, 1, true, false, true),
       Block(64, 2, 9, 1, 1, true, false, true), Block(64, 1, 13, 1, 2, false, false, true),
       Block(96, 1, 1, 1, 1, false, false, false)},
      /*features=*/16);
}

ModelConfig JasperDrLike() {
  using test_util::Block;
  return test_util::ConfigWith(
      {Block(40, 1, 5, 2, 1, false, false, false), Block(40, 2, 5, 1, 1, true, true, false),
       Block(56, 2, 7, 1, 1, true, true, false), Block(56, 1, 3, 1, 1, true, true, false),
       Block(72, 1, 1, 1, 1, false, false, false)},
      /*features=*/16);
}

struct ModelParam {
  const char* name;
  bool jasper;
  Precision precision;
};

void PrintTo(const ModelParam& param, std::ostream* os) { *os << param.name; }

class CudaBackendTest : public ::testing::TestWithParam<ModelParam> {};

TEST_P(CudaBackendTest, MatchesCpuBackend) {
  SKIP_WITHOUT_GPU();
  const ModelParam& param = GetParam();
  std::shared_ptr<const Model> model =
      MakeModel(param.jasper ? JasperDrLike() : QuartzNetLike(), 11);
  ASSERT_NE(model, nullptr);

  BackendOptions options;
  options.keep_log_probs = true;
  options.keep_block_outputs = true;
  options.max_batch = 2;  // smaller than the batch below: exercises the one-time growth
  options.max_feature_frames = 64;
  auto cpu = CreateCpuBackend(model, options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  options.gpu_precision = param.precision;
  auto gpu = CreateCudaBackend(model, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ((*gpu)->name(), "cuda:0");

  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (int round = 0; round < 2; ++round) {
    const int batch = round == 0 ? 5 : 1;
    const int time = round == 0 ? 203 : 77;
    const int features = model->config().feat_in;
    std::vector<float> data(static_cast<std::size_t>(batch) * time * features);
    for (float& v : data) v = dist(rng);
    std::vector<int> lengths(batch);
    for (int b = 0; b < batch; ++b) lengths[b] = b == 0 ? time : 1 + static_cast<int>(rng() % time);
    for (int b = 0; b < batch; ++b) {
      for (int t = lengths[b]; t < time; ++t) {
        std::fill_n(data.begin() + (static_cast<std::size_t>(b) * time + t) * features, features,
                    kNaN);
      }
    }
    FeatureBatch input{data.data(), batch, time, features, lengths.data()};
    BackendOutput expected, got;
    ASSERT_TRUE((*cpu)->Run(input, &expected).ok());
    const absl::Status status = (*gpu)->Run(input, &got);
    ASSERT_TRUE(status.ok()) << status;

    ASSERT_EQ(got.batch, expected.batch);
    ASSERT_EQ(got.time, expected.time);
    ASSERT_EQ(got.vocab, expected.vocab);
    ASSERT_EQ(got.lengths, expected.lengths);
    ASSERT_EQ(got.block_outputs.size(), expected.block_outputs.size());
    for (std::size_t b = 0; b < got.block_outputs.size(); ++b) {
      ASSERT_EQ(got.block_time[b], expected.block_time[b]);
      ExpectClose(Compare(got.block_outputs[b], expected.block_outputs[b]), param.precision,
                  "block " + std::to_string(b));
    }
    ExpectClose(Compare(got.log_probs, expected.log_probs), param.precision, "log-probs");
    // Greedy ids: identical for FP32 except near-ties; FP16/BF16 agree on almost every frame.
    std::size_t same = 0, valid = 0;
    for (int b = 0; b < batch; ++b) {
      for (int t = 0; t < got.time; ++t) {
        const std::size_t i = static_cast<std::size_t>(b) * got.time + t;
        if (t >= got.lengths[b]) {
          EXPECT_EQ(got.ids[i], -1);
          EXPECT_EQ(got.best_log_probs[i], 0.0f);
          continue;
        }
        ++valid;
        same += got.ids[i] == expected.ids[i];
      }
    }
    const double agreement = valid == 0 ? 1.0 : static_cast<double>(same) / valid;
    EXPECT_GE(agreement, param.precision == Precision::kFp32 ? 0.99 : 0.95);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaBackendTest,
                         ::testing::Values(ModelParam{"QuartzNetLikeFp32", false, Precision::kFp32},
                                           ModelParam{"QuartzNetLikeFp16", false, Precision::kFp16},
                                           ModelParam{"QuartzNetLikeBf16", false, Precision::kBf16},
                                           ModelParam{"JasperDrLikeFp32", true, Precision::kFp32},
                                           ModelParam{"JasperDrLikeFp16", true, Precision::kFp16}),
                         [](const ::testing::TestParamInfo<ModelParam>& info) {
                           return std::string(info.param.name);
                         });

// CUDA graphs (BackendOptions::cuda_graphs): a replayed forward must give bit for bit what
// direct launches give, for every shape in any order (first run direct, second captured, then
// replays with new data and new lengths; graphs dropped by a workspace growth and captured
// again), in FP32 and FP16.
TEST(CudaBackendGraphs, ReplayEqualsDirectLaunches) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<const Model> model = MakeModel(QuartzNetLike(), 5);
  ASSERT_NE(model, nullptr);
  for (Precision precision : {Precision::kFp32, Precision::kFp16}) {
    BackendOptions options;
    options.keep_log_probs = true;
    options.max_batch = 2;  // the batch of 5 below grows the workspaces (graphs dropped)
    options.max_feature_frames = 128;
    options.cuda_graphs = true;
    options.gpu_precision = precision;
    auto graphs = CreateCudaBackend(model, options);
    ASSERT_TRUE(graphs.ok()) << graphs.status();
    options.cuda_graphs = false;
    auto direct = CreateCudaBackend(model, options);
    ASSERT_TRUE(direct.ok()) << direct.status();

    std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    const int features = model->config().feat_in;
    // First runs launch directly, second runs capture, later runs replay.
    const std::vector<std::pair<int, int>> shapes = {{2, 96},  {2, 96}, {1, 37},  {2, 96},
                                                     {5, 160}, {2, 96}, {1, 37},  {5, 160},
                                                     {1, 37},  {2, 96}, {5, 160}, {5, 160}};
    for (std::size_t round = 0; round < shapes.size(); ++round) {
      SCOPED_TRACE(::testing::Message()
                   << "round " << round << " precision " << static_cast<int>(precision));
      const auto [batch, time] = shapes[round];
      std::vector<float> data(static_cast<std::size_t>(batch) * time * features);
      for (float& v : data) v = dist(rng);
      std::vector<int> lengths(batch);
      for (int b = 0; b < batch; ++b) lengths[b] = 1 + static_cast<int>(rng() % time);
      FeatureBatch input{data.data(), batch, time, features, lengths.data()};
      BackendOutput want, got;
      ASSERT_TRUE((*direct)->Run(input, &want).ok());
      const absl::Status status = (*graphs)->Run(input, &got);
      ASSERT_TRUE(status.ok()) << status;
      EXPECT_EQ(got.lengths, want.lengths);
      EXPECT_EQ(got.ids, want.ids);
      ASSERT_EQ(got.best_log_probs.size(), want.best_log_probs.size());
      EXPECT_EQ(std::memcmp(got.best_log_probs.data(), want.best_log_probs.data(),
                            sizeof(float) * want.best_log_probs.size()),
                0);
      ASSERT_EQ(got.log_probs.size(), want.log_probs.size());
      EXPECT_EQ(std::memcmp(got.log_probs.data(), want.log_probs.data(),
                            sizeof(float) * want.log_probs.size()),
                0);
    }
  }
}

TEST(CudaBackendSelection, AutoAndCudaFollowTheGpu) {
  std::shared_ptr<const Model> model = MakeModel(QuartzNetLike(), 3);
  ASSERT_NE(model, nullptr);
  ASSERT_NE(MakeModel(JasperDrLike(), 3), nullptr);  // both synthetic models load everywhere
  BackendOptions options;
  options.device = Device::kAuto;
  auto backend = CreateBackend(model, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  options.device = Device::kCuda;
  auto cuda = CreateBackend(model, options);
  if (!HasGpu()) {
    // No GPU: auto falls back to the CPU, an explicit cuda request is a clear error.
    EXPECT_EQ((*backend)->name(), "cpu");
    EXPECT_FALSE(CudaAvailable());
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    GTEST_SKIP() << "no CUDA GPU: checked the CPU fallback only";
  }
  EXPECT_TRUE(CudaAvailable());
  EXPECT_EQ((*backend)->name(), "cuda:0");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
}

}  // namespace
}  // namespace jasper::kernels::cuda
