#include "engine/model/int8_calibration.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/model.h"

namespace jasper {
namespace {

using json = nlohmann::json;

constexpr char kFormat[] = "jasper-int8-calibration";
// 2: a separable sub-block's depthwise input scale, when that input is a ReLU's output, is the
// step of the unsigned grid (its clip / 255). Version 1 files (clip / 127) are read too: the same
// step on the unsigned grid clips nothing they did not. A reader of version 1 only refuses
// version 2 instead of clipping those inputs at half their range.
// 3: a separable sub-block may carry its depthwise input's scales per channel
// ("depthwise_channel_scales"; its per-tensor scale is still calibrated as before) and factors
// that smooth its depthwise output into the pointwise weights ("depthwise_output_smoothing";
// scales[0] is then the smoothed output's). A reader of version 2 refuses version 3: it would
// quantize the unsmoothed output with the smoothed output's scale.
constexpr int kVersion = 3;
constexpr int kOldestVersion = 1;

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(kInt8CalibrationFile, ": ", what));
}

class Fnv1a64 {
 public:
  void Bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      hash_ ^= p[i];
      hash_ *= 0x100000001b3ULL;
    }
  }
  void Int(std::int64_t v) { Bytes(&v, sizeof(v)); }
  void Floats(const std::vector<float>& v) {
    Int(static_cast<std::int64_t>(v.size()));
    Bytes(v.data(), v.size() * sizeof(float));
  }
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

void HashSubBlock(const FoldedSubBlock& s, Fnv1a64* h) {
  const kernels::SubBlockDesc& d = s.desc;
  for (int v : {d.in_channels, d.out_channels, d.kernel_size, d.stride, d.dilation, d.padding,
                d.separable ? 1 : 0, static_cast<int>(d.activation)}) {
    h->Int(v);
  }
  h->Floats(s.depthwise);
  h->Floats(s.weight);
  h->Floats(s.bias);
  h->Int(static_cast<std::int64_t>(s.residual_weights.size()));
  for (const std::vector<float>& w : s.residual_weights) h->Floats(w);
}

// Every sub-block of `model` with its (block, sub_block) key, the decoder last as (-1, 0).
template <typename Fn>
void ForEachSubBlock(const Model& model, Fn fn) {
  for (std::size_t b = 0; b < model.blocks().size(); ++b) {
    const std::vector<FoldedSubBlock>& subs = model.blocks()[b].sub_blocks;
    for (std::size_t s = 0; s < subs.size(); ++s) {
      fn(static_cast<int>(b), static_cast<int>(s), subs[s]);
    }
  }
  fn(-1, 0, model.decoder());
}

}  // namespace

const Int8SubBlockScales* Int8Calibration::FindLayer(int block, int sub_block) const {
  for (const Int8SubBlockScales& l : layers) {
    if (l.block == block && l.sub_block == sub_block) return &l;
  }
  return nullptr;
}

const std::vector<float>* Int8Calibration::Find(int block, int sub_block) const {
  const Int8SubBlockScales* l = FindLayer(block, sub_block);
  return l == nullptr ? nullptr : &l->scales;
}

int Int8Calibration::Fp32Count() const {
  int n = 0;
  for (const Int8SubBlockScales& l : layers) n += l.fp32 ? 1 : 0;
  return n;
}

absl::StatusOr<Int8Calibration> ParseInt8Calibration(const std::string& json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const std::exception& e) {
    return Invalid(absl::StrCat("not JSON (", e.what(), ")"));
  }
  if (!root.is_object()) return Invalid("the top level must be an object");
  auto field = [&root](const char* key) -> const json* {
    auto it = root.find(key);
    return it == root.end() ? nullptr : &*it;
  };
  const json* format = field("format");
  if (format == nullptr || !format->is_string() || format->get<std::string>() != kFormat) {
    return Invalid(absl::StrCat("'format' must be \"", kFormat, "\""));
  }
  const json* version = field("version");
  if (version == nullptr || !version->is_number_integer() || version->get<int>() < kOldestVersion ||
      version->get<int>() > kVersion) {
    return Invalid(absl::StrCat("'version' must be ", kOldestVersion, " to ", kVersion));
  }
  Int8Calibration c;
  const json* fingerprint = field("weights_fingerprint");
  if (fingerprint == nullptr || !fingerprint->is_string()) {
    return Invalid("'weights_fingerprint' must be a string");
  }
  c.weights_fingerprint = fingerprint->get<std::string>();
  if (const json* v = field("method"); v != nullptr && v->is_string()) {
    c.method = v->get<std::string>();
  }
  if (const json* v = field("utterances"); v != nullptr && v->is_number_integer()) {
    c.utterances = v->get<int>();
  }
  if (const json* v = field("audio_seconds"); v != nullptr && v->is_number()) {
    c.audio_seconds = v->get<double>();
  }
  if (const json* v = field("frame_agreement"); v != nullptr && v->is_number()) {
    c.frame_agreement = v->get<double>();
  }
  if (const json* v = field("frame_agreement_all_int8"); v != nullptr && v->is_number()) {
    c.frame_agreement_all_int8 = v->get<double>();
  }
  const json* layers = field("layers");
  if (layers == nullptr || !layers->is_array()) return Invalid("'layers' must be an array");
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const json& l = (*layers)[i];
    const std::string at = absl::StrCat("layers[", i, "]");
    if (!l.is_object()) return Invalid(at + " must be an object");
    Int8SubBlockScales s;
    auto block = l.find("block");
    auto sub = l.find("sub_block");
    auto scales = l.find("scales");
    if (block == l.end() || !block->is_number_integer() || sub == l.end() ||
        !sub->is_number_integer()) {
      return Invalid(at + ": 'block' and 'sub_block' must be integers");
    }
    s.block = block->get<int>();
    s.sub_block = sub->get<int>();
    if (scales == l.end() || !scales->is_array() || scales->empty() || scales->size() > 64) {
      return Invalid(at + ": 'scales' must be an array of 1 to 64 numbers");
    }
    for (const json& v : *scales) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0.0 ||
          !std::isfinite(static_cast<float>(v.get<double>()))) {
        return Invalid(at + ": every scale must be a finite number > 0");
      }
      s.scales.push_back(static_cast<float>(v.get<double>()));
    }
    for (const auto& [key, values] :
         {std::pair<const char*, std::vector<float>*>{"depthwise_channel_scales",
                                                      &s.depthwise_channel_scales},
          {"depthwise_output_smoothing", &s.depthwise_output_smoothing}}) {
      auto field = l.find(key);
      if (field == l.end()) continue;
      if (!field->is_array() || field->empty() || field->size() > 65536) {
        return Invalid(absl::StrCat(at, ": '", key, "' must be an array of 1 to 65536 numbers"));
      }
      for (const json& v : *field) {
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0.0 ||
            !std::isfinite(static_cast<float>(v.get<double>())) ||
            static_cast<float>(v.get<double>()) <= 0.0f) {
          return Invalid(
              absl::StrCat(at, ": every value of '", key, "' must be a finite number > 0"));
        }
        values->push_back(static_cast<float>(v.get<double>()));
      }
    }
    if (auto fp32 = l.find("fp32"); fp32 != l.end()) {
      if (!fp32->is_boolean()) return Invalid(at + ": 'fp32' must be true or false");
      s.fp32 = fp32->get<bool>();
    }
    c.layers.push_back(std::move(s));
  }
  return c;
}

std::string Int8CalibrationToJson(const Int8Calibration& c) {
  // One line per field and per layer, for people reading and diffing it. FP32 values printed
  // with 9 significant digits read back to the same float.
  std::string out = "{\n";
  absl::StrAppend(&out, " \"format\": ", json(kFormat).dump(), ",\n");
  absl::StrAppend(&out, " \"version\": ", kVersion, ",\n");
  absl::StrAppend(&out, " \"weights_fingerprint\": ", json(c.weights_fingerprint).dump(), ",\n");
  absl::StrAppend(&out, " \"method\": ", json(c.method).dump(), ",\n");
  absl::StrAppend(&out, " \"utterances\": ", c.utterances, ",\n");
  absl::StrAppend(&out, " \"audio_seconds\": ", absl::StrFormat("%.3f", c.audio_seconds), ",\n");
  absl::StrAppend(&out, " \"frame_agreement\": ", absl::StrFormat("%.6f", c.frame_agreement),
                  ",\n");
  absl::StrAppend(&out, " \"frame_agreement_all_int8\": ",
                  absl::StrFormat("%.6f", c.frame_agreement_all_int8), ",\n");
  out += " \"layers\": [";
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    const Int8SubBlockScales& l = c.layers[i];
    absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "  {\"block\": ", l.block,
                    ", \"sub_block\": ", l.sub_block, ", \"scales\": [");
    for (std::size_t k = 0; k < l.scales.size(); ++k) {
      absl::StrAppend(&out, k == 0 ? "" : ", ", absl::StrFormat("%.9g", l.scales[k]));
    }
    out += "]";
    if (l.fp32) out += ", \"fp32\": true";
    for (const auto& [key, values] :
         {std::pair<const char*, const std::vector<float>*>{"depthwise_channel_scales",
                                                            &l.depthwise_channel_scales},
          {"depthwise_output_smoothing", &l.depthwise_output_smoothing}}) {
      if (values->empty()) continue;
      absl::StrAppend(&out, ",\n   \"", key, "\": [");
      for (std::size_t k = 0; k < values->size(); ++k) {
        absl::StrAppend(&out, k == 0 ? "" : ", ", absl::StrFormat("%.9g", (*values)[k]));
      }
      out += "]";
    }
    out += "}";
  }
  out += "\n ]\n}\n";
  return out;
}

std::string WeightsFingerprint(const Model& model) {
  Fnv1a64 h;
  ForEachSubBlock(model, [&h](int, int, const FoldedSubBlock& s) { HashSubBlock(s, &h); });
  return absl::StrFormat("%016x", h.value());
}

absl::Status CheckInt8Calibration(const Int8Calibration& calibration, const Model& model) {
  const std::string fingerprint = WeightsFingerprint(model);
  if (calibration.weights_fingerprint != fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat(kInt8CalibrationFile, " was made for other weights (fingerprint ",
                     calibration.weights_fingerprint, ", these weights ", fingerprint,
                     "); run `jasper-transcribe --calibrate_int8` again"));
  }
  absl::Status status;
  ForEachSubBlock(model, [&](int block, int sub_block, const FoldedSubBlock& s) {
    if (!status.ok()) return;
    const std::vector<float>* scales = calibration.Find(block, sub_block);
    const std::size_t expected = 1 + s.residual_weights.size() + (s.desc.separable ? 1 : 0);
    if (scales == nullptr || scales->size() != expected) {
      status = absl::FailedPreconditionError(
          absl::StrCat(kInt8CalibrationFile, ": block ", block, " sub-block ", sub_block, " needs ",
                       expected, " scales, has ", scales == nullptr ? 0 : scales->size()));
      return;
    }
    const Int8SubBlockScales& layer = *calibration.FindLayer(block, sub_block);
    for (const auto& [key, values] :
         {std::pair<const char*, const std::vector<float>*>{"depthwise channel scales",
                                                            &layer.depthwise_channel_scales},
          {"depthwise output smoothing factors", &layer.depthwise_output_smoothing}}) {
      const std::size_t n = values->size();
      if (status.ok() && n != 0 &&
          (!s.desc.separable || n != static_cast<std::size_t>(s.desc.in_channels))) {
        status = absl::FailedPreconditionError(absl::StrCat(
            kInt8CalibrationFile, ": block ", block, " sub-block ", sub_block, " has ", n, " ", key,
            "; it needs ",
            s.desc.separable ? absl::StrCat(s.desc.in_channels, " (one per input channel)")
                             : std::string("none (it is not separable)")));
      }
    }
  });
  return status;
}

}  // namespace jasper
