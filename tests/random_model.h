// Random models for tests and benchmarks: small Jasper/QuartzNet configs, the QuartzNet 15x5
// architecture, and random checkpoints under NeMo's state_dict names (written independently of
// engine/model/model.cc, so the loader is tested against them). Header-only, no test framework, so
// tools/bench/jasper_bench.cc uses it too; tests reach it through tests/model_test_util.h.
// Thread-compatible (pure functions of their arguments).
#ifndef JASPER_TESTS_RANDOM_MODEL_H_
#define JASPER_TESTS_RANDOM_MODEL_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"

namespace jasper::test_util {

// name -> (shape, FP32 values), the input of SerializeSafetensors().
using Tensors = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;

// ---------------------------------------------------------------------------------------------
// Building tiny models.

inline BlockConfig Block(int filters, int repeat, int kernel, int stride, int dilation,
                         bool residual, bool dense, bool separable) {
  BlockConfig b;
  b.filters = filters;
  b.repeat = repeat;
  b.kernel = kernel;
  b.stride = stride;
  b.dilation = dilation;
  b.residual = residual;
  b.residual_dense = dense;
  b.separable = separable;
  return b;
}

inline ModelConfig ConfigWith(std::vector<BlockConfig> blocks, int features = 8) {
  ModelConfig c;
  c.name = "tiny";
  c.featurizer.features = features;
  c.feat_in = features;
  c.blocks = std::move(blocks);
  c.decoder_feat_in = c.blocks.back().filters;
  c.labels = {" ", "a", "b", "c", "'"};
  return c;
}

// QuartzNet-like: strided separable prologue (R=2, so both sub-blocks stride), separable
// residual block, dilated dense block, 1x1 dense epilogue.
inline ModelConfig SeparableConfig() {
  return ConfigWith(
      {Block(6, 2, 5, 2, 1, false, false, true), Block(6, 3, 3, 1, 1, true, false, true),
       Block(10, 2, 3, 1, 2, false, false, false), Block(12, 1, 1, 1, 1, false, false, false)});
}

// Jasper DR-like: dense prologue, three dense-residual blocks, dense epilogue.
inline ModelConfig DenseResidualConfig() {
  return ConfigWith(
      {Block(7, 1, 3, 2, 1, false, false, false), Block(7, 2, 3, 1, 1, true, true, false),
       Block(9, 2, 5, 1, 1, true, true, false), Block(9, 1, 3, 1, 1, true, true, false),
       Block(11, 1, 1, 1, 1, false, false, false)});
}

inline std::vector<float> Random(std::mt19937& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline void AddBatchNorm(Tensors& t, const std::string& prefix, int c, std::mt19937& rng) {
  t[prefix + ".weight"] = {{c}, Random(rng, c, 0.5f, 1.5f)};
  t[prefix + ".bias"] = {{c}, Random(rng, c, -0.5f, 0.5f)};
  t[prefix + ".running_mean"] = {{c}, Random(rng, c, -0.5f, 0.5f)};
  t[prefix + ".running_var"] = {{c}, Random(rng, c, 0.05f, 2.0f)};
}

// QuartzNet 15x5 (NeMo's QuartzNet15x5Base-En encoder): C1 (K33 stride 2), 5 groups of 3
// residual blocks of 5 separable sub-blocks (256/256/512/512/512 filters, K 33/39/51/63/75),
// C2 (K87 dilation 2), C3 (1x1, 1024), decoder to 28 characters + blank; 64 log-mel features.
inline ModelConfig QuartzNet15x5Config() {
  ModelConfig c;
  c.name = "quartznet15x5-random";
  c.featurizer.features = 64;
  c.feat_in = 64;
  c.blocks.push_back(Block(256, 1, 33, 2, 1, false, false, true));  // C1
  const int filters[5] = {256, 256, 512, 512, 512};
  const int kernels[5] = {33, 39, 51, 63, 75};
  for (int g = 0; g < 5; ++g) {
    for (int r = 0; r < 3; ++r) {
      c.blocks.push_back(Block(filters[g], 5, kernels[g], 1, 1, true, false, true));
    }
  }
  c.blocks.push_back(Block(512, 1, 87, 1, 2, false, false, true));   // C2
  c.blocks.push_back(Block(1024, 1, 1, 1, 1, false, false, false));  // C3
  c.decoder_feat_in = 1024;
  c.labels = {" "};
  for (char ch = 'a'; ch <= 'z'; ++ch) c.labels.push_back(std::string(1, ch));
  c.labels.push_back("'");
  return c;
}

inline std::vector<float> Symmetric(std::mt19937& rng, std::size_t n, float bound) {
  return Random(rng, n, -bound, bound);
}

// WeightInit::kUnitVariance (see MakeTensors). Residual branches read only the block input
// (dense residual panes are not generated).
inline Tensors UnitVarianceTensors(const ModelConfig& config, unsigned seed) {
  std::mt19937 rng(seed);
  Tensors t;
  auto batch_norm = [&](const std::string& prefix, int c) {
    t[prefix + ".weight"] = {{c}, Random(rng, c, 0.8f, 1.2f)};
    t[prefix + ".bias"] = {{c}, Random(rng, c, -0.1f, 0.1f)};
    t[prefix + ".running_mean"] = {{c}, Random(rng, c, -0.1f, 0.1f)};
    t[prefix + ".running_var"] = {{c}, Random(rng, c, 0.8f, 1.2f)};
  };
  for (std::size_t b = 0; b < config.blocks.size(); ++b) {
    const BlockConfig& blk = config.blocks[b];
    const int in = b == 0 ? config.feat_in : config.blocks[b - 1].filters;
    const std::string m = "encoder.encoder." + std::to_string(b) + ".mconv.";
    for (int j = 0; j < blk.repeat; ++j) {
      const int cin = j == 0 ? in : blk.filters;
      const int k = blk.kernel;
      const int o = blk.filters;
      if (blk.separable) {
        t[m + std::to_string(5 * j) + ".conv.weight"] = {
            {cin, 1, k}, Symmetric(rng, std::size_t(cin) * k, std::sqrt(3.0f / k))};
        t[m + std::to_string(5 * j + 1) + ".conv.weight"] = {
            {o, cin, 1}, Symmetric(rng, std::size_t(o) * cin, std::sqrt(3.0f / cin))};
        batch_norm(m + std::to_string(5 * j + 2), o);
      } else {
        t[m + std::to_string(4 * j) + ".conv.weight"] = {
            {o, cin, k}, Symmetric(rng, std::size_t(o) * cin * k, std::sqrt(3.0f / (cin * k)))};
        batch_norm(m + std::to_string(4 * j + 1), o);
      }
    }
    if (blk.residual) {
      const std::string r = "encoder.encoder." + std::to_string(b) + ".res.0.";
      t[r + "0.conv.weight"] = {
          {blk.filters, in, 1},
          Symmetric(rng, std::size_t(blk.filters) * in, 0.5f * std::sqrt(3.0f / in))};
      batch_norm(r + "1", blk.filters);
    }
  }
  const int n = config.num_outputs();
  const int c = config.decoder_feat_in;
  t["decoder.decoder_layers.0.weight"] = {{n, c, 1},
                                          Symmetric(rng, std::size_t(n) * c, std::sqrt(3.0f / c))};
  t["decoder.decoder_layers.0.bias"] = {{n}, Symmetric(rng, n, 0.1f)};
  return t;
}

// How MakeTensors draws weights.
enum class WeightInit {
  // Fixed ranges (conv weights in [-1, 1] / [-0.5, 0.5], wide batch-norm statistics): large
  // values that exercise folding in small test models.
  kTest,
  // Variance-preserving (uniform +-sqrt(3 / fan_in), batch norm near identity, residual branch
  // at half scale): activations stay O(1) through a deep model such as QuartzNet 15x5, with no
  // overflow or denormals to distort timings (benchmarks).
  kUnitVariance,
};

// Tensors under NeMo's state_dict names, written here independently of the loader.
inline Tensors MakeTensors(const ModelConfig& config, unsigned seed,
                           WeightInit init = WeightInit::kTest) {
  if (init == WeightInit::kUnitVariance) return UnitVarianceTensors(config, seed);
  std::mt19937 rng(seed);
  Tensors t;
  std::vector<int> dense_panes;
  for (std::size_t b = 0; b < config.blocks.size(); ++b) {
    const BlockConfig& blk = config.blocks[b];
    const int in = b == 0 ? config.feat_in : config.blocks[b - 1].filters;
    const std::string p = "encoder.encoder." + std::to_string(b) + ".";
    for (int j = 0; j < blk.repeat; ++j) {
      const int cin = j == 0 ? in : blk.filters;
      const int k = blk.kernel;
      const int o = blk.filters;
      if (blk.separable) {
        const std::string m = p + "mconv.";
        t[m + std::to_string(5 * j) + ".conv.weight"] = {{cin, 1, k}, Random(rng, cin * k, -1, 1)};
        t[m + std::to_string(5 * j + 1) + ".conv.weight"] = {{o, cin, 1},
                                                             Random(rng, o * cin, -0.5, 0.5)};
        AddBatchNorm(t, m + std::to_string(5 * j + 2), o, rng);
      } else {
        const std::string m = p + "mconv.";
        t[m + std::to_string(4 * j) + ".conv.weight"] = {{o, cin, k},
                                                         Random(rng, o * cin * k, -0.5, 0.5)};
        AddBatchNorm(t, m + std::to_string(4 * j + 1), o, rng);
      }
    }
    if (blk.residual) {
      std::vector<int> panes = {in};
      if (blk.residual_dense) {
        dense_panes.push_back(in);
        panes = dense_panes;
      }
      for (std::size_t q = 0; q < panes.size(); ++q) {
        const std::string r = p + "res." + std::to_string(q) + ".";
        t[r + "0.conv.weight"] = {{blk.filters, panes[q], 1},
                                  Random(rng, blk.filters * panes[q], -0.5, 0.5)};
        AddBatchNorm(t, r + "1", blk.filters, rng);
      }
    }
  }
  const int n = config.num_outputs();
  t["decoder.decoder_layers.0.weight"] = {{n, config.decoder_feat_in, 1},
                                          Random(rng, n * config.decoder_feat_in, -1, 1)};
  t["decoder.decoder_layers.0.bias"] = {{n}, Random(rng, n, -1, 1)};
  return t;
}

// A loaded Model with MakeTensors(config, seed, init) weights (no files written).
inline absl::StatusOr<std::shared_ptr<const Model>> MakeRandomModel(
    const ModelConfig& config, unsigned seed, WeightInit init = WeightInit::kTest) {
  return Model::FromParts(config, SerializeSafetensors(MakeTensors(config, seed, init)));
}

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_RANDOM_MODEL_H_
