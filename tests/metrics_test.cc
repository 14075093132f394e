// Metrics: the registry's text exposition (format 0.0.4), the HTTP exporter's protocol and
// limits, and a real server scraped over loopback while real gRPC streams run through it.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "engine/runtime/backend.h"
#include "engine/streaming/scheduler.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "server/http_exporter.h"
#include "server/jasper_server.h"
#include "server/metrics.h"
#include "server/server_metrics.h"
#include "tests/server_test_util.h"

namespace jasper::server {
namespace {

namespace pb = ::jasper::asr::v1;
using ::jasper::test_util::DeadlineIn;
using ::jasper::test_util::HttpBody;
using ::jasper::test_util::HttpGet;
using ::jasper::test_util::HttpRaw;
using ::jasper::test_util::kSlowdown;
using ::jasper::test_util::MetricValue;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// ---------------------------------------------------------------------------------------------
// Registry.

TEST(MetricsRegistryTest, RendersCountersGaugesAndCumulativeHistograms) {
  MetricsRegistry r;
  CounterFamily* calls = r.AddCounter("t_calls_total", "Calls.\nSecond line \\.", {"method"});
  calls->WithLabels({"A"})->Increment();
  calls->WithLabels({"A"})->Increment(2);
  calls->WithLabels({"B\"x\n"})->Increment(0.5);
  calls->WithLabels({"A"})->Increment(-5);  // ignored: counters only go up
  r.AddGauge("t_gauge", "A gauge.")->Get()->Set(-1.25);
  Histogram* h = r.AddHistogram("t_latency_seconds", "Latency.", {0.1, 1.0})->Get();
  h->Observe(0.05);
  h->Observe(0.1);  // le: inclusive
  h->Observe(0.5);
  h->Observe(7);
  r.AddCallbackGauge("t_cb", "Callback.", {"k"}, [] {
    return std::vector<GaugeSample>{{{"v"}, 3}};
  });
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr("# HELP t_calls_total Calls.\\nSecond line \\\\.\n"
                              "# TYPE t_calls_total counter\n"
                              "t_calls_total{method=\"A\"} 3\n"
                              "t_calls_total{method=\"B\\\"x\\n\"} 0.5\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE t_gauge gauge\nt_gauge -1.25\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE t_latency_seconds histogram\n"
                              "t_latency_seconds_bucket{le=\"0.1\"} 2\n"
                              "t_latency_seconds_bucket{le=\"1\"} 3\n"
                              "t_latency_seconds_bucket{le=\"+Inf\"} 4\n"
                              "t_latency_seconds_sum 7.65\n"
                              "t_latency_seconds_count 4\n"));
  EXPECT_THAT(text, HasSubstr("t_cb{k=\"v\"} 3\n"));
  // Families come out sorted by name, each with HELP then TYPE.
  EXPECT_LT(text.find("t_calls_total"), text.find("t_cb"));
  EXPECT_LT(text.find("t_gauge"), text.find("t_latency_seconds"));
}

TEST(MetricsRegistryTest, BadAndDuplicateNamesAreNotExportedButUsable) {
  MetricsRegistry r;
  r.AddCounter("ok_total", "x")->Get()->Increment();
  Counter* dup = r.AddCounter("ok_total", "again")->Get();
  Counter* bad = r.AddCounter("1bad name", "x")->Get();
  dup->Increment();  // must not crash
  bad->Increment();
  const std::string text = r.Render();
  EXPECT_EQ(MetricValue(text, "ok_total"), 1);
  EXPECT_THAT(text, Not(HasSubstr("bad name")));
}

TEST(MetricsRegistryTest, LabelCombinationsAreBounded) {
  MetricsRegistry r;
  CounterFamily* f = r.AddCounter("many_total", "x", {"id"});
  for (int i = 0; i < kMaxSeriesPerFamily + 100; ++i) {
    f->WithLabels({std::to_string(i)})->Increment();
  }
  const std::string text = r.Render();
  EXPECT_EQ(MetricValue(text, "many_total{id=\"overflow\"}"), 100);
  EXPECT_EQ(MetricValue(text, "many_total{id=\"3\"}"), 1);
}

TEST(MetricsRegistryTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry r;
  Counter* c = r.AddCounter("c_total", "x")->Get();
  Histogram* h = r.AddHistogram("h", "x", {1.0})->Get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Increment();
        h->Observe(0.5);
      }
    });
  }
  std::string during = r.Render();  // concurrent scrape is fine
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(h->count(), 40000u);
  EXPECT_DOUBLE_EQ(h->sum(), 20000);
}

TEST(ServerMetricsTest, MethodLabelsAreBounded) {
  EXPECT_EQ(ServerMetrics::MethodLabels("/jasper.asr.v1.Asr/StreamingRecognize"),
            std::make_pair(std::string("jasper.asr.v1.Asr"), std::string("StreamingRecognize")));
  EXPECT_EQ(ServerMetrics::MethodLabels("/evil.Service/X").first, "other");
  EXPECT_EQ(ServerMetrics::MethodLabels("/jasper.asr.v1.Asr/a b").first, "other");
  EXPECT_EQ(ServerMetrics::MethodLabels("garbage").first, "other");
}

// ---------------------------------------------------------------------------------------------
// The scheduler's observer hook (engine/streaming/scheduler.h) feeding ServerMetrics.

// Echoes one id per two frames; sleeps a little so that requests queue up.
class EchoBackend : public Backend {
 public:
  absl::Status Run(const FeatureBatch& in, BackendOutput* out) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    out->batch = in.batch;
    out->time = (in.time + 1) / 2;
    out->vocab = 1;
    out->lengths.assign(in.batch, 0);
    out->ids.assign(static_cast<size_t>(out->batch) * out->time, 0);
    out->best_log_probs.assign(out->ids.size(), 0.0f);
    for (int b = 0; b < in.batch; ++b) out->lengths[b] = (in.lengths[b] + 1) / 2;
    return absl::OkStatus();
  }
  std::string name() const override { return "echo"; }
};

WindowRequest Window(int frames, std::atomic<int>* done) {
  WindowRequest r;
  r.features.num_features = 4;
  r.features.padded_frames = frames;
  r.features.valid_frames = frames;
  r.features.data.assign(static_cast<size_t>(frames) * 4, 0.0f);
  r.done = [done](absl::StatusOr<WindowResult>) { ++*done; };
  return r;
}

TEST(SchedulerObserverTest, BatchesQueueWaitAndRejectionsReachTheMetrics) {
  std::vector<std::unique_ptr<Backend>> replicas;
  replicas.push_back(std::make_unique<EchoBackend>());
  SchedulerOptions options;
  options.max_batch_size = 4;
  options.max_queue_delay_ms = 20;
  options.max_queued_windows = 8;
  auto scheduler = Scheduler::Create(std::move(replicas), options);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  ServerMetrics metrics(/*feature_frame_s=*/0.01, /*replicas=*/1);
  (*scheduler)->SetObserver(&metrics);
  std::atomic<int> done{0};
  int accepted = 0;
  int refused = 0;
  for (int i = 0; i < 20; ++i) {  // more than the queue holds: some are refused
    if ((*scheduler)->Submit(Window(100, &done)).ok()) {
      ++accepted;
    } else {
      ++refused;
    }
  }
  (*scheduler)->Shutdown();
  (*scheduler)->SetObserver(nullptr);
  EXPECT_EQ(done.load(), accepted);
  EXPECT_GT(refused, 0);
  const std::string text = metrics.Render();
  EXPECT_EQ(MetricValue(text, "jasper_scheduler_windows_total{result=\"ok\"}"), accepted);
  EXPECT_EQ(MetricValue(text, "jasper_scheduler_queue_wait_seconds_count"), accepted);
  EXPECT_EQ(MetricValue(text, "jasper_scheduler_batch_size_sum"), accepted);
  EXPECT_GT(MetricValue(text, "jasper_scheduler_batch_size_count"), 0);
  EXPECT_EQ(MetricValue(text, "jasper_scheduler_batches_total"),
            MetricValue(text, "jasper_scheduler_batch_size_count"));
  EXPECT_EQ(
      MetricValue(text, "jasper_scheduler_windows_rejected_total{code=\"RESOURCE_EXHAUSTED\"}"),
      refused);
  EXPECT_NEAR(MetricValue(text, "jasper_backend_audio_seconds_total"), accepted * 1.0, 1e-9);
  EXPECT_GT(MetricValue(text, "jasper_backend_busy_seconds_total{replica=\"0\"}"), 0);
}

// One scheduler per served model: ObserverFor numbers replicas across models and converts
// frames with each model's hop.
TEST(SchedulerObserverTest, ObserversForSeveralModelsShareTheMetrics) {
  ServerMetrics metrics(/*feature_frame_s=*/0.01, /*replicas=*/3);
  std::unique_ptr<SchedulerObserver> first = metrics.ObserverFor(0, 0.01);
  std::unique_ptr<SchedulerObserver> second = metrics.ObserverFor(2, 0.02);
  BatchReport report;
  report.replica = 0;
  report.batch_size = 1;
  report.compute_ms = 500;
  report.valid_frames = 100;
  report.queue_ms = {1.0};
  first->OnBatch(report);   // replica 0, 1 s of audio
  second->OnBatch(report);  // replica 2, 2 s of audio
  second->OnRejected(absl::ResourceExhaustedError("full"));
  const std::string text = metrics.Render();
  EXPECT_EQ(MetricValue(text, "jasper_backend_busy_seconds_total{replica=\"0\"}"), 0.5);
  EXPECT_EQ(MetricValue(text, "jasper_backend_busy_seconds_total{replica=\"1\"}"), 0.0);
  EXPECT_EQ(MetricValue(text, "jasper_backend_busy_seconds_total{replica=\"2\"}"), 0.5);
  EXPECT_NEAR(MetricValue(text, "jasper_backend_audio_seconds_total"), 3.0, 1e-9);
  EXPECT_EQ(MetricValue(text, "jasper_scheduler_batches_total"), 2);
  EXPECT_EQ(
      MetricValue(text, "jasper_scheduler_windows_rejected_total{code=\"RESOURCE_EXHAUSTED\"}"), 1);
}

// ---------------------------------------------------------------------------------------------
// Device memory of GPU backends (ServerMetrics::AddDeviceMemoryGauges), with fake backends.

// Reports whatever `info` holds (nullopt: a host backend), counting the queries.
class DeviceMemoryBackend : public Backend {
 public:
  explicit DeviceMemoryBackend(std::optional<DeviceMemoryInfo> info) : info_(info) {}
  absl::Status Run(const FeatureBatch&, BackendOutput*) override {
    return absl::UnimplementedError("not for running");
  }
  std::string name() const override { return "fake"; }
  std::optional<DeviceMemoryInfo> DeviceMemory() const override {
    ++queries_;
    return info_;
  }
  std::optional<DeviceMemoryInfo> info_;
  mutable std::atomic<int> queries_{0};
};

DeviceMemoryInfo Info(int device, int64_t used, int64_t total, int64_t backend) {
  DeviceMemoryInfo info;
  info.device = device;
  info.used_bytes = used;
  info.total_bytes = total;
  info.backend_bytes = backend;
  return info;
}

int CountLines(const std::string& text, const std::string& prefix) {
  int n = 0;
  size_t pos = 0;
  while ((pos = text.find("\n" + prefix, pos)) != std::string::npos) {
    ++n;
    ++pos;
  }
  return n;
}

TEST(DeviceMemoryMetricsTest, GaugesReportEveryDeviceOnceAndEveryReplicaAtScrapeTime) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  // Replicas 0 and 1 share device 0; replica 2 is on device 1.
  DeviceMemoryBackend r0(Info(0, 5 * kGiB, 80 * kGiB, 300 << 20));
  DeviceMemoryBackend r1(Info(0, 5 * kGiB, 80 * kGiB, 200 << 20));
  DeviceMemoryBackend r2(Info(1, 2 * kGiB, 40 * kGiB, 100 << 20));
  ServerMetrics metrics(/*feature_frame_s=*/0.01, /*replicas=*/3);
  ASSERT_TRUE(metrics.AddDeviceMemoryGauges({&r0, &r1, &r2}));
  std::string text = metrics.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE jasper_gpu_memory_used_bytes gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE jasper_gpu_memory_total_bytes gauge\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE jasper_backend_device_memory_bytes gauge\n"));
  EXPECT_EQ(MetricValue(text, "jasper_gpu_memory_used_bytes{device=\"0\"}"), 5.0 * kGiB);
  EXPECT_EQ(MetricValue(text, "jasper_gpu_memory_total_bytes{device=\"0\"}"), 80.0 * kGiB);
  EXPECT_EQ(MetricValue(text, "jasper_gpu_memory_used_bytes{device=\"1\"}"), 2.0 * kGiB);
  EXPECT_EQ(MetricValue(text, "jasper_gpu_memory_total_bytes{device=\"1\"}"), 40.0 * kGiB);
  EXPECT_EQ(CountLines(text, "jasper_gpu_memory_used_bytes{"), 2) << text;
  EXPECT_EQ(CountLines(text, "jasper_gpu_memory_total_bytes{"), 2) << text;
  EXPECT_EQ(MetricValue(text, "jasper_backend_device_memory_bytes{replica=\"0\"}"), 300 << 20);
  EXPECT_EQ(MetricValue(text, "jasper_backend_device_memory_bytes{replica=\"1\"}"), 200 << 20);
  EXPECT_EQ(MetricValue(text, "jasper_backend_device_memory_bytes{replica=\"2\"}"), 100 << 20);

  // Read at scrape time: a new reading shows in the next scrape.
  const int queries = r0.queries_.load();
  r0.info_ = Info(0, 7 * kGiB, 80 * kGiB, 400 << 20);
  r1.info_ = Info(0, 7 * kGiB, 80 * kGiB, 200 << 20);
  text = metrics.Render();
  EXPECT_GT(r0.queries_.load(), queries);
  EXPECT_EQ(MetricValue(text, "jasper_gpu_memory_used_bytes{device=\"0\"}"), 7.0 * kGiB);
  EXPECT_EQ(MetricValue(text, "jasper_backend_device_memory_bytes{replica=\"0\"}"), 400 << 20);

  // A failed device query (total -1) drops that device's series, not the backend's bytes.
  r2.info_ = Info(1, -1, -1, 100 << 20);
  text = metrics.Render();
  EXPECT_EQ(MetricValue(text, "jasper_gpu_memory_total_bytes{device=\"1\"}"), -1) << text;
  EXPECT_EQ(MetricValue(text, "jasper_gpu_memory_used_bytes{device=\"1\"}"), -1) << text;
  EXPECT_EQ(MetricValue(text, "jasper_backend_device_memory_bytes{replica=\"2\"}"), 100 << 20);
}

TEST(DeviceMemoryMetricsTest, HostBackendsExportNoDeviceMemoryFamilies) {
  DeviceMemoryBackend cpu0(std::nullopt);
  DeviceMemoryBackend cpu1(std::nullopt);
  EchoBackend echo;  // the Backend default: no device memory
  EXPECT_FALSE(echo.DeviceMemory().has_value());
  ServerMetrics metrics(/*feature_frame_s=*/0.01, /*replicas=*/3);
  EXPECT_FALSE(metrics.AddDeviceMemoryGauges({&cpu0, &cpu1, &echo, nullptr}));
  EXPECT_FALSE(metrics.AddDeviceMemoryGauges({}));
  const std::string text = metrics.Render();
  EXPECT_THAT(text, Not(HasSubstr("jasper_gpu_memory")));
  EXPECT_THAT(text, Not(HasSubstr("jasper_backend_device_memory")));
}

// ---------------------------------------------------------------------------------------------
// HTTP exporter.

class HttpExporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto exporter = HttpExporter::Start("127.0.0.1:0", MetricsRegistry::kContentType, [this] {
      ++renders_;
      return std::string("x_total 1\n");
    });
    ASSERT_TRUE(exporter.ok()) << exporter.status();
    exporter_ = *std::move(exporter);
    ASSERT_GT(exporter_->port(), 0);
  }
  std::atomic<int> renders_{0};
  std::unique_ptr<HttpExporter> exporter_;
};

TEST_F(HttpExporterTest, ServesMetricsAnd404AndErrors) {
  const std::string ok = HttpGet(exporter_->port(), "/metrics");
  EXPECT_THAT(ok, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(ok, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(ok, HasSubstr("Content-Length: 10\r\n"));
  EXPECT_EQ(HttpBody(ok), "x_total 1\n");
  EXPECT_EQ(HttpBody(HttpGet(exporter_->port(), "/metrics?name[]=x")), "x_total 1\n");
  EXPECT_THAT(HttpGet(exporter_->port(), "/"), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(HttpGet(exporter_->port(), "/metricsx"), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(HttpRaw(exporter_->port(), "POST /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 405"));
  const std::string head = HttpRaw(exporter_->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200"));
  EXPECT_EQ(HttpBody(head), "");
  EXPECT_THAT(HttpRaw(exporter_->port(), "nonsense\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(
      HttpRaw(exporter_->port(), "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(9000, 'a')),
      StartsWith("HTTP/1.1 431"));
  // A request line that is not HTTP is refused as soon as it is seen, whatever its length.
  EXPECT_THAT(HttpRaw(exporter_->port(), "GET /metrics " + std::string(9000, 'a')),
              StartsWith("HTTP/1.1 400"));
}

TEST_F(HttpExporterTest, SlowClientsDoNotBlockOthers) {
  // Connections that send nothing occupy slots but not the thread.
  std::vector<std::thread> idle;
  std::atomic<bool> stop{false};
  for (int i = 0; i < 4; ++i) {
    idle.emplace_back([&] { (void)HttpRaw(exporter_->port(), "GET /met"); });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(HttpBody(HttpGet(exporter_->port(), "/metrics")), "x_total 1\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2 * kSlowdown));
  exporter_.reset();  // closes the idle connections; their reads end
  for (auto& t : idle) t.join();
}

TEST(HttpExporterStartTest, BadAddressesAreErrors) {
  auto render = [] { return std::string(); };
  EXPECT_EQ(HttpExporter::Start("nohost", "", render).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpExporter::Start("127.0.0.1:99999", "", render).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto first = HttpExporter::Start("127.0.0.1:0", "", render);
  ASSERT_TRUE(first.ok());
  // The same port twice cannot be bound.
  EXPECT_EQ(
      HttpExporter::Start(absl::StrCat("127.0.0.1:", (*first)->port()), "", render).status().code(),
      absl::StatusCode::kUnavailable);
}

// ---------------------------------------------------------------------------------------------
// A real server under streaming load, scraped over loopback.

TEST(ServerMetricsScrapeTest, ValuesMoveDuringStreamingLoad) {
  const std::string model_dir = test_util::ServerTestModelDir();
  if (model_dir.empty()) GTEST_SKIP() << "no model";
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.metrics_address = "127.0.0.1:0";
  options.model_dir = model_dir;
  options.max_concurrent_streams = 4;
  options.idle_timeout_ms = 20000;
  auto started = JasperServer::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<JasperServer> server = *std::move(started);
  const int mport = server->metrics_port();
  ASSERT_GT(mport, 0);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = pb::Asr::NewStub(channel);

  const std::string before = HttpBody(HttpGet(mport, "/metrics"));
  // Device memory: only on a GPU backend (the CPU reports none, so no such family exists).
  if (absl::StartsWith(server->engine()->device_name(), "cpu")) {
    EXPECT_THAT(before, Not(HasSubstr("jasper_gpu_memory")));
    EXPECT_THAT(before, Not(HasSubstr("jasper_backend_device_memory")));
  } else {
    EXPECT_GT(MetricValue(before, "jasper_gpu_memory_total_bytes{device=\"0\"}"), 0) << before;
    EXPECT_GT(MetricValue(before, "jasper_gpu_memory_used_bytes{device=\"0\"}"), 0) << before;
    EXPECT_GT(MetricValue(before, "jasper_backend_device_memory_bytes{replica=\"0\"}"), 0)
        << before;
  }
  EXPECT_EQ(MetricValue(before, "jasper_active_streams{api=\"jasper\"}"), 0);
  EXPECT_EQ(MetricValue(before, "jasper_final_result_latency_seconds_count{mode=\"streaming\"}"),
            0);

  // Four streams open (the limit), a fifth is refused with RESOURCE_EXHAUSTED.
  using Stream =
      grpc::ClientReaderWriter<pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < 4; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(DeadlineIn(30));
    streams.push_back(stub->StreamingRecognize(contexts.back().get()));
    ASSERT_TRUE(streams.back()->Write(test_util::StreamConfig()));
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10 * kSlowdown);
  while (server->engine()->active_calls() < 4 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server->engine()->active_calls(), 4);
  {
    grpc::ClientContext c;
    c.set_deadline(DeadlineIn(10));
    auto refused = stub->StreamingRecognize(&c);
    pb::StreamingRecognizeResponse r;
    EXPECT_FALSE(refused->Read(&r));
    EXPECT_EQ(refused->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  const std::string during = HttpBody(HttpGet(mport, "/metrics"));
  EXPECT_EQ(MetricValue(during, "jasper_active_streams{api=\"jasper\"}"), 4) << during;
  EXPECT_EQ(MetricValue(during, "jasper_admitted_calls"), 4);
  EXPECT_EQ(MetricValue(during,
                        "jasper_grpc_calls_rejected_total{grpc_service=\"jasper.asr.v1."
                        "Asr\",grpc_method=\"StreamingRecognize\",grpc_code=\"RESOURCE_"
                        "EXHAUSTED\"}"),
            1)
      << during;

  // Audio through all four at once (writers in parallel), scraping while they run.
  std::vector<std::thread> writers;
  std::vector<grpc::Status> statuses(streams.size());
  std::vector<int> finals(streams.size(), 0);
  for (size_t i = 0; i < streams.size(); ++i) {
    writers.emplace_back([&, i] {
      for (const std::string& chunk : test_util::AudioChunks(test_util::ServerTestWav())) {
        if (!streams[i]->Write(test_util::StreamAudio(chunk))) break;
      }
      streams[i]->WritesDone();
      pb::StreamingRecognizeResponse r;
      while (streams[i]->Read(&r)) {
        for (const auto& res : r.results()) finals[i] += res.is_final() ? 1 : 0;
      }
      statuses[i] = streams[i]->Finish();
    });
  }
  int scrapes = 0;
  double max_active = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string text = HttpBody(HttpGet(mport, "/metrics"));
    if (!text.empty()) ++scrapes;
    max_active = std::max(max_active, MetricValue(text, "jasper_active_streams{api=\"jasper\"}"));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(scrapes, 20);
  EXPECT_GE(max_active, 1);
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_TRUE(statuses[i].ok()) << statuses[i].error_message();
    EXPECT_GE(finals[i], 1);
  }

  // After the load: everything moved.
  const std::string after = HttpBody(HttpGet(mport, "/metrics"));
  EXPECT_EQ(MetricValue(after, "jasper_active_streams{api=\"jasper\"}"), 0) << after;
  EXPECT_EQ(MetricValue(after,
                        "jasper_grpc_calls_total{grpc_service=\"jasper.asr.v1.Asr\","
                        "grpc_method=\"StreamingRecognize\",grpc_code=\"OK\"}"),
            4);
  EXPECT_GT(MetricValue(after, "jasper_scheduler_batch_size_count"), 0);
  EXPECT_GT(MetricValue(after, "jasper_scheduler_batch_size_bucket{le=\"+Inf\"}"), 0);
  EXPECT_GT(MetricValue(after, "jasper_scheduler_queue_wait_seconds_count"), 0);
  EXPECT_GE(MetricValue(after, "jasper_final_result_latency_seconds_count{mode=\"streaming\"}"), 4);
  EXPECT_GT(MetricValue(after, "jasper_partial_result_latency_seconds_count"), 0);
  EXPECT_GT(MetricValue(after, "jasper_audio_seconds_total{mode=\"streaming\"}"), 4 * 1.0);
  // The server runs one replica per worker (2 on two cores); any of them may have run the
  // batches, so the per-replica counters are checked through their sum.
  const double busy_all = MetricValue(after, "jasper_backend_busy_seconds_all_total");
  EXPECT_GT(busy_all, 0) << after;
  const int replicas = static_cast<int>(MetricValue(after, "jasper_backend_replicas"));
  ASSERT_GE(replicas, 1) << after;
  double busy_sum = 0;
  for (int r = 0; r < replicas; ++r) {
    busy_sum += MetricValue(
        after, "jasper_backend_busy_seconds_total{replica=\"" + std::to_string(r) + "\"}");
  }
  EXPECT_NEAR(busy_sum, busy_all, 1e-3 + 1e-6 * busy_all) << after;
  EXPECT_GT(MetricValue(after, "jasper_realtime_factor"), 0);
  EXPECT_EQ(MetricValue(after, "jasper_scheduler_queue_depth"), 0);
  EXPECT_EQ(MetricValue(after, "jasper_scheduler_bulk_queue_depth"), 0);
  EXPECT_GT(MetricValue(after, "jasper_scheduler_windows_total{result=\"ok\"}"), 0);

  // Offline calls count under their own method and mode.
  {
    grpc::ClientContext c;
    c.set_deadline(DeadlineIn(30));
    pb::RecognizeRequest request;
    request.mutable_config()->set_language_code("en-US");
    request.set_audio(test_util::ServerTestWav());
    pb::RecognizeResponse response;
    ASSERT_TRUE(stub->Recognize(&c, request, &response).ok());
  }
  const std::string offline = HttpBody(HttpGet(mport, "/metrics"));
  EXPECT_EQ(MetricValue(offline,
                        "jasper_grpc_calls_total{grpc_service=\"jasper.asr.v1.Asr\","
                        "grpc_method=\"Recognize\",grpc_code=\"OK\"}"),
            1);
  EXPECT_GT(MetricValue(offline, "jasper_final_result_latency_seconds_count{mode=\"offline\"}"), 0);
  server->Shutdown();
}

TEST(ServerMetricsScrapeTest, NoListenerWithoutAddressAndBadAddressFailsStart) {
  const std::string model_dir = test_util::ServerTestModelDir();
  if (model_dir.empty()) GTEST_SKIP() << "no model";
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.model_dir = model_dir;
  options.warmup = false;
  auto server = JasperServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->metrics_port(), 0);
  options.metrics_address = "127.0.0.1";
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(JasperServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace jasper::server
