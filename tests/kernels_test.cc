// Kernel tests: the fused CPU sub-block and the CTC head against direct computations.
//
// Every case draws fresh random data from a seed that is printed on failure; set
// JASPER_KERNELS_SEED=<n> to replay one. Outputs and the workspace are poisoned with NaN before a
// run so an unwritten element fails, and input frames past the lengths hold large finite garbage
// (1e6) so a kernel that reads masked frames fails too.
//
// Tolerance: with n = K*C_in + sum(C_res) products per output, the fused result must satisfy
//   max |fused - reference| <= 1e-5 * sqrt(n) * max |reference|
// over the valid frames (both are FP32; they differ only in summation order and FMA use), and
// frames past out_lengths must be exactly 0. (Observed errors stay below 1% of this bound.)
// The packed kernel runs on every path this CPU has (each ISA level of kernels/cpu_features.h in
// turn, FP32, BF16 and INT8); BF16 is held to the bound of its operands' rounding, INT8 to the
// bound of its operands' quantization (kernels_int8_check.h), both through CheckBounded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/blas_sub_block.h"
#include "kernels/cpu/int8_quantize.h"  // the row quantizers, checked against each other
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"
#include "tests/kernels_int8_check.h"

namespace jasper::kernels {
namespace {

constexpr float kGarbage = 1e6f;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::uint64_t FreshSeed() {
  if (const char* env = std::getenv("JASPER_KERNELS_SEED")) return std::strtoull(env, nullptr, 10);
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  float Uniform(float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(engine_);
  }
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(engine_); }
  std::vector<float> Vector(std::size_t n, float scale) {
    std::vector<float> v(n);
    for (float& e : v) e = Uniform(-scale, scale);
    return v;
  }

 private:
  std::mt19937_64 engine_;
};

// How the per-utterance input lengths are drawn.
enum class Lengths {
  kMixed,      // full, 0, 1, in_time-1, in_time/2+3, then random in [0, in_time]
  kFull,       // all in_time
  kZero,       // all 0
  kOne,        // all 1
  kShort,      // all in_time / 2
  kOutPadded,  // mixed inputs, but out_lengths = out_time (outputs read masked input only)
};

struct Case {
  std::string name;
  bool separable = true;
  int kernel_size = 1;
  int stride = 1;
  int dilation = 1;
  int padding = -1;  // -1: 'same', dilation*(K-1)/2
  int in_channels = 8;
  int out_channels = 8;
  int in_time = 16;
  int batch = 4;
  std::vector<int> residual_channels;
  Activation activation = Activation::kRelu;
  bool bias = true;
  Lengths lengths = Lengths::kMixed;
  // x >= 0 (as a ReLU's output): packed with PackSubBlock's nonnegative_input, which puts INT8's
  // depthwise input on the unsigned grid.
  bool nonnegative_input = false;
  // Residual inputs >= 0 as well, marked ResidualInput::nonnegative (the unsigned grid).
  bool nonnegative_residuals = false;
  // Separable: the input's channels spread over 2^-6 .. 2 of its range, and INT8 packed with a
  // depthwise input scale per channel (PackSubBlock's depthwise_channel_scales).
  bool per_channel_scales = false;
  // Separable: INT8 packed with a random power-of-two migration factor per depthwise output
  // channel (PackSubBlock's output_smoothing), checked against the oracle of the equivalent
  // sub-block (depthwise / m, pointwise rows x m: exact in FP32 for powers of two).
  bool smoothing = false;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

SubBlockDesc DescOf(const Case& c) {
  SubBlockDesc d;
  d.in_channels = c.in_channels;
  d.out_channels = c.out_channels;
  d.kernel_size = c.kernel_size;
  d.stride = c.stride;
  d.dilation = c.dilation;
  d.padding = c.padding >= 0 ? c.padding : c.dilation * (c.kernel_size - 1) / 2;
  d.separable = c.separable;
  d.activation = c.activation;
  return d;
}

std::vector<int> DrawLengths(const Case& c, Rng& rng) {
  std::vector<int> len(c.batch);
  for (int b = 0; b < c.batch; ++b) {
    switch (c.lengths) {
      case Lengths::kFull:
        len[b] = c.in_time;
        break;
      case Lengths::kZero:
        len[b] = 0;
        break;
      case Lengths::kOne:
        len[b] = std::min(1, c.in_time);
        break;
      case Lengths::kShort:
        len[b] = c.in_time / 2;
        break;
      case Lengths::kMixed:
      case Lengths::kOutPadded: {
        const int fixed[] = {c.in_time, 0, std::min(1, c.in_time), std::max(c.in_time - 1, 0),
                             std::min(c.in_time / 2 + 3, c.in_time)};
        len[b] = b < 5 ? fixed[b] : rng.Int(0, c.in_time);
        break;
      }
    }
  }
  return len;
}

// Fills frames [len, time) of each utterance of a [batch, time, channels] buffer with garbage.
void Garble(std::vector<float>& v, int batch, int time, int channels, const std::vector<int>& len) {
  for (int b = 0; b < batch; ++b) {
    for (int t = len[b]; t < time; ++t) {
      float* row = v.data() + (static_cast<std::size_t>(b) * time + t) * channels;
      for (int c = 0; c < channels; ++c) row[c] = (c % 2 ? -kGarbage : kGarbage);
    }
  }
}

// The packed kernel's paths on this CPU: every ISA level up to the active one with FP32 (AMX
// runs FP32 like AVX-512), BF16 on the portable loops and, where the CPU has them, on AVX-512
// BF16 (vdpbf16ps) and on AMX, and INT8 on the portable loops, AVX-512 VNNI and AMX likewise.
struct Variant {
  CpuIsa isa;
  Precision precision;
  std::string Name() const { return std::string(CpuIsaName(isa)) + "/" + PrecisionName(precision); }
};

std::vector<Variant> Variants() {
  const CpuIsa top = ActiveCpuIsa();
  std::vector<Variant> variants;
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa <= top) variants.push_back({isa, Precision::kFp32});
  }
  variants.push_back({CpuIsa::kBaseline, Precision::kBf16});
  if (top >= CpuIsa::kAvx512 && GetCpuFeatures().avx512_bf16) {
    variants.push_back({CpuIsa::kAvx512, Precision::kBf16});  // vdpbf16ps
  }
  if (top == CpuIsa::kAmx) variants.push_back({CpuIsa::kAmx, Precision::kBf16});
  variants.push_back({CpuIsa::kBaseline, Precision::kInt8});
  if (top >= CpuIsa::kAvx512 && GetCpuFeatures().avx512_vnni) {
    variants.push_back({CpuIsa::kAvx512, Precision::kInt8});  // vpdpbusd
  }
  if (top == CpuIsa::kAmx && GetCpuFeatures().amx_int8) {
    variants.push_back({CpuIsa::kAmx, Precision::kInt8});
  }
  return variants;
}

// Caps the kernels' ISA level for a scope (kernels/cpu_features.h).
class ScopedIsa {
 public:
  explicit ScopedIsa(CpuIsa cap) : previous_(SetCpuIsaCap(cap)) {}
  ~ScopedIsa() { SetCpuIsaCap(previous_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  CpuIsa previous_;
};

std::vector<float> Abs(std::vector<float> v) {
  for (float& e : v) e = std::fabs(e);
  return v;
}

// The reference on |x|, |weights| and |residuals|, no bias, identity: per output, the sum of
// |a_k| |b_k| over the GEMM's products (an upper bound of it for the depthwise rows), which
// bounds BF16's rounding error.
std::vector<float> AbsReference(const Case& c, const SubBlockDesc& desc, const SubBlockWeights& w,
                                const std::vector<float>& x, const BatchGeometry& g,
                                const std::vector<std::vector<float>>& res_x,
                                const std::vector<std::vector<float>>& res_w) {
  SubBlockDesc abs_desc = desc;
  abs_desc.activation = Activation::kIdentity;
  const int k = c.kernel_size;
  std::vector<float> dw;
  if (c.separable) dw = Abs(std::vector<float>(w.depthwise, w.depthwise + k * c.in_channels));
  const std::size_t w_size =
      static_cast<std::size_t>(c.separable ? 1 : k) * c.in_channels * c.out_channels;
  const std::vector<float> weight = Abs(std::vector<float>(w.weight, w.weight + w_size));
  SubBlockWeights abs_w;
  abs_w.depthwise = c.separable ? dw.data() : nullptr;
  abs_w.weight = weight.data();
  std::vector<std::vector<float>> ax, aw;
  std::vector<ResidualInput> residuals;
  for (std::size_t p = 0; p < res_x.size(); ++p) {
    ax.push_back(Abs(res_x[p]));
    aw.push_back(Abs(res_w[p]));
  }
  for (std::size_t p = 0; p < res_x.size(); ++p) {
    residuals.push_back({ax[p].data(), aw[p].data(), c.residual_channels[p]});
  }
  const std::vector<float> abs_x = Abs(x);
  std::vector<float> y(static_cast<std::size_t>(c.batch) * g.out_time * c.out_channels, kNaN);
  SubBlockReference(abs_desc, abs_w, abs_x.data(), g, residuals.data(),
                    static_cast<int>(residuals.size()), y.data());
  return y;
}

// A low-precision result against the FP32 reference: per valid element within limit[i], and
// the RMS error over the valid frames within rms_fraction of the reference's RMS (+ tol_fp32),
// which a dropped or misplaced K chunk or a wrong scale breaks; masked frames exactly zero.
//
// BF16 keeps 8 significant bits (unit roundoff 2^-8), so each product of rounded operands is
// within (2 * 2^-8 + 2^-16) |a||b| of the exact one: limit = 1.01 * 2^-7 * abs_ref + tol_fp32
// (abs_ref from AbsReference), RMS within 1/64 (expected about 1/300). INT8: limit = 1.01 x the
// quantization bound of kernels_int8_check.h + tol_fp32, RMS within 1/16 (expected under
// 1/100). The RMS check needs kMinRmsElements valid elements: over a handful (DenseT1: 10) one
// output whose terms cancel (|ref| far below the sum of |terms| its bound is made of) carries
// the whole RMS, and a seed failed that way with every element inside its bound.
constexpr int kMinRmsElements = 64;
void CheckBounded(const char* kernel, const std::vector<float>& y, const std::vector<float>& ref,
                  const std::vector<double>& limit, double rms_fraction,
                  const std::vector<int>& out_len, int batch, int out_time, int c_out,
                  double tol_fp32) {
  SCOPED_TRACE(kernel);
  double max_err = 0.0, err2 = 0.0, ref2 = 0.0;
  int reported = 0;
  int finite = 0;  // valid elements in err2 / ref2
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < out_time; ++t) {
      for (int o = 0; o < c_out; ++o) {
        const std::size_t i = (static_cast<std::size_t>(b) * out_time + t) * c_out + o;
        bool bad;
        if (t >= out_len[b]) {
          bad = !(ref[i] == 0.0f && y[i] == 0.0f);
        } else {
          const double err = std::fabs(double(y[i]) - double(ref[i]));
          bad = !std::isfinite(y[i]) || err > limit[i];
          if (std::isfinite(y[i])) {
            max_err = std::max(max_err, err);
            err2 += err * err;
            ref2 += double(ref[i]) * ref[i];
            ++finite;
          }
          if (bad && reported < 5) {
            ADD_FAILURE() << "b=" << b << " t=" << t << " o=" << o << ": " << y[i]
                          << " vs reference " << ref[i] << " (bound " << limit[i] << ")";
          }
        }
        if (bad) ++reported;
      }
    }
  }
  EXPECT_EQ(reported, 0) << reported << " bad elements; max error " << max_err;
  if (finite >= kMinRmsElements) {
    EXPECT_LE(std::sqrt(err2), rms_fraction * std::sqrt(ref2) + tol_fp32) << "RMS error too large";
  }
}

void RunCase(const Case& c) {
  const std::uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "case " << c.name << ", seed " << seed
                                  << " (replay: JASPER_KERNELS_SEED=" << seed << ")");
  Rng rng(seed);
  const SubBlockDesc desc = DescOf(c);
  ASSERT_TRUE(IsValid(desc));
  const int out_time = ConvOutputLength(desc, c.in_time);
  const int c_in = c.in_channels;
  const int c_out = c.out_channels;
  const int k = c.kernel_size;

  const std::vector<int> in_len = DrawLengths(c, rng);
  std::vector<int> out_len(c.batch);
  for (int b = 0; b < c.batch; ++b) {
    out_len[b] = c.lengths == Lengths::kOutPadded ? out_time : ConvOutputLength(desc, in_len[b]);
  }

  std::vector<float> x = rng.Vector(static_cast<std::size_t>(c.batch) * c.in_time * c_in, 1.0f);
  if (c.nonnegative_input) x = Abs(std::move(x));
  if (c.per_channel_scales) {
    std::vector<float> gain(c_in);
    for (float& f : gain) f = std::ldexp(1.0f, rng.Int(-6, 1));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] *= gain[i % c_in];
  }
  Garble(x, c.batch, c.in_time, c_in, in_len);  // negative garbage too: masked rows are not read
  std::vector<float> depthwise;
  std::vector<float> weight;
  if (c.separable) {
    depthwise = rng.Vector(static_cast<std::size_t>(k) * c_in, 1.0f / std::sqrt(float(k)));
    weight = rng.Vector(static_cast<std::size_t>(c_in) * c_out, 1.0f / std::sqrt(float(c_in)));
  } else {
    weight =
        rng.Vector(static_cast<std::size_t>(k) * c_in * c_out, 1.0f / std::sqrt(float(k * c_in)));
  }
  std::vector<float> bias = rng.Vector(c_out, 0.5f);
  SubBlockWeights w;
  w.depthwise = c.separable ? depthwise.data() : nullptr;
  w.weight = weight.data();
  w.bias = c.bias ? bias.data() : nullptr;
  std::vector<float> smoothing, smoothed_depthwise, smoothed_weight;
  SubBlockWeights w_oracle = w;  // what INT8's oracle bounds: the smoothed sub-block
  if (c.smoothing && c.separable) {
    // SmoothQuant's factors from this data (alpha 0.5), rounded to powers of two, plus a random
    // step either way: sqrt(max |depthwise output| / max |pointwise row|) per channel.
    std::vector<int> len = in_len;
    std::vector<int> olen(c.batch);
    for (int b = 0; b < c.batch; ++b) olen[b] = std::min(out_len[b], out_time);
    const BatchGeometry dg{c.batch, c.in_time, out_time, len.data(), olen.data()};
    std::vector<float> dw_out(static_cast<std::size_t>(c.batch) * out_time * c_in);
    DepthwiseReference(desc, depthwise.data(), x.data(), dg, dw_out.data());
    std::vector<float> a_max(c_in, 0.0f), w_max(c_in, 0.0f);
    for (std::size_t i = 0; i < dw_out.size(); ++i) {
      a_max[i % c_in] = std::max(a_max[i % c_in], std::fabs(dw_out[i]));
    }
    for (std::size_t i = 0; i < weight.size(); ++i) {
      w_max[i / c_out] = std::max(w_max[i / c_out], std::fabs(weight[i]));
    }
    smoothing.resize(c_in);
    for (int ch = 0; ch < c_in; ++ch) {
      const double ratio = a_max[ch] > 0.0f && w_max[ch] > 0.0f ? a_max[ch] / w_max[ch] : 1.0;
      smoothing[ch] =
          std::ldexp(1.0f, static_cast<int>(std::lround(0.5 * std::log2(ratio))) + rng.Int(-1, 1));
    }
    smoothed_depthwise = depthwise;
    for (std::size_t i = 0; i < depthwise.size(); ++i) smoothed_depthwise[i] /= smoothing[i % c_in];
    smoothed_weight = weight;
    for (std::size_t i = 0; i < weight.size(); ++i) smoothed_weight[i] *= smoothing[i / c_out];
    w_oracle.depthwise = smoothed_depthwise.data();
    w_oracle.weight = smoothed_weight.data();
  }

  int products = k * c_in;
  std::vector<std::vector<float>> res_x;
  std::vector<std::vector<float>> res_w;
  std::vector<ResidualInput> residuals;
  for (int ch : c.residual_channels) {
    res_x.push_back(rng.Vector(static_cast<std::size_t>(c.batch) * out_time * ch, 1.0f));
    if (c.nonnegative_residuals) res_x.back() = Abs(std::move(res_x.back()));
    Garble(res_x.back(), c.batch, out_time, ch, out_len);
    res_w.push_back(rng.Vector(static_cast<std::size_t>(ch) * c_out, 1.0f / std::sqrt(float(ch))));
    products += ch;
  }
  for (std::size_t p = 0; p < c.residual_channels.size(); ++p) {
    residuals.push_back(
        {res_x[p].data(), res_w[p].data(), c.residual_channels[p], c.nonnegative_residuals});
  }

  BatchGeometry g;
  g.batch = c.batch;
  g.in_time = c.in_time;
  g.out_time = out_time;
  g.in_lengths = in_len.data();
  g.out_lengths = out_len.data();

  const std::size_t y_size = static_cast<std::size_t>(c.batch) * out_time * c_out;
  std::vector<float> y_ref(y_size, kNaN);
  SubBlockReference(desc, w, x.data(), g, residuals.data(), static_cast<int>(residuals.size()),
                    y_ref.data());
  double scale = 0.0;
  for (float v : y_ref) {
    ASSERT_TRUE(std::isfinite(v)) << "reference wrote a non-finite value";
    scale = std::max(scale, std::fabs(double(v)));
  }
  const double tol = 1e-5 * std::sqrt(double(products)) * scale;
  auto check = [&](const char* kernel, const std::vector<float>& y_fast) {
    SCOPED_TRACE(kernel);
    double max_err = 0.0;
    int reported = 0;
    for (int b = 0; b < c.batch; ++b) {
      for (int t = 0; t < out_time; ++t) {
        for (int o = 0; o < c_out; ++o) {
          const std::size_t i = (static_cast<std::size_t>(b) * out_time + t) * c_out + o;
          const float f = y_fast[i];
          const float r = y_ref[i];
          bool bad;
          if (t >= out_len[b]) {
            bad = !(r == 0.0f && f == 0.0f);  // masked frames: exactly zero
          } else {
            const double err = std::fabs(double(f) - double(r));
            bad = !std::isfinite(f) || err > tol;
            if (std::isfinite(f)) max_err = std::max(max_err, err);
          }
          if (bad && reported++ < 5) {
            ADD_FAILURE() << "b=" << b << " t=" << t << " o=" << o << " out_len=" << out_len[b]
                          << " in_len=" << in_len[b] << ": " << kernel << " " << f
                          << " vs reference " << r << " (tol " << tol << ")";
          }
        }
      }
    }
    EXPECT_EQ(reported, 0) << reported << " bad elements; max error " << max_err << ", tol " << tol;
  };

  // Fused on the caller's weights (OpenBLAS). Exactly sized workspace (ASan catches an overrun),
  // poisoned like the output (reading it before writing shows).
  {
    std::vector<float> workspace(FusedSubBlockWorkspaceFloats(desc), kNaN);
    std::vector<float> y_fast(y_size, kNaN);
    FusedSubBlockCpu(desc, w, x.data(), g, residuals.data(), static_cast<int>(residuals.size()),
                     workspace.data(), y_fast.data());
    check("FusedSubBlockCpu", y_fast);
  }
  // Fused on packed weights, on every path this CPU has (each ISA level in turn, FP32, BF16 and
  // INT8).
  std::vector<double> bf16_limit;     // per element (CheckBounded)
  std::vector<double> bf16_dw_limit;  // the same with a BF16 depthwise conv
  std::vector<double> int8_limit;
  int8_check::Int8Oracle int8;    // INT8's scales and error bound
  std::vector<float> int8_first;  // the first INT8 path's output, which every INT8 path matches
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(testing::Message() << "path " << v.Name());
    const ScopedIsa isa(v.isa);
    const bool bf16 = v.precision == Precision::kBf16;
    const bool is_int8 = v.precision == Precision::kInt8;
    if (bf16 && bf16_limit.empty()) {
      // Each operand of the GEMM rounded to BF16 moves a product by at most 2^-8 of itself, so
      // by 2^-7 for both; a BF16 depthwise (bf16_depthwise) rounds its own operands as well,
      // which adds 2^-7 of the depthwise terms to the GEMM's input: 2^-6 in all.
      for (float a : AbsReference(c, desc, w, x, g, res_x, res_w)) {
        bf16_limit.push_back(1.01 * std::ldexp(double(a), -7) + tol);
        bf16_dw_limit.push_back(1.01 * std::ldexp(double(a), -6) + tol);
      }
    }
    if (is_int8 && int8.scales.empty()) {
      int8 = int8_check::MakeInt8Oracle(desc, w_oracle, x.data(), g, residuals, c.nonnegative_input,
                                        c.per_channel_scales);
      for (float bound : int8.bound) int8_limit.push_back(1.01 * double(bound) + tol);
    }
    Int8PackOptions int8_options;
    int8_options.nonnegative_input = c.nonnegative_input;
    if (c.per_channel_scales) int8_options.input_channel_scales = int8.channel_scales.data();
    if (!smoothing.empty()) int8_options.output_smoothing = smoothing.data();
    const PackedSubBlock packed =
        PackSubBlock(desc, w, residuals.data(), static_cast<int>(residuals.size()), v.precision,
                     is_int8 ? int8.scales.data() : nullptr, int8_options);
    ASSERT_TRUE(packed.valid);
    std::vector<const float*> res_ptrs;
    for (const auto& r : res_x) res_ptrs.push_back(r.data());
    auto check_path = [&](const char* kernel, const std::vector<float>& y_fast) {
      if (bf16) {
        CheckBounded(kernel, y_fast, y_ref, packed.bf16_depthwise ? bf16_dw_limit : bf16_limit,
                     1.0 / 64, out_len, c.batch, out_time, c_out, tol);
      } else if (is_int8) {
        CheckBounded(kernel, y_fast, y_ref, int8_limit, 1.0 / 16, out_len, c.batch, out_time, c_out,
                     tol);
      } else {
        check(kernel, y_fast);
      }
    };
    std::vector<float> workspace(PackedSubBlockWorkspaceFloats(packed), kNaN);
    std::vector<float> y_fast(y_size, kNaN);
    FusedSubBlockCpuPacked(packed, x.data(), g, res_ptrs.data(), workspace.data(), y_fast.data());
    check_path("FusedSubBlockCpuPacked", y_fast);
    if (packed.bf16_depthwise) {
      // Packed for vdpbf16ps; the same weights run on the portable loops when the level drops.
      const ScopedIsa portable(CpuIsa::kBaseline);
      std::vector<float> y_portable(y_size, kNaN);
      std::vector<float> portable_workspace(PackedSubBlockWorkspaceFloats(packed), kNaN);
      FusedSubBlockCpuPacked(packed, x.data(), g, res_ptrs.data(), portable_workspace.data(),
                             y_portable.data());
      check_path("FusedSubBlockCpuPacked, BF16 depthwise on portable loops", y_portable);
    }
    if (is_int8 && int8_first.empty()) {
      int8_first = y_fast;
    } else if (is_int8) {
      // Their INT32 sums are equal; only the FP32 dequantization and epilogue may round apart
      // (FMA contraction differs by path): a few ulps of the output's scale, far inside the
      // INT8 bound, where a wrong tap or channel would be off by whole quantization steps.
      float scale = 0.0f;
      for (float v : int8_first) scale = std::isnan(v) ? scale : std::max(scale, std::fabs(v));
      for (std::size_t i = 0; i < y_size; ++i) {
        const float a = y_fast[i], b = int8_first[i];
        if (std::isnan(a) && std::isnan(b)) continue;  // never written by either
        ASSERT_LE(std::fabs(a - b), 1e-6f * scale)
            << "INT8 paths differ at element " << i << ": " << a << " vs " << b;
      }
    }
    // Split into parts (intra-op threads; here run one after another, each with its own
    // poisoned workspace, and in reverse order so no part relies on another having run): the
    // same bits as one part, every element written. 5 parts outnumber the rows of small cases.
    for (int parts : {2, 3, 5}) {
      SCOPED_TRACE(testing::Message() << parts << " parts");
      std::vector<float> y_parts(y_size, kNaN);
      for (int part = parts - 1; part >= 0; --part) {
        std::vector<float> part_workspace(PackedSubBlockWorkspaceFloats(packed), kNaN);
        FusedSubBlockCpuPackedPart(packed, x.data(), g, res_ptrs.data(), parts, part,
                                   part_workspace.data(), y_parts.data());
      }
      check_path("FusedSubBlockCpuPackedPart", y_parts);
      EXPECT_EQ(0, std::memcmp(y_parts.data(), y_fast.data(), sizeof(float) * y_size))
          << "parts differ from the single-part result";
    }
    // Out-of-range parts write nothing.
    std::vector<float> untouched(y_size, kNaN);
    FusedSubBlockCpuPackedPart(packed, x.data(), g, res_ptrs.data(), 2, 2, workspace.data(),
                               untouched.data());
    FusedSubBlockCpuPackedPart(packed, x.data(), g, res_ptrs.data(), 0, 0, workspace.data(),
                               untouched.data());
    for (float u : untouched) ASSERT_TRUE(std::isnan(u));
  }
}

// The cross product separable/dense x K x stride x dilation, with time and channel sizes chosen
// off the tile and vector widths, and a mix of the other options.
std::vector<Case> SweepCases() {
  std::vector<Case> cases;
  const int kernels[] = {1, 3, 11, 33, 75};
  const int times[] = {1, 7, 33, 130, 257};
  const int small_channels[] = {3, 13, 40};
  const int wide_channels[] = {13, 64, 96};
  const std::vector<int> residual_sets[] = {{}, {13}, {7, 64, 21}};
  int i = 0;
  for (bool separable : {true, false}) {
    for (int k : kernels) {
      for (int stride : {1, 2}) {
        for (int dilation : {1, 2}) {
          Case c;
          c.separable = separable;
          c.kernel_size = k;
          c.stride = stride;
          c.dilation = dilation;
          c.in_time = times[(i + k) % 5];
          // Wide channels only where the dense reference stays cheap.
          const bool cheap = separable || k <= 11;
          c.in_channels = cheap ? wide_channels[i % 3] : small_channels[i % 3];
          c.out_channels = cheap ? wide_channels[(i + 1) % 3] + 1 : small_channels[(i + 2) % 3];
          c.batch = 4;
          c.residual_channels = residual_sets[i % 3];
          c.activation = i % 2 ? Activation::kIdentity : Activation::kRelu;
          c.bias = i % 4 != 3;
          c.name = std::string(separable ? "Sep" : "Dense") + "K" + std::to_string(k) + "S" +
                   std::to_string(stride) + "D" + std::to_string(dilation) + "T" +
                   std::to_string(c.in_time) + "C" + std::to_string(c.in_channels) + "x" +
                   std::to_string(c.out_channels);
          cases.push_back(c);
          ++i;
        }
      }
    }
  }
  return cases;
}

std::vector<Case> SpecialCases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, bool sep, int k, int s, int d, int p, int cin, int cout, int t,
                 int batch, std::vector<int> res, Activation act, bool bias, Lengths lengths) {
    Case c;
    c.name = std::move(name);
    c.separable = sep;
    c.kernel_size = k;
    c.stride = s;
    c.dilation = d;
    c.padding = p;
    c.in_channels = cin;
    c.out_channels = cout;
    c.in_time = t;
    c.batch = batch;
    c.residual_channels = std::move(res);
    c.activation = act;
    c.bias = bias;
    c.lengths = lengths;
    cases.push_back(c);
  };
  const auto relu = Activation::kRelu;
  const auto id = Activation::kIdentity;
  // Padding other than 'same'.
  add("SepValidPadding", true, 11, 1, 1, 0, 13, 17, 130, 4, {}, relu, true, Lengths::kMixed);
  add("DenseValidPadding", false, 11, 1, 1, 0, 13, 17, 130, 4, {5}, relu, true, Lengths::kMixed);
  add("SepWidePaddingS2", true, 3, 2, 1, 4, 13, 9, 33, 4, {}, id, true, Lengths::kMixed);
  add("DenseWidePaddingD2", false, 3, 1, 2, 5, 13, 9, 33, 4, {}, relu, true, Lengths::kMixed);
  add("DensePointwisePadded", false, 1, 1, 1, 2, 13, 9, 33, 4, {3}, relu, true, Lengths::kMixed);
  add("DensePointwiseS2", false, 1, 2, 1, 0, 40, 24, 257, 4, {}, relu, true, Lengths::kMixed);
  add("DensePointwiseS2Pad3", false, 1, 2, 1, 3, 13, 9, 130, 4, {}, id, true, Lengths::kMixed);
  // QuartzNet-like prologue (K33 s2 'same') and a dilated block, real channel multiples.
  add("SepPrologueLike", true, 33, 2, 1, -1, 64, 96, 257, 3, {}, relu, true, Lengths::kMixed);
  add("SepDilatedK33D2", true, 33, 1, 2, -1, 96, 64, 257, 3, {96}, relu, true, Lengths::kMixed);
  // Several tiles per utterance, so that interior tiles (read in place, no staging) run too.
  add("SepLong", true, 33, 1, 1, -1, 40, 24, 700, 8, {24}, relu, true, Lengths::kMixed);
  add("DenseLong", false, 11, 1, 1, -1, 13, 9, 700, 8, {9}, relu, true, Lengths::kMixed);
  add("DenseLongS2D1", false, 11, 2, 1, -1, 13, 9, 1100, 8, {}, id, true, Lengths::kMixed);
  add("DenseLongD2", false, 3, 1, 2, -1, 13, 9, 1100, 3, {}, relu, true, Lengths::kFull);
  // Batch 33 with small channels, residual branches, both conv kinds.
  add("SepBatch33", true, 33, 1, 1, -1, 3, 13, 130, 33, {3, 13, 5}, relu, true, Lengths::kMixed);
  add("DenseBatch33", false, 11, 2, 1, -1, 13, 3, 130, 33, {13}, id, true, Lengths::kMixed);
  add("DenseK1Batch33", false, 1, 1, 1, 0, 13, 13, 257, 33, {13, 13, 3}, relu, true,
      Lengths::kMixed);
  // Packed path: stacked tiles across utterances (short T, large batch), tile boundaries inside
  // an utterance, QuartzNet-like channel counts that are not multiples of 16, K=1 stride 2.
  add("SepStackBatch33T25", true, 33, 1, 1, -1, 40, 70, 25, 33, {40}, relu, true, Lengths::kMixed);
  add("SepStackBatch33T100Full", true, 75, 1, 1, -1, 24, 19, 100, 33, {24, 11}, id, true,
      Lengths::kFull);
  add("SepStackBatch9T300S2", true, 33, 2, 1, -1, 17, 33, 300, 9, {}, relu, true, Lengths::kMixed);
  add("DenseK1StackBatch33S2", false, 1, 2, 1, 0, 29, 35, 57, 33, {35}, relu, true,
      Lengths::kMixed);
  add("SepWideK1000", true, 5, 1, 1, -1, 600, 47, 40, 3, {300, 17}, relu, true, Lengths::kMixed);
  add("DenseK3D1Wide", false, 3, 1, 1, -1, 300, 21, 300, 2, {13}, relu, true, Lengths::kMixed);
  add("DenseK3D2Wide", false, 3, 1, 2, -1, 130, 21, 300, 2, {}, relu, true, Lengths::kMixed);
  // Even tap counts (the AVX2 depthwise takes taps in pairs; odd counts end with a single tap),
  // frames that are not a multiple of its 12-frame group, channel counts whose last 16-channel
  // block has 4, 8 or 12 valid lanes, dilation 1 and 2 (padding 'valid' where 'same' needs an
  // odd kernel).
  add("SepEvenK4D1", true, 4, 1, 1, 0, 20, 9, 61, 3, {}, relu, true, Lengths::kMixed);
  add("SepEvenK2D2", true, 2, 1, 2, 0, 24, 9, 61, 3, {}, id, true, Lengths::kMixed);
  add("SepEvenK30D1", true, 30, 1, 1, 3, 28, 17, 97, 2, {5}, relu, true, Lengths::kFull);
  add("SepEvenK30D2", true, 30, 1, 2, 5, 44, 17, 130, 2, {}, relu, true, Lengths::kMixed);
  // Batch 1 with full, short, 1 and 0 lengths; T = 1.
  add("SepBatch1Full", true, 11, 1, 1, -1, 64, 64, 130, 1, {64}, relu, true, Lengths::kFull);
  add("SepBatch1Short", true, 75, 1, 1, -1, 13, 13, 257, 1, {}, relu, true, Lengths::kShort);
  add("DenseBatch1One", false, 3, 1, 1, -1, 13, 13, 7, 1, {13}, relu, true, Lengths::kOne);
  add("SepBatch1Zero", true, 3, 1, 1, -1, 13, 13, 7, 1, {13}, relu, true, Lengths::kZero);
  add("DenseBatch1Zero", false, 3, 2, 1, -1, 13, 13, 7, 1, {}, id, false, Lengths::kZero);
  add("SepT1", true, 75, 1, 1, -1, 13, 13, 1, 2, {13}, relu, true, Lengths::kFull);
  add("DenseT1", false, 75, 1, 1, -1, 3, 5, 1, 2, {}, relu, true, Lengths::kFull);
  // No bias, no activation, no residual: the epilogue does nothing.
  add("SepBare", true, 11, 1, 1, -1, 96, 40, 130, 4, {}, id, false, Lengths::kMixed);
  add("DenseBare", false, 3, 1, 1, -1, 40, 13, 130, 4, {}, id, false, Lengths::kMixed);
  add("DenseK1Bare", false, 1, 1, 1, 0, 40, 13, 130, 4, {}, id, false, Lengths::kFull);
  // Output lengths longer than the input supports: valid frames that read masked input only.
  add("SepOutPadded", true, 11, 1, 1, -1, 13, 13, 33, 4, {13}, relu, true, Lengths::kOutPadded);
  add("DenseOutPadded", false, 3, 1, 1, -1, 13, 13, 33, 4, {}, relu, true, Lengths::kOutPadded);
  add("DenseK1OutPadded", false, 1, 1, 1, 0, 13, 13, 33, 4, {}, id, true, Lengths::kOutPadded);
  // Copies of the named cases, each changed by `variant` (a name that is not a case is skipped;
  // NonNegativeCasesExist and PerChannelCasesExist count the copies).
  auto copies_of = [&cases](std::initializer_list<const char*> names, auto variant) {
    for (const char* name : names) {
      const auto it = std::find_if(cases.begin(), cases.end(),
                                   [name](const Case& c) { return c.name == name; });
      if (it != cases.end()) variant(Case(*it));
    }
  };
  // INT8's inputs on the unsigned grid (a ReLU's output): the depthwise input, a dense
  // sub-block's GEMM input, the residual inputs. Strides, dilation, long and stacked tiles, odd
  // channel counts, several residuals, T = 1, lengths past the input.
  copies_of(
      {"SepPrologueLike", "SepDilatedK33D2", "SepLong", "SepBatch33", "SepStackBatch33T25",
       "SepStackBatch9T300S2", "SepWideK1000", "SepEvenK2D2", "SepEvenK30D2", "SepBatch1Short",
       "SepT1", "SepOutPadded", "DenseValidPadding", "DenseLong", "DenseK1Batch33",
       "DenseK1StackBatch33S2", "DenseK3D1Wide", "DenseT1", "DenseOutPadded"},
      [&cases](Case c) {
        c.name += "NonNegative";
        c.nonnegative_input = true;
        c.nonnegative_residuals = true;
        cases.push_back(c);
      });
  // The INT8 depthwise input with a scale per channel, on either grid (strides, dilation, a
  // stacked tile, odd channel counts, T = 1), then the same with the depthwise output smoothed
  // into the pointwise weights.
  copies_of({"SepPrologueLike", "SepDilatedK33D2", "SepStackBatch9T300S2", "SepBatch33", "SepT1",
             "SepPrologueLikeNonNegative", "SepDilatedK33D2NonNegative", "SepBatch33NonNegative",
             "SepEvenK2D2NonNegative", "SepOutPaddedNonNegative"},
            [&cases](Case c) {
              c.name += "PerChannel";
              c.per_channel_scales = true;
              cases.push_back(c);
              c.name += "Smoothed";
              c.smoothing = true;
              cases.push_back(c);
            });
  return cases;
}

class SubBlockSweepTest : public testing::TestWithParam<Case> {};
TEST_P(SubBlockSweepTest, FusedMatchesReference) { RunCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Sweep, SubBlockSweepTest, testing::ValuesIn(SweepCases()),
                         [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

// Every name the unsigned-grid copies are made from is a special case.
TEST(SubBlockSpecialCasesTest, NonNegativeCasesExist) {
  int copies = 0;
  for (const Case& c : SpecialCases()) {
    copies += c.nonnegative_input && !c.per_channel_scales ? 1 : 0;
  }
  EXPECT_EQ(copies, 19);
}

// Every name the per-channel copies are made from is a special case.
TEST(SubBlockSpecialCasesTest, PerChannelCasesExist) {
  int copies = 0;
  for (const Case& c : SpecialCases()) copies += c.per_channel_scales && !c.smoothing ? 1 : 0;
  EXPECT_EQ(copies, 10);
}

class SubBlockSpecialTest : public testing::TestWithParam<Case> {};
TEST_P(SubBlockSpecialTest, FusedMatchesReference) { RunCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Special, SubBlockSpecialTest, testing::ValuesIn(SpecialCases()),
                         [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

// The reference itself, on a case small enough to check by hand: K=3 same padding, one channel.
TEST(SubBlockReferenceTest, HandComputedDenseAndSeparable) {
  SubBlockDesc d;
  d.in_channels = 1;
  d.out_channels = 1;
  d.kernel_size = 3;
  d.padding = 1;
  d.activation = Activation::kIdentity;
  const float x[] = {1, 2, 3, 100};  // frame 3 is masked
  const int in_len = 3;
  const int out_len = 3;
  BatchGeometry g{1, 4, 4, &in_len, &out_len};
  const float dense_w[] = {1, 10, 100};  // [K, 1, 1]
  const float bias = 0.5f;
  float y[4];
  SubBlockReference(d, {nullptr, dense_w, &bias}, x, g, nullptr, 0, y);
  // y[t] = x[t-1] + 10 x[t] + 100 x[t+1] + 0.5, x masked to 0 outside [0, 3).
  EXPECT_FLOAT_EQ(y[0], 0 + 10 + 200 + 0.5f);
  EXPECT_FLOAT_EQ(y[1], 1 + 20 + 300 + 0.5f);
  EXPECT_FLOAT_EQ(y[2], 2 + 30 + 0 + 0.5f);
  EXPECT_EQ(y[3], 0.0f);

  d.separable = true;
  const float pointwise = -2.0f;  // [1, 1]
  const float res_x[] = {1, 1, 1, 1e6f};
  const float res_w = 3.0f;
  const ResidualInput res{res_x, &res_w, 1};
  d.activation = Activation::kRelu;
  SubBlockReference(d, {dense_w, &pointwise, nullptr}, x, g, &res, 1, y);
  EXPECT_FLOAT_EQ(y[0], 0.0f);  // relu(-2 * 210 + 3)
  EXPECT_FLOAT_EQ(y[2], 0.0f);
  d.activation = Activation::kIdentity;
  SubBlockReference(d, {dense_w, &pointwise, nullptr}, x, g, &res, 1, y);
  EXPECT_FLOAT_EQ(y[0], -2 * 210.0f + 3);
  EXPECT_FLOAT_EQ(y[1], -2 * 321.0f + 3);
  EXPECT_FLOAT_EQ(y[2], -2 * 32.0f + 3);
  EXPECT_EQ(y[3], 0.0f);
}

TEST(ConvOutputLengthTest, MatchesTorchFormula) {
  for (int k = 1; k <= 9; ++k) {
    for (int s = 1; s <= 3; ++s) {
      for (int d = 1; d <= 3; ++d) {
        for (int p = 0; p <= 6; ++p) {
          SubBlockDesc desc;
          desc.in_channels = desc.out_channels = 1;
          desc.kernel_size = k;
          desc.stride = s;
          desc.dilation = d;
          desc.padding = p;
          for (int len = 0; len <= 40; ++len) {
            const double torch = std::floor(double(len + 2 * p - d * (k - 1) - 1) / s) + 1;
            ASSERT_EQ(ConvOutputLength(desc, len), std::max(0, int(torch)))
                << "K=" << k << " s=" << s << " d=" << d << " p=" << p << " L=" << len;
          }
        }
      }
    }
  }
  // QuartzNet prologue: K33, stride 2, padding 16 gives ceil(L / 2).
  SubBlockDesc qn;
  qn.in_channels = qn.out_channels = 1;
  qn.kernel_size = 33;
  qn.stride = 2;
  qn.padding = 16;
  for (int len = 0; len < 100; ++len) EXPECT_EQ(ConvOutputLength(qn, len), (len + 1) / 2);
}

TEST(IsValidTest, RejectsBadDescriptors) {
  SubBlockDesc d;
  d.in_channels = d.out_channels = 4;
  EXPECT_TRUE(IsValid(d));
  auto with = [&](auto mutate) {
    SubBlockDesc copy = d;
    mutate(copy);
    return IsValid(copy);
  };
  EXPECT_FALSE(with([](SubBlockDesc& c) { c.in_channels = 0; }));
  EXPECT_FALSE(with([](SubBlockDesc& c) { c.out_channels = -1; }));
  EXPECT_FALSE(with([](SubBlockDesc& c) { c.kernel_size = 0; }));
  EXPECT_FALSE(with([](SubBlockDesc& c) { c.stride = 0; }));
  EXPECT_FALSE(with([](SubBlockDesc& c) { c.dilation = 0; }));
  EXPECT_FALSE(with([](SubBlockDesc& c) { c.padding = -1; }));
  EXPECT_TRUE(with([](SubBlockDesc& c) {
    c.separable = true;
    c.kernel_size = 87;
    c.dilation = 2;
  }));
}

TEST(WorkspaceTest, IndependentOfGeometryAndBounded) {
  // The engine sizes the workspace once per model from the descriptor alone (the signature
  // guarantees it does not depend on the batch); real shapes must stay under 4 Mi floats.
  SubBlockDesc qn;
  qn.in_channels = qn.out_channels = 512;
  qn.kernel_size = 87;
  qn.dilation = 2;
  qn.separable = true;
  EXPECT_LT(FusedSubBlockWorkspaceFloats(qn), std::size_t{4} << 20);
  SubBlockDesc jasper;
  jasper.in_channels = 896;
  jasper.out_channels = 1024;
  jasper.kernel_size = 29;
  jasper.dilation = 2;
  EXPECT_LT(FusedSubBlockWorkspaceFloats(jasper), std::size_t{4} << 20);
}

// The probe: one answer per process, levels ordered, the cap lowers and restores the level.
TEST(CpuFeaturesTest, ProbeIsConsistentAndTheCapWorks) {
  const CpuFeatures& f = GetCpuFeatures();
  EXPECT_EQ(&f, &GetCpuFeatures());
  EXPECT_TRUE(f.best < CpuIsa::kAvx2 || f.avx2_fma);
  EXPECT_TRUE(f.best < CpuIsa::kAvx512 || f.avx512);
  EXPECT_TRUE(f.best != CpuIsa::kAmx || (f.amx_bf16 && f.amx_permitted && f.avx512_bf16));
  EXPECT_TRUE(!f.amx_bf16 || f.amx_permitted || !f.amx_note.empty());
  EXPECT_LE(ActiveCpuIsa(), f.best);
  {
    const ScopedIsa baseline(CpuIsa::kBaseline);
    EXPECT_EQ(ActiveCpuIsa(), CpuIsa::kBaseline);
  }
  const CpuIsa before = ActiveCpuIsa();
  {
    const ScopedIsa all(CpuIsa::kAmx);
    EXPECT_EQ(ActiveCpuIsa(), f.best);
  }
  EXPECT_EQ(ActiveCpuIsa(), before);
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx}) {
    CpuIsa parsed = CpuIsa::kBaseline;
    EXPECT_TRUE(ParseCpuIsa(CpuIsaName(isa), &parsed));
    EXPECT_EQ(parsed, isa);
  }
  CpuIsa untouched = CpuIsa::kAvx2;
  EXPECT_FALSE(ParseCpuIsa("sse9", &untouched));
  EXPECT_EQ(untouched, CpuIsa::kAvx2);
  EXPECT_NE(DescribeCpuFeatures().find(CpuIsaName(ActiveCpuIsa())), std::string::npos);
  std::cout << "CPU: " << DescribeCpuFeatures() << "\n";
}

// The paths the sweep runs only where the CPU has them, each on a QuartzNet-sized sub-block
// (C = 256, K = 33, residual), said SKIPPED elsewhere.
Case QuartzNetLike() {
  Case c;
  c.name = "QuartzNetLike";
  c.kernel_size = 33;
  c.in_channels = c.out_channels = 256;
  c.in_time = 130;
  c.batch = 3;
  c.residual_channels = {256};
  return c;
}

TEST(CpuPathTest, Avx2Fp32) {
  if (ActiveCpuIsa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2: " << DescribeCpuFeatures();
  const ScopedIsa avx2(CpuIsa::kAvx2);  // this level and those below it
  RunCase(QuartzNetLike());
}

TEST(CpuPathTest, Avx512Fp32) {
  if (ActiveCpuIsa() < CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512: " << DescribeCpuFeatures();
  const ScopedIsa avx512(CpuIsa::kAvx512);
  RunCase(QuartzNetLike());
}

TEST(CpuPathTest, Avx512Bf16) {
  if (ActiveCpuIsa() < CpuIsa::kAvx512 || !GetCpuFeatures().avx512_bf16) {
    GTEST_SKIP() << "no AVX-512 BF16: " << DescribeCpuFeatures();
  }
  const ScopedIsa avx512(CpuIsa::kAvx512);
  ASSERT_TRUE(HasBf16Gemm());
  RunCase(QuartzNetLike());
}

TEST(CpuPathTest, AmxBf16) {
  if (ActiveCpuIsa() < CpuIsa::kAmx) GTEST_SKIP() << "no AMX: " << DescribeCpuFeatures();
  RunCase(QuartzNetLike());
}

TEST(CpuPathTest, Avx512VnniInt8) {
  if (ActiveCpuIsa() < CpuIsa::kAvx512 || !GetCpuFeatures().avx512_vnni) {
    GTEST_SKIP() << "no AVX-512 VNNI: " << DescribeCpuFeatures();
  }
  const ScopedIsa avx512(CpuIsa::kAvx512);
  ASSERT_TRUE(HasInt8Gemm());
  RunCase(QuartzNetLike());
  Case nonnegative = QuartzNetLike();
  nonnegative.nonnegative_input = true;
  nonnegative.nonnegative_residuals = true;
  RunCase(nonnegative);
  nonnegative.per_channel_scales = true;
  RunCase(nonnegative);
  nonnegative.smoothing = true;
  RunCase(nonnegative);
}

TEST(CpuPathTest, AmxInt8) {
  if (ActiveCpuIsa() < CpuIsa::kAmx || !GetCpuFeatures().amx_int8) {
    GTEST_SKIP() << "no AMX-INT8: " << DescribeCpuFeatures();
  }
  ASSERT_TRUE(HasInt8Gemm());
  RunCase(QuartzNetLike());
  Case nonnegative = QuartzNetLike();
  nonnegative.nonnegative_input = true;
  nonnegative.nonnegative_residuals = true;
  RunCase(nonnegative);
  nonnegative.per_channel_scales = true;
  RunCase(nonnegative);
  nonnegative.smoothing = true;
  RunCase(nonnegative);
}

// The INT8 GEMM's row quantizers: the AVX-512 form (the VNNI and AMX gathers) writes the bytes
// of the portable one (the portable gather) for both grids and both operand kinds (signed grid:
// q, or q + 128 for vpdpbusd; unsigned grid: u - 128, or u), and the zero's byte past n.
TEST(Int8QuantizeTest, RowQuantizersAgree) {
#if JASPER_X86_DISPATCH
  if (ActiveCpuIsa() < CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512: " << DescribeCpuFeatures();
  Rng rng(FreshSeed());
  for (int n : {1, 15, 16, 17, 70}) {
    std::vector<float> src = rng.Vector(n, 3.0f);
    src[0] = kNaN;
    if (n > 2) src[2] = 1e30f;  // clipped
    for (bool to_unsigned : {false, true}) {
      for (bool grid_unsigned : {false, true}) {
        SCOPED_TRACE(testing::Message() << "n " << n << ", operand unsigned " << to_unsigned
                                        << ", grid unsigned " << grid_unsigned);
        std::vector<std::int8_t> portable(80, 0x55), avx512(80, 0x55);
        cpu_internal::QuantizeRowPortable(src.data(), n, portable.data(), 0.02f, to_unsigned,
                                          grid_unsigned);
        const int written = cpu_internal::QuantizeRowAvx512(src.data(), n, avx512.data(), 0.02f,
                                                            to_unsigned, grid_unsigned);
        EXPECT_EQ(written, (n + 15) / 16 * 16);
        for (int c = 0; c < n; ++c) EXPECT_EQ(avx512[c], portable[c]) << c;
        const std::int8_t zero = static_cast<std::int8_t>(to_unsigned == grid_unsigned ? 0 : 0x80);
        for (int c = n; c < written; ++c) EXPECT_EQ(avx512[c], zero) << c;
        // The values: NaN is the grid's zero; a clipped value its top.
        const int q0 =
            portable[0] + (to_unsigned != grid_unsigned ? (to_unsigned ? -128 : 128) : 0);
        EXPECT_EQ(q0, grid_unsigned ? 0 : -127);
      }
    }
  }
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

// Packing rejects precisions the CPU kernels do not have, and INT8 without valid scales.
TEST(PackSubBlockTest, RejectsFp16AndInt8WithoutScales) {
  SubBlockDesc d;
  d.in_channels = d.out_channels = 4;
  const std::vector<float> w(16, 1.0f);
  const SubBlockWeights weights{nullptr, w.data(), nullptr};
  EXPECT_TRUE(PackSubBlock(d, weights, nullptr, 0, Precision::kBf16).valid);
  EXPECT_FALSE(PackSubBlock(d, weights, nullptr, 0, Precision::kFp16).valid);
  EXPECT_FALSE(PackSubBlock(d, weights, nullptr, 0, Precision::kInt8).valid);
  for (float bad : {0.0f, -1.0f, kNaN, std::numeric_limits<float>::infinity()}) {
    EXPECT_FALSE(PackSubBlock(d, weights, nullptr, 0, Precision::kInt8, &bad).valid) << bad;
  }
  const float scale = 0.5f;
  EXPECT_TRUE(PackSubBlock(d, weights, nullptr, 0, Precision::kInt8, &scale).valid);
  // A separable sub-block's depthwise input scales per channel: each must be finite, > 0 and
  // have a finite inverse.
  SubBlockDesc sep = d;
  sep.separable = true;
  sep.kernel_size = 3;
  sep.padding = 1;
  const std::vector<float> dw(12, 0.25f);
  const SubBlockWeights sep_weights{dw.data(), w.data(), nullptr};
  const float two[] = {0.5f, 0.5f};
  std::vector<float> channels(4, 0.125f);
  std::vector<float> factors(4, 2.0f);
  Int8PackOptions options;
  options.input_channel_scales = channels.data();
  options.output_smoothing = factors.data();
  EXPECT_TRUE(PackSubBlock(sep, sep_weights, nullptr, 0, Precision::kInt8, two, options).valid);
  for (float bad : {0.0f, -1.0f, kNaN, std::numeric_limits<float>::infinity(), 1e-39f}) {
    channels[3] = bad;
    EXPECT_FALSE(PackSubBlock(sep, sep_weights, nullptr, 0, Precision::kInt8, two, options).valid)
        << bad;
    channels[3] = 0.125f;
    factors[1] = bad;
    EXPECT_FALSE(PackSubBlock(sep, sep_weights, nullptr, 0, Precision::kInt8, two, options).valid)
        << bad;
    factors[1] = 2.0f;
  }
}

// INT8 clips activations beyond 127 steps and gives the same bits on every path: A = 1000 x
// the scale saturates at 127 steps, so y = 127 * scale * w exactly (w = 1 is exact in INT8).
TEST(PackSubBlockTest, Int8ClipsActivationsAndPathsAgree) {
  SubBlockDesc d;
  d.in_channels = 70;  // over one 64-wide K granule
  d.out_channels = 33;
  d.activation = Activation::kIdentity;
  const std::vector<float> w(static_cast<std::size_t>(d.in_channels) * d.out_channels, 1.0f);
  const float scale = 0.25f;
  const int time = 21;
  std::vector<float> x(static_cast<std::size_t>(time) * d.in_channels);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0 ? -1000.0f : 1000.0f) * scale;
  const int lengths[] = {time};
  BatchGeometry g{1, time, time, lengths, lengths};
  std::vector<float> first;
  for (const Variant& v : Variants()) {
    if (v.precision != Precision::kInt8) continue;
    SCOPED_TRACE(v.Name());
    const ScopedIsa isa(v.isa);
    const PackedSubBlock p =
        PackSubBlock(d, {nullptr, w.data(), nullptr}, nullptr, 0, Precision::kInt8, &scale);
    ASSERT_TRUE(p.valid);
    std::vector<float> workspace(PackedSubBlockWorkspaceFloats(p), kNaN);
    std::vector<float> y(static_cast<std::size_t>(time) * d.out_channels, kNaN);
    FusedSubBlockCpuPacked(p, x.data(), g, nullptr, workspace.data(), y.data());
    for (int t = 0; t < time; ++t) {
      float expected = 0.0f;  // channel c is -127 or +127 steps
      for (int c = 0; c < d.in_channels; ++c) {
        const std::size_t i = static_cast<std::size_t>(t) * d.in_channels + c;
        expected += (i % 3 == 0 ? -127.0f : 127.0f) * scale;
      }
      for (int o = 0; o < d.out_channels; ++o) {
        ASSERT_EQ(y[static_cast<std::size_t>(t) * d.out_channels + o], expected) << t << " " << o;
      }
    }
    if (first.empty()) {
      first = y;
    } else {
      EXPECT_EQ(0, std::memcmp(first.data(), y.data(), sizeof(float) * y.size()));
    }
  }
}

// DepthwiseReference (INT8 calibration's view of the pointwise GEMM's input) is the separable
// sub-block with an identity pointwise conv, no bias and no activation.
TEST(SubBlockReferenceTest, DepthwiseReferenceIsTheSeparableHalf) {
  Rng rng(FreshSeed());
  SubBlockDesc d;
  d.in_channels = d.out_channels = 19;
  d.kernel_size = 7;
  d.stride = 2;
  d.dilation = 2;
  d.padding = 6;
  d.separable = true;
  d.activation = Activation::kIdentity;
  const int batch = 3, in_time = 40;
  const int out_time = ConvOutputLength(d, in_time);
  const int in_len[] = {40, 0, 17};
  const int out_len[] = {ConvOutputLength(d, 40), 0, ConvOutputLength(d, 17)};
  std::vector<float> x = rng.Vector(static_cast<std::size_t>(batch) * in_time * d.in_channels, 1);
  Garble(x, batch, in_time, d.in_channels, {40, 0, 17});
  const std::vector<float> dw = rng.Vector(static_cast<std::size_t>(7) * d.in_channels, 1);
  std::vector<float> eye(static_cast<std::size_t>(d.in_channels) * d.in_channels, 0.0f);
  for (int c = 0; c < d.in_channels; ++c) eye[static_cast<std::size_t>(c) * d.in_channels + c] = 1;
  BatchGeometry g{batch, in_time, out_time, in_len, out_len};
  const std::size_t n = static_cast<std::size_t>(batch) * out_time * d.in_channels;
  std::vector<float> expected(n, kNaN), got(n, kNaN);
  SubBlockReference(d, {dw.data(), eye.data(), nullptr}, x.data(), g, nullptr, 0, expected.data());
  DepthwiseReference(d, dw.data(), x.data(), g, got.data());
  EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), sizeof(float) * n));
}

// Direct log-softmax in long double, without the max shift (the logits are kept modest).
void CheckHead(const std::vector<float>& logits, int batch, int time, int vocab,
               const std::vector<int>& lengths, const std::vector<float>& log_probs,
               const std::vector<int>& ids, const std::vector<float>& best) {
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < time; ++t) {
      const std::size_t frame = static_cast<std::size_t>(b) * time + t;
      const float* in = logits.data() + frame * vocab;
      const float* out = log_probs.data() + frame * vocab;
      if (t >= lengths[b]) {
        EXPECT_EQ(ids[frame], -1);
        EXPECT_EQ(best[frame], 0.0f);
        for (int v = 0; v < vocab; ++v) ASSERT_EQ(out[v], 0.0f) << "b=" << b << " t=" << t;
        continue;
      }
      long double sum = 0;
      for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<long double>(in[v]));
      const long double lse = std::log(sum);
      int arg = 0;
      for (int v = 1; v < vocab; ++v) arg = in[v] > in[arg] ? v : arg;
      for (int v = 0; v < vocab; ++v) {
        ASSERT_NEAR(out[v], static_cast<double>(in[v] - lse), 1e-5) << "b=" << b << " t=" << t;
      }
      EXPECT_EQ(ids[frame], arg) << "b=" << b << " t=" << t;
      EXPECT_NEAR(best[frame], static_cast<double>(in[arg] - lse), 1e-5);
    }
  }
}

TEST(LogSoftmaxArgmaxTest, MatchesDirectComputation) {
  const std::uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  Rng rng(seed);
  for (int vocab : {1, 29, 1025}) {
    const int batch = 3;
    const int time = 9;
    const std::vector<int> lengths = {9, 0, 4};
    std::vector<float> logits = rng.Vector(static_cast<std::size_t>(batch) * time * vocab, 8.0f);
    // A tie (the first maximum wins, as torch.argmax) in frame (0, 1).
    if (vocab > 3) {
      float* f = logits.data() + vocab;
      f[1] = f[3] = 50.0f;
    }
    std::vector<float> log_probs(logits.size(), kNaN);
    std::vector<int> ids(batch * time, 12345);
    std::vector<float> best(batch * time, kNaN);
    LogSoftmaxArgmax(logits.data(), batch, time, vocab, lengths.data(), log_probs.data(),
                     ids.data(), best.data());
    CheckHead(logits, batch, time, vocab, lengths, log_probs, ids, best);
    if (vocab > 3) {
      EXPECT_EQ(ids[1], 1);
    }

    // In place (log_probs aliasing logits) gives the same bits.
    std::vector<float> in_place = logits;
    std::vector<int> ids2(batch * time, 12345);
    std::vector<float> best2(batch * time, kNaN);
    LogSoftmaxArgmax(in_place.data(), batch, time, vocab, lengths.data(), in_place.data(),
                     ids2.data(), best2.data());
    EXPECT_EQ(in_place, log_probs);
    EXPECT_EQ(ids2, ids);
    EXPECT_EQ(best2, best);
  }
}

TEST(LogSoftmaxArgmaxTest, StableForLargeLogits) {
  // exp(1e4) overflows even in double: the kernel must shift by the max.
  const int vocab = 5;
  const std::vector<float> logits = {1e4f, 1e4f - 1, 1e4f - 2, -1e4f, 1e4f - 0.5f};
  const int length = 1;
  std::vector<float> log_probs(vocab, kNaN);
  int id = -7;
  float best = kNaN;
  LogSoftmaxArgmax(logits.data(), 1, 1, vocab, &length, log_probs.data(), &id, &best);
  const double lse = std::log(1 + std::exp(-1.0) + std::exp(-2.0) + std::exp(-0.5));
  EXPECT_EQ(id, 0);
  EXPECT_NEAR(best, -lse, 1e-6);
  EXPECT_NEAR(log_probs[1], -1 - lse, 1e-6);
  EXPECT_NEAR(log_probs[3], -2e4 - lse, 1e-2);
  for (float v : log_probs) EXPECT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace jasper::kernels
