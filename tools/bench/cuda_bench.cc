// cuda_bench: GPU benchmark of the fused CUDA sub-block (issue 7), side by side with cuDNN 9 on
// the same shapes in the same process, and of the whole QuartzNet 15x5 through the CUDA backend.
//
//   cuda_bench [--precision=fp16] [--sections=subblock,model] [--json=FILE] [--quick]
//              [--cudnn_lib=libcudnn.so.9]
//
// Sub-block rows (each at B*T = 16384 frames and at batch 1 with a 2 s window = 100 encoder
// frames): separable C=256/K=33, C=512/K=75 (depthwise + pointwise + bias + ReLU; one row also
// with the block's 1x1 residual branch), dense C=512/K=11 and K=29 (conv + bias + ReLU).
// Columns:
//   ours        kernels::cuda::LaunchFusedSubBlock: ONE launch per sub-block
//   cudnn_fused the best cuDNN composition: cudnnConvolutionBiasActivationForward (conv + bias +
//               add + ReLU in one call) for the pointwise/dense conv, after a grouped
//               (depthwise) cudnnConvolutionForward for separable rows; the residual 1x1 conv is
//               a separate convolution whose output is the fused call's `z`
//   cudnn_ops   the op sequence as NeMo/PyTorch runs it: conv(s), bias add (BN at inference),
//               residual add, ReLU, each a separate cuDNN call
// Timing: CUDA events around samples of `reps` back-to-back calls (reps sized so a sample takes
// >= ~2 ms), median over samples, after warm-up; input buffers rotate so that the inputs of
// consecutive calls are not in L2 (each row's rotation set is >= 2x the L2 size).
// FLOPs: separable 2*B*T*(C*K + C*C) (+ 2*B*T*C*C for the residual), dense 2*B*T*C*C*K.
// Bytes: the minimum traffic: x, y, weights (and the residual input) once each. Roofline time
// = max(FLOPs / peak, bytes / bandwidth) with --peak_tflops (per precision) and --peak_tbps.
//
// cuDNN is loaded at run time (dlopen), so the program runs, and the cuDNN columns say why they
// are empty, where no cuDNN is installed (the GPU machine has it only inside PyTorch's wheels:
// tools/gpu_check.sh points LD_LIBRARY_PATH there).
//
// Model rows: QuartzNet 15x5 (random weights, tests/random_model.h) through CreateCudaBackend:
// Backend::Run on host features (the copies in and out included), batch 64 x 10 s and batch 1
// x 2 s; real-time factor = audio seconds / wall seconds.
//
// Not a test: a measuring tool (docs/PERFORMANCE.md). The PyTorch eager columns come from
// tools/bench_cuda_torch.py, which reads this program's --json output.
#include <cuda_runtime.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cuda_backend.h"
#include "kernels/cuda/sub_block_cuda.h"
#include "kernels/cuda/weight_pack.h"
#include "nlohmann/json.hpp"
#include "tests/random_model.h"

ABSL_FLAG(std::string, precision, "fp16", "fp32, fp16 or bf16.");
ABSL_FLAG(std::string, sections, "subblock,model", "Comma-separated: subblock, model.");
ABSL_FLAG(std::string, json, "", "Also write the results here (read by bench_cuda_torch.py).");
ABSL_FLAG(bool, quick, false, "Fewer samples (about 3x faster, noisier).");
ABSL_FLAG(std::string, cudnn_lib, "libcudnn.so.9", "cuDNN library to dlopen.");
ABSL_FLAG(double, peak_tflops, 0,
          "Peak TFLOP/s of the precision for the roofline (0: H200 "
          "dense: fp16/bf16 989, fp32 67).");
ABSL_FLAG(double, peak_tbps, 4.8, "Memory bandwidth, TB/s, for the roofline (H200: 4.8).");

namespace {

using jasper::kernels::SubBlockDesc;
using jasper::kernels::SubBlockWeights;
namespace kc = jasper::kernels::cuda;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "cuda_bench: %s\n", what.c_str());
  std::exit(1);
}

void CudaOk(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device buffer (owning).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    CudaOk(cudaMalloc(&ptr_, std::max<size_t>(bytes, 16)), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Random values in [-scale, scale] converted to `precision`, uploaded.
std::unique_ptr<DeviceBuffer> Upload(kc::Precision precision, size_t count, float scale,
                                     std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> host(count);
  for (float& v : host) v = dist(*rng);
  std::vector<unsigned char> raw(count * kc::PrecisionBytes(precision));
  kc::ConvertFromFloat(precision, host.data(), count, raw.data());
  auto buffer = std::make_unique<DeviceBuffer>(raw.size());
  CudaOk(cudaMemcpy(buffer->get(), raw.data(), raw.size(), cudaMemcpyHostToDevice), "upload");
  return buffer;
}

std::unique_ptr<DeviceBuffer> UploadRaw(const void* data, size_t bytes) {
  auto buffer = std::make_unique<DeviceBuffer>(bytes);
  CudaOk(cudaMemcpy(buffer->get(), data, bytes, cudaMemcpyHostToDevice), "upload");
  return buffer;
}

// Median milliseconds per call of fn(i), i = the call's index (for input rotation).
template <typename Fn>
double MedianMs(cudaStream_t stream, int samples, Fn fn) {
  cudaEvent_t start, stop;
  CudaOk(cudaEventCreate(&start), "cudaEventCreate");
  CudaOk(cudaEventCreate(&stop), "cudaEventCreate");
  int call = 0;
  for (int i = 0; i < 5; ++i) fn(call++);  // warm-up
  // Size a sample to >= ~2 ms.
  CudaOk(cudaEventRecord(start, stream), "cudaEventRecord");
  fn(call++);
  CudaOk(cudaEventRecord(stop, stream), "cudaEventRecord");
  CudaOk(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float one = 0;
  CudaOk(cudaEventElapsedTime(&one, start, stop), "cudaEventElapsedTime");
  const int reps = std::clamp(static_cast<int>(2.0 / std::max(one, 1e-3f)), 1, 1000);
  std::vector<double> per_call;
  for (int s = 0; s < samples; ++s) {
    CudaOk(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int r = 0; r < reps; ++r) fn(call++);
    CudaOk(cudaEventRecord(stop, stream), "cudaEventRecord");
    CudaOk(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    CudaOk(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    per_call.push_back(ms / reps);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(per_call.begin(), per_call.begin() + per_call.size() / 2, per_call.end());
  return per_call[per_call.size() / 2];
}

// ---------------------------------------------------------------------------------------------
// cuDNN, loaded at run time. Only the legacy (v7-style) convolution API is used; cuDNN 9 still
// ships it and runs it through its graph engines.

struct Cudnn {
  void* lib = nullptr;
  std::string error;  // why it is unavailable
#define JASPER_CUDNN_FN(name) decltype(&::name) name = nullptr
  JASPER_CUDNN_FN(cudnnGetVersion);
  JASPER_CUDNN_FN(cudnnGetErrorString);
  JASPER_CUDNN_FN(cudnnCreate);
  JASPER_CUDNN_FN(cudnnSetStream);
  JASPER_CUDNN_FN(cudnnCreateTensorDescriptor);
  JASPER_CUDNN_FN(cudnnSetTensor4dDescriptor);
  JASPER_CUDNN_FN(cudnnCreateFilterDescriptor);
  JASPER_CUDNN_FN(cudnnSetFilter4dDescriptor);
  JASPER_CUDNN_FN(cudnnCreateConvolutionDescriptor);
  JASPER_CUDNN_FN(cudnnSetConvolution2dDescriptor);
  JASPER_CUDNN_FN(cudnnSetConvolutionGroupCount);
  JASPER_CUDNN_FN(cudnnSetConvolutionMathType);
  JASPER_CUDNN_FN(cudnnFindConvolutionForwardAlgorithm);
  JASPER_CUDNN_FN(cudnnGetConvolutionForwardWorkspaceSize);
  JASPER_CUDNN_FN(cudnnConvolutionForward);
  JASPER_CUDNN_FN(cudnnConvolutionBiasActivationForward);
  JASPER_CUDNN_FN(cudnnCreateActivationDescriptor);
  JASPER_CUDNN_FN(cudnnSetActivationDescriptor);
  JASPER_CUDNN_FN(cudnnActivationForward);
  JASPER_CUDNN_FN(cudnnAddTensor);
#undef JASPER_CUDNN_FN

  bool Load(const std::string& path) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      error = std::string("dlopen ") + path + ": " + (e ? e : "?");
      return false;
    }
    bool ok = true;
    auto get = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      if (*fn == nullptr) {
        error = std::string("missing symbol ") + name;
        ok = false;
      }
    };
#define JASPER_CUDNN_GET(name) get(&name, #name)
    JASPER_CUDNN_GET(cudnnGetVersion);
    JASPER_CUDNN_GET(cudnnGetErrorString);
    JASPER_CUDNN_GET(cudnnCreate);
    JASPER_CUDNN_GET(cudnnSetStream);
    JASPER_CUDNN_GET(cudnnCreateTensorDescriptor);
    JASPER_CUDNN_GET(cudnnSetTensor4dDescriptor);
    JASPER_CUDNN_GET(cudnnCreateFilterDescriptor);
    JASPER_CUDNN_GET(cudnnSetFilter4dDescriptor);
    JASPER_CUDNN_GET(cudnnCreateConvolutionDescriptor);
    JASPER_CUDNN_GET(cudnnSetConvolution2dDescriptor);
    JASPER_CUDNN_GET(cudnnSetConvolutionGroupCount);
    JASPER_CUDNN_GET(cudnnSetConvolutionMathType);
    JASPER_CUDNN_GET(cudnnFindConvolutionForwardAlgorithm);
    JASPER_CUDNN_GET(cudnnGetConvolutionForwardWorkspaceSize);
    JASPER_CUDNN_GET(cudnnConvolutionForward);
    JASPER_CUDNN_GET(cudnnConvolutionBiasActivationForward);
    JASPER_CUDNN_GET(cudnnCreateActivationDescriptor);
    JASPER_CUDNN_GET(cudnnSetActivationDescriptor);
    JASPER_CUDNN_GET(cudnnActivationForward);
    JASPER_CUDNN_GET(cudnnAddTensor);
#undef JASPER_CUDNN_GET
    return ok;
  }
};

// A failed cuDNN call: the message, thrown out of a row so that the row's cuDNN columns are
// reported as errors and the benchmark goes on.
struct CudnnError {
  std::string message;
};

void Check(const Cudnn& dnn, cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw CudnnError{std::string(what) + ": " + dnn.cudnnGetErrorString(status)};
  }
}

cudnnDataType_t DnnType(kc::Precision p) {
  switch (p) {
    case kc::Precision::kFp16:
      return CUDNN_DATA_HALF;
    case kc::Precision::kBf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

// One convolution of a 1-D signal as a 2-D NHWC one with H = 1: x [B, T, Cin] -> y [B, T, Cout].
struct DnnConv {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace_bytes = 0;
};

DnnConv MakeConv(const Cudnn& dnn, cudnnHandle_t handle, kc::Precision p, int batch, int time,
                 int c_in, int c_out, int kernel, int groups) {
  DnnConv c;
  const cudnnDataType_t t = DnnType(p);
  Check(dnn, dnn.cudnnCreateTensorDescriptor(&c.x), "create x");
  Check(dnn, dnn.cudnnSetTensor4dDescriptor(c.x, CUDNN_TENSOR_NHWC, t, batch, c_in, 1, time),
        "set x");
  Check(dnn, dnn.cudnnCreateTensorDescriptor(&c.y), "create y");
  Check(dnn, dnn.cudnnSetTensor4dDescriptor(c.y, CUDNN_TENSOR_NHWC, t, batch, c_out, 1, time),
        "set y");
  Check(dnn, dnn.cudnnCreateTensorDescriptor(&c.bias), "create bias");
  Check(dnn, dnn.cudnnSetTensor4dDescriptor(c.bias, CUDNN_TENSOR_NHWC, t, 1, c_out, 1, 1),
        "set bias");
  Check(dnn, dnn.cudnnCreateFilterDescriptor(&c.w), "create w");
  Check(dnn,
        dnn.cudnnSetFilter4dDescriptor(c.w, t, CUDNN_TENSOR_NHWC, c_out, c_in / groups, 1, kernel),
        "set w");
  Check(dnn, dnn.cudnnCreateConvolutionDescriptor(&c.conv), "create conv");
  Check(dnn,
        dnn.cudnnSetConvolution2dDescriptor(c.conv, 0, kernel / 2, 1, 1, 1, 1,
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "set conv");
  Check(dnn, dnn.cudnnSetConvolutionGroupCount(c.conv, groups), "group count");
  // FP32 on CUDA-core FMA (no TF32), as our FP32 kernel; FP16/BF16 on tensor cores.
  Check(dnn,
        dnn.cudnnSetConvolutionMathType(
            c.conv, p == kc::Precision::kFp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
        "math type");
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int returned = 0;
  Check(dnn,
        dnn.cudnnFindConvolutionForwardAlgorithm(handle, c.x, c.w, c.conv, c.y, 8, &returned, perf),
        "find algorithm");
  int best = -1;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      best = i;
      break;  // sorted fastest first
    }
  }
  if (best < 0) throw CudnnError{"no convolution algorithm"};
  c.algo = perf[best].algo;
  Check(dnn,
        dnn.cudnnGetConvolutionForwardWorkspaceSize(handle, c.x, c.w, c.conv, c.y, c.algo,
                                                    &c.workspace_bytes),
        "workspace size");
  return c;
}

// ---------------------------------------------------------------------------------------------
// Sub-block rows.

struct Shape {
  std::string name;
  bool separable;
  int channels;
  int kernel;
  bool residual;
  int batch;
  int time;
};

struct Row {
  Shape shape;
  double flops = 0, bytes = 0;
  double ours_ms = NAN, cudnn_fused_ms = NAN, cudnn_ops_ms = NAN;
  std::string cudnn_error;
};

Row RunSubBlock(const Shape& s, kc::Precision p, const Cudnn* dnn, cudnnHandle_t handle,
                cudaStream_t stream, int samples, size_t l2_bytes) {
  Row row;
  row.shape = s;
  const int c = s.channels, k = s.kernel, b = s.batch, t = s.time;
  const size_t eb = kc::PrecisionBytes(p);
  const double frames = static_cast<double>(b) * t;
  row.flops = 2.0 * frames *
              (s.separable ? (static_cast<double>(c) * k + static_cast<double>(c) * c)
                           : static_cast<double>(c) * c * k);
  double weight_elems = s.separable ? static_cast<double>(c) * c + static_cast<double>(c) * k
                                    : static_cast<double>(c) * c * k;
  if (s.residual) {
    row.flops += 2.0 * frames * c * c;
    weight_elems += static_cast<double>(c) * c;
  }
  row.bytes = eb * (frames * c * (s.residual ? 3 : 2) + weight_elems);

  std::mt19937 rng(7);
  const size_t act = static_cast<size_t>(b) * t * c;
  // Rotation: enough input sets that one pass over them is >= 2x L2.
  const size_t set_bytes = act * eb * (s.residual ? 2 : 1);
  const int sets = static_cast<int>(std::clamp<size_t>(2 * l2_bytes / set_bytes + 1, 1, 16));
  std::vector<std::unique_ptr<DeviceBuffer>> xs, rs;
  for (int i = 0; i < sets; ++i) {
    xs.push_back(Upload(p, act, 1.0f, &rng));
    if (s.residual) rs.push_back(Upload(p, act, 1.0f, &rng));
  }
  DeviceBuffer y(act * eb);
  std::vector<int> lengths(b, t);
  auto d_len = UploadRaw(lengths.data(), lengths.size() * sizeof(int));

  // Ours.
  SubBlockDesc d;
  d.in_channels = c;
  d.out_channels = c;
  d.kernel_size = k;
  d.padding = k / 2;
  d.separable = s.separable;
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  const std::vector<float> depthwise = random(static_cast<size_t>(k) * c);
  const std::vector<float> weight = random(static_cast<size_t>(c) * c * (s.separable ? 1 : k));
  const std::vector<float> bias = random(c);
  const std::vector<float> res_w = random(static_cast<size_t>(c) * c);
  const float* res_w_ptr = res_w.data();
  const int res_c = c;
  kc::PackedSubBlock packed;
  std::string error;
  const SubBlockWeights weights{s.separable ? depthwise.data() : nullptr, weight.data(),
                                bias.data()};
  if (!kc::PackSubBlock(d, weights, &res_w_ptr, &res_c, s.residual ? 1 : 0, p, &packed, &error)) {
    Die("PackSubBlock: " + error);
  }
  auto d_weight = UploadRaw(packed.weight.data(), packed.weight.size());
  auto d_dw = UploadRaw(packed.depthwise.data(), packed.depthwise.size() * sizeof(float));
  auto d_bias = UploadRaw(packed.bias.data(), packed.bias.size() * sizeof(float));
  kc::DeviceSubBlock view;
  view.desc = d;
  view.n_padded = packed.n_padded;
  view.k_steps = packed.k_steps;
  view.num_residuals = s.residual ? 1 : 0;
  view.residual_channels[0] = c;
  view.weight = d_weight->get();
  view.depthwise = s.separable ? static_cast<const float*>(d_dw->get()) : nullptr;
  view.bias = static_cast<const float*>(d_bias->get());
  kc::DeviceGeometry g;
  g.batch = b;
  g.in_time = t;
  g.out_time = t;
  g.in_lengths = static_cast<const int*>(d_len->get());
  g.out_lengths = g.in_lengths;
  row.ours_ms = MedianMs(stream, samples, [&](int i) {
    const void* res = s.residual ? rs[i % sets]->get() : nullptr;
    const kc::Result r =
        kc::LaunchFusedSubBlock(view, p, xs[i % sets]->get(), g, &res, y.get(), stream);
    if (!r.ok()) Die(std::string("LaunchFusedSubBlock: ") + r.message);
  });

  if (dnn == nullptr) return row;
  try {
    // Fused composition and the op sequence share descriptors.
    DnnConv main = MakeConv(*dnn, handle, p, b, t, c, c, s.separable ? 1 : k, 1);
    DnnConv dw, res;
    if (s.separable) dw = MakeConv(*dnn, handle, p, b, t, c, c, k, c);
    if (s.residual) res = MakeConv(*dnn, handle, p, b, t, c, c, 1, 1);
    const size_t ws_bytes =
        std::max({main.workspace_bytes, dw.workspace_bytes, res.workspace_bytes, size_t{16}});
    DeviceBuffer workspace(ws_bytes);
    auto w_main = Upload(p, static_cast<size_t>(c) * c * (s.separable ? 1 : k), 0.05f, &rng);
    auto w_dw = Upload(p, static_cast<size_t>(c) * k, 0.05f, &rng);
    auto w_res = Upload(p, static_cast<size_t>(c) * c, 0.05f, &rng);
    auto d_bias_dnn = Upload(p, c, 0.05f, &rng);
    DeviceBuffer t1(act * eb), t2(act * eb), t3(act * eb);
    cudnnActivationDescriptor_t relu;
    Check(*dnn, dnn->cudnnCreateActivationDescriptor(&relu), "create activation");
    Check(*dnn,
          dnn->cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN,
                                            0.0),
          "set activation");
    const float one = 1.0f, zero = 0.0f;
    // out = conv(in) with c's descriptors; returns out.
    auto conv = [&](const DnnConv& c, const void* in, const void* w, void* out,
                    const char* what) -> const void* {
      Check(*dnn,
            dnn->cudnnConvolutionForward(handle, &one, c.x, in, c.w, w, c.conv, c.algo,
                                         workspace.get(), ws_bytes, &zero, c.y, out),
            what);
      return out;
    };
    row.cudnn_fused_ms = MedianMs(stream, samples, [&](int i) {
      const void* x = xs[i % sets]->get();
      const void* main_in = s.separable ? conv(dw, x, w_dw->get(), t1.get(), "depthwise") : x;
      const void* z = y.get();  // alpha2 = 0: z is not read
      float alpha2 = 0.0f;
      if (s.residual) {
        z = conv(res, rs[i % sets]->get(), w_res->get(), t3.get(), "residual conv");
        alpha2 = 1.0f;
      }
      Check(*dnn,
            dnn->cudnnConvolutionBiasActivationForward(
                handle, &one, main.x, main_in, main.w, w_main->get(), main.conv, main.algo,
                workspace.get(), ws_bytes, &alpha2, main.y, z, main.bias, d_bias_dnn->get(), relu,
                main.y, y.get()),
            "conv+bias+add+relu");
    });
    row.cudnn_ops_ms = MedianMs(stream, samples, [&](int i) {
      const void* x = xs[i % sets]->get();
      const void* main_in = s.separable ? conv(dw, x, w_dw->get(), t1.get(), "depthwise") : x;
      conv(main, main_in, w_main->get(), t2.get(), "conv");
      Check(*dnn,
            dnn->cudnnAddTensor(handle, &one, main.bias, d_bias_dnn->get(), &one, main.y, t2.get()),
            "bias");
      if (s.residual) {
        conv(res, rs[i % sets]->get(), w_res->get(), t3.get(), "residual conv");
        Check(*dnn, dnn->cudnnAddTensor(handle, &one, res.y, t3.get(), &one, main.y, t2.get()),
              "residual add");
      }
      Check(
          *dnn,
          dnn->cudnnActivationForward(handle, relu, &one, main.y, t2.get(), &zero, main.y, y.get()),
          "relu");
    });
  } catch (const CudnnError& e) {
    row.cudnn_error = e.message;
  }
  CudaOk(cudaStreamSynchronize(stream), "sync");
  return row;
}

// ---------------------------------------------------------------------------------------------
// Whole model.

struct ModelRow {
  std::string name;
  int batch = 0;
  double audio_s = 0;
  double ms = NAN;
  std::string error;
};

ModelRow RunModel(const std::string& name, kc::Precision p, int batch, double seconds,
                  int samples) {
  ModelRow row;
  row.name = name;
  row.batch = batch;
  row.audio_s = batch * seconds;
  absl::StatusOr<std::shared_ptr<const jasper::Model>> model =
      jasper::test_util::MakeRandomModel(jasper::test_util::QuartzNet15x5Config(), 20261203,
                                         jasper::test_util::WeightInit::kUnitVariance);
  if (!model.ok()) {
    row.error = model.status().ToString();
    return row;
  }
  jasper::BackendOptions options;
  options.device = jasper::Device::kCuda;
  options.gpu_precision = p;
  absl::StatusOr<std::unique_ptr<jasper::Backend>> backend =
      jasper::CreateCudaBackend(*model, options);
  if (!backend.ok()) {
    row.error = backend.status().ToString();
    return row;
  }
  const int features = (*model)->config().featurizer.features;
  const int time = static_cast<int>(std::lround(seconds * 100));  // 10 ms feature frames
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> data(static_cast<size_t>(batch) * time * features);
  for (float& v : data) v = dist(rng);
  std::vector<int> lengths(batch, time);
  jasper::FeatureBatch in{data.data(), batch, time, features, lengths.data()};
  jasper::BackendOutput out;
  std::vector<double> ms;
  for (int i = 0; i < 3 + samples; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status s = (*backend)->Run(in, &out);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      row.error = s.ToString();
      return row;
    }
    if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  row.ms = ms[ms.size() / 2];
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string pname = absl::GetFlag(FLAGS_precision);
  kc::Precision p = kc::Precision::kFp16;
  if (pname == "fp32") {
    p = kc::Precision::kFp32;
  } else if (pname == "bf16") {
    p = kc::Precision::kBf16;
  } else if (pname != "fp16") {
    Die("--precision must be fp32, fp16 or bf16");
  }
  // cuDNN first: its symbols and version are checked (and reported) even without a GPU.
  Cudnn dnn;
  const bool dnn_loaded = dnn.Load(absl::GetFlag(FLAGS_cudnn_lib));
  std::string dnn_version =
      dnn_loaded ? std::to_string(dnn.cudnnGetVersion()) : "not loaded (" + dnn.error + ")";
  if (kc::CudaDeviceCount() == 0) {
    // Exit 77: "skipped" for tools/gpu_check.sh (and CTest), not a failure of the benchmark.
    std::fprintf(stderr, "cuda_bench: no CUDA device (cuDNN: %s): skipped\n", dnn_version.c_str());
    return 77;
  }
  cudaDeviceProp prop;
  CudaOk(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const size_t l2 = static_cast<size_t>(prop.l2CacheSize);
  const bool quick = absl::GetFlag(FLAGS_quick);
  const int samples = quick ? 7 : 21;
  double peak_tflops = absl::GetFlag(FLAGS_peak_tflops);
  if (peak_tflops <= 0) peak_tflops = p == kc::Precision::kFp32 ? 67.0 : 989.0;
  const double peak_tbps = absl::GetFlag(FLAGS_peak_tbps);
  std::vector<std::string> sections = absl::StrSplit(absl::GetFlag(FLAGS_sections), ',');
  auto has = [&](const char* s) {
    return std::find(sections.begin(), sections.end(), s) != sections.end();
  };

  cudaStream_t stream;
  CudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudnnHandle_t handle = nullptr;
  if (dnn_loaded && (dnn.cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS ||
                     dnn.cudnnSetStream(handle, stream) != CUDNN_STATUS_SUCCESS)) {
    dnn_version += " (cudnnCreate/cudnnSetStream failed: no cuDNN columns)";
    handle = nullptr;
  }
  std::printf("=== cuda_bench: %s, %d SMs, L2 %zu MiB; precision %s; cuDNN %s ===\n", prop.name,
              prop.multiProcessorCount, l2 >> 20, pname.c_str(), dnn_version.c_str());
  std::printf("roofline: %.0f TFLOP/s, %.2f TB/s (--peak_tflops, --peak_tbps)\n", peak_tflops,
              peak_tbps);

  nlohmann::json json;
  json["device"] = prop.name;
  json["precision"] = pname;
  json["cudnn"] = dnn_version;
  json["peak_tflops"] = peak_tflops;
  json["peak_tbps"] = peak_tbps;
  if (has("subblock")) {
    std::vector<Shape> shapes;
    for (const auto& [name, sep, c, k, res] :
         std::vector<std::tuple<std::string, bool, int, int, bool>>{
             {"sep_c256_k33", true, 256, 33, false},
             {"sep_c512_k75", true, 512, 75, false},
             {"sep_c512_k75_res", true, 512, 75, true},
             {"dense_c512_k11", false, 512, 11, false},
             {"dense_c512_k29", false, 512, 29, false}}) {
      shapes.push_back({name + "_b64t256", sep, c, k, res, 64, 256});
      shapes.push_back({name + "_b1t100", sep, c, k, res, 1, 100});
    }
    std::printf("\n%-26s %9s %9s %9s | %8s %8s %7s | %9s %9s\n", "sub-block (B x T)", "ours ms",
                "cuDNN-f", "cuDNN-op", "TFLOP/s", "GB/s", "%roof", "x cuDNN-f", "x cuDNN-op");
    for (const Shape& s : shapes) {
      const Row r = RunSubBlock(s, p, handle ? &dnn : nullptr, handle, stream, samples, l2);
      const double tflops = r.flops / (r.ours_ms * 1e-3) / 1e12;
      const double gbps = r.bytes / (r.ours_ms * 1e-3) / 1e9;
      const double roof_ms =
          1e3 * std::max(r.flops / (peak_tflops * 1e12), r.bytes / (peak_tbps * 1e12));
      std::printf("%-26s %9.4f %9.4f %9.4f | %8.1f %8.0f %6.0f%% | %8.2fx %8.2fx%s%s\n",
                  s.name.c_str(), r.ours_ms, r.cudnn_fused_ms, r.cudnn_ops_ms, tflops, gbps,
                  100.0 * roof_ms / r.ours_ms, r.cudnn_fused_ms / r.ours_ms,
                  r.cudnn_ops_ms / r.ours_ms,
                  r.cudnn_error.empty() ? "" : "  cuDNN: ", r.cudnn_error.c_str());
      json["subblock"].push_back({{"name", s.name},
                                  {"separable", s.separable},
                                  {"channels", s.channels},
                                  {"kernel", s.kernel},
                                  {"residual", s.residual},
                                  {"batch", s.batch},
                                  {"time", s.time},
                                  {"flops", r.flops},
                                  {"bytes", r.bytes},
                                  {"roofline_ms", roof_ms},
                                  {"ours_ms", r.ours_ms},
                                  {"cudnn_fused_ms", r.cudnn_fused_ms},
                                  {"cudnn_ops_ms", r.cudnn_ops_ms},
                                  {"cudnn_error", r.cudnn_error}});
    }
  }
  if (has("model")) {
    std::printf("\n%-26s %9s %12s\n", "QuartzNet 15x5 (Run)", "ms", "x real time");
    for (const auto& [name, batch, seconds] : std::vector<std::tuple<std::string, int, double>>{
             {"model_b64_10s", 64, 10.0}, {"model_b1_2s", 1, 2.0}}) {
      const ModelRow m = RunModel(name, p, batch, seconds, quick ? 5 : 15);
      std::printf("%-26s %9.3f %12.0f%s%s\n", name.c_str(), m.ms, m.audio_s / (m.ms * 1e-3),
                  m.error.empty() ? "" : "  error: ", m.error.c_str());
      json["model"].push_back({{"name", name},
                               {"batch", batch},
                               {"seconds", seconds},
                               {"ms", m.ms},
                               {"rtfx", m.audio_s / (m.ms * 1e-3)},
                               {"error", m.error}});
    }
  }
  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) Die("cannot write " + path);
    const std::string text = json.dump(2);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  return 0;
}
