// itn_bench: serve-time cost of inverse text normalization (engine/text/inverse_normalizer.h),
// one thread, CPU-time clock, over the spoken sentences of the agreement set. Prints the grammar
// load time, the median microseconds per word over whole passes, and per-sentence p50/p99/max.
//
//   build/tools/bench/itn_bench [--itn_dir=models/quartznet_en_tts_small/itn]
//       [--sentences=tests/fixtures/itn/itn_en.tsv] [--passes=7] [--json]
//
// Not a test: a measuring tool (docs/PERFORMANCE.md, "Inverse text normalization";
// tools/bench_itn_peers.py runs it beside NeMo's Python normalizer).
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

ABSL_FLAG(std::string, itn_dir, "models/quartznet_en_tts_small/itn", "ITN grammar folder.");
ABSL_FLAG(std::string, sentences, "tests/fixtures/itn/itn_en.tsv",
          "Spoken sentences: the first tab-separated column of each line ('#' lines skipped).");
ABSL_FLAG(int, passes, 7, "Timed passes over all sentences (the median is printed).");
ABSL_FLAG(bool, json, false, "Print one JSON object instead of the table.");
ABSL_FLAG(bool, print, false,
          "Print each sentence's written form, one per line, and nothing else (no timing).");

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<std::string> sentences;
  size_t words = 0;
  std::ifstream in(absl::GetFlag(FLAGS_sentences));
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    sentences.push_back(line.substr(0, line.find('\t')));
    words +=
        std::vector<std::string>(absl::StrSplit(sentences.back(), ' ', absl::SkipEmpty())).size();
  }
  if (sentences.empty()) {
    std::fprintf(stderr, "itn_bench: no sentences in %s\n", absl::GetFlag(FLAGS_sentences).c_str());
    return 1;
  }
  const double load_start = CpuSeconds();
  auto itn = jasper::InverseNormalizer::Load(absl::GetFlag(FLAGS_itn_dir));
  const double load_s = CpuSeconds() - load_start;
  if (!itn.ok()) {
    std::fprintf(stderr, "itn_bench: %s\n", std::string(itn.status().message()).c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_print)) {
    for (const std::string& s : sentences) std::printf("%s\n", (*itn)->NormalizeText(s).c_str());
    return 0;
  }
  size_t checksum = 0;
  for (const std::string& s : sentences) checksum += (*itn)->NormalizeText(s).size();  // warm-up
  std::vector<double> pass_s;
  std::vector<double> sentence_us;
  for (int p = 0; p < std::max(1, absl::GetFlag(FLAGS_passes)); ++p) {
    const double start = CpuSeconds();
    for (const std::string& s : sentences) {
      const double t0 = CpuSeconds();
      checksum += (*itn)->NormalizeText(s).size();
      sentence_us.push_back(1e6 * (CpuSeconds() - t0));
    }
    pass_s.push_back(CpuSeconds() - start);
  }
  const double us_per_word = 1e6 * Percentile(pass_s, 0.5) / static_cast<double>(words);
  const double p50 = Percentile(sentence_us, 0.5);
  const double p99 = Percentile(sentence_us, 0.99);
  const double max = Percentile(sentence_us, 1.0);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"sentences\": %zu, \"words\": %zu, \"load_ms\": %.1f, \"us_per_word\": %.2f, "
        "\"sentence_us_p50\": %.1f, \"sentence_us_p99\": %.1f, \"sentence_us_max\": %.1f, "
        "\"checksum\": %zu}\n",
        sentences.size(), words, 1e3 * load_s, us_per_word, p50, p99, max, checksum);
    return 0;
  }
  std::printf("itn_bench: %zu sentences, %zu words, %d passes, 1 thread (CPU time)\n",
              sentences.size(), words, absl::GetFlag(FLAGS_passes));
  std::printf("| grammar load | us per word (median pass) | sentence p50 | p99 | max |\n");
  std::printf("|---|---|---|---|---|\n");
  std::printf("| %.1f ms | %.2f | %.1f us | %.1f us | %.1f us |\n", 1e3 * load_s, us_per_word, p50,
              p99, max);
  return 0;
}
