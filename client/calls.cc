#include "client/calls.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/client_interceptor.h"

namespace jasper::client {
namespace {

namespace asr = ::jasper::asr::v1;
using SteadyClock = std::chrono::steady_clock;

double MsBetween(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return absl::StrCat("CODE_", static_cast<int>(code));
  }
}

void FillConfig(const AudioFile& file, const CallOptions& options, asr::RecognitionConfig* config) {
  // WAV files go as they are; the server reads the header. Raw files need encoding and rate.
  if (file.compressed != asr::ENCODING_UNSPECIFIED) {
    config->set_encoding(file.compressed);  // rate and channels: the stream's own
  } else {
    config->set_encoding(file.is_wav ? asr::ENCODING_UNSPECIFIED : asr::LINEAR_PCM);
    config->set_sample_rate_hertz(file.header.sample_rate);
    config->set_audio_channel_count(file.header.channels);
  }
  config->set_language_code(options.language_code);
  config->set_enable_word_time_offsets(options.word_time_offsets);
  config->set_model(options.model);
  config->set_decoder(options.decoder);
  config->set_max_alternatives(options.max_alternatives);
  config->set_enable_separate_recognition_per_channel(options.separate_channels);
  config->set_inverse_text_normalization(options.itn);
  config->set_enable_automatic_punctuation(options.punctuation);
}

// A final result's alternatives after the first, into result->alternatives.
template <typename Result>
void AddAlternatives(const Result& r, CallResult* result) {
  for (int i = 1; i < r.alternatives_size(); ++i) {
    result->alternatives.push_back({result->final_results - 1, i + 1,
                                    r.alternatives(i).transcript(),
                                    r.alternatives(i).confidence()});
  }
}

std::chrono::system_clock::time_point Deadline(const AudioFile& file, const CallOptions& options) {
  const double ms =
      options.timeout_ms > 0 ? options.timeout_ms : 60000.0 + 2000.0 * file.header.duration_s();
  return std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(ms));
}

void AppendTranscript(const std::string& text, std::string* out) {
  const size_t b = text.find_first_not_of(' ');
  if (b == std::string::npos) return;
  const size_t e = text.find_last_not_of(' ');
  if (!out->empty()) out->push_back(' ');
  out->append(text, b, e - b + 1);
}

// A final result's transcript; with per-channel recognition behind "[channel N]".
template <typename Result>
void AppendFinal(const Result& r, const CallOptions& options, std::string* out) {
  if (!options.separate_channels) return AppendTranscript(r.alternatives(0).transcript(), out);
  std::string text;
  AppendTranscript(r.alternatives(0).transcript(), &text);
  if (!text.empty()) AppendTranscript(absl::StrCat("[channel ", r.channel_tag(), "] ", text), out);
}

// What the writer and the reader of one streaming call share.
struct StreamTiming {
  struct Sent {
    double audio_end_s;
    SteadyClock::time_point at;
  };
  absl::Mutex mu;
  std::vector<Sent> sent ABSL_GUARDED_BY(mu);
  // Times of half-close / force_final still waiting for their final result.
  std::deque<SteadyClock::time_point> awaiting_final ABSL_GUARDED_BY(mu);

  // Time at which the chunk completing `audio_s` seconds of audio was sent.
  bool SentTimeFor(double audio_s, SteadyClock::time_point* at) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    if (sent.empty()) return false;
    auto it = std::lower_bound(sent.begin(), sent.end(), audio_s - 0.002,
                               [](const Sent& s, double t) { return s.audio_end_s < t; });
    *at = it == sent.end() ? sent.back().at : it->at;
    return true;
  }
};

}  // namespace

absl::StatusOr<AudioFile> LoadAudioFile(const std::string& path, int raw_sample_rate_hz) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  AudioFile file;
  file.path = path;
  file.bytes = buffer.str();
  if (IsWav(file.bytes)) {
    auto header = ParseWavHeader(file.bytes);
    if (!header.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", header.status().message()));
    }
    file.header = *header;
    file.is_wav = true;
    return file;
  }
  const bool mp3_name = path.size() > 4 && (path.compare(path.size() - 4, 4, ".mp3") == 0 ||
                                            path.compare(path.size() - 4, 4, ".MP3") == 0);
  if (file.bytes.compare(0, 4, "fLaC") == 0) file.compressed = asr::FLAC;
  if (file.bytes.compare(0, 4, "OggS") == 0) file.compressed = asr::OGGOPUS;
  if (file.bytes.compare(0, 3, "ID3") == 0 || mp3_name) file.compressed = asr::MP3;
  if (file.compressed != asr::ENCODING_UNSPECIFIED) {
    file.header.data_offset = 0;
    file.header.data_bytes = file.bytes.size();
    return file;
  }
  if (raw_sample_rate_hz <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a WAV file; pass --sample_rate for raw 16-bit PCM"));
  }
  file.header.format_tag = 1;
  file.header.channels = 1;
  file.header.sample_rate = raw_sample_rate_hz;
  file.header.bits_per_sample = 16;
  file.header.data_offset = 0;
  file.header.data_bytes = file.bytes.size() & ~static_cast<size_t>(1);
  return file;
}

CallResult RunStreamingOn(const StreamOpener& open, const AudioFile& file,
                          const CallOptions& options, LoadStats* stats) {
  CallResult result;
  result.audio_s = file.header.duration_s();
  const WavHeader& h = file.header;
  const size_t frame_bytes = std::max(1, h.bytes_per_frame());
  // A compressed file's duration is unknown here: it goes in 4 KiB chunks as fast as flow
  // control allows (no real-time pacing, no partial latencies, audio_s 0).
  const bool compressed = file.compressed != asr::ENCODING_UNSPECIFIED;
  const double bytes_per_s = compressed ? 0.0 : static_cast<double>(frame_bytes) * h.sample_rate;
  const size_t chunk_bytes =
      compressed ? size_t{4096}
                 : std::max<size_t>(
                       frame_bytes,
                       static_cast<size_t>(h.sample_rate * std::max(1, options.chunk_ms) / 1000) *
                           frame_bytes);

  StreamTiming timing;
  const bool measure_partials = stats != nullptr && options.interim_results && !compressed;
  WordFirstShown first_shown;  // used by this (the reading) thread only
  const SteadyClock::time_point start = SteadyClock::now();
  absl::StatusOr<std::unique_ptr<RecognizeStream>> opened = open(Deadline(file, options));
  if (!opened.ok()) {
    result.status = grpc::Status(static_cast<grpc::StatusCode>(opened.status().code()),
                                 std::string(opened.status().message()));
    result.wall_ms = MsBetween(start, SteadyClock::now());
    if (stats) stats->AddCall(result.audio_s, CodeName(result.status.error_code()));
    return result;
  }
  std::unique_ptr<RecognizeStream> stream = *std::move(opened);

  std::thread writer([&] {
    asr::StreamingRecognizeRequest request;
    auto* streaming = request.mutable_streaming_config();
    FillConfig(file, options, streaming->mutable_config());
    // Partial latency is per word (WordFirstShown): it needs the final results' word times.
    if (measure_partials) streaming->mutable_config()->set_enable_word_time_offsets(true);
    streaming->set_interim_results(options.interim_results);
    streaming->set_enable_speech_events(options.speech_events);
    request.set_request_id(file.path);
    if (!stream->Write(request)) return;
    const size_t end = h.data_offset + h.data_bytes;
    size_t pos = h.data_offset;
    int next_force_ms = options.force_final_every_ms;
    bool first = true;
    while (pos < end) {
      const size_t n = std::min(chunk_bytes, end - pos);
      const double audio_end_s = compressed ? 0.0 : (pos + n - h.data_offset) / bytes_per_s;
      if (options.simulate_realtime && !compressed) {
        std::this_thread::sleep_until(
            start + std::chrono::microseconds(static_cast<int64_t>(audio_end_s * 1e6)));
      }
      request.Clear();
      // The first chunk carries the WAV header in front of its samples, as Riva clients do.
      const size_t from = first ? 0 : pos;
      request.set_audio_content(file.bytes.data() + from, pos + n - from);
      {
        absl::MutexLock lock(&timing.mu);
        timing.sent.push_back({audio_end_s, SteadyClock::now()});
      }
      if (!stream->Write(request)) return;
      first = false;
      pos += n;
      if (next_force_ms > 0 && audio_end_s * 1000.0 >= next_force_ms && pos < end) {
        request.Clear();
        request.mutable_force_final();
        {
          absl::MutexLock lock(&timing.mu);
          timing.awaiting_final.push_back(SteadyClock::now());
        }
        if (!stream->Write(request)) return;
        next_force_ms += options.force_final_every_ms;
      }
    }
    {
      absl::MutexLock lock(&timing.mu);
      timing.awaiting_final.push_back(SteadyClock::now());
    }
    stream->WritesDone();
  });

  asr::StreamingRecognizeResponse response;
  while (stream->Read(&response)) {
    const SteadyClock::time_point now = SteadyClock::now();
    if (options.verbose) std::cerr << file.path << ": " << response.ShortDebugString() << "\n";
    for (const auto& r : response.results()) {
      SteadyClock::time_point sent_at;
      if (measure_partials && r.alternatives_size() > 0) {
        first_shown.AddResult(r.utterance_index(), r.alternatives(0).transcript(), now);
      }
      if (!r.is_final()) {
        ++result.interim_results;
        continue;
      }
      ++result.final_results;
      if (r.alternatives_size() > 0) {
        AppendFinal(r, options, &result.transcript);
        AddAlternatives(r, &result);
        if (options.word_time_offsets) {
          for (const auto& w : r.alternatives(0).words()) result.words.push_back(w);
        }
      }
      if (measure_partials) {
        // Per word: from sending the audio up to its end to the first result showing it.
        std::vector<std::string> words;
        if (r.alternatives_size() > 0) {
          for (const auto& w : r.alternatives(0).words()) words.push_back(w.word());
        }
        const std::vector<SteadyClock::time_point> shown =
            first_shown.TakeFinal(r.utterance_index(), words);
        for (size_t i = 0; i < words.size(); ++i) {
          const double end_s = r.alternatives(0).words(static_cast<int>(i)).end_time() / 1000.0;
          if (shown[i] != SteadyClock::time_point::max() && timing.SentTimeFor(end_s, &sent_at)) {
            stats->AddLatencyMs("partial", MsBetween(sent_at, shown[i]));
          }
        }
      }
      if (stats == nullptr) continue;
      bool awaited = false;
      {
        absl::MutexLock lock(&timing.mu);
        if (!timing.awaiting_final.empty()) {
          sent_at = timing.awaiting_final.front();
          timing.awaiting_final.pop_front();
          awaited = true;
        }
      }
      if (awaited) {
        stats->AddLatencyMs("final", MsBetween(sent_at, now));
      } else if (timing.SentTimeFor(r.audio_processed(), &sent_at)) {
        stats->AddLatencyMs("endpoint", MsBetween(sent_at, now));
      }
    }
  }
  writer.join();
  result.status = stream->Finish();
  result.wall_ms = MsBetween(start, SteadyClock::now());
  if (stats) stats->AddCall(result.audio_s, CodeName(result.status.error_code()));
  return result;
}

namespace {

// StreamingRecognize over a gRPC stub.
class GrpcRecognizeStream final : public RecognizeStream {
 public:
  GrpcRecognizeStream(asr::Asr::Stub* stub, std::chrono::system_clock::time_point deadline) {
    context_.set_deadline(deadline);
    stream_ = stub->StreamingRecognize(&context_);
  }
  bool Write(const asr::StreamingRecognizeRequest& request) override {
    return stream_->Write(request);
  }
  bool WritesDone() override { return stream_->WritesDone(); }
  bool Read(asr::StreamingRecognizeResponse* response) override { return stream_->Read(response); }
  grpc::Status Finish() override { return stream_->Finish(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<
      grpc::ClientReaderWriter<asr::StreamingRecognizeRequest, asr::StreamingRecognizeResponse>>
      stream_;
};

}  // namespace

CallResult RunStreaming(asr::Asr::Stub* stub, const AudioFile& file, const CallOptions& options,
                        LoadStats* stats) {
  return RunStreamingOn(
      [stub](std::chrono::system_clock::time_point deadline)
          -> absl::StatusOr<std::unique_ptr<RecognizeStream>> {
        return std::make_unique<GrpcRecognizeStream>(stub, deadline);
      },
      file, options, stats);
}

CallResult RunOffline(asr::Asr::Stub* stub, const AudioFile& file, const CallOptions& options,
                      LoadStats* stats) {
  CallResult result;
  result.audio_s = file.header.duration_s();
  asr::RecognizeRequest request;
  FillConfig(file, options, request.mutable_config());
  request.set_audio(file.bytes);
  request.set_request_id(file.path);
  asr::RecognizeResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline(file, options));
  const SteadyClock::time_point start = SteadyClock::now();
  result.status = stub->Recognize(&context, request, &response);
  result.wall_ms = MsBetween(start, SteadyClock::now());
  if (options.verbose) std::cerr << file.path << ": " << response.ShortDebugString() << "\n";
  for (const auto& r : response.results()) {
    ++result.final_results;
    if (r.alternatives_size() == 0) continue;
    AppendFinal(r, options, &result.transcript);
    AddAlternatives(r, &result);
    for (const auto& w : r.alternatives(0).words()) result.words.push_back(w);
  }
  if (stats) {
    if (result.status.ok()) stats->AddLatencyMs("request", result.wall_ms);
    stats->AddCall(result.audio_s, CodeName(result.status.error_code()));
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Channel credentials.

namespace {

// Adds `authorization: Bearer <key>` to every call of the channel.
class ApiKeyInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ApiKeyInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const header_;  // owned by the factory
};

class ApiKeyInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ApiKeyInterceptorFactory(const std::string& key) : header_("Bearer " + key) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new ApiKeyInterceptor(&header_);
  }

 private:
  const std::string header_;
};

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateClientChannel(const std::string& address,
                                                                   const ChannelSecurity& security,
                                                                   grpc::ChannelArguments args) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (security.tls || !security.tls_ca_file.empty() || !security.tls_cert_file.empty() ||
      !security.tls_key_file.empty()) {
    if (security.tls_cert_file.empty() != security.tls_key_file.empty()) {
      return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file go together");
    }
    grpc::SslCredentialsOptions ssl;
    if (!security.tls_ca_file.empty()) {
      absl::StatusOr<std::string> pem = ReadPem("tls_ca_file", security.tls_ca_file);
      if (!pem.ok()) return pem.status();
      ssl.pem_root_certs = *pem;
    }
    if (!security.tls_cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadPem("tls_cert_file", security.tls_cert_file);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem("tls_key_file", security.tls_key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    credentials = grpc::SslCredentials(ssl);
    if (!security.tls_server_name.empty()) args.SetSslTargetNameOverride(security.tls_server_name);
  }
  if (security.api_key.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<ApiKeyInterceptorFactory>(security.api_key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(interceptors));
}

}  // namespace jasper::client
