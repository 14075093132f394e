// jasper-soak: a bounded soak and fault test against a running jasper-server (loopback only).
// tools/soak.sh starts the server and runs this; see docs/RELIABILITY.md for the figures.
//
// Phases:
//   1. warm-up: a few clean streams; then the baseline resident memory (VmRSS of --server_pid).
//   2. load (--duration_s): --streams worker threads, each running one stream after another,
//      each stream a random scenario: normal (random chunk sizes, odd sizes included, WAV or
//      raw PCM, force-finals, interim results), slow reader, client cancellation at a random
//      point, a bad message interleaved after some good audio (audio before the config, a
//      second config, a malformed or nine-channel WAV header, raw audio without a rate, an
//      unsupported encoding, a message over the server's --max_message_bytes), an unknown
//      model. A companion process (this binary with --victim) runs streams and is SIGKILLed at
//      random times: abrupt disconnects with streams in flight.
//   3. drain: wait for the load to end; the RSS after it must be within --rss_bound_mb of the
//      baseline (the server keeps no per-stream memory once streams are gone).
//   4. SIGTERM mid-load: streams are started again, the server gets SIGTERM; it must exit within
//      --grace_ms plus a small slack, open streams must end with OK (after their finals) or
//      UNAVAILABLE, new calls with UNAVAILABLE.
// Assertions throughout: the server process stays up until the SIGTERM (health checks), every
// stream that ended OK got at least one final result, every other stream ended with the status
// the API documents for what it did (docs/API.md; server/status_map.cc), no call hits its
// deadline (a hang). Exit 0 when all hold, 1 otherwise; a JSON report on stdout.
//
// Thread-safety: the stats are under one mutex; each stream runs on its worker thread plus one
// writer thread of its own.
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
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
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/calls.h"
#include "client/wav_header.h"
#include "grpcpp/grpcpp.h"
#include "jasper/asr/v1/asr.grpc.pb.h"

extern char** environ;

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "Server address (loopback).");
ABSL_FLAG(int, server_pid, 0, "PID of the server (RSS from /proc, SIGTERM at the end).");
ABSL_FLAG(std::string, audio, "", "Comma-separated WAV files (16-bit PCM mono).");
ABSL_FLAG(int, duration_s, 20, "Length of the load phase.");
ABSL_FLAG(int, streams, 16, "Concurrent streams during the load.");
ABSL_FLAG(double, speed, 4.0, "Audio sent at this many times real time (0: as fast as allowed).");
ABSL_FLAG(int, max_message_bytes, 1 << 20, "The server's --max_message_bytes.");
ABSL_FLAG(int, grace_ms, 5000, "The server's --shutdown_grace_ms.");
ABSL_FLAG(int, rss_bound_mb, 50, "Allowed VmRSS growth after the load drains, MiB.");
ABSL_FLAG(int, victim_streams, 4, "Streams of each victim process (abrupt disconnects).");
ABSL_FLAG(bool, victim, false, "Internal: run streams until killed.");
ABSL_FLAG(bool, sigterm, true, "End with the SIGTERM-mid-load phase.");
ABSL_FLAG(uint32_t, seed, 1, "Random seed.");
ABSL_FLAG(bool, victims, true, "Run victim processes (abrupt disconnects) during the load.");
ABSL_FLAG(std::string, only, "",
          "Comma-separated scenario names to run (empty: the default mix of all of them).");
ABSL_FLAG(int, startup_timeout_s, 120, "Wait this long for the server to answer.");

namespace {

namespace asr = ::jasper::asr::v1;
using Clock = std::chrono::steady_clock;
using jasper::client::AudioFile;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

enum class Scenario {
  kNormal,
  kSlowReader,
  kCancel,
  kAudioBeforeConfig,
  kSecondConfig,
  kBadWavHeader,
  kNineChannelWav,
  kRawNoRate,
  kBadEncoding,
  kOversize,
  kUnknownModel,
  kCount
};

const char* ScenarioName(Scenario s) {
  switch (s) {
    case Scenario::kNormal:
      return "normal";
    case Scenario::kSlowReader:
      return "slow_reader";
    case Scenario::kCancel:
      return "client_cancel";
    case Scenario::kAudioBeforeConfig:
      return "audio_before_config";
    case Scenario::kSecondConfig:
      return "second_config";
    case Scenario::kBadWavHeader:
      return "malformed_wav_header";
    case Scenario::kNineChannelWav:
      return "nine_channel_wav";
    case Scenario::kRawNoRate:
      return "raw_audio_without_rate";
    case Scenario::kBadEncoding:
      return "unsupported_encoding";
    case Scenario::kOversize:
      return "oversize_message";
    case Scenario::kUnknownModel:
      return "unknown_model";
    case Scenario::kCount:
      break;
  }
  return "?";
}

// The status docs/API.md gives for what the scenario does.
grpc::StatusCode ExpectedCode(Scenario s) {
  switch (s) {
    case Scenario::kNormal:
    case Scenario::kSlowReader:
      return grpc::StatusCode::OK;
    case Scenario::kCancel:
      return grpc::StatusCode::CANCELLED;
    case Scenario::kOversize:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case Scenario::kUnknownModel:
      return grpc::StatusCode::NOT_FOUND;
    default:
      return grpc::StatusCode::INVALID_ARGUMENT;
  }
}

struct Outcome {
  grpc::Status status;
  int finals = 0;
  int interims = 0;
  int64_t audio_bytes = 0;
};

class Stats {
 public:
  void Record(const std::string& phase, Scenario s, const Outcome& o, bool ok,
              const std::string& why) {
    absl::MutexLock lock(&mu_);
    auto& c = counts_[absl::StrCat(phase, ".", ScenarioName(s))];
    ++c[absl::StrCat("code_", o.status.error_code())];
    ++c[ok ? "pass" : "fail"];
    if (o.status.ok() && o.finals > 0) ++c["ok_with_final"];
    audio_bytes_ += o.audio_bytes;
    if (!ok) {
      ++failures_;
      if (messages_.size() < 30) {
        messages_.push_back(absl::StrCat(phase, " ", ScenarioName(s), ": ", why, " (code ",
                                         o.status.error_code(), " '", o.status.error_message(),
                                         "', finals ", o.finals, ")"));
      }
    }
  }
  void Count(const std::string& key, int64_t n = 1) {
    absl::MutexLock lock(&mu_);
    extra_[key] += n;
  }
  void Fail(const std::string& message) {
    absl::MutexLock lock(&mu_);
    ++failures_;
    if (messages_.size() < 30) messages_.push_back(message);
  }
  int failures() {
    absl::MutexLock lock(&mu_);
    return failures_;
  }
  std::string Json(const std::map<std::string, std::string>& top) {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> parts;
    for (const auto& [k, v] : top) parts.push_back(absl::StrFormat("\"%s\":%s", k, v));
    std::vector<std::string> scen;
    for (const auto& [name, c] : counts_) {
      std::vector<std::string> kv;
      for (const auto& [k, v] : c) kv.push_back(absl::StrFormat("\"%s\":%d", k, v));
      scen.push_back(absl::StrFormat("\"%s\":{%s}", name, absl::StrJoin(kv, ",")));
    }
    std::vector<std::string> ex;
    for (const auto& [k, v] : extra_) ex.push_back(absl::StrFormat("\"%s\":%d", k, v));
    std::vector<std::string> msgs;
    for (const auto& m : messages_) {
      std::string e;
      for (char ch : m) {
        if (ch == '"' || ch == '\\') e.push_back('\\');
        if (static_cast<unsigned char>(ch) >= 0x20) e.push_back(ch);
      }
      msgs.push_back(absl::StrCat("\"", e, "\""));
    }
    parts.push_back(absl::StrFormat("\"scenarios\":{%s}", absl::StrJoin(scen, ",")));
    parts.push_back(absl::StrFormat("\"events\":{%s}", absl::StrJoin(ex, ",")));
    parts.push_back(absl::StrFormat("\"audio_mb_sent\":%.1f", audio_bytes_ / 1048576.0));
    parts.push_back(absl::StrFormat("\"failures\":%d", failures_));
    parts.push_back(absl::StrFormat("\"failure_messages\":[%s]", absl::StrJoin(msgs, ",")));
    return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::map<std::string, int64_t>> counts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> extra_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> messages_ ABSL_GUARDED_BY(mu_);
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t audio_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

int64_t RssKb(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

// Running (not exited, not a zombie awaiting its parent's wait).
bool Alive(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// The server answers calls (a ListModels round trip).
bool HealthServing(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = asr::Asr::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  asr::ListModelsResponse response;
  return stub->ListModels(&context, asr::ListModelsRequest(), &response).ok();
}

// One streaming call following `scenario`; `stop` cuts a normal stream short (it then
// half-closes early and still expects its final). `wait_for_ready` makes the call wait out
// a channel that is (re)connecting instead of failing at once with UNAVAILABLE: warm-up and
// load use it (a server that stops accepting then fails the calls by their deadline, and the
// statuses the server itself sends are unchanged); the shutdown phase does not, as it must see
// UNAVAILABLE as it happens.
Outcome RunStream(asr::Asr::Stub* stub, const AudioFile& file, Scenario scenario, std::mt19937* rng,
                  double speed, int max_message_bytes, bool wait_for_ready = false) {
  Outcome out;
  std::uniform_int_distribution<int> chunk_dist(1, 12000);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const bool raw_pcm = unit(*rng) < 0.3;
  const bool interim = unit(*rng) < 0.5;
  const bool force_final = unit(*rng) < 0.3;
  const double cancel_frac = unit(*rng);
  const double bad_after_frac = unit(*rng) * 0.6;
  const uint32_t reader_delay_ms = scenario == Scenario::kSlowReader ? 20 + (*rng)() % 180 : 0;
  std::vector<int> chunks;
  const size_t begin = raw_pcm ? file.header.data_offset : 0;
  const size_t end = file.header.data_offset + file.header.data_bytes;
  for (size_t pos = begin; pos < end;) {
    const int n = std::min<int>(chunk_dist(*rng), static_cast<int>(end - pos));
    chunks.push_back(n);
    pos += n;
  }

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(180));
  context.set_wait_for_ready(wait_for_ready);
  auto stream = stub->StreamingRecognize(&context);
  std::atomic<bool> cancelled{false};

  std::thread writer([&] {
    asr::StreamingRecognizeRequest req;
    const Clock::time_point start = Clock::now();
    const double bytes_per_s = file.header.sample_rate * 2.0;
    if (scenario != Scenario::kAudioBeforeConfig) {
      auto* cfg = req.mutable_streaming_config();
      cfg->set_interim_results(interim);
      auto* c = cfg->mutable_config();
      c->set_language_code("en-US");
      if (raw_pcm) {
        c->set_encoding(asr::LINEAR_PCM);
        c->set_sample_rate_hertz(scenario == Scenario::kRawNoRate ? 0 : file.header.sample_rate);
      }
      if (scenario == Scenario::kRawNoRate && !raw_pcm) {
        c->set_encoding(asr::LINEAR_PCM);
        c->set_sample_rate_hertz(0);
      }
      if (scenario == Scenario::kBadEncoding) c->set_encoding(static_cast<asr::AudioEncoding>(2));
      if (scenario == Scenario::kUnknownModel) c->set_model("no-such-model");
      if (!stream->Write(req)) return;
    }
    size_t pos = begin;
    const size_t bad_at = static_cast<size_t>(chunks.size() * bad_after_frac);
    const size_t cancel_at = static_cast<size_t>(chunks.size() * cancel_frac);
    const bool raw_from_start = scenario == Scenario::kRawNoRate && !raw_pcm;
    if (raw_from_start) pos = file.header.data_offset;
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (scenario == Scenario::kCancel && i == cancel_at) {
        cancelled = true;
        context.TryCancel();
        return;
      }
      const bool bad_now = i == bad_at;
      req.Clear();
      if (bad_now && scenario == Scenario::kSecondConfig) {
        req.mutable_streaming_config()->mutable_config()->set_language_code("en-US");
      } else if (bad_now && scenario == Scenario::kOversize) {
        req.set_audio_content(std::string(max_message_bytes + 4096, '\0'));
      } else if (i == 0 && scenario == Scenario::kBadWavHeader) {
        std::string bad = file.bytes.substr(0, 44);
        bad[20] = '\x11';  // format tag 0x11 (IMA ADPCM): unsupported
        bad[16] = '\x02';  // and a fmt chunk of 2 bytes: malformed
        req.set_audio_content(bad);
      } else if (i == 0 && scenario == Scenario::kNineChannelWav) {
        std::string hdr = file.bytes.substr(0, file.header.data_offset);
        hdr[22] = '\x09';  // channels = 9 (up to 8 are averaged into one)
        hdr[32] = '\x12';  // block align
        req.set_audio_content(hdr + file.bytes.substr(file.header.data_offset, chunks[0]));
      } else {
        const size_t n = std::min<size_t>(chunks[i], end - pos);
        req.set_audio_content(file.bytes.data() + pos, n);
        if (speed > 0) {
          const double audio_s = (pos + n - begin) / bytes_per_s;
          std::this_thread::sleep_until(
              start + std::chrono::microseconds(static_cast<int64_t>(audio_s / speed * 1e6)));
        }
      }
      pos = std::min(end, pos + static_cast<size_t>(chunks[i]));
      out.audio_bytes += static_cast<int64_t>(req.audio_content().size());
      if (!stream->Write(req)) return;
      if (force_final && i % 17 == 16) {
        req.Clear();
        req.mutable_force_final();
        if (!stream->Write(req)) return;
      }
    }
    stream->WritesDone();
  });

  asr::StreamingRecognizeResponse response;
  while (stream->Read(&response)) {
    for (const auto& r : response.results()) ++(r.is_final() ? out.finals : out.interims);
    if (reader_delay_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(reader_delay_ms));
  }
  writer.join();
  out.status = stream->Finish();
  return out;
}

// Checks an outcome against the scenario; `shutting_down`: the server may also end the call
// with UNAVAILABLE (the drain), or refuse it at the start.
bool Judge(Scenario s, const Outcome& o, bool shutting_down, std::string* why) {
  const grpc::StatusCode code = o.status.error_code();
  if (code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    *why = "call hit its deadline (hang)";
    return false;
  }
  if (code == grpc::StatusCode::OK && o.finals == 0) {
    *why = "completed OK without a final result";
    return false;
  }
  if (shutting_down && code == grpc::StatusCode::UNAVAILABLE) return true;
  if (shutting_down && code == grpc::StatusCode::OK) return true;  // finished within the drain
  // A call that reached the server as it stopped (after the drain, before the listener
  // closed) is cancelled by gRPC's own shutdown ("whatever is still open is cancelled").
  if (shutting_down && code == grpc::StatusCode::CANCELLED) return true;
  const grpc::StatusCode want = ExpectedCode(s);
  if (code == want) return true;
  // Cancelling after the last write can race with the server's OK.
  if (s == Scenario::kCancel && code == grpc::StatusCode::OK) return true;
  *why = absl::StrCat("expected code ", want);
  return false;
}

Scenario PickScenario(std::mt19937* rng) {
  static const std::vector<Scenario>* only = [] {
    auto* v = new std::vector<Scenario>();
    for (absl::string_view name :
         absl::StrSplit(absl::GetFlag(FLAGS_only), ',', absl::SkipEmpty())) {
      for (int i = 0; i < static_cast<int>(Scenario::kCount); ++i) {
        if (name == ScenarioName(static_cast<Scenario>(i))) v->push_back(static_cast<Scenario>(i));
      }
    }
    return v;
  }();
  if (!only->empty()) return (*only)[(*rng)() % only->size()];
  // Mostly well-behaved traffic, faults interleaved.
  const int r = static_cast<int>((*rng)() % 100);
  if (r < 50) return Scenario::kNormal;
  if (r < 60) return Scenario::kSlowReader;
  if (r < 70) return Scenario::kCancel;
  return static_cast<Scenario>(3 + (r - 70) % (static_cast<int>(Scenario::kCount) - 3));
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, int index) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt("jasper.soak.channel", index);  // a connection of its own
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

int RunVictim(const std::vector<AudioFile>& files) {
  std::vector<std::thread> threads;
  for (int t = 0; t < absl::GetFlag(FLAGS_victim_streams); ++t) {
    threads.emplace_back([&, t] {
      auto channel = MakeChannel(absl::GetFlag(FLAGS_server), 1000 + t);
      auto stub = asr::Asr::NewStub(channel);
      std::mt19937 rng(absl::GetFlag(FLAGS_seed) * 7919 + t);
      for (;;) {
        RunStream(stub.get(), files[rng() % files.size()], Scenario::kNormal, &rng, 2.0,
                  absl::GetFlag(FLAGS_max_message_bytes));
      }
    });
  }
  for (auto& t : threads) t.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // --help lists this file's flags (absl's default matches only files named after the program).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "client/soak.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "A bounded soak and fault test against a running jasper-server (loopback only); "
      "tools/soak.sh runs it.\nUsage: jasper-soak --server=HOST:PORT --server_pid=PID "
      "--audio=a.wav,b.wav [flags]");
  absl::ParseCommandLine(argc, argv);
  std::vector<AudioFile> files;
  const std::vector<std::string> paths =
      absl::StrSplit(absl::GetFlag(FLAGS_audio), ',', absl::SkipEmpty());
  for (const std::string& path : paths) {
    absl::StatusOr<AudioFile> f = jasper::client::LoadAudioFile(path, 0);
    if (!f.ok() || f->header.bits_per_sample != 16 || f->header.channels != 1) {
      std::cerr << "jasper-soak: " << path << ": need a 16-bit mono WAV\n";
      return 2;
    }
    files.push_back(*std::move(f));
  }
  if (files.empty()) {
    std::cerr << "jasper-soak: --audio is required\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_victim)) return RunVictim(files);

  const std::string address = absl::GetFlag(FLAGS_server);
  const int pid = absl::GetFlag(FLAGS_server_pid);
  const int num_streams = absl::GetFlag(FLAGS_streams);
  const double speed = absl::GetFlag(FLAGS_speed);
  const int max_msg = absl::GetFlag(FLAGS_max_message_bytes);
  Stats stats;
  std::map<std::string, std::string> top;
  auto log = [](const std::string& s) { std::cerr << "jasper-soak: " << s << std::endl; };

  // 1. Warm-up.
  auto control = MakeChannel(address, 0);
  const Clock::time_point wait_start = Clock::now();
  while (!HealthServing(control)) {
    if (Seconds(wait_start, Clock::now()) > absl::GetFlag(FLAGS_startup_timeout_s) ||
        (pid > 0 && !Alive(pid))) {
      std::cerr << "jasper-soak: server not answering at " << address << "\n";
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  {
    std::vector<std::thread> warm;
    for (int t = 0; t < std::min(num_streams, 8); ++t) {
      warm.emplace_back([&, t] {
        auto stub = asr::Asr::NewStub(MakeChannel(address, 1 + t));
        std::mt19937 rng(absl::GetFlag(FLAGS_seed) + 100 + t);
        for (int i = 0; i < 2; ++i) {
          const Outcome o = RunStream(stub.get(), files[rng() % files.size()], Scenario::kNormal,
                                      &rng, 0, max_msg, /*wait_for_ready=*/true);
          std::string why;
          stats.Record("warmup", Scenario::kNormal, o, Judge(Scenario::kNormal, o, false, &why),
                       why);
        }
      });
    }
    for (auto& t : warm) t.join();
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int64_t rss_baseline_kb = pid > 0 ? RssKb(pid) : -1;
  log(absl::StrCat("warm-up done; baseline VmRSS ", rss_baseline_kb, " kB"));

  // 2. Load.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> streams_done{0};
  std::atomic<int> in_flight{0}, max_in_flight{0};
  std::atomic<bool> shutting_down{false};
  const Clock::time_point load_start = Clock::now();
  auto worker = [&](int t, const std::string& phase) {
    auto stub = asr::Asr::NewStub(MakeChannel(address, 10 + t));
    std::mt19937 rng(absl::GetFlag(FLAGS_seed) * 1000003u + t + (phase == "load" ? 0 : 500));
    while (!stop.load()) {
      const Scenario s = PickScenario(&rng);
      const int now = ++in_flight;
      int prev = max_in_flight.load();
      while (now > prev && !max_in_flight.compare_exchange_weak(prev, now)) {
      }
      const bool during_shutdown_before = shutting_down.load();
      const Outcome o = RunStream(stub.get(), files[rng() % files.size()], s, &rng, speed, max_msg,
                                  /*wait_for_ready=*/phase == "load");
      --in_flight;
      std::string why;
      const bool sd = during_shutdown_before || shutting_down.load();
      stats.Record(phase, s, o, Judge(s, o, sd, &why), why);
      ++streams_done;
      if (sd && o.status.error_code() == grpc::StatusCode::UNAVAILABLE) return;
    }
  };
  std::vector<std::thread> workers;
  for (int t = 0; t < num_streams; ++t) workers.emplace_back(worker, t, "load");

  // Abrupt disconnects: victim processes SIGKILLed at random times.
  std::thread killer([&] {
    std::mt19937 rng(absl::GetFlag(FLAGS_seed) + 77);
    while (absl::GetFlag(FLAGS_victims) && !stop.load()) {
      const std::string self = "/proc/self/exe";
      std::vector<std::string> args = {
          "jasper-soak", "--victim", absl::StrCat("--server=", address),
          absl::StrCat("--audio=", absl::GetFlag(FLAGS_audio)), absl::StrCat("--seed=", rng())};
      std::vector<char*> argv_c;
      for (auto& a : args) argv_c.push_back(a.data());
      argv_c.push_back(nullptr);
      pid_t child = 0;
      if (posix_spawn(&child, self.c_str(), nullptr, nullptr, argv_c.data(), environ) != 0) {
        stats.Fail("posix_spawn of a victim failed");
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 2500));
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
      stats.Count("victim_processes_killed");
      stats.Count("abrupt_disconnect_streams", absl::GetFlag(FLAGS_victim_streams));
    }
  });

  // Watch: the server answers, and sample its RSS.
  int64_t rss_peak_kb = rss_baseline_kb;
  const double duration_s = absl::GetFlag(FLAGS_duration_s);
  while (Seconds(load_start, Clock::now()) < duration_s) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (pid > 0) {
      if (!Alive(pid)) {
        stats.Fail("server process died during the load");
        break;
      }
      rss_peak_kb = std::max(rss_peak_kb, RssKb(pid));
    }
    if (static_cast<int>(Seconds(load_start, Clock::now())) % 10 == 0 && !HealthServing(control)) {
      stats.Fail("server stopped answering during the load");
    }
  }
  stop = true;
  killer.join();
  for (auto& t : workers) t.join();
  const double load_s = Seconds(load_start, Clock::now());
  log(absl::StrCat("load done: ", streams_done.load(), " streams in ", load_s, " s"));

  // 3. Drain and memory.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const int64_t rss_after_kb = pid > 0 ? RssKb(pid) : -1;
  const int64_t bound_kb = absl::GetFlag(FLAGS_rss_bound_mb) * 1024LL;
  if (pid > 0 && rss_after_kb - rss_baseline_kb > bound_kb) {
    stats.Fail(absl::StrCat("VmRSS grew by ", (rss_after_kb - rss_baseline_kb) / 1024,
                            " MiB after the load (bound ", bound_kb / 1024, " MiB)"));
  }
  if (pid > 0 && !Alive(pid)) stats.Fail("server not running after the load");
  if (!HealthServing(control)) stats.Fail("server not answering after the load");

  // 4. SIGTERM mid-load.
  double shutdown_s = -1;
  int64_t sigterm_streams = 0;
  if (absl::GetFlag(FLAGS_sigterm) && pid > 0) {
    stop = false;
    streams_done = 0;
    workers.clear();
    for (int t = 0; t < num_streams; ++t) workers.emplace_back(worker, t, "sigterm");
    std::this_thread::sleep_for(std::chrono::seconds(3));
    shutting_down = true;
    const Clock::time_point term_at = Clock::now();
    kill(pid, SIGTERM);
    const double limit_s = absl::GetFlag(FLAGS_grace_ms) / 1000.0 + 5.0;
    while (Alive(pid) && Seconds(term_at, Clock::now()) < limit_s + 30) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    shutdown_s = Seconds(term_at, Clock::now());
    if (Alive(pid))
      stats.Fail("server still running 30 s past its grace period");
    else if (shutdown_s > limit_s) {
      stats.Fail(
          absl::StrFormat("shutdown took %.1f s (grace %.1f s + 5 s)", shutdown_s, limit_s - 5));
    }
    stop = true;
    for (auto& t : workers) t.join();
    sigterm_streams = streams_done.load();
  }

  top["load_seconds"] = absl::StrFormat("%.1f", load_s);
  top["concurrent_streams"] = absl::StrCat(num_streams);
  top["max_streams_in_flight"] = absl::StrCat(max_in_flight.load());
  top["rss_baseline_mb"] = absl::StrFormat("%.1f", rss_baseline_kb / 1024.0);
  top["rss_peak_mb"] = absl::StrFormat("%.1f", rss_peak_kb / 1024.0);
  top["rss_after_drain_mb"] = absl::StrFormat("%.1f", rss_after_kb / 1024.0);
  top["rss_bound_mb"] = absl::StrCat(absl::GetFlag(FLAGS_rss_bound_mb));
  top["shutdown_seconds"] = absl::StrFormat("%.2f", shutdown_s);
  top["sigterm_phase_streams"] = absl::StrCat(sigterm_streams);
  top["speed"] = absl::StrFormat("%.1f", speed);
  std::cout << stats.Json(top) << std::endl;
  const int failures = stats.failures();
  log(failures == 0 ? "PASS" : absl::StrCat("FAIL: ", failures, " failures"));
  return failures == 0 ? 0 : 1;
}
