#include "server/http_exporter.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace jasper::server {

absl::StatusOr<std::unique_ptr<HttpExporter>> HttpExporter::Start(
    const std::string& address, std::string content_type, std::function<std::string()> render) {
  HttpServerOptions options;
  options.address = address;
  options.threads = 1;
  options.max_body_bytes = 1024;  // a scrape has no body
  options.max_header_bytes = kMaxRequestBytes;
  options.request_timeout_ms = kConnectionTimeoutMs;
  options.max_connections = kMaxConnections;
  auto handler = [content_type = std::move(content_type), render = std::move(render)](
                     HttpRequest request, HttpResponder respond) {
    HttpResponse r;
    r.close = true;
    if (request.path != "/metrics") {
      r = JsonError(
          404, absl::StrCat("no route ", request.path.substr(0, 128), "; metrics are at /metrics"),
          "invalid_request_error", "not_found");
    } else if (request.method != "GET" && request.method != "HEAD") {
      r = JsonError(405, "only GET and HEAD", "invalid_request_error", "method_not_allowed");
      r.headers.emplace_back("Allow", "GET, HEAD");
    } else {
      r.content_type = content_type;
      if (request.method == "GET") r.body = render();
    }
    r.close = true;
    respond(std::move(r));
  };
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options, handler);
  if (!server.ok()) return server.status();
  std::unique_ptr<HttpExporter> exporter(new HttpExporter());
  exporter->server_ = *std::move(server);
  return exporter;
}

}  // namespace jasper::server
