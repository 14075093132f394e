// Test helpers for model loading: tiny Jasper/QuartzNet configs and random checkpoints under
// NeMo's state_dict names (tests/random_model.h, shared with tools/bench), raw safetensors
// builders, a naive
// double-precision NeMo forward (conv -> BN -> ReLU, JasperBlock list passing), and the folded
// model run through kernels::SubBlockReference. Header-only; used by model_loader_test.cc.
// Thread-compatible.
#ifndef JASPER_TESTS_MODEL_TEST_UTIL_H_
#define JASPER_TESTS_MODEL_TEST_UTIL_H_

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "gtest/gtest.h"
#include "kernels/sub_block.h"
#include "tests/random_model.h"

namespace jasper::test_util {

// A safetensors file with arbitrary header text (for malformed cases).
inline std::string RawFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

inline std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// Naive NeMo forward (double, one utterance at its exact length, zero 'same' padding).

struct Act {
  int t = 0;
  int c = 0;
  std::vector<double> v;  // [t, c]
};

inline const std::vector<float>& Get(const Tensors& t, const std::string& name) {
  return t.at(name).second;
}

// PyTorch Conv1d, no bias; depthwise when groups == channels.
inline Act NaiveConv(const Act& x, const std::vector<float>& w, int c_out, int k, int stride,
                     int dil, bool depthwise) {
  const int pad = dil * (k - 1) / 2;
  Act y;
  y.t = (x.t + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  y.c = c_out;
  y.v.assign(static_cast<std::size_t>(y.t) * c_out, 0.0);
  for (int t = 0; t < y.t; ++t) {
    for (int o = 0; o < c_out; ++o) {
      double acc = 0.0;
      for (int kk = 0; kk < k; ++kk) {
        const int ti = t * stride - pad + kk * dil;
        if (ti < 0 || ti >= x.t) continue;
        if (depthwise) {
          acc += w[o * k + kk] * x.v[ti * x.c + o];
        } else {
          for (int c = 0; c < x.c; ++c) acc += w[(o * x.c + c) * k + kk] * x.v[ti * x.c + c];
        }
      }
      y.v[t * c_out + o] = acc;
    }
  }
  return y;
}

inline Act NaiveBatchNorm(Act x, const Tensors& ts, const std::string& prefix) {
  const auto& g = Get(ts, prefix + ".weight");
  const auto& b = Get(ts, prefix + ".bias");
  const auto& m = Get(ts, prefix + ".running_mean");
  const auto& v = Get(ts, prefix + ".running_var");
  for (int t = 0; t < x.t; ++t) {
    for (int c = 0; c < x.c; ++c) {
      double& e = x.v[t * x.c + c];
      e = (e - m[c]) / std::sqrt(v[c] + 1e-3) * g[c] + b[c];
    }
  }
  return x;
}

inline void Relu(Act& x) {
  for (double& e : x.v) e = std::max(e, 0.0);
}

// JasperBlock.forward as NeMo writes it: xs list passing, res[i] reads xs[i].
inline Act NaiveForward(const ModelConfig& config, const Tensors& ts, const Act& input) {
  std::vector<Act> xs = {input};
  for (std::size_t b = 0; b < config.blocks.size(); ++b) {
    const BlockConfig& blk = config.blocks[b];
    const std::string p = "encoder.encoder." + std::to_string(b) + ".";
    Act out = xs.back();
    for (int j = 0; j < blk.repeat; ++j) {
      const std::string m = p + "mconv.";
      if (blk.separable) {
        out = NaiveConv(out, Get(ts, m + std::to_string(5 * j) + ".conv.weight"), out.c, blk.kernel,
                        blk.stride, blk.dilation, true);
        out = NaiveConv(out, Get(ts, m + std::to_string(5 * j + 1) + ".conv.weight"), blk.filters,
                        1, 1, 1, false);
        out = NaiveBatchNorm(out, ts, m + std::to_string(5 * j + 2));
      } else {
        out = NaiveConv(out, Get(ts, m + std::to_string(4 * j) + ".conv.weight"), blk.filters,
                        blk.kernel, blk.stride, blk.dilation, false);
        out = NaiveBatchNorm(out, ts, m + std::to_string(4 * j + 1));
      }
      if (j + 1 < blk.repeat) Relu(out);
    }
    for (std::size_t i = 0; blk.residual && ts.count(p + "res." + std::to_string(i) + ".1.bias");
         ++i) {
      const std::string r = p + "res." + std::to_string(i) + ".";
      Act res = NaiveConv(xs[i], Get(ts, r + "0.conv.weight"), blk.filters, 1, 1, 1, false);
      res = NaiveBatchNorm(res, ts, r + "1");
      for (std::size_t e = 0; e < out.v.size(); ++e) out.v[e] += res.v[e];
    }
    Relu(out);
    if (blk.residual && blk.residual_dense) {
      xs.push_back(out);
    } else {
      xs = {out};
    }
  }
  const int n = config.num_outputs();
  Act logits = NaiveConv(xs.back(), Get(ts, "decoder.decoder_layers.0.weight"), n, 1, 1, 1, false);
  const auto& bias = Get(ts, "decoder.decoder_layers.0.bias");
  for (int t = 0; t < logits.t; ++t) {
    for (int o = 0; o < n; ++o) logits.v[t * n + o] += bias[o];
  }
  return logits;
}

inline std::vector<float> RunSubBlock(const FoldedSubBlock& sub, const std::vector<float>& x,
                                      int t_in, const std::vector<const std::vector<float>*>& panes,
                                      int* t_out) {
  *t_out = kernels::ConvOutputLength(sub.desc, t_in);
  std::vector<float> y(static_cast<std::size_t>(*t_out) * sub.desc.out_channels, -777.0f);
  kernels::BatchGeometry geometry{1, t_in, *t_out, &t_in, t_out};
  std::vector<kernels::ResidualInput> residuals;
  for (std::size_t p = 0; p < panes.size(); ++p) {
    residuals.push_back(
        {panes[p]->data(), sub.residual_weights[p].data(), sub.residual_channels[p]});
  }
  kernels::SubBlockWeights weights{sub.depthwise.empty() ? nullptr : sub.depthwise.data(),
                                   sub.weight.data(), sub.bias.data()};
  kernels::SubBlockReference(sub.desc, weights, x.data(), geometry, residuals.data(),
                             static_cast<int>(residuals.size()), y.data());
  return y;
}

// The folded model through the reference kernel; residual panes from residual_sources.
// The folded model through the reference kernel; residual panes from residual_sources. Block
// outputs ([T_b, C_b] each) go to *block_outputs when given.
inline std::vector<float> FoldedForward(const Model& model, const std::vector<float>& input,
                                        int t_in, int* t_out,
                                        std::vector<std::vector<float>>* block_outputs = nullptr) {
  std::vector<std::vector<float>> outputs;
  std::vector<float> cur = input;
  int t = t_in;
  for (const FoldedBlock& block : model.blocks()) {
    for (const FoldedSubBlock& sub : block.sub_blocks) {
      std::vector<const std::vector<float>*> panes;
      for (int src : sub.residual_sources) panes.push_back(src < 0 ? &input : &outputs[src]);
      int next_t = 0;
      cur = RunSubBlock(sub, cur, t, panes, &next_t);
      t = next_t;
    }
    outputs.push_back(cur);
  }
  if (block_outputs != nullptr) *block_outputs = outputs;
  return RunSubBlock(model.decoder(), cur, t, {}, t_out);
}

// Encodes values exactly representable in the target type (test helper, no rounding).
inline std::string EncodeHalf(const std::vector<float>& v, bool bf16) {
  std::string out;
  for (float f : v) {
    uint32_t bits = 0;
    std::memcpy(&bits, &f, 4);
    uint16_t h = 0;
    if (bf16) {
      h = static_cast<uint16_t>(bits >> 16);
    } else if (f != 0.0f) {
      const uint32_t exp = (bits >> 23) & 0xff;
      h = static_cast<uint16_t>(((bits >> 16) & 0x8000) | ((exp - 112) << 10) |
                                ((bits >> 13) & 0x3ff));
    }
    out.append(reinterpret_cast<const char*>(&h), 2);
  }
  return out;
}

// A scratch folder under ::testing::TempDir(), named after the running test; removed on
// destruction.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("model_loader_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }
  void Write(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path_ / name, std::ios::binary);
    out << bytes;
  }

 private:
  std::filesystem::path path_;
};

// MakeRandomModel for tests: a failure is a test failure and gives nullptr.
inline std::shared_ptr<const Model> BuildModel(const ModelConfig& config, unsigned seed) {
  absl::StatusOr<std::shared_ptr<const Model>> model = MakeRandomModel(config, seed);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// Writes model.json and model.safetensors into `dir` and loads the folder.
inline absl::StatusOr<std::shared_ptr<const Model>> WriteAndLoad(const TempDir& dir,
                                                                 const std::string& json_text,
                                                                 const std::string& weights) {
  dir.Write("model.json", json_text);
  dir.Write("model.safetensors", weights);
  return Model::Load(dir.path());
}

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_MODEL_TEST_UTIL_H_
