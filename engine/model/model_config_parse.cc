// model.json parsing: JSON text -> ModelConfig. The schema is documented field by field in
// docs/MODEL_FORMAT.md; keys follow NeMo's model_config.yaml so that the converter copies them.
//
// nlohmann::json is used so that no exception leaves this file: the parse error is caught here
// and every value's type is checked before it is read. Range and cross-field checks live in
// ModelConfig::Validate() (model_config.cc), which ParseModelConfig() calls last.
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/model/model_config.h"
#include "engine/status_macros.h"

namespace jasper {
namespace {

using json = nlohmann::json;

// Refuse before allocating; Validate() applies the same limit.
constexpr std::size_t kMaxBlocks = 1024;

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}
absl::Status Unsupported(const std::string& field, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat(field, ": ", what));
}

// A JSON value for an error message. dump() recurses, so only flat, small arrays and objects are
// printed: a hostile, deeply nested value must not overflow the stack while an error is built.
std::string Dump(const json& value) {
  if (value.is_structured()) {
    bool flat = value.size() <= 8;
    for (const json& element : value) flat = flat && !element.is_structured();
    if (!flat) {
      return absl::StrCat(value.is_array() ? "an array" : "an object", " of ", value.size(),
                          " entries");
    }
  }
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) {
    std::size_t cut = 77;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
    text = text.substr(0, cut) + "...";
  }
  return text;
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
        return Unsupported(Path(key),
                           absl::StrCat("expected a one-element list (1-D conv), got ", Dump(*v)));
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
  JASPER_RETURN_IF_ERROR(CheckKeys(object, path,
                                   {"_target_",
                                    "sample_rate",
                                    "window_size",
                                    "window_stride",
                                    "n_window_size",
                                    "n_window_stride",
                                    "n_fft",
                                    "features",
                                    "window",
                                    "preemph",
                                    "lowfreq",
                                    "highfreq",
                                    "log",
                                    "log_zero_guard_type",
                                    "log_zero_guard_value",
                                    "mag_power",
                                    "normalize",
                                    "pad_to",
                                    "pad_value",
                                    "mel_norm",
                                    "dither",
                                    "frame_splicing",
                                    "exact_pad",
                                    "stft_mode",
                                    "stft_conv",
                                    "stft_exact_pad",
                                    "rng",
                                    "nb_augmentation_prob",
                                    "nb_max_freq",
                                    "use_torchaudio"}));
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
  JASPER_RETURN_IF_ERROR(CheckKeys(object, path,
                                   {"filters",
                                    "repeat",
                                    "kernel",
                                    "stride",
                                    "dilation",
                                    "dropout",
                                    "residual",
                                    "separable",
                                    "residual_dense",
                                    "residual_mode",
                                    "groups",
                                    "se",
                                    "se_reduction_ratio",
                                    "se_context_size",
                                    "se_interpolation_mode",
                                    "kernel_size_factor",
                                    "stride_last",
                                    "heads",
                                    "masked",
                                    "padding",
                                    "future_context",
                                    "quantize",
                                    "normalization",
                                    "norm_groups"}));
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
  JASPER_RETURN_IF_ERROR(
      CheckKeys(object, path,
                {"_target_", "feat_in", "activation", "conv_mask", "jasper", "normalization_mode",
                 "init_mode", "frame_splicing", "quantize"}));
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
  if (jasper->size() > kMaxBlocks) {
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
  JASPER_RETURN_IF_ERROR(
      CheckKeys(object, path,
                {"_target_", "feat_in", "num_classes", "vocabulary", "init_mode", "add_blank"}));
  const Section s(object, path);
  JASPER_RETURN_IF_ERROR(CheckTarget(s, "ConvASRDecoder"));
  JASPER_RETURN_IF_ERROR(s.Int("feat_in", true, &config->decoder_feat_in));
  int num_classes = -1;
  JASPER_RETURN_IF_ERROR(s.Int("num_classes", false, &num_classes));
  const int num_labels = static_cast<int>(config->labels.size());
  if (num_classes != -1 && num_classes != num_labels) {
    return Invalid(
        s.Path("num_classes"),
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
  JASPER_RETURN_IF_ERROR(CheckKeys(
      root, "",
      {"format_version", "name", "language_model", "inverse_text_normalization", "punctuation",
       "default_decoder", "sample_rate", "labels", "preprocessor", "encoder", "decoder"}));
  const Section s(root, "");
  JASPER_RETURN_IF_ERROR(s.Int("format_version", true, &config->format_version));
  if (config->format_version != 1) {
    return Unsupported("format_version",
                       absl::StrCat(config->format_version, " (this build reads version 1)"));
  }
  JASPER_RETURN_IF_ERROR(s.String("name", false, &config->name));
  JASPER_RETURN_IF_ERROR(s.String("language_model", false, &config->language_model));
  JASPER_RETURN_IF_ERROR(
      s.String("inverse_text_normalization", false, &config->inverse_text_normalization));
  JASPER_RETURN_IF_ERROR(s.String("punctuation", false, &config->punctuation));
  JASPER_RETURN_IF_ERROR(s.String("default_decoder", false, &config->default_decoder));
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
  JASPER_RETURN_IF_ERROR(
      ParsePreprocessor(*s.Find("preprocessor"), sample_rate, &config->featurizer));
  JASPER_RETURN_IF_ERROR(ParseEncoder(*s.Find("encoder"), config));
  JASPER_RETURN_IF_ERROR(ParseDecoder(*s.Find("decoder"), config));
  return config->Validate();
}

}  // namespace

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

}  // namespace jasper
