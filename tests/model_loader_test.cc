// Model loading tests: model.json parsing/validation, NeMo tensor names, batch-norm folding
// numerics (folded model through kernels::SubBlockReference vs. a naive
// conv -> BN -> ReLU NeMo forward in double), dense-residual wiring, and one test per malformed
// input, each checking the error message. Run under ASan+UBSan: no malformed input may crash.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/decoding/ngram_lm.h"
#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/sub_block.h"
#include "tests/model_test_util.h"

namespace jasper {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using json = nlohmann::json;
using test_util::Act;
using test_util::Block;
using test_util::ConfigWith;
using test_util::DenseResidualConfig;
using test_util::EncodeHalf;
using test_util::FoldedForward;
using test_util::Get;
using test_util::MakeTensors;
using test_util::NaiveForward;
using test_util::Random;
using test_util::RawFile;
using test_util::SeparableConfig;
using test_util::TempDir;
using test_util::Tensors;
using test_util::WriteAndLoad;

void ExpectFoldedMatchesNaive(const ModelConfig& config, const Tensors& tensors) {
  TempDir dir;
  auto model = WriteAndLoad(dir, ModelConfigToJson(config), SerializeSafetensors(tensors));
  ASSERT_TRUE(model.ok()) << model.status();
  std::mt19937 rng(7);
  const int t_in = 23;
  Act input{t_in, config.feat_in, {}};
  const std::vector<float> x = Random(rng, static_cast<std::size_t>(t_in) * config.feat_in, -2, 2);
  input.v.assign(x.begin(), x.end());
  const Act expected = NaiveForward(config, tensors, input);
  int t_out = 0;
  const std::vector<float> got = FoldedForward(**model, x, t_in, &t_out);
  ASSERT_EQ(t_out, expected.t);
  ASSERT_EQ(got.size(), expected.v.size());
  double max_ref = 0.0;
  for (double e : expected.v) max_ref = std::max(max_ref, std::abs(e));
  ASSERT_GT(max_ref, 0.1);  // not a trivially zero network
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], expected.v[i], 1e-4 * std::max(1.0, max_ref)) << "logit " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Loading and folding.

TEST(ModelLoaderTest, SeparableModelMatchesNaiveNemoForward) {
  const ModelConfig config = SeparableConfig();
  ExpectFoldedMatchesNaive(config, MakeTensors(config, 1));
}

TEST(ModelLoaderTest, DenseResidualModelMatchesNaiveNemoForward) {
  const ModelConfig config = DenseResidualConfig();
  ExpectFoldedMatchesNaive(config, MakeTensors(config, 2));
}

TEST(ModelLoaderTest, DenseResidualFromEncoderInputMatchesNaiveNemoForward) {
  const ModelConfig config =
      ConfigWith({Block(8, 2, 3, 1, 1, true, true, true), Block(8, 1, 3, 1, 1, true, true, false),
                  Block(6, 1, 1, 1, 1, false, false, false)});
  ExpectFoldedMatchesNaive(config, MakeTensors(config, 3));
}

TEST(ModelLoaderTest, ResidualSourcesOfDenseResidualModel) {
  const ModelConfig config = DenseResidualConfig();
  TempDir dir;
  auto model =
      WriteAndLoad(dir, ModelConfigToJson(config), SerializeSafetensors(MakeTensors(config, 4)));
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& blocks = (*model)->blocks();
  ASSERT_EQ(blocks.size(), 5u);
  const std::vector<std::vector<int>> sources = {{}, {0}, {0, 1}, {0, 1, 2}, {}};
  const std::vector<std::vector<int>> channels = {{}, {7}, {7, 7}, {7, 7, 9}, {}};
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const auto& subs = blocks[b].sub_blocks;
    ASSERT_EQ(subs.size(), static_cast<std::size_t>(config.blocks[b].repeat));
    for (std::size_t j = 0; j + 1 < subs.size(); ++j) {
      EXPECT_TRUE(subs[j].residual_sources.empty()) << "only the last sub-block has residuals";
    }
    EXPECT_EQ(subs.back().residual_sources, sources[b]) << "block " << b;
    EXPECT_EQ(subs.back().residual_channels, channels[b]) << "block " << b;
    ASSERT_EQ(subs.back().residual_weights.size(), sources[b].size());
    for (std::size_t p = 0; p < sources[b].size(); ++p) {
      EXPECT_EQ(subs.back().residual_weights[p].size(),
                static_cast<std::size_t>(channels[b][p]) * config.blocks[b].filters);
    }
  }
}

TEST(ModelLoaderTest, ResidualSourcesFollowNemoListPassing) {
  // Jasper 10x5 DR: C1, ten dense-residual blocks, C2, C3.
  std::vector<BlockConfig> blocks = {Block(4, 1, 3, 2, 1, false, false, false)};
  for (int i = 0; i < 10; ++i) blocks.push_back(Block(4 + i / 2, 1, 3, 1, 1, true, true, false));
  blocks.push_back(Block(6, 1, 3, 1, 2, false, false, false));
  blocks.push_back(Block(8, 1, 1, 1, 1, false, false, false));
  auto sources = ResidualSources(ConfigWith(blocks));
  ASSERT_TRUE(sources.ok()) << sources.status();
  for (int k = 1; k <= 10; ++k) {
    std::vector<int> expected(k);
    for (int i = 0; i < k; ++i) expected[i] = i;
    EXPECT_EQ((*sources)[k], expected) << "block " << k;
  }
  EXPECT_TRUE((*sources)[11].empty());
  // Plain residual blocks read their own input.
  auto plain = ResidualSources(SeparableConfig());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)[1], std::vector<int>{0});
  // A plain residual right after the encoder input reads the features.
  auto first = ResidualSources(ConfigWith({Block(8, 1, 3, 1, 1, true, false, false)}));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)[0], std::vector<int>{-1});
}

TEST(ModelLoaderTest, TensorNamesFollowNemoMconvIndices) {
  // The reference doc's examples: separable R=5 dw 0,5,..,20 / pw 1,..,21 / BN 2,..,22;
  // dense R=5 conv 0,4,..,16 / BN 1,..,17.
  const ModelConfig config = ConfigWith(
      {Block(4, 5, 3, 1, 1, true, false, true), Block(4, 5, 3, 1, 1, false, false, false)});
  const Tensors t = MakeTensors(config, 5);
  for (int i : {0, 5, 10, 15, 20}) {
    EXPECT_TRUE(t.count("encoder.encoder.0.mconv." + std::to_string(i) + ".conv.weight"));
    EXPECT_TRUE(t.count("encoder.encoder.0.mconv." + std::to_string(i + 1) + ".conv.weight"));
    EXPECT_TRUE(t.count("encoder.encoder.0.mconv." + std::to_string(i + 2) + ".running_var"));
  }
  for (int i : {0, 4, 8, 12, 16}) {
    EXPECT_TRUE(t.count("encoder.encoder.1.mconv." + std::to_string(i) + ".conv.weight"));
    EXPECT_TRUE(t.count("encoder.encoder.1.mconv." + std::to_string(i + 1) + ".running_mean"));
  }
  EXPECT_TRUE(t.count("encoder.encoder.0.res.0.0.conv.weight"));
  EXPECT_TRUE(t.count("encoder.encoder.0.res.0.1.weight"));
  TempDir dir;
  auto model = WriteAndLoad(dir, ModelConfigToJson(config), SerializeSafetensors(t));
  ASSERT_TRUE(model.ok()) << model.status();
}

TEST(ModelLoaderTest, DescriptorsAndLayouts) {
  const ModelConfig config = SeparableConfig();
  const Tensors t = MakeTensors(config, 6);
  auto model = Model::FromParts(config, SerializeSafetensors(t));
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& blocks = (*model)->blocks();
  // Block 0: separable K5 stride 2, R=2: NeMo strides every sub-block.
  const auto& d0 = blocks[0].sub_blocks[0].desc;
  EXPECT_EQ(d0.in_channels, 8);
  EXPECT_EQ(d0.out_channels, 6);
  EXPECT_EQ(d0.stride, 2);
  EXPECT_EQ(d0.padding, 2);
  EXPECT_TRUE(d0.separable);
  EXPECT_EQ(d0.activation, kernels::Activation::kRelu);
  EXPECT_EQ(blocks[0].sub_blocks[1].desc.in_channels, 6);
  EXPECT_EQ(blocks[0].sub_blocks[1].desc.stride, 2);
  EXPECT_EQ(config.subsampling_factor(), 4);
  // Depthwise stored [K, C_in] from [C_in, 1, K], unscaled.
  const auto& dw = Get(t, "encoder.encoder.0.mconv.0.conv.weight");
  EXPECT_EQ(blocks[0].sub_blocks[0].depthwise[3 * 8 + 5], dw[5 * 5 + 3]);
  // Block 2: dense K3 dilation 2 on every sub-block, padding 2.
  for (const auto& sub : blocks[2].sub_blocks) {
    EXPECT_EQ(sub.desc.dilation, 2);
    EXPECT_EQ(sub.desc.padding, 2);
    EXPECT_FALSE(sub.desc.separable);
    EXPECT_TRUE(sub.depthwise.empty());
  }
  EXPECT_EQ(blocks[2].sub_blocks[1].desc.in_channels, 10);
  // Dense fold W'[k,c,o] = s_o W[o,c,k], b'_o = beta_o - s_o mu_o.
  const auto& w = Get(t, "encoder.encoder.2.mconv.4.conv.weight");  // sub-block 1: [10,10,3]
  const std::string bn = "encoder.encoder.2.mconv.5";
  const int o = 7, c = 4, k = 2;
  const double s = Get(t, bn + ".weight")[o] / std::sqrt(Get(t, bn + ".running_var")[o] + 1e-3);
  EXPECT_FLOAT_EQ(blocks[2].sub_blocks[1].weight[(k * 10 + c) * 10 + o],
                  s * w[(o * 10 + c) * 3 + k]);
  EXPECT_FLOAT_EQ(blocks[2].sub_blocks[1].bias[o],
                  Get(t, bn + ".bias")[o] - s * Get(t, bn + ".running_mean")[o]);
  // Decoder: [C_enc, num_outputs], identity, checkpoint bias.
  const FoldedSubBlock& dec = (*model)->decoder();
  EXPECT_EQ(dec.desc.in_channels, 12);
  EXPECT_EQ(dec.desc.out_channels, 6);
  EXPECT_EQ(dec.desc.activation, kernels::Activation::kIdentity);
  EXPECT_EQ(dec.weight[3 * 6 + 2], Get(t, "decoder.decoder_layers.0.weight")[2 * 12 + 3]);
  EXPECT_EQ(dec.bias, Get(t, "decoder.decoder_layers.0.bias"));
  EXPECT_TRUE((*model)->filterbank().empty());
}

TEST(ModelLoaderTest, FilterbankWindowAndStepCountersAreAccepted) {
  const ModelConfig config = SeparableConfig();
  Tensors t = MakeTensors(config, 8);
  std::mt19937 rng(9);
  const std::vector<float> fb = Random(rng, 8 * 257, 0, 1);
  t["preprocessor.featurizer.fb"] = {{1, 8, 257}, fb};
  t["preprocessor.featurizer.window"] = {{320}, Random(rng, 320, 0, 1)};
  // num_batches_tracked is an I64 scalar in NeMo checkpoints: append it raw.
  const std::string base = SerializeSafetensors(t);
  uint64_t header_len = 0;
  std::memcpy(&header_len, base.data(), 8);
  json header = json::parse(base.substr(8, header_len));
  const std::string data = base.substr(8 + header_len);
  header["encoder.encoder.0.mconv.2.num_batches_tracked"] = {
      {"dtype", "I64"}, {"shape", json::array()}, {"data_offsets", {data.size(), data.size() + 8}}};
  header["__metadata__"] = {{"format", "pt"}};
  auto model = Model::FromParts(config, RawFile(header.dump(), data + std::string(8, '\1')));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->filterbank(), fb);

  t["preprocessor.featurizer.fb"] = {{1, 8, 256}, Random(rng, 8 * 256, 0, 1)};
  auto bad = Model::FromParts(config, SerializeSafetensors(t));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              AllOf(HasSubstr("preprocessor.featurizer.fb"), HasSubstr("[1,8,256]"),
                    HasSubstr("expected [1,8,257]")));

  // The model's featurizer is built at load, so a filterbank it rejects fails the load (not the
  // first stream), and a loaded model's featurizer uses the checkpoint's filterbank.
  EXPECT_EQ((*model)->featurizer().filterbank(), fb);
  std::vector<float> nan_fb = fb;
  nan_fb[100] = std::nanf("");
  t["preprocessor.featurizer.fb"] = {{1, 8, 257}, nan_fb};
  auto non_finite = Model::FromParts(config, SerializeSafetensors(t));
  ASSERT_FALSE(non_finite.ok());
  EXPECT_EQ(non_finite.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(non_finite.status().message(), HasSubstr("featurizer"));
}

TEST(ModelLoaderTest, HalfPrecisionCheckpointsAreConvertedBeforeFolding) {
  const ModelConfig config = DenseResidualConfig();
  Tensors t = MakeTensors(config, 10);
  for (auto& entry : t) {  // k/64, |k| <= 128: exact in F16 and BF16
    for (float& x : entry.second.second) x = std::round(x * 64.0f) / 64.0f;
    if (entry.first.find("running_var") != std::string::npos) {
      for (float& x : entry.second.second) x = std::max(x, 1.0f / 64);
    }
  }
  auto reference = Model::FromParts(config, SerializeSafetensors(t));
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (bool bf16 : {false, true}) {
    json header = json::object();
    std::string data;
    for (const auto& [name, tensor] : t) {
      const std::string bytes = EncodeHalf(tensor.second, bf16);
      header[name] = {{"dtype", bf16 ? "BF16" : "F16"},
                      {"shape", tensor.first},
                      {"data_offsets", {data.size(), data.size() + bytes.size()}}};
      data += bytes;
    }
    auto model = Model::FromParts(config, RawFile(header.dump(), data));
    ASSERT_TRUE(model.ok()) << model.status();
    for (std::size_t b = 0; b < config.blocks.size(); ++b) {
      for (std::size_t j = 0; j < (*model)->blocks()[b].sub_blocks.size(); ++j) {
        const auto& got = (*model)->blocks()[b].sub_blocks[j];
        const auto& want = (*reference)->blocks()[b].sub_blocks[j];
        EXPECT_EQ(got.weight, want.weight);
        EXPECT_EQ(got.bias, want.bias);
        EXPECT_EQ(got.residual_weights, want.residual_weights);
      }
    }
  }
}

// Real NeMo output: tests/fixtures/<model>/expected.safetensors holds NeMo's features, block
// outputs and log-probs per utterance (tools/gen_fixtures.py); the folded model, run through the
// reference kernel from NeMo's features, must reproduce them. Skipped when fixtures are absent.
TEST(ModelLoaderTest, FoldedModelMatchesNemoOnFixtures) {
  int checked = 0;
  for (const char* name : {"quartznet_small", "quartznet_small_legacy", "jasper_dr_small"}) {
    const std::string dir = std::string(JASPER_SOURCE_DIR) + "/tests/fixtures/" + name;
    if (!std::filesystem::exists(dir + "/model/model.json")) continue;
    auto model = Model::Load(dir + "/model");
    ASSERT_TRUE(model.ok()) << model.status();
    auto expected = SafetensorsFile::ReadFile(dir + "/expected.safetensors");
    ASSERT_TRUE(expected.ok()) << expected.status();
    const int vocab = (*model)->config().num_outputs();
    for (int u = 0; expected->Find("features_" + std::to_string(u)) != nullptr; ++u) {
      const std::string id = std::to_string(u);
      const std::vector<float> features = *expected->GetFloat("features_" + id);
      std::vector<std::vector<float>> blocks;
      int t_out = 0;
      const std::vector<float> logits = FoldedForward(
          **model, features, static_cast<int>(expected->Find("features_" + id)->shape[0]), &t_out,
          &blocks);
      for (std::size_t b = 0; b < blocks.size(); ++b) {
        const auto want = expected->GetFloat("block_" + std::to_string(b) + "_" + id);
        if (!want.ok()) continue;
        ASSERT_EQ(blocks[b].size(), want->size()) << name << " block " << b;
        for (std::size_t i = 0; i < want->size(); ++i) {
          ASSERT_NEAR(blocks[b][i], (*want)[i], 1e-3 * std::max(1.0f, std::abs((*want)[i])))
              << name << " utterance " << u << " block " << b << " element " << i;
        }
      }
      const std::vector<float> log_probs = *expected->GetFloat("logprobs_" + id);
      ASSERT_EQ(logits.size(), log_probs.size()) << name;
      for (int t = 0; t < t_out; ++t) {
        double max = -1e30, sum = 0.0;
        for (int o = 0; o < vocab; ++o) max = std::max(max, double{logits[t * vocab + o]});
        for (int o = 0; o < vocab; ++o) sum += std::exp(logits[t * vocab + o] - max);
        for (int o = 0; o < vocab; ++o) {
          EXPECT_NEAR(logits[t * vocab + o] - max - std::log(sum), log_probs[t * vocab + o], 1e-3)
              << name << " utterance " << u << " frame " << t;
        }
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no fixtures under tests/fixtures";
}

// ---------------------------------------------------------------------------------------------
// Malformed model folders.

class MalformedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = SeparableConfig();
    tensors_ = MakeTensors(config_, 13);
    json_text_ = ModelConfigToJson(config_);
    weights_ = SerializeSafetensors(tensors_);
  }
  absl::Status Load(const std::string& json_text, const std::string& weights) {
    return WriteAndLoad(dir_, json_text, weights).status();
  }
  absl::Status LoadTensors(const Tensors& t) { return Load(json_text_, SerializeSafetensors(t)); }

  TempDir dir_;
  ModelConfig config_;
  Tensors tensors_;
  std::string json_text_;
  std::string weights_;
};

TEST_F(MalformedModelTest, GoodFolderLoads) { EXPECT_TRUE(Load(json_text_, weights_).ok()); }

TEST_F(MalformedModelTest, LanguageModelIsLoadedCheckedAndNamedPlainly) {
  ModelConfig with_lm = config_;
  with_lm.language_model = "lm.bin";
  const std::string json_text = ModelConfigToJson(with_lm);
  // Declared but missing, then malformed, then good.
  absl::Status s = Load(json_text, weights_);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("language_model"));
  dir_.Write("lm.bin", "not a language model at all");
  EXPECT_EQ(Load(json_text, weights_).code(), absl::StatusCode::kInvalidArgument);
  auto lm = NgramLm::FromArpa("\\data\\\nngram 1=2\n\\1-grams:\n-1 a\n-2 b\n\\end\\\n");
  ASSERT_TRUE(lm.ok()) << lm.status();
  dir_.Write("lm.bin", (*lm)->ToBinary());
  auto model = WriteAndLoad(dir_, json_text, weights_);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_NE((*model)->language_model(), nullptr);
  EXPECT_EQ((*model)->language_model()->vocab_size(), 5);  // a, b and the three markers
  // Only a file name in the folder.
  for (const char* bad : {"../lm.bin", "/etc/passwd", "sub/lm.bin", ".."}) {
    with_lm.language_model = bad;
    s = Load(ModelConfigToJson(with_lm), weights_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(MalformedModelTest, MissingModelJson) {
  dir_.Write("model.safetensors", weights_);
  const absl::Status s = Model::Load(dir_.path()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("model.json"), HasSubstr("not found")));
}

TEST_F(MalformedModelTest, MissingSafetensors) {
  dir_.Write("model.json", json_text_);
  const absl::Status s = Model::Load(dir_.path()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("model.safetensors"), HasSubstr("not found")));
  EXPECT_THAT(Model::Load(dir_.path() + "/nonexistent").status().message(), HasSubstr("not found"));
}

TEST_F(MalformedModelTest, SafetensorsReadFile) {
  dir_.Write("model.safetensors", weights_);
  auto file = SafetensorsFile::ReadFile(dir_.path() + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors().size(), tensors_.size());
  EXPECT_EQ(*file->GetFloat("decoder.decoder_layers.0.bias"),
            Get(tensors_, "decoder.decoder_layers.0.bias"));
  auto missing = SafetensorsFile::ReadFile(dir_.path() + "/nope.safetensors");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(SafetensorsFile::ReadFile(dir_.path()).status().message(),
              HasSubstr("not a regular file"));
}

TEST_F(MalformedModelTest, TruncatedSafetensors) {
  uint64_t header_len = 0;
  std::memcpy(&header_len, weights_.data(), 8);
  const std::size_t data_begin = 8 + header_len;
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, std::size_t{7}, std::size_t{8},
                          std::size_t{20}, data_begin - 1, data_begin, data_begin + 1,
                          data_begin + 100, weights_.size() / 2 + 1, weights_.size() - 1}) {
    const absl::Status s = Load(json_text_, weights_.substr(0, cut));
    ASSERT_FALSE(s.ok()) << "cut at " << cut;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("model.safetensors"), HasSubstr("truncated")))
        << "cut at " << cut;
  }
}

TEST_F(MalformedModelTest, HeaderLengthLargerThanFile) {
  std::string bytes = weights_;
  const uint64_t len = bytes.size();
  std::memcpy(bytes.data(), &len, 8);
  EXPECT_THAT(Load(json_text_, bytes).message(), HasSubstr("larger than"));
}

TEST_F(MalformedModelTest, HeaderNotJson) {
  EXPECT_THAT(Load(json_text_, RawFile("not json at all", "")).message(),
              HasSubstr("not valid JSON"));
}

TEST_F(MalformedModelTest, MissingTensor) {
  Tensors t = tensors_;
  t.erase("encoder.encoder.1.mconv.7.running_var");
  EXPECT_THAT(LoadTensors(t).message(),
              HasSubstr("missing tensor encoder.encoder.1.mconv.7.running_var"));
  t = tensors_;
  t.erase("decoder.decoder_layers.0.bias");
  EXPECT_THAT(LoadTensors(t).message(), HasSubstr("missing tensor decoder.decoder_layers.0.bias"));
}

TEST_F(MalformedModelTest, ExtraTensor) {
  Tensors t = tensors_;
  t["encoder.encoder.9.mconv.0.conv.weight"] = {{1}, {0.0f}};
  EXPECT_THAT(LoadTensors(t).message(),
              HasSubstr("unexpected tensor encoder.encoder.9.mconv.0.conv.weight"));
  // A second residual pane where the config says plain residual.
  t = tensors_;
  t["encoder.encoder.1.res.1.0.conv.weight"] = {{6, 6, 1}, std::vector<float>(36)};
  EXPECT_THAT(LoadTensors(t).message(),
              AllOf(HasSubstr("unexpected tensor encoder.encoder.1.res.1.0.conv.weight"),
                    HasSubstr("residual_dense")));
}

TEST_F(MalformedModelTest, WrongShape) {
  Tensors t = tensors_;
  t["encoder.encoder.0.mconv.1.conv.weight"] = {{6, 8}, std::vector<float>(48)};
  EXPECT_THAT(LoadTensors(t).message(), AllOf(HasSubstr("encoder.encoder.0.mconv.1.conv.weight"),
                                              HasSubstr("[6,8]"), HasSubstr("expected [6,8,1]")));
}

TEST_F(MalformedModelTest, BadTensorValues) {
  Tensors t = tensors_;
  t["encoder.encoder.2.mconv.0.conv.weight"].second[5] = std::nanf("");
  EXPECT_THAT(LoadTensors(t).message(), HasSubstr("non-finite"));
  t = tensors_;
  t["encoder.encoder.2.mconv.1.running_var"].second[0] = -1.0f;
  EXPECT_THAT(LoadTensors(t).message(), HasSubstr("running_var"));
}

TEST_F(MalformedModelTest, CheckpointForAnotherArchitecture) {
  ModelConfig residual = config_;
  residual.blocks[3].residual = true;
  EXPECT_THAT(Load(ModelConfigToJson(residual), weights_).message(),
              HasSubstr("missing tensor encoder.encoder.3.res.0.0.conv.weight (expected shape "
                        "[12,10,1])"));
  // Separable checkpoint for a dense config: the pointwise slot is where the BN should be.
  ModelConfig other = config_;
  other.blocks[0].separable = false;
  EXPECT_THAT(Load(ModelConfigToJson(other), weights_).message(),
              AllOf(HasSubstr("encoder.encoder.0.mconv.0.conv.weight"), HasSubstr("expected")));
}

TEST_F(MalformedModelTest, MalformedJson) {
  for (const std::string& text : std::vector<std::string>{
           "", "{", "{\"format_version\": 1,", "[1,2]", "nul", std::string(100000, '[')}) {
    const absl::Status s = Load(text, weights_);
    ASSERT_FALSE(s.ok()) << text.substr(0, 20);
    EXPECT_THAT(s.message(), HasSubstr("model.json")) << text.substr(0, 20);
  }
  EXPECT_THAT(Load("{\"format_version\": 1,", weights_).message(), HasSubstr("malformed JSON"));
}

struct ArchCase {
  const char* name;
  std::function<void(json&)> mutate;
  std::vector<std::string> words;
};

TEST_F(MalformedModelTest, InvalidArchitectureValues) {
  const std::vector<ArchCase> cases = {
      {"negative_filters",
       [](json& j) { j["encoder"]["jasper"][1]["filters"] = -4; },
       {"encoder.jasper[1].filters", "-4"}},
      {"even_kernel",
       [](json& j) { j["encoder"]["jasper"][2]["kernel"] = json::array({4}); },
       {"encoder.jasper[2].kernel", "odd"}},
      {"two_d_kernel",
       [](json& j) {
         j["encoder"]["jasper"][2]["kernel"] = json::array({3, 3});
       },
       {"encoder.jasper[2].kernel", "one-element"}},
      {"se",
       [](json& j) { j["encoder"]["jasper"][1]["se"] = true; },
       {"encoder.jasper[1].se", "squeeze-excite"}},
      {"activation",
       [](json& j) { j["encoder"]["activation"] = "tanh"; },
       {"encoder.activation", "tanh"}},
      {"labels_empty",
       [](json& j) {
         j["labels"] = json::array();
         j["decoder"]["num_classes"] = -1;
       },
       {"labels", "empty"}},
      {"num_classes",
       [](json& j) { j["decoder"]["num_classes"] = 28; },
       {"decoder.num_classes", "28"}},
      {"duplicate_label", [](json& j) { j["labels"][2] = "a"; }, {"labels[2]", "duplicate"}},
      {"groups",
       [](json& j) { j["encoder"]["jasper"][0]["groups"] = 2; },
       {"encoder.jasper[0].groups"}},
      {"residual_mode",
       [](json& j) { j["encoder"]["jasper"][1]["residual_mode"] = "max"; },
       {"encoder.jasper[1].residual_mode", "max"}},
      {"stride_last",
       [](json& j) { j["encoder"]["jasper"][1]["stride_last"] = true; },
       {"encoder.jasper[1].stride_last"}},
      {"kernel_size_factor",
       [](json& j) { j["encoder"]["jasper"][1]["kernel_size_factor"] = 0.5; },
       {"encoder.jasper[1].kernel_size_factor"}},
      {"future_context",
       [](json& j) { j["encoder"]["jasper"][1]["future_context"] = 2; },
       {"encoder.jasper[1].future_context"}},
      {"stride_and_dilation",
       [](json& j) { j["encoder"]["jasper"][0]["dilation"] = json::array({2}); },
       {"encoder.jasper[0].dilation", "stride"}},
      {"strided_residual",
       [](json& j) { j["encoder"]["jasper"][1]["stride"] = json::array({2}); },
       {"encoder.jasper[1].residual", "stride 2"}},
      {"repeat_zero",
       [](json& j) { j["encoder"]["jasper"][3]["repeat"] = 0; },
       {"encoder.jasper[3].repeat"}},
      {"unknown_block_key",
       [](json& j) { j["encoder"]["jasper"][3]["bogus"] = 1; },
       {"encoder.jasper[3].bogus", "unknown"}},
      {"no_blocks",
       [](json& j) { j["encoder"]["jasper"] = json::array(); },
       {"encoder.jasper", "at least one"}},
      {"feat_in",
       [](json& j) { j["encoder"]["feat_in"] = 80; },
       {"encoder.feat_in", "preprocessor.features"}},
      {"decoder_feat_in",
       [](json& j) { j["decoder"]["feat_in"] = 1024; },
       {"decoder.feat_in", "1024"}},
      {"sample_rate",
       [](json& j) { j["preprocessor"]["sample_rate"] = 8000; },
       {"preprocessor.sample_rate", "8000"}},
      {"window",
       [](json& j) { j["preprocessor"]["window"] = "hamming"; },
       {"preprocessor.window", "hamming"}},
      {"frame_splicing",
       [](json& j) { j["preprocessor"]["frame_splicing"] = 3; },
       {"preprocessor.frame_splicing"}},
      {"guard_type",
       [](json& j) { j["preprocessor"]["log_zero_guard_type"] = "clamp"; },
       {"log_zero_guard_type", "clamp"}},
      {"stft_mode",
       [](json& j) { j["preprocessor"]["stft_mode"] = "torch"; },
       {"preprocessor.stft_mode", "torch"}},
      {"n_fft_small",
       [](json& j) { j["preprocessor"]["n_fft"] = 256; },
       {"preprocessor.n_fft", "256"}},
      {"format_version", [](json& j) { j["format_version"] = 2; }, {"format_version", "2"}},
      {"filters_string",
       [](json& j) { j["encoder"]["jasper"][0]["filters"] = "256"; },
       {"encoder.jasper[0].filters", "integer"}},
      {"huge_filters",
       [](json& j) { j["encoder"]["jasper"][0]["filters"] = 1e12; },
       {"encoder.jasper[0].filters"}},
      {"dense_not_consecutive",
       [](json& j) {
         j["encoder"]["jasper"][1]["residual_dense"] = true;
         j["encoder"]["jasper"][3]["residual"] = true;
         j["encoder"]["jasper"][3]["residual_dense"] = true;
       },
       {"encoder.jasper[3].residual_dense", "consecutive"}},
      {"missing_encoder", [](json& j) { j.erase("encoder"); }, {"encoder", "required"}},
      {"unknown_top_key", [](json& j) { j["extra"] = 1; }, {"extra", "unknown"}},
  };
  for (const ArchCase& c : cases) {
    json j = json::parse(json_text_);
    c.mutate(j);
    const absl::Status s = Load(j.dump(), weights_);
    ASSERT_FALSE(s.ok()) << c.name;
    EXPECT_THAT(s.message(), HasSubstr("model.json")) << c.name;
    for (const std::string& w : c.words) EXPECT_THAT(s.message(), HasSubstr(w)) << c.name;
  }
}

TEST_F(MalformedModelTest, DeeplyNestedValuesAreErrorsNotCrashes) {
  // Error messages must not recurse into a hostile value (json::dump() is recursive).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::vector<std::function<void(json&)>> places = {
      [](json& j) { j["encoder"]["jasper"][0]["filters"] = "DEEP"; },
      [](json& j) { j["encoder"]["jasper"][1]["residual"] = "DEEP"; },
      [](json& j) { j["encoder"]["jasper"][2]["kernel"] = "DEEP"; },
      [](json& j) { j["labels"][0] = "DEEP"; },
  };
  for (std::size_t i = 0; i < places.size(); ++i) {
    json j = json::parse(json_text_);
    places[i](j);
    std::string text = j.dump();
    text.replace(text.find("\"DEEP\""), 6, deep);
    const absl::Status s = Load(text, weights_);
    ASSERT_FALSE(s.ok()) << i;
    EXPECT_THAT(s.message(), HasSubstr("an array of 1 entries")) << i;
  }
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[)" + deep + R"(],"data_offsets":[0,0]}})";
  EXPECT_THAT(SafetensorsFile::Parse(RawFile(header, "")).status().message(),
              HasSubstr("(an array)"));
}

TEST_F(MalformedModelTest, RandomJsonCorruptionNeverCrashes) {
  std::mt19937 rng(14);
  for (int i = 0; i < 300; ++i) {
    std::string text = json_text_;
    text[rng() % text.size()] = "{}[]\":,0-9e.tn \x80"[rng() % 17];
    auto config = ParseModelConfig(text);
    if (config.ok()) (void)Model::FromParts(*config, weights_);
  }
}

// ---------------------------------------------------------------------------------------------
// model.json round trip and NeMo-style input.

TEST(ModelConfigTest, RoundTrip) {
  ModelConfig c = DenseResidualConfig();
  c.featurizer.n_fft = 0;
  c.featurizer.highfreq_hz = 7600;
  c.featurizer.mel_norm = "none";
  c.featurizer.stft_mode = StftMode::kNemo25;
  auto parsed = ParseModelConfig(ModelConfigToJson(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(ModelConfigToJson(*parsed), ModelConfigToJson(c));
  EXPECT_EQ(parsed->featurizer.n_fft, 0);
  EXPECT_EQ(parsed->featurizer.mel_norm, "none");
  EXPECT_EQ(parsed->featurizer.stft_mode, StftMode::kNemo25);
  EXPECT_EQ(parsed->blocks.size(), 5u);
  EXPECT_TRUE(parsed->blocks[2].residual_dense);
  EXPECT_EQ(parsed->subsampling_factor(), 2);
  EXPECT_EQ(parsed->blank_id(), 5);
}

TEST(ModelConfigTest, AcceptsNemoStyleConfig) {
  const std::string text = R"({
    "format_version": 1, "name": "qn", "sample_rate": 16000, "labels": [" ", "a", "'"],
    "preprocessor": {"_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
      "sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025,
      "window_stride": 0.01, "window": "hann", "features": 80, "n_fft": null, "frame_splicing": 1,
      "dither": 1e-05, "pad_to": 16, "stft_conv": true, "log_zero_guard_value": "tiny",
      "preemph": null, "highfreq": null, "mel_norm": "slaney"},
    "encoder": {"_target_": "nemo.collections.asr.modules.ConvASREncoder", "feat_in": 80,
      "activation": "relu", "conv_mask": true, "normalization_mode": "batch",
      "jasper": [
        {"filters": 16, "repeat": 1, "kernel": [33], "stride": [2], "dilation": [1],
         "dropout": 0.2, "residual": false, "separable": true, "se": false,
         "se_context_size": -1, "kernel_size_factor": 1.0, "stride_last": false},
        {"filters": 16, "repeat": 5, "kernel": 5, "stride": [1], "dilation": [1],
         "dropout": 0.0, "residual": true, "separable": true, "masked": true,
         "padding": "same", "heads": -1, "groups": 1, "residual_mode": "add"}]},
    "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": 16,
      "num_classes": -1, "vocabulary": [" ", "a", "'"]}})";
  auto c = ParseModelConfig(text);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->featurizer.WinLength(), 400);
  EXPECT_EQ(c->featurizer.HopLength(), 160);
  EXPECT_EQ(c->featurizer.n_fft, 0);
  EXPECT_EQ(c->featurizer.preemph, 0.0);
  EXPECT_EQ(c->featurizer.log_zero_guard_value, static_cast<double>(FLT_MIN));
  EXPECT_EQ(c->featurizer.stft_mode, StftMode::kLegacy);
  EXPECT_EQ(c->blocks[1].kernel, 5);
  EXPECT_EQ(c->blocks[1].repeat, 5);
  EXPECT_EQ(c->num_outputs(), 4);
  EXPECT_EQ(c->subsampling_factor(), 2);
}

}  // namespace
}  // namespace jasper
