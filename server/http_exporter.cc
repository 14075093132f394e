#include "server/http_exporter.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/status_macros.h"
#include "spdlog/spdlog.h"

namespace jasper::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

void CloseFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

std::string StatusResponse(int code, const char* reason, const std::string& extra_headers = "") {
  const std::string body = absl::StrCat(code, " ", reason, "\n");
  return absl::StrCat("HTTP/1.1 ", code, " ", reason,
                      "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ",
                      body.size(), "\r\nConnection: close\r\n", extra_headers, "\r\n", body);
}

}  // namespace

absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  std::string h;
  std::string p;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("address '", address, "' is not [IPv6]:port"));
    }
    h = address.substr(1, close - 1);
    p = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("address '", address, "' has no :port"));
    }
    h = address.substr(0, colon);
    p = address.substr(colon + 1);
    if (h.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", address, "': write IPv6 hosts as [host]:port"));
    }
  }
  int port_number = -1;
  if (h.empty() || !absl::SimpleAtoi(p, &port_number) || port_number < 0 || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' is not host:port with a port in [0, 65535]"));
  }
  *host = h;
  *port = port_number;
  return absl::OkStatus();
}

struct HttpExporter::Connection {
  int fd = -1;
  std::string in;
  std::string out;
  size_t sent = 0;
  bool writing = false;
  bool lingering = false;  // response sent and write side shut: reading until the peer closes
  SteadyClock::time_point deadline;
};

absl::StatusOr<std::unique_ptr<HttpExporter>> HttpExporter::Start(
    const std::string& address, std::string content_type, std::function<std::string()> render) {
  std::string host;
  int port = 0;
  JASPER_RETURN_IF_ERROR(SplitHostPort(address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics address '", address, "': ", ::gai_strerror(rc)));
  }
  std::unique_ptr<HttpExporter> exporter(new HttpExporter());
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    exporter->listen_fd_ = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (exporter->listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", address, ": ", last_error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(exporter->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    if (bound.ss_family == AF_INET) {
      exporter->port_ = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else if (bound.ss_family == AF_INET6) {
      exporter->port_ = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    }
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    CloseFd(&exporter->listen_fd_);
    return absl::UnavailableError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  exporter->wake_read_fd_ = pipe_fds[0];
  exporter->wake_write_fd_ = pipe_fds[1];
  exporter->content_type_ = std::move(content_type);
  exporter->render_ = std::move(render);
  HttpExporter* raw = exporter.get();
  exporter->thread_ = std::thread([raw] { raw->Loop(); });
  spdlog::info("metrics: http://{}/metrics (bound to port {})", address, exporter->port_);
  return exporter;
}

HttpExporter::~HttpExporter() {
  if (wake_write_fd_ >= 0) {
    const char c = 'x';
    (void)!::write(wake_write_fd_, &c, 1);
  }
  if (thread_.joinable()) thread_.join();
  CloseFd(&listen_fd_);
  CloseFd(&wake_read_fd_);
  CloseFd(&wake_write_fd_);
}

std::string HttpExporter::Respond(const std::string& head) {
  // Request line: METHOD SP target SP HTTP/1.x
  const std::string line = head.substr(0, head.find("\r\n"));
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.") || parts[1].empty()) {
    return StatusResponse(400, "Bad Request");
  }
  const std::string& method = parts[0];
  std::string path = parts[1];
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    return StatusResponse(405, "Method Not Allowed", "Allow: GET, HEAD\r\n");
  }
  if (path != "/metrics") return StatusResponse(404, "Not Found");
  const std::string body = render_();
  std::string response =
      absl::StrCat("HTTP/1.1 200 OK\r\nContent-Type: ", content_type_,
                   "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  if (method == "GET") response += body;
  return response;
}

void HttpExporter::Loop() {
  std::vector<Connection> conns;
  std::vector<pollfd> fds;
  for (;;) {
    const auto now = SteadyClock::now();
    // Drop connections past their deadline.
    for (size_t i = 0; i < conns.size();) {
      if (now >= conns[i].deadline) {
        CloseFd(&conns[i].fd);
        conns.erase(conns.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    fds.clear();
    fds.push_back({wake_read_fd_, POLLIN, 0});
    const bool accepting = static_cast<int>(conns.size()) < kMaxConnections;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    int timeout_ms = 1000;
    for (const Connection& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.writing && !c.lingering ? POLLOUT : POLLIN), 0});
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now).count();
      timeout_ms = std::min<int>(timeout_ms, static_cast<int>(std::max<int64_t>(left, 0)) + 1);
    }
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("metrics: poll: {}", std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;  // woken to stop
    // Existing connections first (their indices match fds[2 + i]).
    std::vector<bool> done(conns.size(), false);
    for (size_t i = 0; i < conns.size(); ++i) {
      const short ev = fds[2 + i].revents;
      if (ev == 0) continue;
      Connection& c = conns[i];
      if (c.lingering) {
        // Discard what the client still sends; close on its EOF (or the linger deadline), so
        // that unread input does not turn our close into a reset that loses the response.
        char buf[4096];
        const ssize_t got = ::recv(c.fd, buf, sizeof(buf), 0);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          done[i] = true;
        }
        continue;
      }
      if (!c.writing) {
        char buf[4096];
        const ssize_t got = ::recv(c.fd, buf, sizeof(buf), 0);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          done[i] = true;
          continue;
        }
        if (got > 0) c.in.append(buf, static_cast<size_t>(got));
        const size_t end = c.in.find("\r\n\r\n");
        if (end != std::string::npos) {
          c.out = Respond(c.in.substr(0, end));
          c.writing = true;
        } else if (c.in.size() > static_cast<size_t>(kMaxRequestBytes)) {
          c.out = StatusResponse(431, "Request Header Fields Too Large");
          c.writing = true;
        }
        if (!c.writing) continue;
      }
      // Writing (possibly right after the request completed).
      while (c.sent < c.out.size()) {
        const ssize_t put =
            ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (put < 0) {
          if (errno == EINTR) continue;
          if (errno != EAGAIN && errno != EWOULDBLOCK) done[i] = true;
          break;
        }
        c.sent += static_cast<size_t>(put);
      }
      if (c.sent >= c.out.size() && !done[i]) {
        ::shutdown(c.fd, SHUT_WR);
        c.lingering = true;
        c.deadline =
            std::min(c.deadline, SteadyClock::now() + std::chrono::milliseconds(kLingerMs));
      }
    }
    std::vector<Connection> kept;
    kept.reserve(conns.size());
    for (size_t i = 0; i < conns.size(); ++i) {
      if (done[i]) {
        CloseFd(&conns[i].fd);
      } else {
        kept.push_back(std::move(conns[i]));
      }
    }
    conns.swap(kept);
    // New connections.
    if (accepting && (fds[1].revents & POLLIN) != 0) {
      while (static_cast<int>(conns.size()) < kMaxConnections) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN, or an error of that one connection
        Connection c;
        c.fd = fd;
        c.deadline = SteadyClock::now() + std::chrono::milliseconds(kConnectionTimeoutMs);
        conns.push_back(std::move(c));
      }
    }
  }
  for (Connection& c : conns) CloseFd(&c.fd);
}

}  // namespace jasper::server
