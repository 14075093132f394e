// A small Prometheus metrics registry: counters, gauges and histograms with fixed label names,
// rendered in the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
//   MetricsRegistry registry;
//   CounterFamily* calls = registry.AddCounter("jasper_calls_total", "Calls.", {"method"});
//   Counter* c = calls->WithLabels({"Recognize"});  // look up once, keep the pointer
//   c->Increment();                                   // lock-free
//   std::string text = registry.Render();
//
// Hot-path updates (Increment, Add, Set, Observe) are lock-free atomics. WithLabels() takes the
// family's mutex (look a series up once and keep the pointer where it matters); a family holds
// at most kMaxSeriesPerFamily label combinations, after which further new combinations all
// share one series whose label values are "overflow" (so clients cannot grow the registry
// without bound). Callback gauges are evaluated at Render() time.
//
// Ownership: the registry owns its families and series; the pointers it returns stay valid for
// the registry's lifetime. Callbacks are owned; what they capture must outlive the registry or
// be removed before it is destroyed (the registry never calls them after destruction).
// Thread-safety: thread-safe. Families must be added before concurrent use is relied upon
// (adding is thread-safe, but a name can be added only once).
#ifndef JASPER_SERVER_METRICS_H_
#define JASPER_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace jasper::server {

// A monotonically increasing value (negative increments are ignored).
class Counter {
 public:
  void Increment(double amount = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into fixed buckets (upper bounds, strictly increasing; +Inf implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count of bucket i (i == bounds().size(): the +Inf bucket).
  uint64_t bucket_count(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

// Bucket bounds helpers.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
std::vector<double> LinearBuckets(double start, double width, int count);

inline constexpr int kMaxSeriesPerFamily = 500;

// A named metric with fixed label names and one series per combination of label values.
template <typename T>
class Family {
 public:
  // The series for `values` (one per label name; missing values are ""), created on first use.
  T* WithLabels(const std::vector<std::string>& values) ABSL_LOCKS_EXCLUDED(mu_);
  // The series with no labels (families without label names).
  T* Get() { return WithLabels({}); }

 private:
  friend class MetricsRegistry;
  Family(std::vector<std::string> label_names, std::function<std::unique_ptr<T>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}
  // Calls fn(values, series) for each series, in label order, under the family's mutex.
  template <typename Fn>
  void ForEach(Fn fn) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    for (const auto& [values, series] : series_) fn(values, *series);
  }

  const std::vector<std::string> label_names_;
  const std::function<std::unique_ptr<T>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> series_ ABSL_GUARDED_BY(mu_);
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// One sample of a callback gauge: label values (one per label name) and the value.
struct GaugeSample {
  std::vector<std::string> label_values;
  double value = 0;
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // `name` must match [a-zA-Z_:][a-zA-Z0-9_:]* and be new; label names [a-zA-Z_][a-zA-Z0-9_]*.
  // A bad or duplicate name is a programming error: it is logged and the family is still
  // returned (but not rendered), so callers never get nullptr.
  CounterFamily* AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> label_names = {});
  GaugeFamily* AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names = {});
  HistogramFamily* AddHistogram(const std::string& name, const std::string& help,
                                std::vector<double> bounds,
                                std::vector<std::string> label_names = {});
  // A gauge whose samples `fn` returns at each Render() (called without registry locks; it
  // must be fast and must not call Render()).
  void AddCallbackGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names,
                        std::function<std::vector<GaugeSample>()> fn);

  // Every family in the text exposition format 0.0.4, families sorted by name.
  std::string Render() const ABSL_LOCKS_EXCLUDED(mu_);

  // The Content-Type of Render()'s output.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  struct Entry {
    std::string help;
    std::string type;  // counter, gauge, histogram
    std::vector<std::string> label_names;
    std::unique_ptr<CounterFamily> counter;
    std::unique_ptr<GaugeFamily> gauge;
    std::unique_ptr<HistogramFamily> histogram;
    std::function<std::vector<GaugeSample>()> callback;
  };
  // Adds `entry` under `name`; false (logged) when the name is bad or taken.
  bool Register(const std::string& name, Entry entry, Entry** added) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  // Families refused by Register(), kept alive so that their pointers stay valid.
  std::vector<std::unique_ptr<Entry>> rejected_ ABSL_GUARDED_BY(mu_);
};

// ------------------------------------------------------------------------------------------
// Implementation of the template.

template <typename T>
T* Family<T>::WithLabels(const std::vector<std::string>& values) {
  std::vector<std::string> key = values;
  key.resize(label_names_.size());
  absl::MutexLock lock(&mu_);
  auto it = series_.find(key);
  if (it != series_.end()) return it->second.get();
  if (static_cast<int>(series_.size()) >= kMaxSeriesPerFamily) {
    key.assign(label_names_.size(), "overflow");
    it = series_.find(key);
    if (it != series_.end()) return it->second.get();
  }
  return series_.emplace(std::move(key), make_()).first->second.get();
}

}  // namespace jasper::server

#endif  // JASPER_SERVER_METRICS_H_
