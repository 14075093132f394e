// One recognition call of jasper-client: a streaming call (config, audio chunks at real time or
// as fast as flow control allows, optional force_final controls, half-close) or an offline
// Recognize. Measures latencies into LoadStats.
//
// Thread-safety: each function runs one call on the calling thread (a streaming call starts one
// writer thread of its own); the stub and LoadStats may be shared across threads.
#ifndef JASPER_CLIENT_CALLS_H_
#define JASPER_CLIENT_CALLS_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/latency_stats.h"
#include "client/wav_header.h"
#include "grpcpp/grpcpp.h"
#include "jasper/asr/v1/asr.grpc.pb.h"

namespace jasper::client {

// A file to send, as bytes (WAV header included) plus where its samples are.
struct AudioFile {
  std::string path;
  std::string bytes;
  WavHeader header;  // for raw PCM files: a synthesized header with data_offset 0
  bool is_wav = false;
  // FLAC, OGGOPUS or MP3: a compressed file, sent as it is (the server decodes it); its
  // duration is not known here (header describes nothing). ENCODING_UNSPECIFIED otherwise.
  ::jasper::asr::v1::AudioEncoding compressed = ::jasper::asr::v1::ENCODING_UNSPECIFIED;
};

// Reads `path`. A WAV file is described by its header; a FLAC, Ogg (Opus/Vorbis) or MP3 file
// (by its magic, or an .mp3 name) is sent as it is; anything else is raw 16-bit mono PCM at
// `raw_sample_rate_hz` (error when that is 0).
absl::StatusOr<AudioFile> LoadAudioFile(const std::string& path, int raw_sample_rate_hz);

struct CallOptions {
  std::string model;
  std::string language_code = "en-US";
  int chunk_ms = 100;
  bool simulate_realtime = false;
  bool interim_results = false;
  bool word_time_offsets = false;
  bool speech_events = false;
  int force_final_every_ms = 0;  // 0: never
  std::string decoder;           // RecognitionConfig.decoder: "", "greedy" or "beam"
  int max_alternatives = 0;      // RecognitionConfig.max_alternatives (0-10)
  // RecognitionConfig.enable_separate_recognition_per_channel: each channel of a multi-channel
  // file recognized on its own; the transcript marks each final "[channel N] ...".
  bool separate_channels = false;
  // RecognitionConfig.inverse_text_normalization: numbers, money, dates... as written.
  bool itn = false;
  // RecognitionConfig.enable_automatic_punctuation: marks . , ? and capitals.
  bool punctuation = false;
  int timeout_ms = 0;    // 0: 60 s + 2 x audio duration
  bool verbose = false;  // print every response to stderr
};

// An alternative hypothesis of a final result (max_alternatives > 1).
struct Alternative {
  int result = 0;  // index of the final result (utterance) in the call
  int rank = 0;    // 2, 3, ...: its place in the result's alternatives
  std::string transcript;
  float confidence = 0.0f;
};

struct CallResult {
  grpc::Status status;
  std::string transcript;  // final results joined with spaces (see separate_channels)
  std::vector<jasper::asr::v1::WordInfo> words;
  std::vector<Alternative> alternatives;  // the final results' 2nd and later alternatives
  int interim_results = 0;
  int final_results = 0;
  double audio_s = 0.0;
  double wall_ms = 0.0;
};

// The two directions of one StreamingRecognize call, over gRPC or the server's WebSocket front.
// Thread-safety: Write and WritesDone from one thread, Read from one other; Finish once, after
// Read returned false and the writing thread is done.
class RecognizeStream {
 public:
  virtual ~RecognizeStream() = default;
  // False once the call has ended (Finish says why).
  virtual bool Write(const jasper::asr::v1::StreamingRecognizeRequest& request) = 0;
  virtual bool WritesDone() = 0;  // half-close: no more requests
  virtual bool Read(jasper::asr::v1::StreamingRecognizeResponse* response) = 0;
  virtual grpc::Status Finish() = 0;
};

// Opens a stream that ends with DEADLINE_EXCEEDED at `deadline`; errors: the call's status.
using StreamOpener = std::function<absl::StatusOr<std::unique_ptr<RecognizeStream>>(
    std::chrono::system_clock::time_point deadline)>;

// A streaming call on the stream `open` gives: the config, the audio in chunks (paced when
// options.simulate_realtime), force_final controls, half-close; results and latencies read back.
CallResult RunStreamingOn(const StreamOpener& open, const AudioFile& file,
                          const CallOptions& options, LoadStats* stats);

// RunStreamingOn over gRPC's Asr/StreamingRecognize.
CallResult RunStreaming(jasper::asr::v1::Asr::Stub* stub, const AudioFile& file,
                        const CallOptions& options, LoadStats* stats);

CallResult RunOffline(jasper::asr::v1::Asr::Stub* stub, const AudioFile& file,
                      const CallOptions& options, LoadStats* stats);

// How the client reaches the server: plaintext or TLS (optionally with a client certificate,
// for mutual TLS), and an optional API key sent with every call as
// `authorization: Bearer <key>`.
struct ChannelSecurity {
  bool tls = false;             // also implied by any tls_* file below
  std::string tls_ca_file;      // PEM roots to verify the server; empty: the system's roots
  std::string tls_cert_file;    // PEM client certificate chain (mTLS), with tls_key_file
  std::string tls_key_file;     // PEM client private key
  std::string tls_server_name;  // name to verify instead of the address's host; empty: host
  std::string api_key;          // empty: none
};

// A channel to `address` with `security` applied on top of `args`. Errors: INVALID_ARGUMENT
// (unreadable file, a certificate without its key or the reverse).
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateClientChannel(const std::string& address,
                                                                   const ChannelSecurity& security,
                                                                   grpc::ChannelArguments args);

}  // namespace jasper::client

#endif  // JASPER_CLIENT_CALLS_H_
