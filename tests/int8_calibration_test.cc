// INT8 calibration (engine/model/int8_calibration.h, engine/runtime/int8_calibrator.h): the file
// format and its checks, the MSE clip choice, the model folder's calibration at load, the
// calibrator on random models, and the CPU backend's INT8 refusals and results.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_join.h"
#include "engine/model/int8_calibration.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cpu_backend.h"
#include "engine/runtime/int8_calibrator.h"
#include "kernels/cpu_features.h"
#include "kernels/sub_block.h"
#include "tests/model_test_util.h"

namespace jasper {
namespace {

using test_util::BuildModel;
using test_util::TempDir;

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Int8Calibration Sample() {
  Int8Calibration c;
  c.weights_fingerprint = "0123456789abcdef";
  c.method = "mse-histogram-2048";
  c.utterances = 3;
  c.audio_seconds = 12.5;
  c.frame_agreement = 0.975;
  c.frame_agreement_all_int8 = 0.96;
  auto layer = [](int block, int sub_block, std::vector<float> scales) {
    Int8SubBlockScales l;
    l.block = block;
    l.sub_block = sub_block;
    l.scales = std::move(scales);
    return l;
  };
  c.layers = {layer(0, 0, {0.125f}), layer(1, 1, {0.0306f, 1e-7f}), layer(-1, 0, {3.4e38f})};
  c.layers[1].fp32 = true;
  c.layers[1].depthwise_channel_scales = {0.5f, 1e-30f, 3e38f};
  c.layers[1].depthwise_output_smoothing = {2.0f, 0.25f, 1.5f};
  return c;
}

TEST(Int8CalibrationFileTest, RoundTripsExactly) {
  const Int8Calibration c = Sample();
  absl::StatusOr<Int8Calibration> back = ParseInt8Calibration(Int8CalibrationToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->weights_fingerprint, c.weights_fingerprint);
  EXPECT_EQ(back->method, c.method);
  EXPECT_EQ(back->utterances, 3);
  EXPECT_DOUBLE_EQ(back->audio_seconds, 12.5);
  EXPECT_DOUBLE_EQ(back->frame_agreement, 0.975);
  EXPECT_DOUBLE_EQ(back->frame_agreement_all_int8, 0.96);
  ASSERT_EQ(back->layers.size(), 3u);
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    EXPECT_EQ(back->layers[i].block, c.layers[i].block);
    EXPECT_EQ(back->layers[i].sub_block, c.layers[i].sub_block);
    EXPECT_EQ(back->layers[i].scales, c.layers[i].scales);  // bit-exact floats
    EXPECT_EQ(back->layers[i].fp32, c.layers[i].fp32);
    EXPECT_EQ(back->layers[i].depthwise_channel_scales, c.layers[i].depthwise_channel_scales);
    EXPECT_EQ(back->layers[i].depthwise_output_smoothing, c.layers[i].depthwise_output_smoothing);
  }
  EXPECT_EQ(back->Fp32Count(), 1);
  ASSERT_NE(back->FindLayer(1, 1), nullptr);
  EXPECT_TRUE(back->FindLayer(1, 1)->fp32);
  // A file without the optional fields (as written before mixed precision) reads as all INT8.
  std::string old = Int8CalibrationToJson(c);
  old.erase(old.find(", \"fp32\": true"), 14);
  for (const char* key :
       {",\n   \"depthwise_channel_scales\"", ",\n   \"depthwise_output_smoothing\""}) {
    const std::size_t dw = old.find(key);
    ASSERT_NE(dw, std::string::npos) << key << old;
    old.erase(dw, old.find(']', dw) + 1 - dw);
  }
  const std::size_t line = old.find(" \"frame_agreement_all_int8\"");
  old.erase(line, old.find('\n', line) + 1 - line);
  absl::StatusOr<Int8Calibration> older = ParseInt8Calibration(old);
  ASSERT_TRUE(older.ok()) << older.status() << old;
  EXPECT_EQ(older->Fp32Count(), 0);
  EXPECT_TRUE(older->FindLayer(1, 1)->depthwise_channel_scales.empty());  // per tensor
  EXPECT_TRUE(older->FindLayer(1, 1)->depthwise_output_smoothing.empty());
  for (const char* version : {"\"version\": 1", "\"version\": 2"}) {
    std::string earlier = old;
    earlier.replace(earlier.find("\"version\": 3"), 12, version);
    EXPECT_TRUE(ParseInt8Calibration(earlier).ok()) << earlier;
  }
  EXPECT_EQ(older->frame_agreement_all_int8, -1.0);
  ASSERT_NE(back->Find(-1, 0), nullptr);
  EXPECT_EQ(back->Find(-1, 0)->size(), 1u);
  EXPECT_EQ(back->Find(2, 0), nullptr);
}

TEST(Int8CalibrationFileTest, RejectsMalformedFiles) {
  const std::string good = Int8CalibrationToJson(Sample());
  auto replaced = [&good](const std::string& from, const std::string& to) {
    std::string s = good;
    const std::size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const std::string bad[] = {
      "",
      "[]",
      "{",
      replaced("jasper-int8-calibration", "something-else"),
      replaced("\"version\": 3", "\"version\": 4"),
      replaced("\"version\": 3", "\"version\": 0"),
      replaced("\"weights_fingerprint\": \"0123456789abcdef\"", "\"weights_fingerprint\": 7"),
      replaced("\"layers\": [", "\"layers\": 5, \"x\": ["),
      replaced("[0.125]", "[]"),
      replaced("[0.125]", "[-0.125]"),
      replaced("[0.125]", "[0]"),
      replaced("[0.125]", "[1e39]"),  // not a finite float
      replaced("[0.125]", "[\"0.125\"]"),
      replaced("\"sub_block\": 0, \"scales\": [0.125]", "\"scales\": [0.125]"),
      replaced("\"fp32\": true", "\"fp32\": 1"),
      replaced("\"fp32\": true", "\"fp32\": \"yes\""),
      replaced("\"depthwise_channel_scales\": [0.5", "\"depthwise_channel_scales\": [-0.5"),
      replaced("\"depthwise_channel_scales\": [0.5", "\"depthwise_channel_scales\": [0"),
      replaced("\"depthwise_channel_scales\": [0.5", "\"depthwise_channel_scales\": [\"0.5\""),
      replaced("\"depthwise_channel_scales\": [0.5", "\"depthwise_channel_scales\": [1e-50"),
      replaced("\"depthwise_channel_scales\": [0.5, 1e-30, 3.00000001e+38]",
               "\"depthwise_channel_scales\": []"),
      replaced("\"depthwise_channel_scales\": [0.5, 1e-30, 3.00000001e+38]",
               "\"depthwise_channel_scales\": 0.5"),
      replaced("\"depthwise_output_smoothing\": [2", "\"depthwise_output_smoothing\": [-2"),
      replaced("\"depthwise_output_smoothing\": [2", "\"depthwise_output_smoothing\": [null"),
      replaced("\"depthwise_output_smoothing\": [2, 0.25, 1.5]",
               "\"depthwise_output_smoothing\": []"),
  };
  for (const std::string& text : bad) {
    absl::StatusOr<Int8Calibration> parsed = ParseInt8Calibration(text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

// The clip minimizes the histogram's squared error: no clipping for a uniform spread; a lone
// far outlier is clipped (its squared error is cheaper than coarser steps for everything else).
// The grid rule the packing and the calibration share, in the order of the activation scales.
TEST(Int8UnsignedGridTest, OneEntryPerScaleInOrder) {
  kernels::SubBlockDesc dense;
  dense.separable = false;
  kernels::SubBlockDesc separable = dense;
  separable.separable = true;
  // Dense: A_main is the input itself; then the residual inputs.
  EXPECT_EQ(kernels::Int8UnsignedGrid(dense, true, {false, true}),
            (std::vector<bool>{true, false, true}));
  EXPECT_EQ(kernels::Int8UnsignedGrid(dense, false, {}), (std::vector<bool>{false}));
  // Separable: A_main is the depthwise output (signed); the depthwise input comes last.
  EXPECT_EQ(kernels::Int8UnsignedGrid(separable, true, {true}),
            (std::vector<bool>{false, true, true}));
  EXPECT_EQ(kernels::Int8UnsignedGrid(separable, false, {false}),
            (std::vector<bool>{false, false, false}));
}

TEST(ChooseInt8ScaleTest, UniformKeepsTheRangeAndOutliersAreClipped) {
  std::vector<double> uniform(2048, 100.0);
  EXPECT_NEAR(ChooseInt8Scale(uniform, 10.0f), 10.0f / 127, 10.0f / 127 * 0.02);
  std::vector<double> outlier(2048, 0.0);
  for (int i = 0; i < 200; ++i) outlier[i] = 1e5;  // the bulk below 1/10 of the max
  outlier[2047] = 1.0;
  const float scale = ChooseInt8Scale(outlier, 10.0f);
  EXPECT_LT(scale, 10.0f / 127 / 4);
  EXPECT_GE(scale, 10.0f / 127 / 16 * 0.99);  // never below 1/16 of the range
  EXPECT_EQ(ChooseInt8Scale(uniform, 0.0f), 1.0f);
  EXPECT_EQ(ChooseInt8Scale({}, 1.0f), 1.0f);
}

// The calibrator on a random model: a scale per GEMM input of every sub-block and the decoder,
// a calibration the model accepts, and (with an INT8 GEMM) a checked frame agreement.
TEST(Int8CalibratorTest, CalibratesEverySubBlockAndChecksItself) {
  for (const ModelConfig& config :
       {test_util::SeparableConfig(), test_util::DenseResidualConfig()}) {
    auto model = BuildModel(config, 21);
    ASSERT_NE(model, nullptr);
    Int8Calibrator calibrator(model, 2);
    EXPECT_EQ(calibrator.Calibrate(1.0).status().code(), absl::StatusCode::kFailedPrecondition);
    const int features = config.feat_in;
    EXPECT_EQ(calibrator.AddUtterance(std::vector<float>(features * 3 - 1), 3).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(calibrator.AddUtterance({}, 0).code(), absl::StatusCode::kInvalidArgument);
    std::mt19937 rng(5);
    for (int frames : {180, 61, 300}) {
      ASSERT_TRUE(calibrator
                      .AddUtterance(test_util::Random(
                                        rng, static_cast<std::size_t>(frames) * features, -1, 1),
                                    frames)
                      .ok());
    }
    absl::StatusOr<Int8Calibration> c = calibrator.Calibrate(5.4);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(CheckInt8Calibration(*c, *model).ok());
    EXPECT_EQ(c->weights_fingerprint, WeightsFingerprint(*model));
    EXPECT_EQ(c->utterances, 3);
    EXPECT_DOUBLE_EQ(c->audio_seconds, 5.4);
    std::size_t sub_blocks = 1;  // the decoder
    for (const FoldedBlock& b : model->blocks()) sub_blocks += b.sub_blocks.size();
    EXPECT_EQ(c->layers.size(), sub_blocks);
    int separable = 0;
    for (const Int8SubBlockScales& l : c->layers) {
      for (float s : l.scales) EXPECT_TRUE(std::isfinite(s) && s > 0) << s;
      // A separable sub-block's depthwise input has a scale per channel; the others none.
      const FoldedSubBlock& sub =
          l.block < 0 ? model->decoder() : model->blocks()[l.block].sub_blocks[l.sub_block];
      ASSERT_EQ(l.depthwise_channel_scales.size(),
                sub.desc.separable ? static_cast<std::size_t>(sub.desc.in_channels) : 0u);
      for (float s : l.depthwise_channel_scales) EXPECT_TRUE(std::isfinite(s) && s > 0) << s;
      // ... and factors smoothing its output into the pointwise weights, around 1.
      ASSERT_EQ(l.depthwise_output_smoothing.size(), l.depthwise_channel_scales.size());
      double log_sum = 0.0;
      for (float m : l.depthwise_output_smoothing) {
        EXPECT_TRUE(std::isfinite(m) && m > 0) << m;
        log_sum += std::log(m);
      }
      EXPECT_NEAR(log_sum, 0.0, 1e-3 * (1 + l.depthwise_output_smoothing.size()));
      if (sub.desc.separable) {
        ++separable;
        const auto [lo, hi] = std::minmax_element(l.depthwise_channel_scales.begin(),
                                                  l.depthwise_channel_scales.end());
        EXPECT_LT(*lo, *hi);  // random data: each channel its own range
      }
    }
    EXPECT_EQ(separable > 0, config.blocks.front().separable);
    if (kernels::HasInt8Gemm()) {
      EXPECT_GE(c->frame_agreement, 0.5);  // random weights: close, not equal
      EXPECT_LE(c->frame_agreement, 1.0);
    } else {
      EXPECT_EQ(c->frame_agreement, -1.0);
    }
    // Another model's weights: refused, saying so.
    auto other = BuildModel(config, 22);
    const absl::Status stale = CheckInt8Calibration(*c, *other);
    EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(stale.message().find("other weights"), std::string::npos) << stale;
    Int8Calibration missing = *c;
    missing.layers.pop_back();
    EXPECT_EQ(CheckInt8Calibration(missing, *model).code(), absl::StatusCode::kFailedPrecondition);
    Int8Calibration extra_scale = *c;
    extra_scale.layers.front().scales.push_back(1.0f);
    EXPECT_EQ(CheckInt8Calibration(extra_scale, *model).code(),
              absl::StatusCode::kFailedPrecondition);
    // Channel scales: one too many on a separable sub-block, any on the (dense) decoder.
    Int8Calibration channels = *c;
    if (separable > 0) {
      channels.layers.front().depthwise_channel_scales.push_back(1.0f);
      EXPECT_EQ(CheckInt8Calibration(channels, *model).code(),
                absl::StatusCode::kFailedPrecondition);
      channels = *c;
      channels.layers.front().depthwise_output_smoothing.pop_back();
      EXPECT_EQ(CheckInt8Calibration(channels, *model).code(),
                absl::StatusCode::kFailedPrecondition);
      channels = *c;
    }
    channels.layers.back().depthwise_channel_scales = {1.0f};
    const absl::Status dense = CheckInt8Calibration(channels, *model);
    EXPECT_EQ(dense.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(dense.message().find("not separable"), std::string::npos) << dense;
    // Per tensor and unsmoothed when asked: no channel scales or factors, the method says which.
    Int8CalibrationOptions per_tensor;
    per_tensor.per_channel_depthwise = false;
    per_tensor.smooth_depthwise_output = false;
    absl::StatusOr<Int8Calibration> t = calibrator.Calibrate(5.4, per_tensor);
    ASSERT_TRUE(t.ok()) << t.status();
    for (const Int8SubBlockScales& l : t->layers) {
      EXPECT_TRUE(l.depthwise_channel_scales.empty());
      EXPECT_TRUE(l.depthwise_output_smoothing.empty());
    }
    EXPECT_EQ(t->method, "mse-histogram-2048");
    EXPECT_NE(c->method.find("per channel"), std::string::npos) << c->method;
    EXPECT_NE(c->method.find("smoothed (alpha 0.5)"), std::string::npos) << c->method;
    // Smoothing changes the depthwise output's scale (its range is the smoothed one's), nothing
    // else.
    if (separable > 0) {
      EXPECT_NE(t->layers.front().scales[0], c->layers.front().scales[0]);
      EXPECT_EQ(t->layers.front().scales.back(), c->layers.front().scales.back());
    }
    Int8CalibrationOptions bad_alpha;
    bad_alpha.smoothing_alpha = 1.5;
    EXPECT_EQ(calibrator.Calibrate(5.4, bad_alpha).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// Mixed precision: a sub-block the calibration marks fp32 runs in FP32 under INT8. With every
// one marked, INT8's outputs are FP32's bit for bit; the selection keeps within its budget,
// reports an agreement the check reproduces, and keeps none at a budget of 0.
TEST(Int8MixedPrecisionTest, Fp32SubBlocksAndTheirSelection) {
  if (!kernels::HasInt8Gemm()) GTEST_SKIP() << "no INT8 GEMM: " << kernels::DescribeCpuFeatures();
  for (const ModelConfig& config :
       {test_util::SeparableConfig(), test_util::DenseResidualConfig()}) {
    auto model = BuildModel(config, 31);
    ASSERT_NE(model, nullptr);
    const int features = config.feat_in;
    std::mt19937 rng(17);
    Int8Calibrator calibrator(model);
    for (int frames : {240, 97}) {
      ASSERT_TRUE(calibrator
                      .AddUtterance(test_util::Random(
                                        rng, static_cast<std::size_t>(frames) * features, -1, 1),
                                    frames)
                      .ok());
    }
    Int8CalibrationOptions bad;
    bad.max_fp32_share = 1.5;
    EXPECT_EQ(calibrator.Calibrate(1.0, bad).status().code(), absl::StatusCode::kInvalidArgument);
    bad.max_fp32_share = 0.1;
    bad.min_gain = -0.1;
    EXPECT_EQ(calibrator.Calibrate(1.0, bad).status().code(), absl::StatusCode::kInvalidArgument);

    absl::StatusOr<Int8Calibration> all_int8 = calibrator.Calibrate(1.0);  // default: budget 0
    ASSERT_TRUE(all_int8.ok()) << all_int8.status();
    EXPECT_EQ(all_int8->Fp32Count(), 0);
    EXPECT_EQ(all_int8->frame_agreement, all_int8->frame_agreement_all_int8);
    EXPECT_EQ(*calibrator.FrameAgreement(*all_int8), all_int8->frame_agreement);

    // Every sub-block in FP32: the INT8 backend gives FP32's logits bit for bit.
    Int8Calibration every = *all_int8;
    for (Int8SubBlockScales& l : every.layers) l.fp32 = true;
    EXPECT_EQ(*calibrator.FrameAgreement(every), 1.0);
    BackendOptions options;
    options.device = Device::kCpu;
    options.keep_log_probs = true;
    absl::StatusOr<std::unique_ptr<Backend>> fp32 = CreateCpuBackend(model, options);
    options.cpu_precision = kernels::Precision::kInt8;
    options.int8_calibration = std::make_shared<const Int8Calibration>(every);
    absl::StatusOr<std::unique_ptr<Backend>> mixed = CreateCpuBackend(model, options);
    ASSERT_TRUE(fp32.ok() && mixed.ok());
    const int frames = 133;
    const std::vector<float> x =
        test_util::Random(rng, static_cast<std::size_t>(frames) * features, -1, 1);
    BackendOutput a, b;
    ASSERT_TRUE((*fp32)->Run({x.data(), 1, frames, features, &frames}, &a).ok());
    ASSERT_TRUE((*mixed)->Run({x.data(), 1, frames, features, &frames}, &b).ok());
    EXPECT_EQ(a.log_probs, b.log_probs);
    // One sub-block in FP32, the rest INT8: runs, and differs from both.
    Int8Calibration one = *all_int8;
    one.layers.front().fp32 = true;
    options.int8_calibration = std::make_shared<const Int8Calibration>(one);
    absl::StatusOr<std::unique_ptr<Backend>> part = CreateCpuBackend(model, options);
    ASSERT_TRUE(part.ok()) << part.status();
    BackendOutput c;
    ASSERT_TRUE((*part)->Run({x.data(), 1, frames, features, &frames}, &c).ok());
    EXPECT_NE(c.log_probs, a.log_probs);

    // The selection, with room for every sub-block and no minimum gain: whatever it keeps fits
    // the budget, never lowers the agreement, and the check reproduces the recorded figure.
    for (double budget : {0.05, 1.0}) {
      Int8CalibrationOptions select;
      select.max_fp32_share = budget;
      select.min_gain = 0.0;
      std::vector<std::string> lines;
      select.log = [&lines](const std::string& line) { lines.push_back(line); };
      absl::StatusOr<Int8Calibration> chosen = calibrator.Calibrate(1.0, select);
      ASSERT_TRUE(chosen.ok()) << chosen.status();
      EXPECT_FALSE(lines.empty());
      EXPECT_GE(chosen->frame_agreement, chosen->frame_agreement_all_int8);
      EXPECT_EQ(*calibrator.FrameAgreement(*chosen), chosen->frame_agreement);
      double total = 0.0, kept = 0.0;
      for (const Int8SubBlockScales& l : chosen->layers) {
        const FoldedSubBlock& sub =
            l.block < 0 ? model->decoder() : model->blocks()[l.block].sub_blocks[l.sub_block];
        total += MultiplyAddsPerFrame(sub);
        if (l.fp32) kept += MultiplyAddsPerFrame(sub);
      }
      EXPECT_LE(kept, budget * total * (1 + 1e-9));
      if (chosen->Fp32Count() == 0 && budget == 1.0) {
        // Nothing kept with room for everything: no sub-block alone in FP32 raises the agreement
        // (a disagreement two sub-blocks' errors make together can stay).
        for (std::size_t i = 0; i < chosen->layers.size(); ++i) {
          Int8Calibration one = *chosen;
          one.layers[i].fp32 = true;
          EXPECT_LE(*calibrator.FrameAgreement(one), chosen->frame_agreement_all_int8)
              << i << "\n"
              << absl::StrJoin(lines, "\n");
        }
      }
    }
    // A calibration of other weights is refused by the check.
    auto other = BuildModel(config, 32);
    Int8Calibrator other_calibrator(other);
    ASSERT_TRUE(
        other_calibrator.AddUtterance(test_util::Random(rng, 50u * features, -1, 1), 50).ok());
    EXPECT_EQ(other_calibrator.FrameAgreement(*all_int8).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

// The model folder's calibration: absent, stale or malformed leaves the model loadable and INT8
// refused with the reason; a good one is used.
TEST(Int8CalibrationLoadTest, FolderCalibrationIsCheckedAtLoad) {
  const std::string shipped = std::string(JASPER_SOURCE_DIR) + "/models/quartznet_en_tts_small";
  TempDir dir;
  for (const char* name : {"model.json", "model.safetensors", "lm.bin"}) {
    std::filesystem::copy_file(std::filesystem::path(shipped) / name,
                               std::filesystem::path(dir.path()) / name);
  }
  for (const char* folder : {"itn", "punct_bert"}) {  // model.json names them
    std::filesystem::copy(std::filesystem::path(shipped) / folder,
                          std::filesystem::path(dir.path()) / folder);
  }
  BackendOptions options;
  options.device = Device::kCpu;
  options.cpu_precision = kernels::Precision::kInt8;
  const bool hardware = kernels::HasInt8Gemm();

  absl::StatusOr<std::shared_ptr<const Model>> none = Model::Load(dir.path());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ((*none)->int8_calibration(), nullptr);
  EXPECT_EQ((*none)->int8_calibration_status().code(), absl::StatusCode::kNotFound);
  if (hardware) {
    absl::StatusOr<std::unique_ptr<Backend>> refused = CreateCpuBackend(*none, options);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find("--calibrate_int8"), std::string::npos)
        << refused.status();
  }

  const std::string good = ReadText(std::filesystem::path(shipped) / kInt8CalibrationFile);
  ASSERT_FALSE(good.empty()) << "the shipped model has no " << kInt8CalibrationFile;
  std::string stale = good;
  const std::size_t at = stale.find("\"weights_fingerprint\": \"") + 24;
  stale[at] = stale[at] == '0' ? '1' : '0';
  dir.Write(kInt8CalibrationFile, stale);
  absl::StatusOr<std::shared_ptr<const Model>> with_stale = Model::Load(dir.path());
  ASSERT_TRUE(with_stale.ok()) << with_stale.status();
  EXPECT_EQ((*with_stale)->int8_calibration(), nullptr);
  EXPECT_EQ((*with_stale)->int8_calibration_status().code(), absl::StatusCode::kFailedPrecondition);
  if (hardware) {
    EXPECT_EQ(CreateCpuBackend(*with_stale, options).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }

  dir.Write(kInt8CalibrationFile, "{ not json");
  absl::StatusOr<std::shared_ptr<const Model>> with_bad = Model::Load(dir.path());
  ASSERT_TRUE(with_bad.ok()) << with_bad.status();
  EXPECT_EQ((*with_bad)->int8_calibration_status().code(), absl::StatusCode::kInvalidArgument);

  dir.Write(kInt8CalibrationFile, good);
  absl::StatusOr<std::shared_ptr<const Model>> with_good = Model::Load(dir.path());
  ASSERT_TRUE(with_good.ok()) << with_good.status();
  ASSERT_NE((*with_good)->int8_calibration(), nullptr) << (*with_good)->int8_calibration_status();
  EXPECT_TRUE((*with_good)->int8_calibration_status().ok());
  if (hardware) {
    EXPECT_TRUE(CreateCpuBackend(*with_good, options).ok());
  }
}

// INT8 results of an utterance do not depend on the batch around it: padded frames, other
// utterances and the batch size change no bit of its outputs (masked frames are never read).
TEST(Int8BackendTest, PaddingAndBatchDoNotChangeAnUtterance) {
  if (!kernels::HasInt8Gemm()) GTEST_SKIP() << "no INT8 GEMM: " << kernels::DescribeCpuFeatures();
  for (const ModelConfig& config :
       {test_util::SeparableConfig(), test_util::DenseResidualConfig()}) {
    auto model = BuildModel(config, 24);
    ASSERT_NE(model, nullptr);
    const int features = config.feat_in;
    std::mt19937 rng(9);
    Int8Calibrator calibrator(model);
    ASSERT_TRUE(calibrator.AddUtterance(test_util::Random(rng, 300u * features, -1, 1), 300).ok());
    absl::StatusOr<Int8Calibration> calibration = calibrator.Calibrate(3.0);
    ASSERT_TRUE(calibration.ok()) << calibration.status();
    BackendOptions options;
    options.device = Device::kCpu;
    options.cpu_precision = kernels::Precision::kInt8;
    options.int8_calibration = std::make_shared<const Int8Calibration>(*calibration);
    options.keep_log_probs = true;
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(model, options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    const int frames = 211;
    const std::vector<float> utterance =
        test_util::Random(rng, static_cast<std::size_t>(frames) * features, -1, 1);
    BackendOutput alone;
    ASSERT_TRUE((*backend)->Run({utterance.data(), 1, frames, features, &frames}, &alone).ok());
    // The same utterance second in a batch of 3, padded to 260 frames, garbage in the padding.
    const int time = 260;
    std::vector<float> batch = test_util::Random(rng, 3u * time * features, -50, 50);
    std::copy(utterance.begin(), utterance.end(), batch.begin() + time * features);
    const int lengths[] = {260, frames, 97};
    BackendOutput in_batch;
    ASSERT_TRUE((*backend)->Run({batch.data(), 3, time, features, lengths}, &in_batch).ok());
    const int enc = alone.lengths[0];
    ASSERT_EQ(in_batch.lengths[1], enc);
    const std::size_t vocab = alone.vocab;
    for (int t = 0; t < enc; ++t) {
      ASSERT_EQ(alone.ids[t], in_batch.ids[in_batch.time + t]) << t;
      for (std::size_t v = 0; v < vocab; ++v) {
        ASSERT_EQ(alone.log_probs[t * vocab + v],
                  in_batch.log_probs[(in_batch.time + t) * vocab + v])
            << t << " " << v;
      }
    }
  }
}

// Without an INT8 GEMM in hardware (simulated by capping the ISA level at AVX2), INT8 is
// refused whatever the calibration; the reference mode ignores the precision.
TEST(Int8BackendTest, RefusedWithoutHardwareInt8) {
  auto model = BuildModel(test_util::SeparableConfig(), 23);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(*ParseCpuPrecision("int8"), kernels::Precision::kInt8);
  BackendOptions options;
  options.device = Device::kCpu;
  options.cpu_precision = kernels::Precision::kInt8;
  const kernels::CpuIsa previous = kernels::SetCpuIsaCap(kernels::CpuIsa::kAvx2);
  EXPECT_FALSE(kernels::HasInt8Gemm());
  absl::StatusOr<std::unique_ptr<Backend>> refused = CreateCpuBackend(model, options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("VNNI"), std::string::npos) << refused.status();
  EXPECT_TRUE(CreateCpuBackend(model, options, /*use_reference=*/true).ok());
  kernels::SetCpuIsaCap(previous);
}

}  // namespace
}  // namespace jasper
