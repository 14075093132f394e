// model.json parsing, validation and serialization. The schema is documented field by field in
// docs/MODEL_FORMAT.md; keys follow NeMo's model_config.yaml so that the converter copies them.
//
// nlohmann::json is used so that no exception leaves this file: the parse error is caught here
// and every value's type is checked before it is read.
#include "engine/model_config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace jasper {
namespace {

using json = nlohmann::json;
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
constexpr int kMaxFeatures = 1024;
constexpr int kMaxFft = 65536;
constexpr int kMinSampleRate = 1000;
constexpr int kMaxSampleRate = 384000;
constexpr std::size_t kMaxLabels = 1 << 20;

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}
absl::Status Unsupported(const std::string& field, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat(field, ": ", what));
}

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

const char* TypeName(const json& value) { return value.type_name(); }

// Keys a section may hold; anything else is an error naming the key.
absl::Status CheckKeys(const json& object, const std::string& path,
                       const std::set<std::string>& allowed) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (allowed.count(it.key()) == 0) {
      return Unsupported(path.empty() ? it.key() : absl::StrCat(path, ".", it.key()),
                         "unknown or unsupported key");
    }
  }
  return absl::OkStatus();
}

// Typed field readers. `path` is the dotted name used in errors. A missing key leaves *out
// unchanged unless `required`.
class Section {
 public:
  Section(const json& object, std::string path) : object_(object), path_(std::move(path)) {}

  std::string Path(const std::string& key) const {
    return path_.empty() ? key : absl::StrCat(path_, ".", key);
  }
  const json* Find(const std::string& key) const {
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  bool IsNull(const std::string& key) const {
    const json* v = Find(key);
    return v != nullptr && v->is_null();
  }

  absl::Status Int(const std::string& key, bool required, int* out) const {
    const json* v = Find(key);
    if (v == nullptr) return required ? Invalid(Path(key), "required") : absl::OkStatus();
    return ToInt(*v, Path(key), out);
  }
  absl::Status Number(const std::string& key, bool required, double* out) const {
    const json* v = Find(key);
    if (v == nullptr) return required ? Invalid(Path(key), "required") : absl::OkStatus();
    if (!v->is_number()) {
      return Invalid(Path(key), absl::StrCat("expected a number, got ", TypeName(*v)));
    }
    *out = v->get<double>();
    if (!std::isfinite(*out)) return Invalid(Path(key), "must be finite");
    return absl::OkStatus();
  }
  absl::Status Bool(const std::string& key, bool required, bool* out) const {
    const json* v = Find(key);
    if (v == nullptr) return required ? Invalid(Path(key), "required") : absl::OkStatus();
    if (!v->is_boolean()) {
      return Invalid(Path(key), absl::StrCat("expected true/false, got ", Dump(*v)));
    }
    *out = v->get<bool>();
    return absl::OkStatus();
  }
  absl::Status String(const std::string& key, bool required, std::string* out) const {
    const json* v = Find(key);
    if (v == nullptr) return required ? Invalid(Path(key), "required") : absl::OkStatus();
    if (!v->is_string()) {
      return Invalid(Path(key), absl::StrCat("expected a string, got ", Dump(*v)));
    }
    *out = v->get<std::string>();
    return absl::OkStatus();
  }
  // NeMo writes kernel/stride/dilation as one-element lists ([33]); a bare integer is accepted.
  absl::Status IntList1(const std::string& key, bool required, int* out) const {
    const json* v = Find(key);
    if (v == nullptr) return required ? Invalid(Path(key), "required") : absl::OkStatus();
    if (v->is_array()) {
      if (v->size() != 1) {
        return Unsupported(Path(key), absl::StrCat("expected a one-element list (1-D conv), got ",
                                                   Dump(*v)));
      }
      return ToInt((*v)[0], Path(key), out);
    }
    return ToInt(*v, Path(key), out);
  }

  static absl::Status ToInt(const json& v, const std::string& path, int* out) {
    if (!v.is_number_integer()) {
      return Invalid(path, absl::StrCat("expected an integer, got ", Dump(v)));
    }
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
        return Invalid(path, absl::StrCat("out of range: ", Dump(v)));
      }
      *out = static_cast<int>(u);
      return absl::OkStatus();
    }
    const int64_t i = v.get<int64_t>();
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max()) {
      return Invalid(path, absl::StrCat("out of range: ", Dump(v)));
    }
    *out = static_cast<int>(i);
    return absl::OkStatus();
  }

 private:
  const json& object_;
  std::string path_;
};

#define JASPER_RETURN_IF_ERROR(expr)      \
  do {                                    \
    absl::Status _status = (expr);        \
    if (!_status.ok()) return _status;    \
  } while (0)

// `_target_` is informative; when present it must name the expected NeMo class.
absl::Status CheckTarget(const Section& s, const std::string& class_name) {
  std::string target;
  JASPER_RETURN_IF_ERROR(s.String("_target_", false, &target));
  if (!target.empty() && !absl::EndsWith(target, class_name)) {
    return Unsupported(s.Path("_target_"),
                       absl::StrCat("'", target, "' is not supported (expected ", class_name, ")"));
  }
  return absl::OkStatus();
}

absl::Status ParsePreprocessor(const json& object, int sample_rate, FeaturizerConfig* f) {
  const std::string path = "preprocessor";
  if (!object.is_object()) return Invalid(path, "expected an object");
  JASPER_RETURN_IF_ERROR(CheckKeys(
      object, path,
      {"_target_", "sample_rate", "window_size", "window_stride", "n_window_size",
       "n_window_stride", "n_fft", "features", "window", "preemph", "lowfreq", "highfreq", "log",
       "log_zero_guard_type", "log_zero_guard_value", "mag_power", "normalize", "pad_to",
       "pad_value", "mel_norm", "dither", "frame_splicing", "exact_pad", "stft_mode", "stft_conv",
       "stft_exact_pad", "rng", "nb_augmentation_prob", "nb_max_freq", "use_torchaudio"}));
  const Section s(object, path);
  JASPER_RETURN_IF_ERROR(CheckTarget(s, "AudioToMelSpectrogramPreprocessor"));

  f->sample_rate = sample_rate;
  int pre_rate = sample_rate;
  JASPER_RETURN_IF_ERROR(s.Int("sample_rate", false, &pre_rate));
  if (pre_rate != sample_rate) {
    return Invalid(s.Path("sample_rate"),
                   absl::StrCat(pre_rate, " differs from the top-level sample_rate ", sample_rate));
  }
  for (const char* key : {"n_window_size", "n_window_stride"}) {
    if (s.Find(key) != nullptr && !s.IsNull(key)) {
      return Unsupported(s.Path(key), "not supported; give window_size/window_stride in seconds");
    }
  }
  JASPER_RETURN_IF_ERROR(s.Number("window_size", false, &f->window_size_s));
  JASPER_RETURN_IF_ERROR(s.Number("window_stride", false, &f->window_stride_s));
  if (s.IsNull("n_fft")) {
    f->n_fft = 0;
  } else {
    JASPER_RETURN_IF_ERROR(s.Int("n_fft", false, &f->n_fft));
    if (f->n_fft <= 0) return Invalid(s.Path("n_fft"), "must be positive or null");
  }
  JASPER_RETURN_IF_ERROR(s.Int("features", false, &f->features));
  JASPER_RETURN_IF_ERROR(s.String("window", false, &f->window));
  if (s.IsNull("preemph")) {
    f->preemph = 0.0;
  } else {
    JASPER_RETURN_IF_ERROR(s.Number("preemph", false, &f->preemph));
  }
  JASPER_RETURN_IF_ERROR(s.Number("lowfreq", false, &f->lowfreq_hz));
  if (s.IsNull("highfreq")) {
    f->highfreq_hz = 0.0;
  } else {
    JASPER_RETURN_IF_ERROR(s.Number("highfreq", false, &f->highfreq_hz));
  }
  JASPER_RETURN_IF_ERROR(s.Bool("log", false, &f->log));

  std::string guard_type = "add";
  JASPER_RETURN_IF_ERROR(s.String("log_zero_guard_type", false, &guard_type));
  if (guard_type != "add") {
    return Unsupported(s.Path("log_zero_guard_type"),
                       absl::StrCat("'", guard_type, "' is not supported (only \"add\")"));
  }
  if (const json* guard = s.Find("log_zero_guard_value"); guard != nullptr && guard->is_string()) {
    // NeMo's names for torch.finfo(float32) constants.
    const std::string name = guard->get<std::string>();
    if (name == "tiny") {
      f->log_zero_guard_value = std::numeric_limits<float>::min();
    } else if (name == "eps") {
      f->log_zero_guard_value = std::numeric_limits<float>::epsilon();
    } else {
      return Invalid(s.Path("log_zero_guard_value"),
                     absl::StrCat("'", name, "' is not a number, \"tiny\" or \"eps\""));
    }
  } else {
    JASPER_RETURN_IF_ERROR(s.Number("log_zero_guard_value", false, &f->log_zero_guard_value));
  }
  JASPER_RETURN_IF_ERROR(s.Number("mag_power", false, &f->mag_power));

  if (s.IsNull("normalize")) {
    f->normalize = "none";
  } else {
    JASPER_RETURN_IF_ERROR(s.String("normalize", false, &f->normalize));
    if (f->normalize == "None" || f->normalize == "NA") f->normalize = "none";
  }
  JASPER_RETURN_IF_ERROR(s.Int("pad_to", false, &f->pad_to));
  JASPER_RETURN_IF_ERROR(s.Number("pad_value", false, &f->pad_value));
  if (s.IsNull("mel_norm")) {
    f->mel_norm = "none";
  } else {
    JASPER_RETURN_IF_ERROR(s.String("mel_norm", false, &f->mel_norm));
  }

  // Accepted for compatibility with NeMo configs and ignored at inference.
  double dither = 0.0;
  JASPER_RETURN_IF_ERROR(s.Number("dither", false, &dither));
  if (dither < 0.0) return Invalid(s.Path("dither"), "must be >= 0");
  if (!s.IsNull("nb_augmentation_prob")) {
    double nb = 0.0;
    JASPER_RETURN_IF_ERROR(s.Number("nb_augmentation_prob", false, &nb));
  }
  // stft_conv / stft_exact_pad are deprecated; NeMo forces them to false and so do we.
  bool ignored = false;
  JASPER_RETURN_IF_ERROR(s.Bool("stft_conv", false, &ignored));
  JASPER_RETURN_IF_ERROR(s.Bool("stft_exact_pad", false, &ignored));

  int frame_splicing = 1;
  JASPER_RETURN_IF_ERROR(s.Int("frame_splicing", false, &frame_splicing));
  if (frame_splicing != 1) {
    return Unsupported(s.Path("frame_splicing"),
                       absl::StrCat("only 1 is supported, got ", frame_splicing));
  }
  bool exact_pad = false;
  JASPER_RETURN_IF_ERROR(s.Bool("exact_pad", false, &exact_pad));
  if (exact_pad) return Unsupported(s.Path("exact_pad"), "only false is supported");
  bool use_torchaudio = false;
  JASPER_RETURN_IF_ERROR(s.Bool("use_torchaudio", false, &use_torchaudio));
  if (use_torchaudio) return Unsupported(s.Path("use_torchaudio"), "only false is supported");

  std::string stft_mode = "legacy";
  JASPER_RETURN_IF_ERROR(s.String("stft_mode", false, &stft_mode));
  if (stft_mode == "legacy") {
    f->stft_mode = StftMode::kLegacy;
  } else if (stft_mode == "nemo25") {
    f->stft_mode = StftMode::kNemo25;
  } else {
    return Invalid(s.Path("stft_mode"),
                   absl::StrCat("'", stft_mode, "' is not \"legacy\" or \"nemo25\""));
  }
  return absl::OkStatus();
}

absl::Status ParseBlock(const json& object, int index, BlockConfig* block) {
  const std::string path = absl::StrCat("encoder.jasper[", index, "]");
  if (!object.is_object()) return Invalid(path, "expected an object");
  JASPER_RETURN_IF_ERROR(CheckKeys(
      object, path,
      {"filters", "repeat", "kernel", "stride", "dilation", "dropout", "residual", "separable",
       "residual_dense", "residual_mode", "groups", "se", "se_reduction_ratio", "se_context_size",
       "se_interpolation_mode", "kernel_size_factor", "stride_last", "heads", "masked", "padding",
       "future_context", "quantize", "normalization", "norm_groups"}));
  const Section s(object, path);
  JASPER_RETURN_IF_ERROR(s.Int("filters", true, &block->filters));
  JASPER_RETURN_IF_ERROR(s.Int("repeat", true, &block->repeat));
  JASPER_RETURN_IF_ERROR(s.IntList1("kernel", true, &block->kernel));
  JASPER_RETURN_IF_ERROR(s.IntList1("stride", false, &block->stride));
  JASPER_RETURN_IF_ERROR(s.IntList1("dilation", false, &block->dilation));
  JASPER_RETURN_IF_ERROR(s.Bool("residual", false, &block->residual));
  JASPER_RETURN_IF_ERROR(s.Bool("residual_dense", false, &block->residual_dense));
  JASPER_RETURN_IF_ERROR(s.Bool("separable", false, &block->separable));

  // Known NeMo keys that do not change inference, or must hold their default value.
  double dropout = 0.0;
  JASPER_RETURN_IF_ERROR(s.Number("dropout", false, &dropout));
  if (dropout < 0.0 || dropout > 1.0) return Invalid(s.Path("dropout"), "must be in [0, 1]");
  bool masked = true;
  JASPER_RETURN_IF_ERROR(s.Bool("masked", false, &masked));
  std::string text = "same";
  JASPER_RETURN_IF_ERROR(s.String("padding", false, &text));
  if (text != "same") {
    return Unsupported(s.Path("padding"), absl::StrCat("'", text, "' (only \"same\")"));
  }
  text = "add";
  JASPER_RETURN_IF_ERROR(s.String("residual_mode", false, &text));
  if (text != "add") {
    return Unsupported(s.Path("residual_mode"), absl::StrCat("'", text, "' (only \"add\")"));
  }
  text = "batch";
  JASPER_RETURN_IF_ERROR(s.String("normalization", false, &text));
  if (text != "batch") {
    return Unsupported(s.Path("normalization"), absl::StrCat("'", text, "' (only \"batch\")"));
  }
  int value = 1;
  JASPER_RETURN_IF_ERROR(s.Int("groups", false, &value));
  if (value != 1) return Unsupported(s.Path("groups"), absl::StrCat("only 1, got ", value));
  value = -1;
  JASPER_RETURN_IF_ERROR(s.Int("heads", false, &value));
  if (value != -1) return Unsupported(s.Path("heads"), absl::StrCat("only -1, got ", value));
  value = -1;
  JASPER_RETURN_IF_ERROR(s.Int("future_context", false, &value));
  if (value != -1) {
    return Unsupported(s.Path("future_context"), absl::StrCat("only -1, got ", value));
  }
  int norm_groups = -1;  // only read by group normalization
  JASPER_RETURN_IF_ERROR(s.Int("norm_groups", false, &norm_groups));
  bool flag = false;
  JASPER_RETURN_IF_ERROR(s.Bool("se", false, &flag));
  if (flag) return Unsupported(s.Path("se"), "squeeze-excite is not supported");
  // se_* are read by NeMo only when se is true; check their types and ignore them.
  JASPER_RETURN_IF_ERROR(s.Int("se_reduction_ratio", false, &value));
  JASPER_RETURN_IF_ERROR(s.Int("se_context_size", false, &value));
  JASPER_RETURN_IF_ERROR(s.String("se_interpolation_mode", false, &text));
  flag = false;
  JASPER_RETURN_IF_ERROR(s.Bool("stride_last", false, &flag));
  if (flag) return Unsupported(s.Path("stride_last"), "only false is supported");
  flag = false;
  JASPER_RETURN_IF_ERROR(s.Bool("quantize", false, &flag));
  if (flag) return Unsupported(s.Path("quantize"), "only false is supported");
  double factor = 1.0;
  JASPER_RETURN_IF_ERROR(s.Number("kernel_size_factor", false, &factor));
  if (factor != 1.0) {
    return Unsupported(s.Path("kernel_size_factor"), absl::StrCat("only 1.0, got ", factor));
  }
  return absl::OkStatus();
}

absl::Status ParseEncoder(const json& object, ModelConfig* config) {
  const std::string path = "encoder";
  if (!object.is_object()) return Invalid(path, "expected an object");
  JASPER_RETURN_IF_ERROR(CheckKeys(object, path,
                                   {"_target_", "feat_in", "activation", "conv_mask", "jasper",
                                    "normalization_mode", "init_mode", "frame_splicing",
                                    "quantize"}));
  const Section s(object, path);
  JASPER_RETURN_IF_ERROR(CheckTarget(s, "ConvASREncoder"));
  JASPER_RETURN_IF_ERROR(s.Int("feat_in", true, &config->feat_in));
  JASPER_RETURN_IF_ERROR(s.String("activation", false, &config->activation));
  JASPER_RETURN_IF_ERROR(s.Bool("conv_mask", false, &config->conv_mask));
  std::string text = "batch";
  JASPER_RETURN_IF_ERROR(s.String("normalization_mode", false, &text));
  if (text != "batch") {
    return Unsupported(s.Path("normalization_mode"), absl::StrCat("'", text, "' (only batch)"));
  }
  JASPER_RETURN_IF_ERROR(s.String("init_mode", false, &text));  // training only
  int frame_splicing = 1;
  JASPER_RETURN_IF_ERROR(s.Int("frame_splicing", false, &frame_splicing));
  if (frame_splicing != 1) return Unsupported(s.Path("frame_splicing"), "only 1 is supported");
  bool quantize = false;
  JASPER_RETURN_IF_ERROR(s.Bool("quantize", false, &quantize));
  if (quantize) return Unsupported(s.Path("quantize"), "only false is supported");

  const json* jasper = s.Find("jasper");
  if (jasper == nullptr) return Invalid(s.Path("jasper"), "required");
  if (!jasper->is_array()) return Invalid(s.Path("jasper"), "expected a list of blocks");
  if (jasper->size() > static_cast<std::size_t>(kMaxBlocks)) {
    return Invalid(s.Path("jasper"), absl::StrCat("more than ", kMaxBlocks, " blocks"));
  }
  config->blocks.assign(jasper->size(), BlockConfig());
  for (std::size_t i = 0; i < jasper->size(); ++i) {
    JASPER_RETURN_IF_ERROR(ParseBlock((*jasper)[i], static_cast<int>(i), &config->blocks[i]));
  }
  return absl::OkStatus();
}

absl::Status ParseDecoder(const json& object, ModelConfig* config) {
  const std::string path = "decoder";
  if (!object.is_object()) return Invalid(path, "expected an object");
  JASPER_RETURN_IF_ERROR(CheckKeys(
      object, path, {"_target_", "feat_in", "num_classes", "vocabulary", "init_mode", "add_blank"}));
  const Section s(object, path);
  JASPER_RETURN_IF_ERROR(CheckTarget(s, "ConvASRDecoder"));
  JASPER_RETURN_IF_ERROR(s.Int("feat_in", true, &config->decoder_feat_in));
  int num_classes = -1;
  JASPER_RETURN_IF_ERROR(s.Int("num_classes", false, &num_classes));
  const int num_labels = static_cast<int>(config->labels.size());
  if (num_classes != -1 && num_classes != num_labels) {
    return Invalid(s.Path("num_classes"),
                   absl::StrCat(num_classes, " does not match the ", num_labels,
                                " labels (num_classes excludes the blank; -1 means labels.size())"));
  }
  if (const json* vocabulary = s.Find("vocabulary"); vocabulary != nullptr) {
    if (!vocabulary->is_array() || vocabulary->size() != config->labels.size()) {
      return Invalid(s.Path("vocabulary"), "must equal labels");
    }
    for (std::size_t i = 0; i < vocabulary->size(); ++i) {
      const json& v = (*vocabulary)[i];
      if (!v.is_string() || v.get<std::string>() != config->labels[i]) {
        return Invalid(s.Path("vocabulary"), absl::StrCat("entry ", i, " differs from labels"));
      }
    }
  }
  std::string init_mode;
  JASPER_RETURN_IF_ERROR(s.String("init_mode", false, &init_mode));
  bool add_blank = true;
  JASPER_RETURN_IF_ERROR(s.Bool("add_blank", false, &add_blank));
  if (!add_blank) return Unsupported(s.Path("add_blank"), "only true is supported");
  return absl::OkStatus();
}

absl::Status ParseTop(const json& root, ModelConfig* config) {
  if (!root.is_object()) return Invalid("model.json", "top level is not a JSON object");
  JASPER_RETURN_IF_ERROR(CheckKeys(root, "",
                                   {"format_version", "name", "sample_rate", "labels",
                                    "preprocessor", "encoder", "decoder"}));
  const Section s(root, "");
  JASPER_RETURN_IF_ERROR(s.Int("format_version", true, &config->format_version));
  if (config->format_version != 1) {
    return Unsupported("format_version",
                       absl::StrCat(config->format_version, " (this build reads version 1)"));
  }
  JASPER_RETURN_IF_ERROR(s.String("name", false, &config->name));
  int sample_rate = 0;
  JASPER_RETURN_IF_ERROR(s.Int("sample_rate", true, &sample_rate));

  const json* labels = s.Find("labels");
  if (labels == nullptr) return Invalid("labels", "required");
  if (!labels->is_array()) return Invalid("labels", "expected a list of strings");
  config->labels.clear();
  for (std::size_t i = 0; i < labels->size(); ++i) {
    const json& label = (*labels)[i];
    if (!label.is_string()) {
      return Invalid(absl::StrCat("labels[", i, "]"),
                     absl::StrCat("expected a string, got ", Dump(label)));
    }
    config->labels.push_back(label.get<std::string>());
  }

  for (const char* key : {"preprocessor", "encoder", "decoder"}) {
    if (s.Find(key) == nullptr) return Invalid(key, "required");
  }
  JASPER_RETURN_IF_ERROR(ParsePreprocessor(*s.Find("preprocessor"), sample_rate,
                                           &config->featurizer));
  JASPER_RETURN_IF_ERROR(ParseEncoder(*s.Find("encoder"), config));
  JASPER_RETURN_IF_ERROR(ParseDecoder(*s.Find("decoder"), config));
  return config->Validate();
}

}  // namespace

int FeaturizerConfig::WinLength() const {
  // Python's int(window_size * sample_rate): truncation toward zero.
  const double samples = window_size_s * sample_rate;
  if (!(samples >= 0.0 && samples < 1e9)) return 0;
  return static_cast<int>(samples);
}

int FeaturizerConfig::HopLength() const {
  const double samples = window_stride_s * sample_rate;
  if (!(samples >= 0.0 && samples < 1e9)) return 0;
  return static_cast<int>(samples);
}

absl::Status FeaturizerConfig::Validate() const {
  const std::string p = "preprocessor.";
  if (sample_rate < kMinSampleRate || sample_rate > kMaxSampleRate) {
    return Invalid("sample_rate", absl::StrCat("must be in [", kMinSampleRate, ", ",
                                               kMaxSampleRate, "], got ", sample_rate));
  }
  const int win = WinLength();
  if (!(window_size_s > 0.0) || win < 1 || win > kMaxFft) {
    return Invalid(p + "window_size",
                   absl::StrCat(window_size_s, " s gives ", win, " samples; need [1, ", kMaxFft,
                                "]"));
  }
  const int hop = HopLength();
  if (!(window_stride_s > 0.0) || hop < 1 || hop > kMaxFft) {
    return Invalid(p + "window_stride",
                   absl::StrCat(window_stride_s, " s gives ", hop, " samples; need [1, ", kMaxFft,
                                "]"));
  }
  if (n_fft != 0 && (n_fft < win || n_fft > kMaxFft)) {
    return Invalid(p + "n_fft", absl::StrCat(n_fft, " must be in [win_length ", win, ", ",
                                             kMaxFft, "] or null"));
  }
  if (features < 1 || features > kMaxFeatures) {
    return Invalid(p + "features",
                   absl::StrCat("must be in [1, ", kMaxFeatures, "], got ", features));
  }
  if (window != "hann") {
    return Unsupported(p + "window", absl::StrCat("'", window, "' (only \"hann\")"));
  }
  if (!(preemph >= 0.0 && preemph < 1.0)) {
    return Invalid(p + "preemph", absl::StrCat("must be in [0, 1) or null, got ", preemph));
  }
  const double nyquist = sample_rate / 2.0;
  if (!(lowfreq_hz >= 0.0 && lowfreq_hz < nyquist)) {
    return Invalid(p + "lowfreq", absl::StrCat("must be in [0, ", nyquist, "), got ", lowfreq_hz));
  }
  if (highfreq_hz != 0.0 && !(highfreq_hz > lowfreq_hz && highfreq_hz <= nyquist)) {
    return Invalid(p + "highfreq", absl::StrCat("must be in (lowfreq, ", nyquist,
                                                "] or null, got ", highfreq_hz));
  }
  if (!(log_zero_guard_value > 0.0 && std::isfinite(log_zero_guard_value))) {
    return Invalid(p + "log_zero_guard_value", "must be a positive number");
  }
  if (!(mag_power > 0.0 && std::isfinite(mag_power))) {
    return Invalid(p + "mag_power", absl::StrCat("must be positive, got ", mag_power));
  }
  if (normalize != "per_feature" && normalize != "none") {
    return Unsupported(p + "normalize",
                       absl::StrCat("'", normalize, "' (only \"per_feature\" or \"none\")"));
  }
  if (pad_to < 0 || pad_to > 1024) {
    return Invalid(p + "pad_to", absl::StrCat("must be in [0, 1024], got ", pad_to));
  }
  if (!std::isfinite(pad_value)) return Invalid(p + "pad_value", "must be finite");
  if (mel_norm != "slaney" && mel_norm != "none") {
    return Unsupported(p + "mel_norm", absl::StrCat("'", mel_norm, "' (only \"slaney\" or null)"));
  }
  return absl::OkStatus();
}

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
    return Invalid("dilation",
                   absl::StrCat("must be in [1, ", kMaxDilation, "], got ", dilation));
  }
  if (stride > 1 && dilation > 1) {
    return Invalid("dilation", absl::StrCat("stride ", stride, " with dilation ", dilation,
                                            ": NeMo forbids stride > 1 together with dilation > 1"));
  }
  if (residual && stride > 1) {
    return Unsupported("residual",
                       absl::StrCat("a residual block with stride ", stride,
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
    factor *= block.stride > 0 ? block.stride : 1;
    if (factor > std::numeric_limits<int>::max()) return std::numeric_limits<int>::max();
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
        return Unsupported(absl::StrCat("encoder.jasper[", b, "].residual_dense"),
                           absl::StrCat("needs ", panes.size(), " earlier activations but only ",
                                        xs.size(), " reach it (residual_dense blocks must be "
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
  if (feat_in != featurizer.features) {
    return Invalid("encoder.feat_in", absl::StrCat(feat_in, " differs from preprocessor.features ",
                                                   featurizer.features));
  }
  if (activation != "relu") {
    return Unsupported("encoder.activation",
                       absl::StrCat("unknown or unsupported activation '", activation,
                                    "' (only \"relu\")"));
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
    return Invalid("encoder.jasper", absl::StrCat("product of strides ", subsampling_factor(),
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

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON: ", e.what()));
  }
  ModelConfig config;
  try {
    JASPER_RETURN_IF_ERROR(ParseTop(root, &config));
  } catch (const std::exception& e) {  // defensive: every access above is type-checked
    return absl::InternalError(absl::StrCat("model.json: unexpected error: ", e.what()));
  }
  return config;
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
  root["sample_rate"] = f.sample_rate;
  root["labels"] = config.labels;
  root["preprocessor"] = std::move(pre);
  root["encoder"] = std::move(encoder);
  root["decoder"] = std::move(decoder);
  return root.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace jasper
