#include "engine/text/punct_cnn.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/io/safetensors.h"
#include "engine/text/manifest_files.h"

namespace jasper {
namespace {

absl::Status Invalid(const std::filesystem::path& file, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", what));
}

// One entry per line, the line's index its row; rows 0 and 1 must be <pad> and <unk>.
absl::Status ReadList(const std::filesystem::path& path, absl::flat_hash_map<std::string, int>* out,
                      int* count) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  std::string line;
  int row = 0;
  while (std::getline(in, line)) {
    if ((row == 0 && line != "<pad>") || (row == 1 && line != "<unk>")) {
      return Invalid(path, "the first two lines must be <pad> and <unk>");
    }
    if (line.empty()) return Invalid(path, absl::StrCat("line ", row + 1, " is empty"));
    if (!out->emplace(line, row).second) {
      return Invalid(path, absl::StrCat("line ", row + 1, ": \"", line, "\" twice"));
    }
    ++row;
  }
  if (row < 2) return Invalid(path, "the first two lines must be <pad> and <unk>");
  *count = row;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<const TokenCnn>> TokenCnn::Load(const std::filesystem::path& dir,
                                                               const nlohmann::json& manifest) {
  const std::filesystem::path manifest_path = dir / "punct.json";
  auto bad = [&](absl::string_view what) { return Invalid(manifest_path, what); };
  if (!manifest.contains("cnn") || !manifest["cnn"].is_object()) {
    return bad("cnn: required (embedding, suffix_embedding, channels, kernel, dilations)");
  }
  const nlohmann::json& c = manifest["cnn"];
  if (!c.contains("embedding") || !JsonIntIn(c["embedding"], 1, 1024) ||
      !c.contains("suffix_embedding") || !JsonIntIn(c["suffix_embedding"], 1, 1024) ||
      !c.contains("channels") || !JsonIntIn(c["channels"], 1, 2048) || !c.contains("kernel") ||
      !JsonIntIn(c["kernel"], 1, 15) || c["kernel"].get<int>() % 2 == 0 ||
      !c.contains("dilations") || !c["dilations"].is_array() || c["dilations"].empty() ||
      c["dilations"].size() > 16 ||
      !std::all_of(c["dilations"].begin(), c["dilations"].end(),
                   [](const nlohmann::json& d) { return JsonIntIn(d, 1, 64); })) {
    return bad(
        "cnn: embedding and suffix_embedding in [1, 1024], channels in [1, 2048], an odd kernel "
        "in [1, 15], 1 to 16 dilations in [1, 64]");
  }
  std::string names[3];
  const char* keys[3] = {"weights", "vocabulary", "suffixes"};
  for (int k = 0; k < 3; ++k) {
    absl::StatusOr<std::string> name = ManifestFileName(manifest, keys[k], manifest_path);
    if (!name.ok()) return name.status();
    names[k] = *std::move(name);
  }
  auto cnn = std::unique_ptr<TokenCnn>(new TokenCnn());
  cnn->kernel_ = c["kernel"].get<int>();
  cnn->embedding_ = c["embedding"].get<int>();
  cnn->suffix_embedding_ = c["suffix_embedding"].get<int>();
  cnn->channels_ = c["channels"].get<int>();
  int num_words = 0, num_suffixes = 0;
  if (absl::Status s = ReadList(dir / names[1], &cnn->words_, &num_words); !s.ok()) return s;
  if (absl::Status s = ReadList(dir / names[2], &cnn->suffixes_, &num_suffixes); !s.ok()) return s;

  const std::filesystem::path weights_path = dir / names[0];
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::ReadFile(weights_path.string());
  if (!file.ok()) return file.status();
  const int64_t e = cnn->embedding_, se = cnn->suffix_embedding_, ch = cnn->channels_,
                k = cnn->kernel_;
  absl::StatusOr<std::vector<float>> table =
      ReadFiniteTensor(*file, weights_path, "embed.weight", {num_words, e});
  if (!table.ok()) return table.status();
  cnn->word_table_ = *std::move(table);
  table = ReadFiniteTensor(*file, weights_path, "suffix.weight", {num_suffixes, se});
  if (!table.ok()) return table.status();
  cnn->suffix_table_ = *std::move(table);

  // PyTorch's Conv1d weight [out, in, K] packed as [K, in, out].
  auto conv = [&](const std::string& name, int64_t in, int64_t out, int64_t taps, int dilation,
                  Conv* dst) -> absl::Status {
    absl::StatusOr<std::vector<float>> w =
        ReadFiniteTensor(*file, weights_path, name + ".weight", {out, in, taps});
    if (!w.ok()) return w.status();
    absl::StatusOr<std::vector<float>> b =
        ReadFiniteTensor(*file, weights_path, name + ".bias", {out});
    if (!b.ok()) return b.status();
    dst->in = static_cast<int>(in);
    dst->out = static_cast<int>(out);
    dst->dilation = dilation;
    dst->weight.assign(taps * in * out, 0.0f);
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        for (int64_t t = 0; t < taps; ++t) {
          dst->weight[(t * in + i) * out + o] = (*w)[(o * in + i) * taps + t];
        }
      }
    }
    dst->bias = *std::move(b);
    return absl::OkStatus();
  };
  if (absl::Status s = conv("inp", e + se, ch, k, 1, &cnn->input_); !s.ok()) return s;
  const nlohmann::json& dilations = c["dilations"];
  cnn->blocks_.resize(dilations.size());
  for (size_t b = 0; b < dilations.size(); ++b) {
    if (absl::Status s =
            conv(absl::StrCat("blocks.", b), ch, ch, k, dilations[b].get<int>(), &cnn->blocks_[b]);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = conv("marks", ch, kClasses, 1, 1, &cnn->marks_); !s.ok()) return s;
  if (absl::Status s = conv("cases", ch, kClasses, 1, 1, &cnn->cases_); !s.ok()) return s;
  return std::unique_ptr<const TokenCnn>(std::move(cnn));
}

void TokenCnn::Apply(const Conv& conv, const std::vector<float>& x, int frames,
                     std::vector<float>* out) const {
  const int taps = static_cast<int>(conv.weight.size()) / (conv.in * conv.out);
  const int half = taps / 2;
  out->assign(static_cast<size_t>(frames) * conv.out, 0.0f);
  for (int t = 0; t < frames; ++t) {
    float* y = out->data() + static_cast<size_t>(t) * conv.out;
    std::copy(conv.bias.begin(), conv.bias.end(), y);
    for (int k = 0; k < taps; ++k) {
      const int src = t + (k - half) * conv.dilation;
      if (src < 0 || src >= frames) continue;
      const float* xs = x.data() + static_cast<size_t>(src) * conv.in;
      const float* w = conv.weight.data() + static_cast<size_t>(k) * conv.in * conv.out;
      for (int i = 0; i < conv.in; ++i) {
        const float a = xs[i];
        if (a == 0.0f) continue;  // ReLU outputs are often zero
        const float* wi = w + static_cast<size_t>(i) * conv.out;
        for (int o = 0; o < conv.out; ++o) y[o] += a * wi[o];
      }
    }
  }
}

TokenCnn::Logits TokenCnn::Forward(absl::Span<const std::string> words) const {
  const int frames = static_cast<int>(words.size());
  const int width = embedding_ + suffix_embedding_;
  std::vector<float> x(static_cast<size_t>(frames) * width);
  for (int t = 0; t < frames; ++t) {
    const std::string lower = absl::AsciiStrToLower(words[t]);
    const bool number =
        std::any_of(lower.begin(), lower.end(), [](char c) { return absl::ascii_isdigit(c); });
    auto w = words_.find(number ? std::string("<num>") : lower);
    const int row = w == words_.end() ? 1 : w->second;
    auto s = suffixes_.find(lower.size() > 3 ? lower.substr(lower.size() - 3) : lower);
    const int suffix_row = s == suffixes_.end() ? 1 : s->second;
    float* dst = x.data() + static_cast<size_t>(t) * width;
    std::copy_n(word_table_.data() + static_cast<size_t>(row) * embedding_, embedding_, dst);
    std::copy_n(suffix_table_.data() + static_cast<size_t>(suffix_row) * suffix_embedding_,
                suffix_embedding_, dst + embedding_);
  }
  std::vector<float> h, step;
  Apply(input_, x, frames, &h);
  for (float& v : h) v = std::max(v, 0.0f);
  for (const Conv& block : blocks_) {
    Apply(block, h, frames, &step);
    for (size_t i = 0; i < h.size(); ++i) h[i] += std::max(step[i], 0.0f);
  }
  Logits logits;
  Apply(marks_, h, frames, &logits.marks);
  Apply(cases_, h, frames, &logits.cases);
  return logits;
}

}  // namespace jasper
