// jasper-client: transcribes WAV files (or folders of them) with a jasper-serve server, and
// doubles as a load generator: N parallel streams x iterations, real-time pacing, and a report
// of p50/p90/p99 partial and final latency, throughput and real-time factor.
//
// Examples:
//   jasper-client --server=127.0.0.1:50051 a.wav b.wav
//   jasper-client --mode=streaming --interim_results --simulate_realtime --chunk_ms=160
//       --parallel=8 --iterations=4 --audio=tests/fixtures/audio
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/calls.h"
#include "client/health.h"
#include "client/latency_stats.h"
#include "client/ws_stream.h"
#include "grpcpp/grpcpp.h"
#include "jasper/asr/v1/asr.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051",
          "Server address host:port (--transport=websocket: the server's --http_listen).");
ABSL_FLAG(std::string, transport, "grpc",
          "grpc (jasper.asr.v1 over gRPC) or websocket (streaming over the HTTP front's "
          "/v1/stream; wss:// with the --tls* flags).");
ABSL_FLAG(std::string, audio, "",
          "Comma-separated audio files (WAV, FLAC, Ogg Opus/Vorbis, MP3; raw PCM with "
          "--sample_rate) or folders (their *.wav, *.flac, *.ogg, *.opus and *.mp3, sorted); "
          "positional arguments are added to these.");
ABSL_FLAG(std::string, mode, "streaming", "offline (Recognize) or streaming (StreamingRecognize).");
ABSL_FLAG(bool, simulate_realtime, false, "Streaming: send each chunk when its audio would exist.");
ABSL_FLAG(int, chunk_ms, 100, "Streaming: audio per message, ms.");
ABSL_FLAG(int, parallel, 1, "Concurrent calls.");
ABSL_FLAG(int, iterations, 1, "Times each file is sent.");
ABSL_FLAG(bool, interim_results, false, "Streaming: ask for interim (is_final=false) results.");
ABSL_FLAG(bool, word_time_offsets, false, "Ask for word start/end times.");
ABSL_FLAG(bool, speech_events, false, "Streaming: ask for utterance start/end events.");
ABSL_FLAG(int, force_final_every_ms, 0,
          "Streaming: send a force_final control after every this many ms of audio (0: never).");
ABSL_FLAG(std::string, model, "", "Model name (empty: the server's default).");
ABSL_FLAG(std::string, decoder, "",
          "greedy or beam (empty: the server's --decoder, else the model's default_decoder).");
ABSL_FLAG(int, max_alternatives, 0,
          "Alternatives per final result, 0-10 (above 1: beam search); text output prints the "
          "others indented under the transcript.");
ABSL_FLAG(bool, separate_channels, false,
          "Recognize each channel of a multi-channel file on its own "
          "(enable_separate_recognition_per_channel); each final is printed as '[channel N] "
          "text'. Without it the server averages the channels into one.");
ABSL_FLAG(bool, itn, false,
          "Written-form transcripts (inverse_text_normalization): numbers, money, dates, times, "
          "measures, phone numbers, e-mail and URLs as written, e.g. '$23.50' for 'twenty three "
          "dollars fifty cents'. Needs a model with ITN grammars (the shipped one has them).");
ABSL_FLAG(bool, punctuation, false,
          "Punctuated, capitalized transcripts (enable_automatic_punctuation): . , ? and "
          "capitals, after --itn when both are given. Needs a model with a punctuation model "
          "(the shipped one has one).");
ABSL_FLAG(std::string, language_code, "en-US", "BCP-47 language code.");
ABSL_FLAG(int, sample_rate, 0, "Rate of raw (headerless 16-bit mono PCM) files; 0: WAV only.");
ABSL_FLAG(int, timeout_ms, 0, "Per-call deadline, ms (0: 60 s + 2 x the audio duration).");
ABSL_FLAG(std::string, output, "text",
          "text: '<file>: <transcript>' lines; json: one JSON object per call, then the report.");
ABSL_FLAG(bool, report, true, "Print the load report (stderr for text output).");
ABSL_FLAG(bool, verbose, false, "Print every response to stderr.");
ABSL_FLAG(bool, list_models, false, "Print the server's models (ListModels) and exit.");
ABSL_FLAG(int, max_message_bytes, 64 << 20, "Channel's max send/receive message size.");
ABSL_FLAG(bool, tls, false,
          "Connect with TLS (implied by any --tls_* file; without --tls_ca_file the system's "
          "root certificates verify the server).");
ABSL_FLAG(std::string, tls_ca_file, "", "PEM CA certificate(s) that signed the server's.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate chain, for servers that require mutual TLS.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to verify in the server's certificate instead of --server's host.");
ABSL_FLAG(std::string, api_key, "",
          "API key, sent as 'authorization: Bearer <key>'. Default: $JASPER_API_KEY if set "
          "(keeps the key out of the process list).");
ABSL_FLAG(bool, health, false,
          "Call grpc.health.v1.Health/Check and exit: 0 when SERVING, 1 otherwise (not serving, "
          "unreachable, deadline). Deadline: --timeout_ms, 0 = 2 s. For container HEALTHCHECKs.");
ABSL_FLAG(std::string, health_service, "",
          "--health: the service to check (empty: the whole server).");

namespace {

namespace asr = ::jasper::asr::v1;
using jasper::client::AudioFile;
using jasper::client::CallOptions;
using jasper::client::CallResult;
using jasper::client::LoadStats;

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out;
}

std::string ResultJson(const AudioFile& file, int iteration, const CallResult& r) {
  std::string words;
  for (const auto& w : r.words) {
    if (!words.empty()) words += ",";
    absl::StrAppendFormat(&words,
                          "{\"word\":\"%s\",\"start_ms\":%d,\"end_ms\":%d,\"confidence\":%.4f}",
                          JsonEscape(w.word()), w.start_time(), w.end_time(), w.confidence());
  }
  std::string alternatives;
  for (const auto& a : r.alternatives) {
    if (!alternatives.empty()) alternatives += ",";
    absl::StrAppendFormat(&alternatives,
                          "{\"result\":%d,\"rank\":%d,\"transcript\":\"%s\",\"confidence\":%.4f}",
                          a.result, a.rank, JsonEscape(a.transcript), a.confidence);
  }
  return absl::StrFormat(
      "{\"file\":\"%s\",\"iteration\":%d,\"status\":%d,\"message\":\"%s\",\"transcript\":\"%s\","
      "\"words\":[%s],\"alternatives\":[%s],\"interim_results\":%d,\"final_results\":%d,"
      "\"audio_s\":%.3f,\"wall_ms\":%.3f}",
      JsonEscape(file.path), iteration, static_cast<int>(r.status.error_code()),
      JsonEscape(r.status.error_message()), JsonEscape(r.transcript), words, alternatives,
      r.interim_results, r.final_results, r.audio_s, r.wall_ms);
}

std::vector<std::string> ExpandPaths(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    if (in.empty()) continue;
    std::error_code ec;
    if (std::filesystem::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& e : std::filesystem::directory_iterator(in, ec)) {
        const std::string ext = e.path().extension().string();
        if (e.is_regular_file() &&
            (ext == ".wav" || ext == ".flac" || ext == ".ogg" || ext == ".opus" || ext == ".mp3")) {
          found.push_back(e.path());
        }
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(in);
    }
  }
  return files;
}

int ListModels(asr::Asr::Stub* stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  asr::ListModelsResponse response;
  grpc::Status status = stub->ListModels(&context, asr::ListModelsRequest(), &response);
  if (!status.ok()) {
    std::cerr << "ListModels failed: " << status.error_code() << " " << status.error_message()
              << "\n";
    return 1;
  }
  for (const auto& m : response.models()) std::cout << m.ShortDebugString() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "client/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "Transcribes WAV files with a jasper-serve server and reports latency and throughput.\n"
      "Usage: jasper-client [flags] [file.wav|folder ...]");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  args.SetMaxSendMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  jasper::client::ChannelSecurity security;
  security.tls = absl::GetFlag(FLAGS_tls);
  security.tls_ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  security.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  security.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  security.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  security.api_key = absl::GetFlag(FLAGS_api_key);
  if (const char* env = std::getenv("JASPER_API_KEY"); security.api_key.empty() && env) {
    security.api_key = env;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> secured =
      jasper::client::CreateClientChannel(absl::GetFlag(FLAGS_server), security, args);
  if (!secured.ok()) {
    std::cerr << "jasper-client: " << secured.status().message() << "\n";
    return 2;
  }
  std::shared_ptr<grpc::Channel> channel = *std::move(secured);
  std::unique_ptr<asr::Asr::Stub> stub = asr::Asr::NewStub(channel);
  if (absl::GetFlag(FLAGS_list_models)) return ListModels(stub.get());
  if (absl::GetFlag(FLAGS_health)) {
    const int timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
    return jasper::client::RunHealthCheck(channel, absl::GetFlag(FLAGS_health_service),
                                          timeout_ms > 0 ? timeout_ms : 2000);
  }

  const std::string mode = absl::GetFlag(FLAGS_mode);
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (mode != "offline" && mode != "streaming") {
    std::cerr << "--mode must be offline or streaming\n";
    return 2;
  }
  if (transport != "grpc" && transport != "websocket") {
    std::cerr << "--transport must be grpc or websocket\n";
    return 2;
  }
  if (transport == "websocket" && mode != "streaming") {
    std::cerr << "--transport=websocket runs streaming calls (--mode=streaming); offline calls "
                 "over HTTP are the OpenAI endpoint (docs/HTTP.md)\n";
    return 2;
  }
  jasper::client::WebSocketTarget ws_target;
  ws_target.address = absl::GetFlag(FLAGS_server);
  ws_target.security = security;
  const jasper::client::StreamOpener ws_open =
      [&ws_target](std::chrono::system_clock::time_point deadline) {
        return jasper::client::OpenWebSocketStream(ws_target, deadline);
      };
  if (output != "text" && output != "json") {
    std::cerr << "--output must be text or json\n";
    return 2;
  }
  std::vector<std::string> inputs = absl::StrSplit(absl::GetFlag(FLAGS_audio), ',');
  for (size_t i = 1; i < positional.size(); ++i) inputs.push_back(positional[i]);
  std::vector<AudioFile> files;
  for (const std::string& path : ExpandPaths(inputs)) {
    auto file = jasper::client::LoadAudioFile(path, absl::GetFlag(FLAGS_sample_rate));
    if (!file.ok()) {
      std::cerr << file.status().message() << "\n";
      return 2;
    }
    files.push_back(*std::move(file));
  }
  if (files.empty()) {
    std::cerr << "no audio files given (--audio or positional arguments)\n";
    return 2;
  }

  CallOptions options;
  options.model = absl::GetFlag(FLAGS_model);
  options.language_code = absl::GetFlag(FLAGS_language_code);
  options.chunk_ms = absl::GetFlag(FLAGS_chunk_ms);
  options.simulate_realtime = absl::GetFlag(FLAGS_simulate_realtime);
  options.interim_results = absl::GetFlag(FLAGS_interim_results);
  options.word_time_offsets = absl::GetFlag(FLAGS_word_time_offsets);
  options.decoder = absl::GetFlag(FLAGS_decoder);
  options.max_alternatives = absl::GetFlag(FLAGS_max_alternatives);
  options.separate_channels = absl::GetFlag(FLAGS_separate_channels);
  options.itn = absl::GetFlag(FLAGS_itn);
  options.punctuation = absl::GetFlag(FLAGS_punctuation);
  options.speech_events = absl::GetFlag(FLAGS_speech_events);
  options.force_final_every_ms = absl::GetFlag(FLAGS_force_final_every_ms);
  options.timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  options.verbose = absl::GetFlag(FLAGS_verbose);

  const int iterations = std::max(1, absl::GetFlag(FLAGS_iterations));
  const int parallel = std::max(1, absl::GetFlag(FLAGS_parallel));
  const int total = iterations * static_cast<int>(files.size());
  std::atomic<int> next{0};
  absl::Mutex print_mu;
  LoadStats stats;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < std::min(parallel, total); ++w) {
    workers.emplace_back([&] {
      for (int task = next++; task < total; task = next++) {
        const AudioFile& file = files[task % files.size()];
        const int iteration = task / static_cast<int>(files.size());
        CallResult r = mode == "offline"
                           ? jasper::client::RunOffline(stub.get(), file, options, &stats)
                       : transport == "websocket"
                           ? jasper::client::RunStreamingOn(ws_open, file, options, &stats)
                           : jasper::client::RunStreaming(stub.get(), file, options, &stats);
        absl::MutexLock lock(&print_mu);
        if (output == "json") {
          std::cout << ResultJson(file, iteration, r) << std::endl;
        } else if (r.status.ok()) {
          std::cout << file.path << ": " << r.transcript << std::endl;
          for (const auto& a : r.alternatives) {
            std::cout << "  result " << a.result << " alternative " << a.rank << ": "
                      << a.transcript << std::endl;
          }
        } else {
          std::cout << file.path << ": ERROR " << r.status.error_code() << " "
                    << r.status.error_message() << std::endl;
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (absl::GetFlag(FLAGS_report)) {
    if (output == "json") {
      std::cout << "{\"report\":" << stats.ReportJson(wall_s) << "}" << std::endl;
    } else {
      std::cerr << stats.Report(wall_s);
    }
  }
  return stats.failed_calls() == 0 ? 0 : 1;
}
