#include "client/latency_stats.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace jasper::client {

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(q, 0.0, 100.0) / 100.0 * (values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - lo);
}

void LoadStats::AddLatencyMs(const std::string& kind, double ms) {
  absl::MutexLock lock(&mu_);
  latencies_ms_[kind].push_back(ms);
}

void LoadStats::AddCall(double audio_s, const std::string& code) {
  absl::MutexLock lock(&mu_);
  ++calls_by_code_[code];
  if (code == "OK") audio_s_ += audio_s;
}

int LoadStats::failed_calls() const {
  absl::MutexLock lock(&mu_);
  int failed = 0;
  for (const auto& [code, n] : calls_by_code_) {
    if (code != "OK") failed += n;
  }
  return failed;
}

std::string LoadStats::Report(double wall_s) const {
  absl::MutexLock lock(&mu_);
  std::string out;
  int calls = 0;
  for (const auto& [code, n] : calls_by_code_) calls += n;
  absl::StrAppendFormat(&out, "calls: %d (", calls);
  std::vector<std::string> parts;
  for (const auto& [code, n] : calls_by_code_) parts.push_back(absl::StrCat(code, "=", n));
  absl::StrAppend(&out, absl::StrJoin(parts, " "), ")\n");
  absl::StrAppendFormat(&out, "audio: %.2f s in %.2f s wall; throughput (RTFx) %.2f; RTF %.4f\n",
                        audio_s_, wall_s, wall_s > 0 ? audio_s_ / wall_s : 0.0,
                        audio_s_ > 0 ? wall_s / audio_s_ : 0.0);
  for (const auto& [kind, v] : latencies_ms_) {
    absl::StrAppendFormat(&out, "%-12s latency ms: n=%zu p50=%.1f p90=%.1f p99=%.1f max=%.1f\n",
                          kind, v.size(), Percentile(v, 50), Percentile(v, 90), Percentile(v, 99),
                          Percentile(v, 100));
  }
  return out;
}

std::string LoadStats::ReportJson(double wall_s) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> codes;
  for (const auto& [code, n] : calls_by_code_) codes.push_back(absl::StrCat("\"", code, "\":", n));
  std::vector<std::string> lat;
  for (const auto& [kind, v] : latencies_ms_) {
    lat.push_back(absl::StrFormat(
        "\"%s\":{\"n\":%zu,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f}", kind,
        v.size(), Percentile(v, 50), Percentile(v, 90), Percentile(v, 99), Percentile(v, 100)));
  }
  return absl::StrFormat(
      "{\"calls\":{%s},\"audio_s\":%.3f,\"wall_s\":%.3f,\"rtfx\":%.3f,\"latency\":{%s}}",
      absl::StrJoin(codes, ","), audio_s_, wall_s, wall_s > 0 ? audio_s_ / wall_s : 0.0,
      absl::StrJoin(lat, ","));
}

void WordFirstShown::AddResult(int utterance_index, absl::string_view transcript, TimePoint at) {
  std::vector<std::map<std::string, TimePoint>>& positions = shown_[utterance_index];
  size_t i = 0;
  for (absl::string_view word : absl::StrSplit(transcript, ' ', absl::SkipEmpty())) {
    if (positions.size() <= i) positions.resize(i + 1);
    positions[i].emplace(std::string(word), at);  // keeps the earliest time
    ++i;
  }
}

std::vector<WordFirstShown::TimePoint> WordFirstShown::TakeFinal(
    int utterance_index, const std::vector<std::string>& words) {
  std::vector<TimePoint> first(words.size(), TimePoint::max());
  auto it = shown_.find(utterance_index);
  if (it == shown_.end()) return first;
  for (size_t i = 0; i < words.size() && i < it->second.size(); ++i) {
    auto w = it->second[i].find(words[i]);
    if (w != it->second[i].end()) first[i] = w->second;
  }
  shown_.erase(it);
  return first;
}

}  // namespace jasper::client
