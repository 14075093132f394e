// punct_bench: accuracy and serve-time cost of punctuation and capitalization
// (engine/text/punctuator.h) on held-out text. Prints per-mark precision/recall/F1, capitals
// F1, the model's load time and the median microseconds per word over whole passes (one
// thread, CPU-time clock).
//
//   build/tools/bench/punct_bench [--punct_dir=models/quartznet_en_tts_small/punct]
//       [--heldout=tests/fixtures/punct/heldout.tsv] [--beam=8] [--passes=5] [--show=0]
//       [--precision=auto|fp32|bf16]
//   build/tools/bench/punct_bench --text="where is the station" [--itn_dir=...]   # one sentence
//
// Not a test (tests/punctuator_test.cc holds the goals): a measuring tool for
// docs/PERFORMANCE.md and the model card.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "engine/text/inverse_normalizer.h"
#include "engine/text/punctuation_metrics.h"
#include "engine/text/punctuator.h"
#include "engine/text/written_words.h"

ABSL_FLAG(std::string, punct_dir, "models/quartznet_en_tts_small/punct", "Model folder.");
ABSL_FLAG(std::string, heldout, "tests/fixtures/punct/heldout.tsv",
          "input<TAB>reference lines (tools/build_punct.py --heldout).");
ABSL_FLAG(int, beam, jasper::Punctuator::kDefaultBeam, "Hypotheses kept per word.");
ABSL_FLAG(std::string, precision, "auto",
          "GEMM precision of a token_transformer model: auto (Punctuator::DefaultPrecision), "
          "fp32 or bf16.");
ABSL_FLAG(int, passes, 5, "Timed passes over all passages (the median is printed).");
ABSL_FLAG(int, show, 0, "Print this many passages: output and reference.");
ABSL_FLAG(std::string, text, "",
          "Instead of measuring: print this sentence (lower-case words) written (with --itn_dir) "
          "and punctuated, as a final result would be.");
ABSL_FLAG(std::string, itn_dir, "models/quartznet_en_tts_small/itn",
          "ITN grammars applied before punctuation with --text (empty: none).");

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const double t0 = CpuSeconds();
  const std::string precision_name = absl::GetFlag(FLAGS_precision);
  jasper::kernels::Precision precision = jasper::Punctuator::DefaultPrecision();
  if (precision_name == "fp32") {
    precision = jasper::kernels::Precision::kFp32;
  } else if (precision_name == "bf16") {
    precision = jasper::kernels::Precision::kBf16;
  } else if (precision_name != "auto") {
    std::fprintf(stderr, "--precision: auto, fp32 or bf16\n");
    return 2;
  }
  std::printf("precision: %s\n", precision == jasper::kernels::Precision::kBf16 ? "bf16" : "fp32");
  auto punctuator = jasper::Punctuator::Load(absl::GetFlag(FLAGS_punct_dir), precision);
  if (!punctuator.ok()) {
    std::fprintf(stderr, "%s\n", punctuator.status().ToString().c_str());
    return 1;
  }
  const double load_ms = 1e3 * (CpuSeconds() - t0);
  if (!absl::GetFlag(FLAGS_text).empty()) {
    // The server's own path for a final result (engine/text/written_words.h).
    std::unique_ptr<const jasper::InverseNormalizer> itn;
    if (!absl::GetFlag(FLAGS_itn_dir).empty()) {
      auto loaded = jasper::InverseNormalizer::Load(absl::GetFlag(FLAGS_itn_dir));
      if (!loaded.ok()) {
        std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
        return 1;
      }
      itn = *std::move(loaded);
    }
    std::string text = absl::GetFlag(FLAGS_text);
    std::vector<jasper::WordInfo> words;
    for (absl::string_view w : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
      words.push_back({std::string(w), 0, 0, 1.0f});
    }
    jasper::WriteFinal({itn.get(), punctuator->get()}, &text, &words);
    std::printf("%s\n", text.c_str());
    return 0;
  }
  std::ifstream in(absl::GetFlag(FLAGS_heldout));
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", absl::GetFlag(FLAGS_heldout).c_str());
    return 1;
  }
  std::vector<std::vector<std::string>> inputs;
  std::vector<std::string> references;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    if (cols.size() != 2) continue;
    inputs.push_back(absl::StrSplit(cols[0], ' ', absl::SkipEmpty()));
    references.push_back(cols[1]);
  }
  const int beam = absl::GetFlag(FLAGS_beam);
  jasper::PunctuationScores scores;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<std::string> out = (*punctuator)->Punctuate(inputs[i], true, beam);
    std::string text;
    for (const std::string& w : out) text += (text.empty() ? "" : " ") + w;
    if (static_cast<int>(i) < absl::GetFlag(FLAGS_show)) {
      std::printf("out: %s\nref: %s\n\n", text.c_str(), references[i].c_str());
    }
    if (absl::Status s = jasper::ScorePassage(text, references[i], &scores); !s.ok()) {
      std::fprintf(stderr, "passage %zu: %s\n", i + 1, s.ToString().c_str());
      return 1;
    }
  }
  std::vector<double> per_word;
  for (int p = 0; p < absl::GetFlag(FLAGS_passes); ++p) {
    const double start = CpuSeconds();
    size_t sink = 0;
    for (const auto& words : inputs) sink += (*punctuator)->Punctuate(words, true, beam).size();
    per_word.push_back(1e6 * (CpuSeconds() - start) / static_cast<double>(scores.words));
    if (sink == 0) std::printf("(no words)\n");
  }
  std::sort(per_word.begin(), per_word.end());
  std::printf("passages %zu, words %lld, beam %d, load %.0f ms\n", inputs.size(),
              static_cast<long long>(scores.words), beam, load_ms);
  std::printf("| | precision | recall | F1 |\n|---|---|---|---|\n");
  const char* names[3] = {"comma", "period", "question mark"};
  for (int m = 0; m < 3; ++m) {
    std::printf("| %s | %.3f | %.3f | %.3f |\n", names[m], scores.marks[m].Precision(),
                scores.marks[m].Recall(), scores.marks[m].F1());
  }
  std::printf("| capitals | %.3f | %.3f | %.3f |\n", scores.capitals.Precision(),
              scores.capitals.Recall(), scores.capitals.F1());
  if (!per_word.empty()) {
    std::printf("cost: %.2f us per word (median of %zu passes, one thread)\n",
                per_word[per_word.size() / 2], per_word.size());
  }
  return 0;
}
