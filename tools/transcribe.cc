// jasper-transcribe: the offline command. Transcribes WAV files with a model folder using the
// engine directly (no server): prints one transcript per file and the timings.
//
//   jasper-transcribe a.wav b.wav                      (the shipped default model)
//   jasper-transcribe --model_dir=models/<name> a.wav b.wav
//   jasper-transcribe --model_dir=models/<name> --calibrate_int8 calib/*.wav
//                      (measures the INT8 scales, writes <model_dir>/int8_calibration.json)
//   jasper-transcribe --model_dir=models/<name> --check_int8 other/*.wav
//                      (how often that calibration's greedy tokens match FP32's on other audio)
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/audio/audio_input.h"
#include "engine/audio/codec.h"
#include "engine/audio/resample.h"
#include "engine/audio/wav.h"
#include "engine/model/default_model_dir.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/int8_calibrator.h"
#include "engine/status_macros.h"
#include "engine/streaming/recognizer.h"
#include "kernels/cpu_features.h"

ABSL_FLAG(std::string, model_dir, "",
          absl::StrCat("Model folder (model.json + model.safetensors). Default, as for "
                       "jasper-server: the first model folder under ",
                       jasper::kDefaultModelSearchPath, "."));
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda.");
ABSL_FLAG(std::string, gpu_precision, "fp32",
          "GPU activations and GEMM operands: fp32, fp16 or bf16 (FP32 accumulation).");
ABSL_FLAG(std::string, cpu_precision, "auto",
          "CPU GEMM operands: auto (bf16 where the CPU has AMX or is an AMD one with AVX-512 BF16, "
          "else fp32), fp32, bf16 (AMX "
          "tiles, FP32 accumulation) or int8 (AMX-INT8 or AVX-512 VNNI; needs the model "
          "folder's int8_calibration.json, see --calibrate_int8).");
ABSL_FLAG(bool, calibrate_int8, false,
          "Instead of transcribing: run the model in FP32 over the given audio (a few minutes "
          "that sound like what will be served; not a test set), choose the INT8 activation "
          "scales, check INT8 against FP32 on the same audio, and write "
          "<model_dir>/int8_calibration.json.");
ABSL_FLAG(bool, check_int8, false,
          "Instead of transcribing: run the model folder's INT8 calibration and FP32 over the "
          "given audio and print the share of frames with the same greedy token (e.g. on audio "
          "the calibration did not see).");
ABSL_FLAG(double, int8_fp32_share, jasper::Int8CalibrationOptions().max_fp32_share,
          "--calibrate_int8: keep in FP32 the sub-blocks whose quantization moves the greedy "
          "tokens most (a greedy selection on the calibration audio), doing at most this share "
          "of the model's multiply-adds per frame; 0: every sub-block in INT8. [0, 1]");
ABSL_FLAG(int, threads, 1,
          "Intra-op threads of the CPU backend replica (each sub-block split among them; results "
          "are identical for any value). [1, 256]");
ABSL_FLAG(bool, words, false, "Print word start/end times (ms) and confidences.");
ABSL_FLAG(bool, json, false, "Print one JSON object per file instead of text.");
ABSL_FLAG(int, repeat, 1, "Run each file this many times (timing); prints the last.");
ABSL_FLAG(std::string, decoder, "",
          "greedy (CTC argmax) or beam (CTC prefix beam search with --lm and --boost). Empty: the "
          "model folder's default_decoder (model.json), greedy when it names none.");
ABSL_FLAG(int, beam_width, jasper::BeamOptions().beam_width, "Beam search: hypotheses kept.");
ABSL_FLAG(double, lm_weight, jasper::BeamOptions().lm_weight,
          "Beam search: weight of the LM's log-probability.");
ABSL_FLAG(double, word_bonus, jasper::BeamOptions().word_bonus,
          "Beam search: score added per word.");
ABSL_FLAG(std::string, lm, "",
          "Beam search: a word n-gram LM, ARPA text (*.arpa) or the binary form (jasper-lm "
          "convert). Empty: the model folder's (model.json language_model), if any; none: no LM.");
ABSL_FLAG(std::string, boost, "",
          "Beam search: phrases to boost, 'phrase=boost;phrase=boost' (boost in log-score units, "
          "e.g. 5).");

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

// The decoder the flags ask for: greedy, or beam search with its options, LM and boosts.
absl::StatusOr<jasper::DecoderConfig> DecoderFromFlags(const jasper::Model& model) {
  jasper::DecoderConfig config;
  std::string name = absl::GetFlag(FLAGS_decoder);
  if (name.empty()) name = model.config().decoder_or_greedy();
  if (name != "greedy" && name != "beam") {
    return absl::InvalidArgumentError("--decoder must be greedy or beam, got '" + name + "'");
  }
  config.beam = name == "beam";
  const bool beam_only = !absl::GetFlag(FLAGS_lm).empty() || !absl::GetFlag(FLAGS_boost).empty();
  if (beam_only && !config.beam) {
    return absl::InvalidArgumentError("--lm and --boost need --decoder=beam");
  }
  config.beam_options.beam_width = absl::GetFlag(FLAGS_beam_width);
  config.beam_options.lm_weight = static_cast<float>(absl::GetFlag(FLAGS_lm_weight));
  config.beam_options.word_bonus = static_cast<float>(absl::GetFlag(FLAGS_word_bonus));
  JASPER_RETURN_IF_ERROR(config.beam_options.Validate());
  const std::string lm_path = absl::GetFlag(FLAGS_lm);
  if (lm_path == "none") {
    // Beam search without any LM, not even the model folder's.
  } else if (!lm_path.empty()) {
    absl::StatusOr<std::shared_ptr<const jasper::NgramLm>> lm = jasper::NgramLm::LoadFile(lm_path);
    if (!lm.ok()) return lm.status();
    config.lm = *std::move(lm);
  } else if (config.beam) {
    config.lm = model.language_model();  // the model folder's, if it has one
  }
  std::vector<jasper::BoostPhrase> phrases;
  for (absl::string_view item :
       absl::StrSplit(absl::GetFlag(FLAGS_boost), ';', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    double boost = 0;
    if (!absl::SimpleAtod(kv.second, &boost)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--boost: '", item, "' is not 'phrase=boost'"));
    }
    phrases.push_back({kv.first, static_cast<float>(boost)});
  }
  if (!phrases.empty()) {
    JASPER_ASSIGN_OR_RETURN(config.boost,
                            jasper::PhraseBoost::Create(phrases, model.config().labels));
  }
  return config;
}

// A FLAC, Ogg (Opus/Vorbis) or MP3 file (by its magic, or an .mp3 name) as mono at `rate` Hz,
// decoded as the server decodes it (engine/audio/audio_input.h); nullopt for anything else.
absl::StatusOr<std::optional<std::vector<float>>> LoadCompressed(const char* path, int rate) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  const std::string name(path);
  const bool mp3_name = name.size() > 4 && (name.compare(name.size() - 4, 4, ".mp3") == 0 ||
                                            name.compare(name.size() - 4, 4, ".MP3") == 0);
  const jasper::SniffResult sniffed = jasper::SniffCodec(bytes);
  jasper::AudioFormat format;
  if (sniffed == jasper::SniffResult::kFlac)
    format.encoding = jasper::AudioEncoding::kFlac;
  else if (sniffed == jasper::SniffResult::kOgg)
    format.encoding = jasper::AudioEncoding::kOggOpus;
  else if (sniffed == jasper::SniffResult::kMp3 || mp3_name)
    format.encoding = jasper::AudioEncoding::kMp3;
  else
    return std::optional<std::vector<float>>();
  JASPER_ASSIGN_OR_RETURN(std::unique_ptr<jasper::AudioInput> input,
                          jasper::AudioInput::Create(format, rate));
  std::vector<float> mono;
  JASPER_RETURN_IF_ERROR(input->Push(bytes, &mono));
  JASPER_RETURN_IF_ERROR(input->Flush(&mono));
  return std::optional<std::vector<float>>(std::move(mono));
}

// `path`'s audio as mono at `rate` Hz: WAV, or FLAC/Ogg/MP3 (LoadCompressed).
absl::StatusOr<std::vector<float>> LoadMono(const char* path, int rate) {
  JASPER_ASSIGN_OR_RETURN(std::optional<std::vector<float>> compressed, LoadCompressed(path, rate));
  if (compressed.has_value()) return *std::move(compressed);
  JASPER_ASSIGN_OR_RETURN(jasper::Audio audio, jasper::ReadWavFile(path));
  std::vector<float> mono = jasper::DownmixToMono(audio);
  if (audio.sample_rate == rate) return mono;
  return jasper::Resample(mono, audio.sample_rate, rate);
}

// --calibrate_int8: every file's features into an Int8Calibrator; the result written to the
// model folder (through a temporary file and a rename, so a reader never sees half of it).
// Adds every file's features to `calibrator`; the audio's seconds, or -1 after printing an error.
double AddCalibrationAudio(const jasper::Model& model, const std::vector<char*>& files,
                           jasper::Int8Calibrator* calibrator) {
  const int rate = model.config().featurizer.sample_rate;
  double audio_s = 0.0;
  for (const char* path : files) {
    absl::StatusOr<std::vector<float>> mono = LoadMono(path, rate);
    absl::StatusOr<jasper::Features> features =
        mono.ok() ? model.featurizer().Compute(*mono)
                  : absl::StatusOr<jasper::Features>(mono.status());
    if (!features.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", path,
                   std::string(features.status().message()).c_str());
      return -1;
    }
    features->data.resize(static_cast<std::size_t>(features->valid_frames) *
                          features->num_features);
    if (absl::Status s = calibrator->AddUtterance(features->data, features->valid_frames);
        !s.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", path, std::string(s.message()).c_str());
      return -1;
    }
    audio_s += static_cast<double>(mono->size()) / rate;
  }
  return audio_s;
}

// --check_int8: the folder's calibration against FP32 on the given audio.
int CheckInt8(const std::shared_ptr<const jasper::Model>& model, const std::vector<char*>& files) {
  if (model->int8_calibration() == nullptr) {
    std::fprintf(stderr, "error: %s\n",
                 std::string(model->int8_calibration_status().message()).c_str());
    return 1;
  }
  jasper::Int8Calibrator calibrator(model, absl::GetFlag(FLAGS_threads));
  const double audio_s = AddCalibrationAudio(*model, files, &calibrator);
  if (audio_s < 0) return 1;
  absl::StatusOr<double> agreement = calibrator.FrameAgreement(*model->int8_calibration());
  if (!agreement.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(agreement.status().message()).c_str());
    return 1;
  }
  std::printf(
      "INT8 (%d sub-block(s) in FP32) and FP32 give the same greedy token on %.3f %% of frames "
      "(%zu files, %.1f s audio)\n",
      model->int8_calibration()->Fp32Count(), 100.0 * *agreement, files.size(), audio_s);
  return 0;
}

int CalibrateInt8(const std::shared_ptr<const jasper::Model>& model, const std::string& model_dir,
                  const std::vector<char*>& files) {
  jasper::Int8Calibrator calibrator(model, absl::GetFlag(FLAGS_threads));
  const double audio_s = AddCalibrationAudio(*model, files, &calibrator);
  if (audio_s < 0) return 1;
  const auto start = Clock::now();
  jasper::Int8CalibrationOptions mixed;
  mixed.max_fp32_share = absl::GetFlag(FLAGS_int8_fp32_share);
  mixed.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  absl::StatusOr<jasper::Int8Calibration> calibration = calibrator.Calibrate(audio_s, mixed);
  if (!calibration.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(calibration.status().message()).c_str());
    return 1;
  }
  const std::filesystem::path target =
      std::filesystem::path(model_dir) / jasper::kInt8CalibrationFile;
  const std::filesystem::path temporary = target.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << jasper::Int8CalibrationToJson(*calibration);
    if (!out.flush()) {
      std::fprintf(stderr, "error: cannot write %s\n", temporary.c_str());
      return 1;
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, target, ec);
  if (ec) {
    std::fprintf(stderr, "error: cannot rename %s to %s: %s\n", temporary.c_str(), target.c_str(),
                 ec.message().c_str());
    return 1;
  }
  std::fprintf(
      stderr, "INT8 calibration of %zu sub-blocks over %d files (%.1f s audio) in %.1f s\n",
      calibration->layers.size(), calibration->utterances, audio_s, MsSince(start) / 1000.0);
  if (calibration->frame_agreement >= 0) {
    std::fprintf(stderr,
                 "check: INT8 (%d sub-block(s) in FP32) and FP32 give the same greedy token on "
                 "%.2f %% of frames (all in INT8: %.2f %%)\n",
                 calibration->Fp32Count(), 100.0 * calibration->frame_agreement,
                 100.0 * calibration->frame_agreement_all_int8);
  } else {
    std::fprintf(stderr, "check skipped: no INT8 GEMM in hardware here (%s)\n",
                 jasper::kernels::DescribeCpuFeatures().c_str());
  }
  std::printf("%s\n", target.c_str());
  return 0;
}

int Run(const std::vector<char*>& files) {
  std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  if (model_dir.empty()) model_dir = jasper::FindDefaultModelDir();
  if (model_dir.empty()) {
    std::fprintf(stderr, "error: no --model_dir given and no model folder under %s\n",
                 jasper::kDefaultModelSearchPath);
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
  if (absl::GetFlag(FLAGS_calibrate_int8)) return CalibrateInt8(*model, model_dir, files);
  if (absl::GetFlag(FLAGS_check_int8)) return CheckInt8(*model, files);
  absl::StatusOr<jasper::kernels::Precision> precision =
      jasper::ParseGpuPrecision(absl::GetFlag(FLAGS_gpu_precision));
  if (!precision.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(precision.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<jasper::kernels::Precision> cpu_precision =
      jasper::ParseCpuPrecision(absl::GetFlag(FLAGS_cpu_precision));
  if (!cpu_precision.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(cpu_precision.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<jasper::DecoderConfig> decoder = DecoderFromFlags(**model);
  if (!decoder.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(decoder.status().message()).c_str());
    return 2;
  }
  jasper::BackendOptions options;
  options.device = *device;
  options.gpu_precision = *precision;
  options.cpu_precision = *cpu_precision;
  options.cpu_threads = absl::GetFlag(FLAGS_threads);
  options.keep_log_probs = decoder->beam;  // beam search reads every label's log-probability
  absl::StatusOr<std::unique_ptr<jasper::OfflineRecognizer>> recognizer =
      jasper::OfflineRecognizer::Create(*model, options);
  if (!recognizer.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(recognizer.status().message()).c_str());
    return 1;
  }
  if (absl::Status s = (*recognizer)->SetDecoder(*std::move(decoder)); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::fprintf(stderr, "model %s loaded in %.1f ms, backend %s\n", model_dir.c_str(),
               MsSince(load_start), (*recognizer)->backend().name().c_str());

  const int model_rate = (*model)->config().featurizer.sample_rate;
  const bool json = absl::GetFlag(FLAGS_json);
  const int repeat = std::max(1, absl::GetFlag(FLAGS_repeat));
  int failures = 0;
  double total_audio_s = 0.0, total_compute_ms = 0.0;
  for (const char* path : files) {
    absl::StatusOr<std::vector<float>> loaded = LoadMono(path, model_rate);
    if (!loaded.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", path, std::string(loaded.status().message()).c_str());
      ++failures;
      continue;
    }
    const std::vector<float>& mono = *loaded;
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
  // --help lists this file's flags (absl's default matches only files named after the program).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "tools/transcribe.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "Transcribes WAV files offline with a jasper-serve model folder (no server).\n"
      "usage: jasper-transcribe [--model_dir=DIR] [--device=auto|cpu|cuda] FILE.wav...");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::fprintf(stderr,
                 "usage: jasper-transcribe [--model_dir=DIR] FILE.wav... (--help: flags)\n");
    return 2;
  }
  return Run(std::vector<char*>(args.begin() + 1, args.end()));
}
