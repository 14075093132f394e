// Model loading: model.json + model.safetensors (NeMo tensor names) -> folded FP32 sub-blocks.
//
// Tensor names (NeMo's state_dict, see docs/MODEL_FORMAT.md): block b, sub-block j of R. Each
// non-last sub-block occupies (separable ? 5 : 4) mconv slots (conv[s], BN, ReLU, Dropout); the
// last has only conv[s] + BN. So with base = j * (separable ? 5 : 4):
//   separable: mconv.{base}.conv.weight [C_in,1,K] (depthwise), mconv.{base+1}.conv.weight
//              [C_out,C_in,1] (pointwise), mconv.{base+2}.{weight,bias,running_mean,running_var}
//   dense:     mconv.{base}.conv.weight [C_out,C_in,K], mconv.{base+1}.* batch norm
//   residual:  res.{p}.0.conv.weight [C_out,C_pane,1], res.{p}.1.* batch norm
// Checkpoints in F16/BF16/F64 are converted to FP32 on read; folding is computed in double from
// those FP32 values and stored as FP32.
#include "engine/model/model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/io/safetensors.h"
#include "engine/status_macros.h"

namespace jasper {
namespace {

// NeMo's JasperBlock BatchNorm1d eps (jasper.py), not PyTorch's 1e-5 default.
constexpr double kBatchNormEps = 1e-3;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// Hands out tensors by name with shape and value checks, remembering which were used so that
// leftovers can be reported.
class TensorSource {
 public:
  explicit TensorSource(const SafetensorsFile& file) : file_(file) {}

  absl::StatusOr<std::vector<float>> Take(const std::string& name,
                                          const std::vector<int64_t>& shape) {
    const TensorView* view = file_.Find(name);
    if (view == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("missing tensor ", name, " (expected shape ", ShapeString(shape), ")"));
    }
    used_.insert(name);
    if (view->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has shape ",
                                                     ShapeString(view->shape), ", expected ",
                                                     ShapeString(shape)));
    }
    absl::StatusOr<std::vector<float>> values = file_.GetFloat(name);
    if (!values.ok()) return values.status();
    for (std::size_t i = 0; i < values->size(); ++i) {
      if (!std::isfinite((*values)[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", name, " holds a non-finite value (NaN or Inf) at index ", i));
      }
    }
    return values;
  }

  bool Has(const std::string& name) const { return file_.Find(name) != nullptr; }

  // Every tensor must have been used, except BatchNorm's step counters.
  absl::Status CheckAllUsed() const {
    for (const auto& entry : file_.tensors()) {
      const std::string& name = entry.first;
      if (used_.count(name) == 0 && !absl::EndsWith(name, ".num_batches_tracked")) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected tensor ", name));
      }
    }
    return absl::OkStatus();
  }

 private:
  const SafetensorsFile& file_;
  std::set<std::string> used_;
};

// Batch norm as y = scale * x + shift (inference statistics), in double.
struct BatchNorm {
  std::vector<double> scale;
  std::vector<double> shift;
};

absl::StatusOr<BatchNorm> TakeBatchNorm(TensorSource& source, const std::string& prefix,
                                        int channels) {
  const std::vector<int64_t> shape = {channels};
  JASPER_ASSIGN_OR_RETURN(auto gamma, source.Take(prefix + ".weight", shape));
  JASPER_ASSIGN_OR_RETURN(auto beta, source.Take(prefix + ".bias", shape));
  JASPER_ASSIGN_OR_RETURN(auto mean, source.Take(prefix + ".running_mean", shape));
  JASPER_ASSIGN_OR_RETURN(auto var, source.Take(prefix + ".running_var", shape));
  BatchNorm bn;
  bn.scale.resize(channels);
  bn.shift.resize(channels);
  for (int o = 0; o < channels; ++o) {
    if (var[o] < 0.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", prefix, ".running_var holds ", var[o], " < 0 at index ", o));
    }
    const double s = static_cast<double>(gamma[o]) / std::sqrt(var[o] + kBatchNormEps);
    bn.scale[o] = s;
    bn.shift[o] = static_cast<double>(beta[o]) - s * static_cast<double>(mean[o]);
  }
  return bn;
}

// W [C_out, C_in, K] (PyTorch Conv1d) scaled by s_o -> [K, C_in, C_out].
std::vector<float> FoldDense(const std::vector<float>& w, const BatchNorm& bn, int c_out, int c_in,
                             int k) {
  std::vector<float> out(static_cast<std::size_t>(k) * c_in * c_out);
  for (int o = 0; o < c_out; ++o) {
    for (int c = 0; c < c_in; ++c) {
      for (int t = 0; t < k; ++t) {
        const double v = bn.scale[o] * w[(static_cast<std::size_t>(o) * c_in + c) * k + t];
        out[(static_cast<std::size_t>(t) * c_in + c) * c_out + o] = static_cast<float>(v);
      }
    }
  }
  return out;
}

std::string BlockPrefix(int b) { return absl::StrCat("encoder.encoder.", b); }

// Loads and folds block b. `sources` are its residual panes (ResidualSources()).
absl::StatusOr<FoldedBlock> LoadBlock(TensorSource& source, const ModelConfig& config, int b,
                                      const std::vector<int>& sources) {
  const BlockConfig& block = config.blocks[b];
  const int in_channels = b == 0 ? config.feat_in : config.blocks[b - 1].filters;
  const int c_out = block.filters;
  const int k = block.kernel;
  const std::string prefix = BlockPrefix(b);
  const int slots = block.separable ? 5 : 4;  // conv[s], BN, ReLU, Dropout

  FoldedBlock folded;
  folded.sub_blocks.resize(block.repeat);
  for (int j = 0; j < block.repeat; ++j) {
    FoldedSubBlock& sub = folded.sub_blocks[j];
    const int c_in = j == 0 ? in_channels : c_out;
    sub.desc.in_channels = c_in;
    sub.desc.out_channels = c_out;
    sub.desc.kernel_size = k;
    // NeMo gives every sub-block the block's stride and dilation (stride_last: false).
    sub.desc.stride = block.stride;
    sub.desc.dilation = block.dilation;
    sub.desc.padding = block.dilation * (k - 1) / 2;
    sub.desc.separable = block.separable;
    sub.desc.activation = kernels::Activation::kRelu;

    const int base = j * slots;
    const std::string mconv = absl::StrCat(prefix, ".mconv.");
    BatchNorm bn;
    if (block.separable) {
      JASPER_ASSIGN_OR_RETURN(auto dw,
                              source.Take(absl::StrCat(mconv, base, ".conv.weight"), {c_in, 1, k}));
      JASPER_ASSIGN_OR_RETURN(
          auto pw, source.Take(absl::StrCat(mconv, base + 1, ".conv.weight"), {c_out, c_in, 1}));
      JASPER_ASSIGN_OR_RETURN(auto bn_or,
                              TakeBatchNorm(source, absl::StrCat(mconv, base + 2), c_out));
      bn = std::move(bn_or);
      // Depthwise [C_in, 1, K] -> [K, C_in], not scaled (the BN follows the pointwise conv).
      sub.depthwise.resize(static_cast<std::size_t>(k) * c_in);
      for (int c = 0; c < c_in; ++c) {
        for (int t = 0; t < k; ++t) {
          sub.depthwise[static_cast<std::size_t>(t) * c_in + c] =
              dw[static_cast<std::size_t>(c) * k + t];
        }
      }
      sub.weight = FoldDense(pw, bn, c_out, c_in, 1);
    } else {
      JASPER_ASSIGN_OR_RETURN(
          auto w, source.Take(absl::StrCat(mconv, base, ".conv.weight"), {c_out, c_in, k}));
      JASPER_ASSIGN_OR_RETURN(auto bn_or,
                              TakeBatchNorm(source, absl::StrCat(mconv, base + 1), c_out));
      bn = std::move(bn_or);
      sub.weight = FoldDense(w, bn, c_out, c_in, k);
    }
    std::vector<double> bias = bn.shift;

    if (j == block.repeat - 1 && block.residual) {
      for (std::size_t p = 0; p < sources.size(); ++p) {
        const int src = sources[p];
        const int c_pane = src < 0 ? config.feat_in : config.blocks[src].filters;
        const std::string res = absl::StrCat(prefix, ".res.", p);
        JASPER_ASSIGN_OR_RETURN(
            auto rw, source.Take(absl::StrCat(res, ".0.conv.weight"), {c_out, c_pane, 1}));
        JASPER_ASSIGN_OR_RETURN(auto rbn, TakeBatchNorm(source, absl::StrCat(res, ".1"), c_out));
        sub.residual_weights.push_back(FoldDense(rw, rbn, c_out, c_pane, 1));
        sub.residual_sources.push_back(src);
        sub.residual_channels.push_back(c_pane);
        for (int o = 0; o < c_out; ++o) bias[o] += rbn.shift[o];
      }
      // A further pane in the file means the config and checkpoint disagree on the layout.
      const std::string extra = absl::StrCat(prefix, ".res.", sources.size(), ".0.conv.weight");
      if (source.Has(extra)) {
        return absl::InvalidArgumentError(
            absl::StrCat("unexpected tensor ", extra, " (block ", b, " has ", sources.size(),
                         " residual pane(s); check residual_dense in model.json)"));
      }
    }
    sub.bias.assign(bias.begin(), bias.end());
  }
  return folded;
}

int EffectiveFft(const FeaturizerConfig& f) {
  if (f.n_fft > 0) return f.n_fft;
  int n = 1;
  while (n < f.WinLength()) n *= 2;
  return n;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat("file not found: ", path));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(absl::StrCat("not a regular file: ", path));
  }
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot stat ", path, ": ", ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes(static_cast<std::size_t>(size), '\0');  // one copy, even for GB checkpoints
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size) {
    return absl::DataLossError(
        absl::StrCat("error reading ", path, " (read ", in.gcount(), " of ", size, " bytes)"));
  }
  return bytes;
}

absl::Status WithPrefix(const absl::Status& status, const std::string& prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Model>> Model::FromParts(const ModelConfig& config,
                                                              const std::string& weights_bytes) {
  absl::Status valid = config.Validate();
  if (!valid.ok()) return WithPrefix(valid, "model config");
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Parse(weights_bytes);
  if (!file.ok()) return file.status();
  return Build(config, *file);
}

absl::StatusOr<std::shared_ptr<const Model>> Model::Load(const std::string& dir) {
  const std::string json_path = (std::filesystem::path(dir) / "model.json").string();
  const std::string weights_path = (std::filesystem::path(dir) / "model.safetensors").string();
  absl::StatusOr<std::string> text = ReadWholeFile(json_path);
  if (!text.ok()) return WithPrefix(text.status(), "model folder " + dir);
  absl::StatusOr<ModelConfig> config = ParseModelConfig(*text);
  if (!config.ok()) return WithPrefix(config.status(), json_path);
  absl::StatusOr<std::string> bytes = ReadWholeFile(weights_path);
  if (!bytes.ok()) return WithPrefix(bytes.status(), "model folder " + dir);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Parse(std::move(*bytes));
  if (!file.ok()) return WithPrefix(file.status(), weights_path);
  absl::StatusOr<std::shared_ptr<const Model>> model = Build(*config, *file);
  if (!model.ok()) return WithPrefix(model.status(), weights_path);
  if (!config->language_model.empty()) {
    const std::string lm_path = (std::filesystem::path(dir) / config->language_model).string();
    absl::StatusOr<std::shared_ptr<const NgramLm>> lm = NgramLm::LoadBinary(lm_path);
    if (!lm.ok()) return WithPrefix(lm.status(), json_path + " language_model");
    // Not shared with anyone yet: completing it here keeps Build() free of file access.
    std::const_pointer_cast<Model>(*model)->language_model_ = *std::move(lm);
  }
  if (!config->inverse_text_normalization.empty()) {
    const std::string itn_dir =
        (std::filesystem::path(dir) / config->inverse_text_normalization).string();
    absl::StatusOr<std::unique_ptr<const InverseNormalizer>> itn = InverseNormalizer::Load(itn_dir);
    if (!itn.ok()) return WithPrefix(itn.status(), json_path + " inverse_text_normalization");
    std::const_pointer_cast<Model>(*model)->inverse_normalizer_ = *std::move(itn);
  }
  if (!config->punctuation.empty()) {
    const std::string punct_dir = (std::filesystem::path(dir) / config->punctuation).string();
    absl::StatusOr<std::unique_ptr<const Punctuator>> punct = Punctuator::Load(punct_dir);
    if (!punct.ok()) return WithPrefix(punct.status(), json_path + " punctuation");
    std::const_pointer_cast<Model>(*model)->punctuator_ = *std::move(punct);
  }
  // The INT8 calibration, if any: kept with its status, never failing the load.
  Model& loaded = *std::const_pointer_cast<Model>(*model);
  const std::string calibration_path = (std::filesystem::path(dir) / kInt8CalibrationFile).string();
  std::error_code ec;
  if (!std::filesystem::exists(calibration_path, ec)) {
    loaded.int8_calibration_status_ = absl::NotFoundError(absl::StrCat(
        "no ", kInt8CalibrationFile, " in ", dir,
        "; make one with `jasper-transcribe --model_dir=", dir, " --calibrate_int8 AUDIO...`"));
  } else {
    absl::StatusOr<std::string> calibration_text = ReadWholeFile(calibration_path);
    absl::StatusOr<Int8Calibration> calibration =
        calibration_text.ok() ? ParseInt8Calibration(*calibration_text)
                              : absl::StatusOr<Int8Calibration>(calibration_text.status());
    absl::Status status = calibration.status();
    if (status.ok()) status = CheckInt8Calibration(*calibration, loaded);
    if (status.ok()) loaded.int8_calibration_ = *std::move(calibration);
    loaded.int8_calibration_status_ = status;
  }
  return model;
}

absl::StatusOr<std::shared_ptr<const Model>> Model::Build(const ModelConfig& config,
                                                          const SafetensorsFile& file) {
  JASPER_ASSIGN_OR_RETURN(auto sources, ResidualSources(config));
  TensorSource source(file);
  std::shared_ptr<Model> model(new Model());
  model->config_ = config;
  const int num_blocks = static_cast<int>(config.blocks.size());
  model->blocks_.reserve(num_blocks);
  for (int b = 0; b < num_blocks; ++b) {
    JASPER_ASSIGN_OR_RETURN(auto block, LoadBlock(source, config, b, sources[b]));
    model->blocks_.push_back(std::move(block));
  }

  // Decoder: Conv1d(feat_in, num_classes + 1, 1, bias=True), no batch norm.
  const int c_enc = config.decoder_feat_in;
  const int n_out = config.num_outputs();
  JASPER_ASSIGN_OR_RETURN(auto dec_w,
                          source.Take("decoder.decoder_layers.0.weight", {n_out, c_enc, 1}));
  JASPER_ASSIGN_OR_RETURN(auto dec_b, source.Take("decoder.decoder_layers.0.bias", {n_out}));
  FoldedSubBlock& dec = model->decoder_;
  dec.desc.in_channels = c_enc;
  dec.desc.out_channels = n_out;
  dec.desc.kernel_size = 1;
  dec.desc.separable = false;
  dec.desc.activation = kernels::Activation::kIdentity;
  dec.weight.resize(static_cast<std::size_t>(c_enc) * n_out);
  for (int o = 0; o < n_out; ++o) {
    for (int c = 0; c < c_enc; ++c) {
      dec.weight[static_cast<std::size_t>(c) * n_out + o] =
          dec_w[static_cast<std::size_t>(o) * c_enc + c];
    }
  }
  dec.bias = std::move(dec_b);

  // Optional featurizer tensors saved by NeMo.
  const FeaturizerConfig& f = config.featurizer;
  if (source.Has("preprocessor.featurizer.fb")) {
    const int bins = EffectiveFft(f) / 2 + 1;
    JASPER_ASSIGN_OR_RETURN(auto fb,
                            source.Take("preprocessor.featurizer.fb", {1, f.features, bins}));
    model->filterbank_ = std::move(fb);  // [1, F, bins] -> [F, bins]: same bytes
  }
  if (source.Has("preprocessor.featurizer.window")) {
    // Validated only: the featurizer builds the same symmetric Hann window itself.
    JASPER_ASSIGN_OR_RETURN(auto window,
                            source.Take("preprocessor.featurizer.window", {f.WinLength()}));
    (void)window;
  }

  absl::Status leftovers = source.CheckAllUsed();
  if (!leftovers.ok()) return leftovers;
  JASPER_ASSIGN_OR_RETURN(auto featurizer, Featurizer::Create(f, model->filterbank_));
  model->featurizer_.emplace(std::move(featurizer));
  model->samples_per_encoder_frame_ =
      static_cast<int64_t>(f.HopLength()) * config.subsampling_factor();
  model->encoder_frame_ms_ =
      1000.0 * static_cast<double>(model->samples_per_encoder_frame_) / f.sample_rate;
  return std::shared_ptr<const Model>(std::move(model));
}

int Model::EncoderFrames(int feature_frames) const {
  int n = feature_frames;
  for (const FoldedBlock& block : blocks_) {
    for (const FoldedSubBlock& sub : block.sub_blocks) n = kernels::ConvOutputLength(sub.desc, n);
  }
  return n;
}

int Model::EncoderFramesForSamples(int num_samples) const {
  return EncoderFrames(featurizer().ValidFrames(num_samples));
}

int Model::EncoderFramesCeil(int64_t ms) const {
  if (ms <= 0) return 0;
  // Exact in integers: ceil(ms * rate / (1000 * samples_per_frame)).
  const int64_t rate = config_.featurizer.sample_rate;
  const int64_t per_frame = 1000 * samples_per_encoder_frame_;
  return static_cast<int>((ms * rate + per_frame - 1) / per_frame);
}

}  // namespace jasper
