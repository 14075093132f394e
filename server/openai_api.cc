#include "server/openai_api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "engine/audio/codec.h"
#include "nlohmann/json.hpp"
#include "server/multipart.h"
#include "server/offline_call.h"
#include "server/status_map.h"
#include "server/web_page.h"

namespace jasper::server {
namespace {

using json = nlohmann::json;

int HttpStatusOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::FAILED_PRECONDITION:
      return 400;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    default:
      return 500;
  }
}

const char* ErrorType(int status) {
  if (status == 401) return "authentication_error";
  if (status == 404 || status == 400 || status == 413) return "invalid_request_error";
  if (status == 429) return "rate_limit_error";
  return "server_error";
}

HttpResponse ErrorFromStatus(const grpc::Status& status) {
  const int http = HttpStatusOf(status.error_code());
  // gRPC's codes are absl's, number for number: absl names them ("INVALID_ARGUMENT").
  const std::string code = absl::AsciiStrToLower(
      absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
  return JsonError(http, status.error_message(), ErrorType(http), code);
}

// "en-US" -> "english" (what OpenAI's verbose_json says), else the code itself.
std::string LanguageName(const std::string& code) {
  if (absl::StartsWithIgnoreCase(code, "en")) return "english";
  return code;
}

// 00:01:02,345 (SRT) or 00:01:02.345 (WebVTT).
std::string Timestamp(double s, char sep) {
  const int64_t ms = static_cast<int64_t>(std::llround(std::max(0.0, s) * 1000.0));
  return absl::StrFormat("%02d:%02d:%02d%c%03d", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, sep,
                         ms % 1000);
}

// The form of a transcription request, checked.
struct TranscriptionForm {
  size_t audio_offset = 0, audio_size = 0;  // the file part's bytes in the request body
  std::string filename;
  std::string model;
  std::string language;
  std::string format = "json";
  bool words = false;
  // Written form and punctuation: jasper's form fields (OpenAI's API has none), off unless
  // asked for, as on the gRPC APIs.
  CallConfig::Stage itn = CallConfig::Stage::kOff;
  CallConfig::Stage punctuation = CallConfig::Stage::kOff;
};

// A jasper form field's boolean: true asks for the stage (FAILED_PRECONDITION without it),
// false turns it off.
absl::Status ParseStage(const std::string& name, const std::string& value,
                        CallConfig::Stage* stage) {
  if (value == "true") {
    *stage = CallConfig::Stage::kOn;
  } else if (value == "false") {
    *stage = CallConfig::Stage::kOff;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be true or false"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TranscriptionForm> ParseForm(const HttpRequest& request, ServingEngine* engine) {
  absl::StatusOr<std::string> boundary = FormBoundary(request.Header("content-type"));
  if (!boundary.ok()) return boundary.status();
  absl::StatusOr<std::vector<FormPart>> parts = ParseMultipart(request.body, *boundary);
  if (!parts.ok()) return parts.status();
  TranscriptionForm form;
  bool have_file = false;
  std::vector<std::string> granularities;
  for (const FormPart& p : *parts) {
    const std::string value(p.data);
    if (p.name == "file") {
      form.audio_offset = static_cast<size_t>(p.data.data() - request.body.data());
      form.audio_size = p.data.size();
      form.filename = p.filename;
      have_file = true;
    } else if (p.name == "model") {
      form.model = value;
    } else if (p.name == "language") {
      form.language = value;
    } else if (p.name == "response_format") {
      form.format = value;
    } else if (p.name == "timestamp_granularities[]" || p.name == "timestamp_granularities") {
      granularities.push_back(value);
    } else if (p.name == "temperature") {
      double t = 0;
      if (!absl::SimpleAtod(value, &t) || !(t >= 0.0 && t <= 1.0)) {
        return absl::InvalidArgumentError("temperature must be a number in [0, 1]");
      }
    } else if (p.name == "stream") {
      if (value == "true") {
        return absl::InvalidArgumentError(
            "stream=true is not supported here; stream audio over gRPC (StreamingRecognize)");
      }
    } else if (p.name == "inverse_text_normalization") {
      if (absl::Status s = ParseStage(p.name, value, &form.itn); !s.ok()) return s;
    } else if (p.name == "enable_automatic_punctuation") {
      if (absl::Status s = ParseStage(p.name, value, &form.punctuation); !s.ok()) return s;
    } else if (p.name == "prompt" || p.name == "chunking_strategy" || p.name == "include[]") {
      // Accepted for compatibility; recognition does not use them (docs/HTTP.md).
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown form field '", p.name.substr(0, 64), "'"));
    }
  }
  if (!have_file) return absl::InvalidArgumentError("the form has no 'file' part");
  if (form.audio_size == 0) return absl::InvalidArgumentError("the 'file' part is empty");
  // A file carries its format: a WAV header, a FLAC/Ogg/ID3 magic, or an .mp3 name (raw PCM
  // has no place in a file upload: it would decode as noise or fail on the missing rate).
  const absl::string_view head =
      absl::string_view(request.body)
          .substr(form.audio_offset, std::min<size_t>(form.audio_size, 12));
  const bool wav = absl::StartsWith(head, "RIFF");
  const SniffResult sniffed =
      SniffCodec(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(head.data()), head.size()));
  if (!wav && (sniffed == SniffResult::kNone || sniffed == SniffResult::kNeedMore) &&
      !absl::EndsWithIgnoreCase(form.filename, ".mp3")) {
    return absl::InvalidArgumentError(
        "the file is not audio this server reads: WAV, FLAC, Ogg (Opus, Vorbis) or MP3 "
        "(an MP3 without an ID3 tag needs a .mp3 file name)");
  }
  static constexpr const char* kFormats[] = {"json", "text", "srt", "vtt", "verbose_json"};
  if (std::find(std::begin(kFormats), std::end(kFormats), form.format) == std::end(kFormats)) {
    return absl::InvalidArgumentError(
        absl::StrCat("response_format '", form.format.substr(0, 32),
                     "' is not one of json, text, srt, vtt, verbose_json"));
  }
  for (const std::string& g : granularities) {
    if (g != "word" && g != "segment") {
      return absl::InvalidArgumentError(
          absl::StrCat("timestamp_granularities[] '", g.substr(0, 32), "' is not word or segment"));
    }
    if (form.format != "verbose_json") {
      return absl::InvalidArgumentError(
          "timestamp_granularities[] needs response_format=verbose_json");
    }
    if (g == "word") form.words = true;
  }
  // ISO-639-1 ("en") against the model's BCP-47 code ("en-US").
  if (!form.language.empty()) {
    const std::string served = engine->language_code();
    const std::string prefix = served.substr(0, served.find('-'));
    if (!absl::EqualsIgnoreCase(form.language, prefix) &&
        !absl::EqualsIgnoreCase(form.language, served)) {
      return absl::InvalidArgumentError(absl::StrCat("language '", form.language.substr(0, 16),
                                                     "' is not served (", prefix, ")"));
    }
  }
  return form;
}

class TranscriptionCall;

// The HTTP front's calls: each in-flight TranscriptionCall is owned here (not by itself), and a
// finished one is destroyed on this object's own thread, never inside the session callback that
// finished it (~TranscriptionCall waits for that callback to return). The destructor cancels
// the calls still open, waits for them to finish and destroys them: it runs before the engine
// goes (the HttpServer that holds the handler is destroyed first).
class CallRegistry {
 public:
  CallRegistry() : reaper_([this] { Reap(); }) {}
  ~CallRegistry();

  void Add(std::shared_ptr<TranscriptionCall> call);
  // The call has finished (called once, from its DoFinish): destroy it soon.
  void Finished(TranscriptionCall* call);

 private:
  void Reap();

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<TranscriptionCall*, std::shared_ptr<TranscriptionCall>> live_;  // guarded by mu_
  std::vector<std::shared_ptr<TranscriptionCall>> done_;                   // guarded by mu_
  bool stop_ = false;                                                      // guarded by mu_
  std::thread reaper_;
};

// One transcription: the request's audio through OfflineCallCore (admission, a session on the
// named model, pushes as the session has room, every final result), rendered at the end.
class TranscriptionCall final : public OfflineCallCore {
 public:
  TranscriptionCall(ServingEngine* engine, CallRegistry* registry, HttpRequest request,
                    TranscriptionForm form, HttpResponder respond)
      : OfflineCallCore(engine, "openai"),
        registry_(registry),
        request_(std::move(request)),
        form_(std::move(form)),
        respond_(std::move(respond)) {}
  ~TranscriptionCall() override { HandleDone(); }

  static void Run(ServingEngine* engine, CallRegistry* registry, HttpRequest request,
                  TranscriptionForm form, HttpResponder respond) {
    auto call = std::make_shared<TranscriptionCall>(engine, registry, std::move(request),
                                                    std::move(form), std::move(respond));
    registry->Add(call);
    call->Start();  // `call` keeps it alive while Start() runs (it may finish in there)
  }
  void Cancel() { HandleCancel(); }

 private:
  absl::StatusOr<CallConfig> ParseConfigRequest() const override {
    CallConfig config;
    config.model = form_.model;
    // Encoding unspecified: WAV headers and FLAC/Ogg/ID3-MP3 magic decide; an .mp3 name too.
    int encoding = 0;
    if (absl::EndsWithIgnoreCase(form_.filename, ".mp3")) encoding = 8;
    if (absl::Status s = SetAudioFormat(encoding, 0, 0, &config); !s.ok()) return s;
    config.word_time_offsets = true;  // segments' times come from the words
    config.request_id = "http";
    config.itn = form_.itn;
    config.punctuation = form_.punctuation;
    return config;
  }
  absl::string_view RequestAudio() const override {
    return absl::string_view(request_.body).substr(form_.audio_offset, form_.audio_size);
  }
  void AddResult(const SessionResult& result, const CallConfig&) override {
    finals_.push_back(result);
  }
  void Complete(const CallConfig&, double audio_s, double) override { audio_s_ = audio_s; }
  void DoFinish(grpc::Status status) override {
    HttpResponse response;
    if (status.ok()) {
      TranscriptionOutput out = RenderTranscription(finals_, form_.format, form_.words, audio_s_,
                                                    LanguageName(engine_->language_code()));
      response.content_type = std::move(out.content_type);
      response.body = std::move(out.body);
    } else {
      response = ErrorFromStatus(status);
    }
    respond_(std::move(response));
    registry_->Finished(this);
  }

  CallRegistry* const registry_;
  const HttpRequest request_;  // owns the body that holds the audio
  const TranscriptionForm form_;
  HttpResponder respond_;
  std::vector<SessionResult> finals_;  // under mu_ (called with it held)
  double audio_s_ = 0;
};

void CallRegistry::Add(std::shared_ptr<TranscriptionCall> call) {
  std::lock_guard<std::mutex> lock(mu_);
  TranscriptionCall* raw = call.get();
  live_.emplace(raw, std::move(call));
}

void CallRegistry::Finished(TranscriptionCall* call) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(call);
  if (it == live_.end()) return;
  done_.push_back(std::move(it->second));
  live_.erase(it);
  cv_.notify_all();
}

void CallRegistry::Reap() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !done_.empty(); });
    std::vector<std::shared_ptr<TranscriptionCall>> done;
    done.swap(done_);
    lock.unlock();
    done.clear();  // ~TranscriptionCall: detaches from its session's callbacks, frees the session
    lock.lock();
    if (stop_ && done_.empty()) return;
  }
}

CallRegistry::~CallRegistry() {
  std::vector<TranscriptionCall*> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [raw, call] : live_) open.push_back(raw);
  }
  // Each ends with on_done(CANCELLED) (delivered by the engine's pools), then Finished().
  for (TranscriptionCall* call : open) call->Cancel();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(30), [this] { return live_.empty(); });
    stop_ = true;
    cv_.notify_all();
  }
  reaper_.join();
  std::lock_guard<std::mutex> lock(mu_);
  done_.clear();
  live_.clear();  // none left unless a call failed to finish within 30 s
}

HttpResponse Json(const json& j) {
  HttpResponse r;
  r.body = j.dump();
  return r;
}

json ModelJson(const ServedModel& m, int64_t created) {
  return json{
      {"id", m.name}, {"object", "model"}, {"created", created}, {"owned_by", "jasper-serve"}};
}

}  // namespace

TranscriptionOutput RenderTranscription(const std::vector<SessionResult>& finals,
                                        const std::string& format, bool words, double audio_s,
                                        const std::string& language) {
  std::vector<std::string> texts;
  for (const SessionResult& r : finals) texts.push_back(r.transcript);
  const std::string text = absl::StrJoin(texts, " ");
  // One segment per final result (an utterance): from its first word to its last.
  struct Segment {
    double start, end;
    const SessionResult* result;
  };
  std::vector<Segment> segments;
  for (const SessionResult& r : finals) {
    double start = r.audio_start_s, end = r.audio_processed_s;
    if (!r.words.empty()) {
      start = r.words.front().start_ms / 1000.0;
      end = r.words.back().end_ms / 1000.0;
    }
    segments.push_back({start, end, &r});
  }
  TranscriptionOutput out;
  if (format == "text") {
    out.content_type = "text/plain; charset=utf-8";
    out.body = text + "\n";
  } else if (format == "srt" || format == "vtt") {
    const bool vtt = format == "vtt";
    out.content_type = vtt ? "text/vtt; charset=utf-8" : "application/x-subrip; charset=utf-8";
    if (vtt) out.body = "WEBVTT\n\n";
    for (size_t i = 0; i < segments.size(); ++i) {
      if (!vtt) absl::StrAppend(&out.body, i + 1, "\n");
      absl::StrAppend(&out.body, Timestamp(segments[i].start, vtt ? '.' : ','), " --> ",
                      Timestamp(segments[i].end, vtt ? '.' : ','), "\n",
                      segments[i].result->transcript, "\n\n");
    }
  } else if (format == "verbose_json") {
    out.content_type = "application/json";
    json j = {
        {"task", "transcribe"}, {"language", language}, {"duration", audio_s}, {"text", text}};
    json segs = json::array();
    json word_list = json::array();
    for (size_t i = 0; i < segments.size(); ++i) {
      const SessionResult& r = *segments[i].result;
      segs.push_back({{"id", i},
                      {"seek", 0},
                      {"start", segments[i].start},
                      {"end", segments[i].end},
                      {"text", r.transcript},
                      {"tokens", json::array()},
                      {"temperature", 0.0},
                      // The mean word confidence, as a log probability.
                      {"avg_logprob", std::log(std::max(1e-6f, r.confidence))},
                      {"confidence", r.confidence}});
      for (const WordInfo& w : r.words) {
        word_list.push_back({{"word", w.word},
                             {"start", w.start_ms / 1000.0},
                             {"end", w.end_ms / 1000.0},
                             {"confidence", w.confidence}});
      }
    }
    j["segments"] = segs;
    if (words) j["words"] = word_list;
    out.body = j.dump();
  } else {
    out.content_type = "application/json";
    out.body = json{{"text", text}}.dump();
  }
  return out;
}

bool HttpRequestHasKey(const HttpRequest& request, const ApiKeys& keys) {
  absl::string_view key = ApiKeys::KeyFromAuthorization(request.Header("authorization"));
  if (key.empty()) key = request.Header("x-api-key");
  return !key.empty() && keys.Matches(key);
}

HttpHandler MakeOpenAiHandler(ServingEngine* engine, std::shared_ptr<ApiKeyStore> keys,
                              std::function<std::string()> render_metrics) {
  const int64_t created = absl::ToUnixSeconds(absl::Now());  // when these models were loaded
  auto registry = std::make_shared<CallRegistry>();
  return [engine, keys, render_metrics, created, registry](HttpRequest request,
                                                           HttpResponder respond) {
    const std::string& path = request.path;
    const bool get = request.method == "GET" || request.method == "HEAD";
    auto method_not_allowed = [&](const char* allow) {
      HttpResponse r = JsonError(405, absl::StrCat(request.method, " is not allowed on ", path),
                                 "invalid_request_error", "method_not_allowed");
      r.headers.emplace_back("Allow", allow);
      respond(std::move(r));
    };
    if (path == "/" || path == "/index.html") {
      if (!get) return method_not_allowed("GET, HEAD");
      HttpResponse r;
      r.content_type = "text/html; charset=utf-8";
      r.body = IndexHtml();
      return respond(std::move(r));
    }
    if (path == "/health") {
      if (!get) return method_not_allowed("GET, HEAD");
      if (engine->draining()) {
        return respond(JsonError(503, "draining", "server_error", "unavailable"));
      }
      return respond(Json({{"status", "SERVING"}}));
    }
    if (path == "/metrics" && render_metrics) {
      if (!get) return method_not_allowed("GET, HEAD");
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = render_metrics();
      return respond(std::move(r));
    }
    if (!absl::StartsWith(path, "/v1/")) {
      return respond(JsonError(404, absl::StrCat("no route ", path.substr(0, 128)),
                               "invalid_request_error", "not_found"));
    }
    // The API: keys as on gRPC (Authorization: Bearer, or x-api-key).
    if (keys != nullptr && !HttpRequestHasKey(request, *keys->Current())) {
      const bool missing = ApiKeys::KeyFromAuthorization(request.Header("authorization")).empty() &&
                           request.Header("x-api-key").empty();
      return respond(JsonError(
          401, missing ? "missing API key (Authorization: Bearer KEY)" : "invalid API key",
          "authentication_error", "invalid_api_key"));
    }
    if (path == "/v1/models" || absl::StartsWith(path, "/v1/models/")) {
      if (!get) return method_not_allowed("GET, HEAD");
      if (path == "/v1/models") {
        json data = json::array();
        for (const auto& m : engine->models()) data.push_back(ModelJson(*m, created));
        return respond(Json({{"object", "list"}, {"data", data}}));
      }
      absl::StatusOr<const ServedModel*> m =
          engine->FindModel(path.substr(std::string("/v1/models/").size()));
      if (!m.ok()) return respond(ErrorFromStatus(ToGrpcStatus(m.status())));
      return respond(Json(ModelJson(**m, created)));
    }
    if (path == "/v1/audio/transcriptions") {
      if (request.method != "POST") return method_not_allowed("POST");
      absl::StatusOr<TranscriptionForm> form = ParseForm(request, engine);
      if (!form.ok()) return respond(ErrorFromStatus(ToGrpcStatus(form.status())));
      TranscriptionForm f = *std::move(form);
      return TranscriptionCall::Run(engine, registry.get(), std::move(request), std::move(f),
                                    std::move(respond));
    }
    respond(JsonError(404, absl::StrCat("no route ", path.substr(0, 128)), "invalid_request_error",
                      "not_found"));
  };
}

}  // namespace jasper::server
