// The HTTP front's routes (server/http_server.h): OpenAI's audio transcription API, the model
// list, Prometheus metrics and a health check, over the same ServingEngine, admission control,
// limits and API keys as the gRPC services.
//
//   POST /v1/audio/transcriptions   multipart/form-data: file (required; WAV, FLAC, Ogg, MP3 or
//                                   anything the gRPC APIs decode), model, language, prompt
//                                   (accepted, unused), temperature (accepted, unused),
//                                   response_format (json | text | srt | vtt | verbose_json),
//                                   timestamp_granularities[] (word, segment; verbose_json)
//   GET  /v1/models, /v1/models/ID  the served models, OpenAI's list format
//   GET  /metrics                   the Prometheus text (open, as --metrics_address's)
//   GET  /health                    200 {"status":"SERVING"}, 503 while draining
//
// Errors are OpenAI's JSON ({"error": {"message", "type", "code"}}) with the HTTP status of the
// gRPC code the same failure gets (docs/HTTP.md): 400 INVALID_ARGUMENT/OUT_OF_RANGE, 401
// UNAUTHENTICATED, 404 NOT_FOUND, 413 body over --http_max_body_bytes, 429 RESOURCE_EXHAUSTED,
// 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED, 500 otherwise.
//
// Ownership: the handler borrows the engine, the metrics and shares the key store; all must
// outlive the HttpServer that runs it. Thread-safety: the handler is thread-safe.
#ifndef JASPER_SERVER_OPENAI_API_H_
#define JASPER_SERVER_OPENAI_API_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/streaming/stream_decoder.h"
#include "server/auth.h"
#include "server/http_server.h"
#include "server/serving_engine.h"

namespace jasper::server {

// Where the HTTP front accepts WebSocket streams (server/ws_stream_call.h).
inline constexpr char kWebSocketStreamPath[] = "/v1/stream";

// Whether the request carries one of `keys` (Authorization: Bearer, or x-api-key).
bool HttpRequestHasKey(const HttpRequest& request, const ApiKeys& keys);

// `render_metrics` may be empty (then /metrics is 404). `keys` may be null (no authentication).
HttpHandler MakeOpenAiHandler(ServingEngine* engine, std::shared_ptr<ApiKeyStore> keys,
                              std::function<std::string()> render_metrics);

// The body of a transcription in `format` ("json", "text", "srt", "vtt", "verbose_json") from
// the call's final results; `words`: verbose_json lists words (timestamp_granularities[] has
// "word"). Exposed for tests.
struct TranscriptionOutput {
  std::string content_type;
  std::string body;
};
TranscriptionOutput RenderTranscription(const std::vector<SessionResult>& finals,
                                        const std::string& format, bool words, double audio_s,
                                        const std::string& language);

}  // namespace jasper::server

#endif  // JASPER_SERVER_OPENAI_API_H_
