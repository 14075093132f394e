#include "engine/text/punct_transformer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/io/safetensors.h"
#include "engine/text/manifest_files.h"
#include "kernels/cpu_features.h"

namespace jasper {

// Per-call buffers, reused across the windows of one Forward().
struct TokenTransformer::Scratch {
  std::vector<float> x, qkv, keys, context, projected, ffn, scores, heads, workspace;
};

namespace {

// o[key] is an integer in [lo, hi].
bool IntIn(const nlohmann::json& o, const char* key, int lo, int hi) {
  return o.contains(key) && JsonIntIn(o[key], lo, hi);
}

// exp(x) for x <= 88 (relative error below 3e-7 for x >= -87; below that a value under 1e-37):
// x = n ln2 + r (Cody-Waite split of ln2), a degree-7 Taylor polynomial for e^r (|r| <= ln2/2),
// 2^n from the exponent bits. Branch-free arithmetic, so the loops calling it vectorize (libm's
// expf and erff do not, and were a quarter of the model's time).
inline float FastExp(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 x 2^23: adding and subtracting it rounds
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  return p * __builtin_bit_cast(float, (e > 1 ? e : 1) << 23);
}

// GELU(v) = v/2 (1 + erf(v / sqrt 2)), erf from the Chebyshev fit of erfc in Numerical Recipes
// (erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), fractional error below 1.2e-7 for z >= 0).
// Absolute error below 5e-7 over [-30, 30] (against double-precision erf).
inline float Gelu(float v) {
  const float z = std::abs(v) * 0.70710678118654752f;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float erfc = t * FastExp(p - z * z);
  return 0.5f * v * (1.0f + std::copysign(1.0f - erfc, v));
}

// GELU over a row.
__attribute__((always_inline)) inline void GeluRowBody(float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) v[i] = Gelu(v[i]);
}

// One head of self-attention over n tokens: q_i at q0 + i * row, k_j at q0 + h + j * row, v_j at
// q0 + 2h + j * row (d values each); out_i (at out + i * h) += softmax_j(scale q_i . k_j) v_j.
// keys [d, n] and scores [n]: scratch.
__attribute__((always_inline)) inline void AttendHeadBody(const float* q0, size_t row, int n, int d,
                                                          float scale, float* keys, float* scores,
                                                          float* out, int h) {
  // The head's keys transposed, [d, n], so the score loop runs along the tokens.
  for (int j = 0; j < n; ++j) {
    for (int e = 0; e < d; ++e) keys[static_cast<size_t>(e) * n + j] = q0[h + j * row + e];
  }
  for (int i = 0; i < n; ++i) {
    const float* q = q0 + i * row;
    for (int j = 0; j < n; ++j) scores[j] = 0.0f;
    for (int e = 0; e < d; ++e) {
      const float qe = q[e] * scale;
      const float* k = keys + static_cast<size_t>(e) * n;
      for (int j = 0; j < n; ++j) scores[j] += qe * k[j];
    }
    float top = scores[0];
    for (int j = 1; j < n; ++j) top = scores[j] > top ? scores[j] : top;
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {
      scores[j] = FastExp(scores[j] - top);
      sum += scores[j];
    }
    const float inv = 1.0f / sum;
    float* o = out + static_cast<size_t>(i) * h;
    for (int j = 0; j < n; ++j) {
      const float* v = q0 + 2 * h + j * row;
      const float a = scores[j] * inv;
      for (int e = 0; e < d; ++e) o[e] += a * v[e];
    }
  }
}

// Each body compiled three times; the process's ISA probe (kernels::ActiveCpuIsa()) picks one,
// so the loops vectorize with the widest registers the CPU has.
#define JASPER_TEXT_AVX2 __attribute__((target("avx2,fma")))
#define JASPER_TEXT_AVX512 __attribute__((target("avx512f,avx2,fma")))
void GeluRowPortable(float* v, size_t n) { GeluRowBody(v, n); }
JASPER_TEXT_AVX2 void GeluRowAvx2(float* v, size_t n) { GeluRowBody(v, n); }
JASPER_TEXT_AVX512 void GeluRowAvx512(float* v, size_t n) { GeluRowBody(v, n); }
void AttendHeadPortable(const float* q0, size_t row, int n, int d, float scale, float* keys,
                        float* scores, float* out, int h) {
  AttendHeadBody(q0, row, n, d, scale, keys, scores, out, h);
}
JASPER_TEXT_AVX2 void AttendHeadAvx2(const float* q0, size_t row, int n, int d, float scale,
                                     float* keys, float* scores, float* out, int h) {
  AttendHeadBody(q0, row, n, d, scale, keys, scores, out, h);
}
JASPER_TEXT_AVX512 void AttendHeadAvx512(const float* q0, size_t row, int n, int d, float scale,
                                         float* keys, float* scores, float* out, int h) {
  AttendHeadBody(q0, row, n, d, scale, keys, scores, out, h);
}
#undef JASPER_TEXT_AVX2
#undef JASPER_TEXT_AVX512

// Chosen per call, so kernels::SetCpuIsaCap takes effect as for the GEMM kernels.
void GeluRow(float* v, size_t n) {
  const auto fn = kernels::ActiveCpuIsa() >= kernels::CpuIsa::kAvx512 ? GeluRowAvx512
                  : kernels::ActiveCpuIsa() >= kernels::CpuIsa::kAvx2 ? GeluRowAvx2
                                                                      : GeluRowPortable;
  fn(v, n);
}

void AttendHead(const float* q0, size_t row, int n, int d, float scale, float* keys, float* scores,
                float* out, int h) {
  const auto fn = kernels::ActiveCpuIsa() >= kernels::CpuIsa::kAvx512 ? AttendHeadAvx512
                  : kernels::ActiveCpuIsa() >= kernels::CpuIsa::kAvx2 ? AttendHeadAvx2
                                                                      : AttendHeadPortable;
  fn(q0, row, n, d, scale, keys, scores, out, h);
}

// x[rows, n] = LayerNorm(x + add) * gain + bias, row by row (add may be null).
void AddLayerNorm(float* x, const float* add, int rows, int n, const std::vector<float>& gain,
                  const std::vector<float>& bias, float epsilon) {
  for (int r = 0; r < rows; ++r) {
    float* v = x + static_cast<size_t>(r) * n;
    if (add != nullptr) {
      const float* a = add + static_cast<size_t>(r) * n;
      for (int i = 0; i < n; ++i) v[i] += a[i];
    }
    float mean = 0.0f;
    for (int i = 0; i < n; ++i) mean += v[i];
    mean /= static_cast<float>(n);
    float var = 0.0f;
    for (int i = 0; i < n; ++i) var += (v[i] - mean) * (v[i] - mean);
    const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + epsilon);
    for (int i = 0; i < n; ++i) v[i] = (v[i] - mean) * inv * gain[i] + bias[i];
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<const TokenTransformer>> TokenTransformer::Load(
    const std::filesystem::path& dir, const nlohmann::json& manifest,
    kernels::Precision precision) {
  if (precision != kernels::Precision::kFp32 && precision != kernels::Precision::kBf16) {
    return absl::InvalidArgumentError("the transformer punctuator runs in fp32 or bf16");
  }
  const std::filesystem::path manifest_path = dir / "punct.json";
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(manifest_path.string(), ": ", what));
  };
  if (!manifest.contains("transformer") || !manifest["transformer"].is_object()) {
    return bad("transformer: required (layers, hidden, heads, intermediate, ...)");
  }
  const nlohmann::json& c = manifest["transformer"];
  if (!IntIn(c, "layers", 1, 48) || !IntIn(c, "hidden", 1, 4096) || !IntIn(c, "heads", 1, 64) ||
      !IntIn(c, "intermediate", 1, 16384) || !IntIn(c, "max_pieces_per_word", 1, 64) ||
      !IntIn(c, "window_words", 1, 4096) || !IntIn(c, "core_words", 1, 4096) ||
      !IntIn(c, "context_words", 0, 4096) || !c.contains("layer_norm_epsilon") ||
      !c["layer_norm_epsilon"].is_number() || !(c["layer_norm_epsilon"].get<double>() > 0) ||
      !(c["layer_norm_epsilon"].get<double>() < 1)) {
    return bad(
        "transformer: layers in [1, 48], hidden in [1, 4096], heads in [1, 64], intermediate in "
        "[1, 16384], max_pieces_per_word in [1, 64], window_words and core_words in [1, 4096], "
        "context_words in [0, 4096], layer_norm_epsilon in (0, 1)");
  }
  const int hidden = c["hidden"].get<int>(), heads = c["heads"].get<int>();
  if (hidden % heads != 0) return bad("transformer: hidden must be a multiple of heads");
  if (c["core_words"].get<int>() + 2 * c["context_words"].get<int>() >
      c["window_words"].get<int>()) {
    return bad("transformer: core_words + 2 x context_words must not exceed window_words");
  }
  absl::StatusOr<std::string> weights_name = ManifestFileName(manifest, "weights", manifest_path);
  if (!weights_name.ok()) return weights_name.status();
  absl::StatusOr<std::string> vocabulary_name =
      ManifestFileName(manifest, "vocabulary", manifest_path);
  if (!vocabulary_name.ok()) return vocabulary_name.status();
  absl::StatusOr<WordPiece> vocabulary = WordPiece::Load(dir / *vocabulary_name);
  if (!vocabulary.ok()) return vocabulary.status();
  auto t = std::unique_ptr<TokenTransformer>(new TokenTransformer(*std::move(vocabulary)));
  t->hidden_ = hidden;
  t->heads_ = heads;
  t->intermediate_ = c["intermediate"].get<int>();
  t->max_pieces_ = c["max_pieces_per_word"].get<int>();
  t->window_words_ = c["window_words"].get<int>();
  t->core_words_ = c["core_words"].get<int>();
  t->context_words_ = c["context_words"].get<int>();
  t->epsilon_ = c["layer_norm_epsilon"].get<float>();

  const std::filesystem::path path = dir / *weights_name;
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::ReadFile(path.string());
  if (!file.ok()) return file.status();
  const int64_t h = hidden, inter = t->intermediate_;
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape,
                    std::vector<float>* out) -> absl::Status {
    absl::StatusOr<std::vector<float>> v = ReadFiniteTensor(*file, path, name, shape);
    if (!v.ok()) return v.status();
    *out = *std::move(v);
    return absl::OkStatus();
  };
  if (absl::Status s =
          tensor("embeddings.word_embeddings.weight", {t->vocabulary_.size(), h}, &t->word_table_);
      !s.ok()) {
    return s;
  }
  // The largest tensor (vocabulary x H): kept as the file's F16 bits where it has them (half the
  // memory; rows are converted as tokens look them up), else in FP32.
  const TensorView* words = file->Find("embeddings.word_embeddings.weight");
  if (words->dtype == DType::kF16) {
    t->word_table_f16_.resize(t->word_table_.size());
    std::memcpy(t->word_table_f16_.data(), words->data, t->word_table_f16_.size() * 2);
    std::vector<float>().swap(t->word_table_);
  }
  const TensorView* pos = file->Find("embeddings.position_embeddings.weight");
  if (pos == nullptr || pos->shape.size() != 2 || pos->shape[0] < 3 || pos->shape[0] > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        path.string(), ": embeddings.position_embeddings.weight: want [positions >= 3, hidden]"));
  }
  t->positions_ = static_cast<int>(pos->shape[0]);
  if (absl::Status s =
          tensor("embeddings.position_embeddings.weight", {t->positions_, h}, &t->position_table_);
      !s.ok()) {
    return s;
  }
  if (static_cast<int64_t>(t->window_words_) * t->max_pieces_ + 2 > t->positions_) {
    return bad(absl::StrCat("transformer: window_words x max_pieces_per_word + 2 exceeds the ",
                            t->positions_, " positions of the weights"));
  }
  if (absl::Status s = tensor("embeddings.LayerNorm.weight", {h}, &t->ln_gain_); !s.ok()) return s;
  if (absl::Status s = tensor("embeddings.LayerNorm.bias", {h}, &t->ln_bias_); !s.ok()) return s;

  // A PyTorch Linear ([out, in] weights, one or more stacked along out) packed for the GEMM.
  auto linear = [&](const std::vector<std::string>& prefixes, int64_t in, int64_t out_each,
                    Linear* dst) -> absl::Status {
    const int64_t out = out_each * static_cast<int64_t>(prefixes.size());
    std::vector<float> w_t(in * out), bias(out);
    for (size_t p = 0; p < prefixes.size(); ++p) {
      std::vector<float> w, b;
      if (absl::Status s = tensor(prefixes[p] + ".weight", {out_each, in}, &w); !s.ok()) return s;
      if (absl::Status s = tensor(prefixes[p] + ".bias", {out_each}, &b); !s.ok()) return s;
      for (int64_t o = 0; o < out_each; ++o) {
        for (int64_t i = 0; i < in; ++i) w_t[i * out + p * out_each + o] = w[o * in + i];
        bias[p * out_each + o] = b[o];
      }
    }
    kernels::SubBlockDesc desc;
    desc.in_channels = static_cast<int>(in);
    desc.out_channels = static_cast<int>(out);
    desc.activation = kernels::Activation::kIdentity;
    kernels::SubBlockWeights weights;
    weights.weight = w_t.data();
    weights.bias = bias.data();
    dst->in = static_cast<int>(in);
    dst->out = static_cast<int>(out);
    dst->packed = kernels::PackSubBlock(desc, weights, nullptr, 0, precision);
    return absl::OkStatus();
  };
  t->layers_.resize(c["layers"].get<int>());
  for (size_t l = 0; l < t->layers_.size(); ++l) {
    Layer& layer = t->layers_[l];
    const std::string p = absl::StrCat("encoder.layer.", l, ".");
    absl::Status s =
        linear({p + "attention.self.query", p + "attention.self.key", p + "attention.self.value"},
               h, h, &layer.qkv);
    if (s.ok()) s = linear({p + "attention.output.dense"}, h, h, &layer.attention_out);
    if (s.ok()) s = linear({p + "intermediate.dense"}, h, inter, &layer.ffn_in);
    if (s.ok()) s = linear({p + "output.dense"}, inter, h, &layer.ffn_out);
    if (s.ok()) s = tensor(p + "attention.output.LayerNorm.weight", {h}, &layer.ln1_gain);
    if (s.ok()) s = tensor(p + "attention.output.LayerNorm.bias", {h}, &layer.ln1_bias);
    if (s.ok()) s = tensor(p + "output.LayerNorm.weight", {h}, &layer.ln2_gain);
    if (s.ok()) s = tensor(p + "output.LayerNorm.bias", {h}, &layer.ln2_bias);
    if (!s.ok()) return s;
  }
  if (absl::Status s = linear({"heads.marks"}, h, kClasses, &t->marks_); !s.ok()) return s;
  if (absl::Status s = linear({"heads.cases"}, h, kClasses, &t->cases_); !s.ok()) return s;
  return std::unique_ptr<const TokenTransformer>(std::move(t));
}

void TokenTransformer::Apply(const Linear& linear, const float* x, int rows, Scratch* scratch,
                             float* y) const {
  const int lengths[1] = {rows};
  kernels::BatchGeometry geometry;
  geometry.batch = 1;
  geometry.in_time = rows;
  geometry.out_time = rows;
  geometry.in_lengths = lengths;
  geometry.out_lengths = lengths;
  scratch->workspace.resize(kernels::PackedSubBlockWorkspaceFloats(linear.packed));
  kernels::FusedSubBlockCpuPacked(linear.packed, x, geometry, nullptr, scratch->workspace.data(),
                                  y);
}

void TokenTransformer::Encode(const std::vector<int>& tokens, Scratch* s) const {
  const int n = static_cast<int>(tokens.size()), h = hidden_, d = hidden_ / heads_;
  s->x.resize(static_cast<size_t>(n) * h);
  for (int t = 0; t < n; ++t) {
    const size_t row = static_cast<size_t>(tokens[t]) * h;
    const float* p = position_table_.data() + static_cast<size_t>(t) * h;
    float* x = s->x.data() + static_cast<size_t>(t) * h;
    if (!word_table_f16_.empty()) {
      for (int i = 0; i < h; ++i) x[i] = HalfToFloat(word_table_f16_[row + i]) + p[i];
    } else {
      for (int i = 0; i < h; ++i) x[i] = word_table_[row + i] + p[i];
    }
  }
  AddLayerNorm(s->x.data(), nullptr, n, h, ln_gain_, ln_bias_, epsilon_);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (const Layer& layer : layers_) {
    s->qkv.resize(static_cast<size_t>(n) * 3 * h);
    Apply(layer.qkv, s->x.data(), n, s, s->qkv.data());
    s->context.assign(static_cast<size_t>(n) * h, 0.0f);
    s->scores.resize(n);
    s->keys.resize(static_cast<size_t>(d) * n);
    const size_t row = 3 * static_cast<size_t>(h);
    for (int head = 0; head < heads_; ++head) {
      AttendHead(s->qkv.data() + head * d, row, n, d, scale, s->keys.data(), s->scores.data(),
                 s->context.data() + head * d, h);
    }
    s->projected.resize(static_cast<size_t>(n) * h);
    Apply(layer.attention_out, s->context.data(), n, s, s->projected.data());
    AddLayerNorm(s->x.data(), s->projected.data(), n, h, layer.ln1_gain, layer.ln1_bias, epsilon_);
    s->ffn.resize(static_cast<size_t>(n) * intermediate_);
    Apply(layer.ffn_in, s->x.data(), n, s, s->ffn.data());
    GeluRow(s->ffn.data(), s->ffn.size());
    Apply(layer.ffn_out, s->ffn.data(), n, s, s->projected.data());
    AddLayerNorm(s->x.data(), s->projected.data(), n, h, layer.ln2_gain, layer.ln2_bias, epsilon_);
  }
}

TokenTransformer::Logits TokenTransformer::Forward(absl::Span<const std::string> words) const {
  const int n = static_cast<int>(words.size());
  Logits logits;
  logits.marks.assign(static_cast<size_t>(n) * kClasses, 0.0f);
  logits.cases.assign(static_cast<size_t>(n) * kClasses, 0.0f);
  // Each word's tokens once: pieces[begin[w], begin[w + 1]).
  std::vector<int> pieces, begin = {0};
  for (const std::string& w : words) {
    vocabulary_.Tokenize(w, max_pieces_, &pieces);
    begin.push_back(static_cast<int>(pieces.size()));
  }
  Scratch scratch;
  std::vector<int> tokens, first;
  const bool one_window = n <= window_words_;
  for (int core = 0; core < n; core += one_window ? n : core_words_) {
    const int core_end = one_window ? n : std::min(n, core + core_words_);
    const int from = one_window ? 0 : std::max(0, core - context_words_);
    const int to = one_window ? n : std::min(n, core_end + context_words_);
    tokens.assign(1, vocabulary_.cls());
    first.clear();
    for (int w = from; w < to; ++w) {
      first.push_back(static_cast<int>(tokens.size()));
      tokens.insert(tokens.end(), pieces.begin() + begin[w], pieces.begin() + begin[w + 1]);
    }
    tokens.push_back(vocabulary_.sep());
    Encode(tokens, &scratch);
    // The core words' first tokens, gathered, through both heads at once.
    const int rows = core_end - core;
    scratch.heads.resize(static_cast<size_t>(rows) * hidden_);
    for (int w = core; w < core_end; ++w) {
      std::copy_n(scratch.x.data() + static_cast<size_t>(first[w - from]) * hidden_, hidden_,
                  scratch.heads.data() + static_cast<size_t>(w - core) * hidden_);
    }
    Apply(marks_, scratch.heads.data(), rows, &scratch,
          logits.marks.data() + static_cast<size_t>(core) * kClasses);
    Apply(cases_, scratch.heads.data(), rows, &scratch,
          logits.cases.data() + static_cast<size_t>(core) * kClasses);
  }
  return logits;
}

}  // namespace jasper
