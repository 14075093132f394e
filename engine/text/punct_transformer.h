// TokenTransformer: the transformer token-classifier punctuation model (punct.json "method":
// "token_transformer", trained by tools/train_punct_bert.py from the first layers of the
// pretrained MiniLM encoder all-MiniLM-L6-v2): per word, scores for the mark after it and for
// its case (engine/text/token_classifier.h).
//
// Network (BERT's encoder, post-LayerNorm, exactly as the training tool computes it): the words'
// WordPiece tokens (engine/text/wordpiece.h, at most max_pieces_per_word each) between [CLS] and
// [SEP]; x = LayerNorm(word_embedding[id] + position_embedding[t]) (the token-type embedding is
// folded into the position table); then per layer
//   x = LayerNorm(x + Attention(x) W_o + b_o),  x = LayerNorm(x + GELU(x W_i + b_i) W_f + b_f)
// with 12-head scaled dot-product self-attention over the window (no mask: every token is
// real) and GELU(v) = v/2 (1 + erf(v / sqrt 2)); two linear heads read each word's first token.
// A passage longer than window_words runs in windows: cores of core_words words with up to
// context_words words of context on either side; a word's scores come from the window whose core
// holds it. Weights are stored in F16 and run in FP32 (the word embeddings stay F16 in memory,
// converted row by row); the linear layers on the fused CPU GEMM
// (kernels::PackSubBlock, a 1x1 dense sub-block without activation: AVX-512 / AVX2 / portable
// in FP32, or BF16 where Load is asked for it).
//
// Tensor shapes (one window at a time, row-major): tokens [T] (T <= window_words *
// max_pieces_per_word + 2 <= positions); hidden [T, H]; qkv [T, 3H]; attention scores [T, T] per
// head; FFN [T, I]; Logits::marks and ::cases [words, 4].
//
// Ownership: owns its weights (packed, immutable after Load). Thread-safety: Forward() is const
// and may run concurrently on one instance (all scratch memory is per call).
#ifndef JASPER_ENGINE_TEXT_PUNCT_TRANSFORMER_H_
#define JASPER_ENGINE_TEXT_PUNCT_TRANSFORMER_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/text/token_classifier.h"
#include "engine/text/wordpiece.h"
#include "kernels/sub_block.h"
#include "nlohmann/json.hpp"

namespace jasper {

class TokenTransformer : public TokenClassifier {
 public:
  // Reads the files `manifest` names in `dir` ("weights", "vocabulary"; sizes already checked
  // by the caller) with the shapes its "transformer" object gives. NOT_FOUND: a missing file;
  // INVALID_ARGUMENT: a malformed config, vocabulary or tensor (missing, wrong shape, not
  // finite), naming it, or a precision other than fp32 and bf16. With kBf16 the linear layers
  // round their inputs and weights to BF16 and sum in FP32 (the acoustic model's BF16 GEMM:
  // AMX, vdpbf16ps, or portable loops); everything else stays FP32.
  static absl::StatusOr<std::unique_ptr<const TokenTransformer>> Load(
      const std::filesystem::path& dir, const nlohmann::json& manifest,
      kernels::Precision precision = kernels::Precision::kFp32);

  Logits Forward(absl::Span<const std::string> words) const override;

 private:
  // y[T, out] = x[T, in] W + b on the packed GEMM.
  struct Linear {
    int in = 0, out = 0;
    kernels::PackedSubBlock packed;
  };
  struct Layer {
    Linear qkv, attention_out, ffn_in, ffn_out;
    std::vector<float> ln1_gain, ln1_bias, ln2_gain, ln2_bias;  // [H] each
  };
  struct Scratch;

  explicit TokenTransformer(WordPiece vocabulary) : vocabulary_(std::move(vocabulary)) {}
  void Apply(const Linear& linear, const float* x, int rows, Scratch* scratch, float* y) const;
  // Hidden states [tokens.size(), H] of one window into scratch->x.
  void Encode(const std::vector<int>& tokens, Scratch* scratch) const;

  WordPiece vocabulary_;
  int hidden_ = 0, heads_ = 0, intermediate_ = 0, positions_ = 0;
  int max_pieces_ = 7, window_words_ = 64, core_words_ = 48, context_words_ = 8;
  float epsilon_ = 1e-12f;
  std::vector<float> word_table_;         // [vocabulary, H], when the file holds FP32
  std::vector<uint16_t> word_table_f16_;  // [vocabulary, H] F16 bits, when the file holds F16
  std::vector<float> position_table_;     // [positions, H], token type 0 folded in
  std::vector<float> ln_gain_, ln_bias_;
  std::vector<Layer> layers_;
  Linear marks_, cases_;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_PUNCT_TRANSFORMER_H_
