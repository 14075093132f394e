// model.json validation and serialization (parsing is in model_config_parse.cc). The schema is
// documented field by field in docs/MODEL_FORMAT.md.
#include "engine/model/model_config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"

namespace jasper {
namespace {

using ordered_json = nlohmann::ordered_json;

// Sanity limits: far beyond any real Jasper/QuartzNet, small enough that no size computed from
// them overflows int64 (filters^2 * kernel < 2^48).
constexpr int kMaxFilters = 16384;
constexpr int kMaxKernel = 1023;
constexpr int kMaxStride = 16;
constexpr int kMaxDilation = 64;
constexpr int kMaxRepeat = 64;
constexpr int kMaxBlocks = 1024;
constexpr int kMaxSubsampling = 4096;
constexpr std::size_t kMaxLabels = 1 << 20;

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}
absl::Status Unsupported(const std::string& field, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat(field, ": ", what));
}

}  // namespace

absl::Status BlockConfig::Validate() const {
  if (filters < 1 || filters > kMaxFilters) {
    return Invalid("filters", absl::StrCat("must be in [1, ", kMaxFilters, "], got ", filters));
  }
  if (repeat < 1 || repeat > kMaxRepeat) {
    return Invalid("repeat", absl::StrCat("must be in [1, ", kMaxRepeat, "], got ", repeat));
  }
  if (kernel < 1 || kernel > kMaxKernel) {
    return Invalid("kernel", absl::StrCat("must be in [1, ", kMaxKernel, "], got ", kernel));
  }
  if (kernel % 2 == 0) {
    return Invalid("kernel", absl::StrCat("must be odd for 'same' padding, got ", kernel));
  }
  if (stride < 1 || stride > kMaxStride) {
    return Invalid("stride", absl::StrCat("must be in [1, ", kMaxStride, "], got ", stride));
  }
  if (dilation < 1 || dilation > kMaxDilation) {
    return Invalid("dilation", absl::StrCat("must be in [1, ", kMaxDilation, "], got ", dilation));
  }
  if (stride > 1 && dilation > 1) {
    return Invalid("dilation",
                   absl::StrCat("stride ", stride, " with dilation ", dilation,
                                ": NeMo forbids stride > 1 together with dilation > 1"));
  }
  if (residual && stride > 1) {
    return Unsupported("residual", absl::StrCat("a residual block with stride ", stride,
                                                " (residual_mode \"add\" needs stride 1)"));
  }
  if (residual_dense && !residual) {
    return Unsupported("residual_dense", "requires residual: true");
  }
  return absl::OkStatus();
}

int ModelConfig::subsampling_factor() const {
  int64_t factor = 1;
  for (const BlockConfig& block : blocks) {
    // Every sub-block of a block carries the block's stride (NeMo, stride_last: false).
    for (int j = 0; j < block.repeat; ++j) {
      factor *= block.stride > 0 ? block.stride : 1;
      if (factor > std::numeric_limits<int>::max()) return std::numeric_limits<int>::max();
    }
  }
  return static_cast<int>(factor);
}

absl::StatusOr<std::vector<std::vector<int>>> ResidualSources(const ModelConfig& config) {
  const int num_blocks = static_cast<int>(config.blocks.size());
  auto channels_of = [&config](int source) {
    return source < 0 ? config.feat_in : config.blocks[source].filters;
  };
  std::vector<std::vector<int>> sources(num_blocks);
  std::vector<int> xs = {-1};  // the list NeMo passes between blocks
  std::vector<int> dense_panes;
  for (int b = 0; b < num_blocks; ++b) {
    const BlockConfig& block = config.blocks[b];
    const int in_channels = channels_of(b - 1);
    if (block.residual) {
      std::vector<int> panes = {in_channels};
      if (block.residual_dense) {
        dense_panes.push_back(in_channels);
        panes = dense_panes;
      }
      if (panes.size() > xs.size()) {
        return Unsupported(
            absl::StrCat("encoder.jasper[", b, "].residual_dense"),
            absl::StrCat("needs ", panes.size(), " earlier activations but only ", xs.size(),
                         " reach it (residual_dense blocks must be "
                         "consecutive, as NeMo requires)"));
      }
      for (std::size_t p = 0; p < panes.size(); ++p) {
        if (channels_of(xs[p]) != panes[p]) {
          return Invalid(absl::StrCat("encoder.jasper[", b, "].residual"),
                         absl::StrCat("pane ", p, " reads an activation of ", channels_of(xs[p]),
                                      " channels but expects ", panes[p]));
        }
        sources[b].push_back(xs[p]);
      }
    }
    if (block.residual && block.residual_dense) {
      xs.push_back(b);
    } else {
      xs = {b};
    }
  }
  return sources;
}

absl::Status ModelConfig::Validate() const {
  if (format_version != 1) {
    return Unsupported("format_version",
                       absl::StrCat(format_version, " (this build reads version 1)"));
  }
  JASPER_RETURN_IF_ERROR(featurizer.Validate());
  if (!language_model.empty() &&
      (language_model.find('/') != std::string::npos || language_model == "." ||
       language_model == ".." || language_model.find('\0') != std::string::npos)) {
    return Invalid("language_model", "must be a file name in the model folder");
  }
  auto folder_name = [](const std::string& name) {
    return name.find('/') == std::string::npos && name != "." && name != ".." &&
           name.find('\0') == std::string::npos;
  };
  if (!inverse_text_normalization.empty() && !folder_name(inverse_text_normalization)) {
    return Invalid("inverse_text_normalization", "must be a folder name in the model folder");
  }
  if (!punctuation.empty() && !folder_name(punctuation)) {
    return Invalid("punctuation", "must be a folder name in the model folder");
  }
  if (!default_decoder.empty() && default_decoder != "greedy" && default_decoder != "beam") {
    return Invalid("default_decoder",
                   absl::StrCat("'", default_decoder, "' is not one of greedy, beam"));
  }
  if (feat_in != featurizer.features) {
    return Invalid("encoder.feat_in", absl::StrCat(feat_in, " differs from preprocessor.features ",
                                                   featurizer.features));
  }
  if (activation != "relu") {
    return Unsupported("encoder.activation", absl::StrCat("unknown or unsupported activation '",
                                                          activation, "' (only \"relu\")"));
  }
  if (blocks.empty()) return Invalid("encoder.jasper", "must hold at least one block");
  if (blocks.size() > static_cast<std::size_t>(kMaxBlocks)) {
    return Invalid("encoder.jasper", absl::StrCat("more than ", kMaxBlocks, " blocks"));
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    absl::Status status = blocks[i].Validate();
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("encoder.jasper[", i, "].", status.message()));
    }
  }
  if (subsampling_factor() > kMaxSubsampling) {
    return Invalid("encoder.jasper", absl::StrCat("total subsampling ", subsampling_factor(),
                                                  " exceeds ", kMaxSubsampling));
  }
  absl::StatusOr<std::vector<std::vector<int>>> sources = ResidualSources(*this);
  if (!sources.ok()) return sources.status();
  if (decoder_feat_in != blocks.back().filters) {
    return Invalid("decoder.feat_in",
                   absl::StrCat(decoder_feat_in, " differs from the last block's filters ",
                                blocks.back().filters));
  }
  if (labels.empty()) return Invalid("labels", "must not be empty");
  if (labels.size() > kMaxLabels) {
    return Invalid("labels", absl::StrCat("more than ", kMaxLabels, " labels"));
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i].empty()) return Invalid(absl::StrCat("labels[", i, "]"), "is empty");
    if (!seen.insert(labels[i]).second) {
      return Invalid(absl::StrCat("labels[", i, "]"),
                     absl::StrCat("duplicate label '", labels[i], "'"));
    }
  }
  return absl::OkStatus();
}

std::string ModelConfigToJson(const ModelConfig& config) {
  const FeaturizerConfig& f = config.featurizer;
  ordered_json pre;
  pre["sample_rate"] = f.sample_rate;
  pre["window_size"] = f.window_size_s;
  pre["window_stride"] = f.window_stride_s;
  pre["n_fft"] = f.n_fft > 0 ? ordered_json(f.n_fft) : ordered_json(nullptr);
  pre["features"] = f.features;
  pre["window"] = f.window;
  pre["preemph"] = f.preemph;
  pre["lowfreq"] = f.lowfreq_hz;
  pre["highfreq"] = f.highfreq_hz > 0 ? ordered_json(f.highfreq_hz) : ordered_json(nullptr);
  pre["log"] = f.log;
  pre["log_zero_guard_type"] = "add";
  pre["log_zero_guard_value"] = f.log_zero_guard_value;
  pre["mag_power"] = f.mag_power;
  pre["normalize"] = f.normalize;
  pre["pad_to"] = f.pad_to;
  pre["pad_value"] = f.pad_value;
  pre["mel_norm"] = f.mel_norm == "none" ? ordered_json(nullptr) : ordered_json(f.mel_norm);
  pre["dither"] = 0.0;
  pre["frame_splicing"] = 1;
  pre["exact_pad"] = false;
  pre["stft_mode"] = f.stft_mode == StftMode::kNemo25 ? "nemo25" : "legacy";

  ordered_json blocks = ordered_json::array();
  for (const BlockConfig& b : config.blocks) {
    ordered_json block;
    block["filters"] = b.filters;
    block["repeat"] = b.repeat;
    block["kernel"] = ordered_json::array({b.kernel});
    block["stride"] = ordered_json::array({b.stride});
    block["dilation"] = ordered_json::array({b.dilation});
    block["dropout"] = 0.0;
    block["residual"] = b.residual;
    block["residual_dense"] = b.residual_dense;
    block["separable"] = b.separable;
    blocks.push_back(std::move(block));
  }
  ordered_json encoder;
  encoder["feat_in"] = config.feat_in;
  encoder["activation"] = config.activation;
  encoder["conv_mask"] = config.conv_mask;
  encoder["jasper"] = std::move(blocks);

  ordered_json decoder;
  decoder["feat_in"] = config.decoder_feat_in;
  decoder["num_classes"] = static_cast<int>(config.labels.size());

  ordered_json root;
  root["format_version"] = config.format_version;
  root["name"] = config.name;
  if (!config.language_model.empty()) root["language_model"] = config.language_model;
  if (!config.inverse_text_normalization.empty()) {
    root["inverse_text_normalization"] = config.inverse_text_normalization;
  }
  if (!config.punctuation.empty()) root["punctuation"] = config.punctuation;
  if (!config.default_decoder.empty()) root["default_decoder"] = config.default_decoder;
  root["sample_rate"] = f.sample_rate;
  root["labels"] = config.labels;
  root["preprocessor"] = std::move(pre);
  root["encoder"] = std::move(encoder);
  root["decoder"] = std::move(decoder);
  return root.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace jasper
