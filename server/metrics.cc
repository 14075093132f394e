#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace jasper::server {
namespace {

// std::atomic<double>::fetch_add is C++20; a CAS loop is lock-free on every platform we build.
void AtomicAdd(std::atomic<double>* target, double amount) {
  double current = target->load(std::memory_order_relaxed);
  while (!target->compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

bool ValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok =
        absl::ascii_isalpha(c) || c == '_' || c == ':' || (i > 0 && absl::ascii_isdigit(c));
    if (!ok) return false;
  }
  return true;
}

bool ValidLabelName(const std::string& name) {
  if (name.empty() || name == "le") return false;  // "le" is the histogram's own label
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = absl::ascii_isalpha(c) || c == '_' || (i > 0 && absl::ascii_isdigit(c));
    if (!ok) return false;
  }
  return true;
}

// HELP text: backslash and newline escaped.
std::string EscapeHelp(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Label values: backslash, double quote and newline escaped.
std::string EscapeLabelValue(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  // The shortest of %.15g / %.17g that reads back exactly.
  std::string s = absl::StrFormat("%.15g", v);
  if (std::strtod(s.c_str(), nullptr) != v) s = absl::StrFormat("%.17g", v);
  return s;
}

// {a="x",b="y"} (plus an optional extra label), or "" with no labels.
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "{" : ",", names[i], "=\"",
                    EscapeLabelValue(i < values.size() ? values[i] : ""), "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&out, out.empty() ? "{" : ",", extra_name, "=\"", EscapeLabelValue(extra_value),
                    "\"");
  }
  if (!out.empty()) out += "}";
  return out;
}

}  // namespace

void Counter::Increment(double amount) {
  if (!(amount > 0)) return;  // also drops NaN
  AtomicAdd(&value_, amount);
}

void Gauge::Add(double amount) { AtomicAdd(&value_, amount); }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                       bounds_.begin());  // first bound >= value ("le")
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, value);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i) out.push_back(start + width * i);
  return out;
}

bool MetricsRegistry::Register(const std::string& name, Entry entry, Entry** added) {
  bool ok = ValidMetricName(name);
  for (const std::string& l : entry.label_names) ok = ok && ValidLabelName(l);
  auto owned = std::make_unique<Entry>(std::move(entry));
  *added = owned.get();
  absl::MutexLock lock(&mu_);
  if (!ok || entries_.count(name) > 0) {
    spdlog::error("metrics: bad or duplicate metric '{}' is not exported", name);
    rejected_.push_back(std::move(owned));
    return false;
  }
  entries_.emplace(name, std::move(owned));
  return true;
}

CounterFamily* MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                           std::vector<std::string> label_names) {
  Entry e;
  e.help = help;
  e.type = "counter";
  e.label_names = label_names;
  e.counter.reset(
      new CounterFamily(std::move(label_names), [] { return std::make_unique<Counter>(); }));
  Entry* added = nullptr;
  Register(name, std::move(e), &added);
  return added->counter.get();
}

GaugeFamily* MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names) {
  Entry e;
  e.help = help;
  e.type = "gauge";
  e.label_names = label_names;
  e.gauge.reset(new GaugeFamily(std::move(label_names), [] { return std::make_unique<Gauge>(); }));
  Entry* added = nullptr;
  Register(name, std::move(e), &added);
  return added->gauge.get();
}

HistogramFamily* MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                               std::vector<double> bounds,
                                               std::vector<std::string> label_names) {
  // Bounds must be finite and strictly increasing; drop what is not.
  std::vector<double> clean;
  for (double b : bounds) {
    if (std::isfinite(b) && (clean.empty() || b > clean.back())) clean.push_back(b);
  }
  Entry e;
  e.help = help;
  e.type = "histogram";
  e.label_names = label_names;
  e.histogram.reset(new HistogramFamily(std::move(label_names),
                                        [clean] { return std::make_unique<Histogram>(clean); }));
  Entry* added = nullptr;
  Register(name, std::move(e), &added);
  return added->histogram.get();
}

void MetricsRegistry::AddCallbackGauge(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names,
                                       std::function<std::vector<GaugeSample>()> fn) {
  Entry e;
  e.help = help;
  e.type = "gauge";
  e.label_names = std::move(label_names);
  e.callback = std::move(fn);
  Entry* added = nullptr;
  Register(name, std::move(e), &added);
}

std::string MetricsRegistry::Render() const {
  // Entries are never removed, so pointers taken under the lock stay valid after it.
  std::vector<std::pair<const std::string*, const Entry*>> entries;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, entry] : entries_) entries.emplace_back(&name, entry.get());
  }
  std::string out;
  for (const auto& [name_ptr, e] : entries) {
    const std::string& name = *name_ptr;
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(e->help), "\n# TYPE ", name, " ",
                    e->type, "\n");
    if (e->counter) {
      e->counter->ForEach([&](const std::vector<std::string>& values, const Counter& c) {
        absl::StrAppend(&out, name, LabelSet(e->label_names, values), " ", FormatValue(c.value()),
                        "\n");
      });
    } else if (e->gauge) {
      e->gauge->ForEach([&](const std::vector<std::string>& values, const Gauge& g) {
        absl::StrAppend(&out, name, LabelSet(e->label_names, values), " ", FormatValue(g.value()),
                        "\n");
      });
    } else if (e->histogram) {
      e->histogram->ForEach([&](const std::vector<std::string>& values, const Histogram& h) {
        // Read the buckets first and derive the count from them, so that the +Inf bucket
        // always equals _count even while observations race with the scrape.
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= h.bounds().size(); ++i) {
          cumulative += h.bucket_count(i);
          const std::string le = i < h.bounds().size() ? FormatValue(h.bounds()[i]) : "+Inf";
          absl::StrAppend(&out, name, "_bucket", LabelSet(e->label_names, values, "le", le), " ",
                          cumulative, "\n");
        }
        const std::string labels = LabelSet(e->label_names, values);
        absl::StrAppend(&out, name, "_sum", labels, " ", FormatValue(h.sum()), "\n");
        absl::StrAppend(&out, name, "_count", labels, " ", cumulative, "\n");
      });
    } else if (e->callback) {
      for (const GaugeSample& s : e->callback()) {
        absl::StrAppend(&out, name, LabelSet(e->label_names, s.label_values), " ",
                        FormatValue(s.value), "\n");
      }
    }
  }
  return out;
}

}  // namespace jasper::server
