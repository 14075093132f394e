// jasper-lm: the word n-gram LM of beam search (engine/decoding/ngram_lm.h) on the command line.
//
//   jasper-lm convert in.arpa out.bin     ARPA text -> the binary form (checked by loading it)
//   jasper-lm info lm.bin|lm.arpa         order, vocabulary, n-grams per order, load time
//   jasper-lm score lm "some text" ...    log10 probability and perplexity of each sentence
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "engine/decoding/ngram_lm.h"

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "jasper-lm: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The word n-gram LM of beam search.\n"
      "  jasper-lm convert in.arpa out.bin\n  jasper-lm info LM\n  jasper-lm score LM TEXT...");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 3) {
    std::fprintf(stderr, "usage: jasper-lm convert|info|score ... (--help)\n");
    return 2;
  }
  const std::string command = args[1];
  const auto start = std::chrono::steady_clock::now();
  auto lm = jasper::NgramLm::LoadFile(args[2]);
  if (!lm.ok()) return Fail(lm.status());
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (command == "convert") {
    if (args.size() != 4) return Fail(absl::InvalidArgumentError("convert needs IN OUT"));
    const std::string image = (*lm)->ToBinary();
    std::ofstream(args[3], std::ios::binary) << image;
    auto check = jasper::NgramLm::LoadBinary(args[3]);
    if (!check.ok()) return Fail(check.status());
    std::printf("wrote %s: %zu bytes\n", args[3], image.size());
    return 0;
  }
  if (command == "info") {
    std::printf("order %d, vocabulary %d, load %.1f ms\n", (*lm)->order(), (*lm)->vocab_size(),
                load_ms);
    for (int n = 1; n <= (*lm)->order(); ++n) {
      std::printf("  %d-grams: %lld\n", n, static_cast<long long>((*lm)->num_ngrams(n)));
    }
    return 0;
  }
  if (command == "score") {
    for (size_t i = 3; i < args.size(); ++i) {
      std::vector<int> ids;
      for (absl::string_view w : absl::StrSplit(args[i], ' ', absl::SkipEmpty())) {
        ids.push_back((*lm)->WordId(w));
      }
      ids.push_back((*lm)->eos_id());
      const float log10p = (*lm)->ScoreSequence((*lm)->BeginSentence(), ids, nullptr);
      std::printf("%.3f\tppl %.1f\t%s\n", log10p,
                  std::pow(10.0, -log10p / static_cast<double>(ids.size())), args[i]);
    }
    return 0;
  }
  return Fail(absl::InvalidArgumentError("unknown command " + command));
}
