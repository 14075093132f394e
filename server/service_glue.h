// What the two recognition APIs (jasper.asr.v1 and nvidia.riva.asr) have in common between
// their messages and the engine: RecognitionConfig -> CallConfig, SessionResult -> alternative
// and result fields, and the StreamCall / OfflineCall adapters built from them. The APIs name
// the fields they share identically, so everything here is a template over the message types;
// a service supplies only what differs, as an `Api` policy:
//
//   struct Api : ApiMessages<StreamingRequest, StreamingResponse, RecognizeRequest,
//                            RecognizeResponse> {
//     static constexpr const char* kName = "...";  // for logs
//     // The kind of a streaming message (ClassifyStreamingRequest() covers config and audio).
//     static RequestKind Classify(const StreamingRequest&);
//     // Streaming-config options beyond `config` and `interim_results`.
//     static void ParseStreamingOptions(const StreamingRequest&, CallConfig*);
//     // The request id of a request message / echoing it into a response message.
//     template <typename Request> static std::string RequestId(const Request&);
//     template <typename Response> static void SetRequestId(const CallConfig&, Response*);
//     // Result fields beyond alternatives, channel_tag, audio_processed (and, for the
//     // streaming result, is_final and stability).
//     static void AddResultDetails(const SessionResult&, StreamingRecognitionResult*);
//     static void AddResultDetails(const SessionResult&, SpeechRecognitionResult*);
//     // A speech event message without its request id; nullptr when the API has none.
//     static std::unique_ptr<StreamingResponse> MakeSpeechEvent(SpeechEventKind, double audio_s,
//                                                               int utterance_index);
//     // Whole-request fields of a Recognize response (besides results and request id).
//     static void AddTotals(double audio_s, double latency_ms, RecognizeResponse*);
//   };
//
// Usage: `new StreamCall<StreamAdapter<Api>>(engine)`, `new OfflineCall<OfflineAdapter<Api>>(...)`.
//
// Ownership and thread-safety: stateless functions over messages the caller owns; safe to call
// concurrently on distinct messages.
#ifndef JASPER_SERVER_SERVICE_GLUE_H_
#define JASPER_SERVER_SERVICE_GLUE_H_

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/decoding/ctc.h"
#include "engine/decoding/ctc_decoder.h"
#include "engine/streaming/stream_session.h"
#include "server/serving_engine.h"
#include "server/stream_call.h"

namespace jasper::server {

// Whether the API's RecognitionConfig has our `decoder` field (jasper.asr.v1 does, Riva not).
template <typename T, typename = void>
struct HasDecoderField : std::false_type {};
template <typename T>
struct HasDecoderField<T, std::void_t<decltype(std::declval<const T&>().decoder())>>
    : std::true_type {};

// Whether the API's RecognitionConfig has Riva's `verbatim_transcripts` (Riva does; jasper.asr.v1
// has `inverse_text_normalization` instead).
template <typename T, typename = void>
struct HasVerbatimField : std::false_type {};
template <typename T>
struct HasVerbatimField<T, std::void_t<decltype(std::declval<const T&>().verbatim_transcripts())>>
    : std::true_type {};

// CallConfig from either API's RecognitionConfig. INVALID_ARGUMENT as SetAudioFormat.
template <typename RecognitionConfig>
absl::StatusOr<CallConfig> ConfigFromProto(const RecognitionConfig& c) {
  CallConfig config;
  if (absl::Status s =
          SetAudioFormat(c.encoding(), c.sample_rate_hertz(), c.audio_channel_count(), &config);
      !s.ok()) {
    return s;
  }
  config.model = c.model();
  config.language_code = c.language_code();
  config.word_time_offsets = c.enable_word_time_offsets();
  // The end-of-utterance window (Riva clients send it only when > 0).
  if (c.has_endpointing_config() && c.endpointing_config().has_stop_history()) {
    config.endpoint_silence_ms = c.endpointing_config().stop_history();
  }
  // Boosting: both APIs carry Riva's speech_contexts (phrases with one boost per context).
  for (const auto& context : c.speech_contexts()) {
    for (const std::string& phrase : context.phrases()) {
      config.boost_phrases.push_back({phrase, context.boost()});
    }
  }
  if constexpr (HasDecoderField<RecognitionConfig>::value) config.decoder = c.decoder();
  // Written form: Riva's default (verbatim_transcripts = false) where the model has grammars;
  // ours when asked for.
  if constexpr (HasVerbatimField<RecognitionConfig>::value) {
    config.itn =
        c.verbatim_transcripts() ? CallConfig::Stage::kOff : CallConfig::Stage::kIfAvailable;
  } else {
    config.itn = c.inverse_text_normalization() ? CallConfig::Stage::kOn : CallConfig::Stage::kOff;
  }
  config.punctuation =
      c.enable_automatic_punctuation() ? CallConfig::Stage::kOn : CallConfig::Stage::kOff;
  // Per-channel recognition: one session per channel, results tagged (ChannelSessions).
  config.separate_channels =
      c.enable_separate_recognition_per_channel() && c.audio_channel_count() > 1;
  if (c.max_alternatives() < 0 || c.max_alternatives() > DecoderConfig::kMaxAlternatives) {
    return absl::InvalidArgumentError(absl::StrCat("max_alternatives must be in [0, ",
                                                   DecoderConfig::kMaxAlternatives, "], got ",
                                                   c.max_alternatives()));
  }
  config.max_alternatives = c.max_alternatives();
  return config;
}

// One alternative: the transcript; for a final result also its confidence and, when asked
// for, its words.
template <typename Alternative>
void FillAlternative(const std::string& transcript, bool is_final, float confidence,
                     const std::vector<WordInfo>& words, const CallConfig& config,
                     Alternative* alt) {
  alt->set_transcript(transcript);
  if (!is_final) return;
  alt->set_confidence(confidence);
  if (!config.word_time_offsets) return;
  for (const WordInfo& w : words) {
    auto* out = alt->add_words();
    out->set_word(w.word);
    out->set_start_time(w.start_ms);
    out->set_end_time(w.end_ms);
    out->set_confidence(w.confidence);
  }
}

// The result's alternatives: its own transcript first, then (final results with
// max_alternatives > 1) the other hypotheses, best first.
template <typename Result>
void FillAlternatives(const SessionResult& r, const CallConfig& config, Result* result) {
  FillAlternative(r.transcript, r.is_final, r.confidence, r.words, config,
                  result->add_alternatives());
  for (const SessionAlternative& a : r.alternatives) {
    FillAlternative(a.transcript, r.is_final, a.confidence, a.words, config,
                    result->add_alternatives());
  }
}

// The message types of an API's StreamingRecognize and Recognize, for its Api policy.
template <typename StreamingRequestT, typename StreamingResponseT, typename RecognizeRequestT,
          typename RecognizeResponseT>
struct ApiMessages {
  using StreamingRequest = StreamingRequestT;
  using StreamingResponse = StreamingResponseT;
  using RecognizeRequest = RecognizeRequestT;
  using RecognizeResponse = RecognizeResponseT;
};

// Config, audio and "nothing" messages, which both APIs' streaming requests have.
template <typename Request>
RequestKind ClassifyStreamingRequest(const Request& r) {
  switch (r.streaming_request_case()) {
    case Request::kStreamingConfig:
      return RequestKind::kConfig;
    case Request::kAudioContent:
      return RequestKind::kAudio;
    default:
      return RequestKind::kEmpty;
  }
}

// The StreamCall adapter of an API (see stream_call.h).
template <typename Api>
struct StreamAdapter {
  using Request = typename Api::StreamingRequest;
  using Response = typename Api::StreamingResponse;
  static constexpr const char* kApi = Api::kName;

  static RequestKind Classify(const Request& r) { return Api::Classify(r); }
  static absl::StatusOr<CallConfig> ParseConfig(const Request& r) {
    absl::StatusOr<CallConfig> config = ConfigFromProto(r.streaming_config().config());
    if (!config.ok()) return config;
    config->interim_results = r.streaming_config().interim_results();
    config->request_id = Api::RequestId(r);
    Api::ParseStreamingOptions(r, &*config);
    return config;
  }
  static absl::string_view Audio(const Request& r) { return r.audio_content(); }
  static std::unique_ptr<Response> MakeResult(const SessionResult& r, const CallConfig& config) {
    auto response = std::make_unique<Response>();
    auto* result = response->add_results();
    FillAlternatives(r, config, result);
    result->set_is_final(r.is_final);
    if (!r.is_final) result->set_stability(r.stability);
    result->set_channel_tag(r.channel + 1);
    result->set_audio_processed(static_cast<float>(r.audio_processed_s));
    Api::AddResultDetails(r, result);
    Api::SetRequestId(config, response.get());
    return response;
  }
  static std::unique_ptr<Response> MakeSpeechEvent(SpeechEventKind kind, double audio_s,
                                                   int utterance_index, const CallConfig& config) {
    std::unique_ptr<Response> response = Api::MakeSpeechEvent(kind, audio_s, utterance_index);
    if (response != nullptr) Api::SetRequestId(config, response.get());
    return response;
  }
};

// The OfflineCall adapter of an API (see offline_call.h).
template <typename Api>
struct OfflineAdapter {
  using Request = typename Api::RecognizeRequest;
  using Response = typename Api::RecognizeResponse;
  static constexpr const char* kApi = Api::kName;

  static absl::StatusOr<CallConfig> ParseConfig(const Request& r) {
    absl::StatusOr<CallConfig> config = ConfigFromProto(r.config());
    if (config.ok()) config->request_id = Api::RequestId(r);
    return config;
  }
  static absl::string_view Audio(const Request& r) { return r.audio(); }
  static void AddResult(const SessionResult& r, const CallConfig& config, Response* response) {
    auto* result = response->add_results();
    FillAlternatives(r, config, result);
    result->set_channel_tag(r.channel + 1);
    result->set_audio_processed(static_cast<float>(r.audio_processed_s));
    Api::AddResultDetails(r, result);
  }
  static void Complete(const CallConfig& config, double audio_s, double latency_ms,
                       Response* response) {
    Api::AddTotals(audio_s, latency_ms, response);
    Api::SetRequestId(config, response);
  }
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_SERVICE_GLUE_H_
