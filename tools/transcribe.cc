// jasper-transcribe: the offline command. Transcribes WAV files with a model folder using the
// engine directly (no server): prints one transcript per file and the timings.
//
//   jasper-transcribe --model_dir=models/<name> a.wav b.wav
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "engine/recognizer.h"
#include "engine/resample.h"
#include "engine/wav.h"

ABSL_FLAG(std::string, model_dir, "", "Model folder (model.json + model.safetensors).");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda.");
ABSL_FLAG(std::string, gpu_precision, "fp32",
          "GPU activations and GEMM operands: fp32, fp16 or bf16 (FP32 accumulation).");
ABSL_FLAG(int, threads, 1,
          "Intra-op threads of the CPU backend replica (each sub-block split among them; results "
          "are identical for any value). [1, 256]");
ABSL_FLAG(bool, words, false, "Print word start/end times (ms) and confidences.");
ABSL_FLAG(bool, json, false, "Print one JSON object per file instead of text.");
ABSL_FLAG(int, repeat, 1, "Run each file this many times (timing); prints the last.");

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out;
}

int Run(const std::vector<char*>& files) {
  const std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  if (model_dir.empty()) {
    std::fprintf(stderr, "error: --model_dir is required\n");
    return 2;
  }
  absl::StatusOr<jasper::Device> device = jasper::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(device.status().message()).c_str());
    return 2;
  }
  auto load_start = Clock::now();
  absl::StatusOr<std::shared_ptr<const jasper::Model>> model = jasper::Model::Load(model_dir);
  if (!model.ok()) {
    std::fprintf(stderr, "error: loading %s: %s\n", model_dir.c_str(),
                 std::string(model.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<jasper::GpuPrecision> precision =
      jasper::ParseGpuPrecision(absl::GetFlag(FLAGS_gpu_precision));
  if (!precision.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(precision.status().message()).c_str());
    return 2;
  }
  jasper::BackendOptions options;
  options.device = *device;
  options.gpu_precision = *precision;
  options.cpu_threads = absl::GetFlag(FLAGS_threads);
  absl::StatusOr<std::unique_ptr<jasper::OfflineRecognizer>> recognizer =
      jasper::OfflineRecognizer::Create(*model, options);
  if (!recognizer.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(recognizer.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "model %s loaded in %.1f ms, backend %s\n", model_dir.c_str(),
               MsSince(load_start), (*recognizer)->backend().name().c_str());

  const int model_rate = (*model)->config().featurizer.sample_rate;
  const bool json = absl::GetFlag(FLAGS_json);
  const int repeat = std::max(1, absl::GetFlag(FLAGS_repeat));
  int failures = 0;
  double total_audio_s = 0.0, total_compute_ms = 0.0;
  for (const char* path : files) {
    absl::StatusOr<jasper::Audio> audio = jasper::ReadWavFile(path);
    if (!audio.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", path, std::string(audio.status().message()).c_str());
      ++failures;
      continue;
    }
    std::vector<float> mono = jasper::DownmixToMono(*audio);
    if (audio->sample_rate != model_rate) {
      absl::StatusOr<std::vector<float>> resampled =
          jasper::Resample(mono, audio->sample_rate, model_rate);
      if (!resampled.ok()) {
        std::fprintf(stderr, "error: %s: %s\n", path,
                     std::string(resampled.status().message()).c_str());
        ++failures;
        continue;
      }
      mono = *std::move(resampled);
    }
    absl::StatusOr<std::vector<jasper::Transcript>> result;
    double compute_ms = 0.0;
    for (int r = 0; r < repeat; ++r) {
      auto start = Clock::now();
      result = (*recognizer)->RecognizeBatch({absl::MakeConstSpan(mono)});
      compute_ms = MsSince(start);
      if (!result.ok()) break;
    }
    if (!result.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", path, std::string(result.status().message()).c_str());
      ++failures;
      continue;
    }
    const jasper::Transcript& t = (*result)[0];
    const double rtf = t.audio_seconds * 1000.0 / compute_ms;
    total_audio_s += t.audio_seconds;
    total_compute_ms += compute_ms;
    if (json) {
      std::string words;
      for (const jasper::WordInfo& w : t.words) {
        if (!words.empty()) words += ",";
        words += absl::StrFormat(R"({"word":"%s","start_ms":%d,"end_ms":%d,"confidence":%.4f})",
                                 JsonEscape(w.word), w.start_ms, w.end_ms, w.confidence);
      }
      std::printf(
          R"({"file":"%s","transcript":"%s","confidence":%.4f,"audio_s":%.3f,"compute_ms":%.2f,"realtime_factor":%.1f,"words":[%s]})"
          "\n",
          JsonEscape(path).c_str(), JsonEscape(t.text).c_str(), t.confidence, t.audio_seconds,
          compute_ms, rtf, words.c_str());
    } else {
      std::printf("%s\t%s\n", path, t.text.c_str());
      if (absl::GetFlag(FLAGS_words)) {
        for (const jasper::WordInfo& w : t.words) {
          std::printf("  %6d %6d  %.3f  %s\n", w.start_ms, w.end_ms, w.confidence, w.word.c_str());
        }
      }
      std::fprintf(stderr, "  %.2f s audio in %.2f ms (%.1fx real time)\n", t.audio_seconds,
                   compute_ms, rtf);
    }
  }
  if (total_compute_ms > 0) {
    std::fprintf(stderr, "total: %.2f s audio, %.1f ms compute, %.1fx real time\n", total_audio_s,
                 total_compute_ms, total_audio_s * 1000.0 / total_compute_ms);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Transcribes WAV files offline with a jasper-serve model folder.\n"
      "usage: jasper-transcribe --model_dir=DIR [--device=auto|cpu|cuda] FILE.wav...");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::fprintf(stderr, "usage: jasper-transcribe --model_dir=DIR FILE.wav...\n");
    return 2;
  }
  return Run(std::vector<char*>(args.begin() + 1, args.end()));
}
