// Latency samples and the load report of jasper-client: p50/p90/p99 per kind of latency,
// throughput and real-time factor.
//
// Thread-safety: LoadStats is internally synchronized (many stream threads add to it).
#ifndef JASPER_CLIENT_LATENCY_STATS_H_
#define JASPER_CLIENT_LATENCY_STATS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace jasper::client {

// The q-th percentile (q in [0, 100]) of `values` by linear interpolation between closest
// ranks; 0 for an empty vector. Sorts a copy.
double Percentile(std::vector<double> values, double q);

class LoadStats {
 public:
  // Latency kinds used by the client: "partial" (interim results), "final" (half-close or
  // force_final to the final result), "endpoint" (finals the server produced on its own, measured
  // like partials), "request" (whole offline Recognize calls), "first_result".
  void AddLatencyMs(const std::string& kind, double ms) ABSL_LOCKS_EXCLUDED(mu_);
  // One finished call: `audio_s` seconds of audio; `code` its gRPC status code name ("OK", ...).
  void AddCall(double audio_s, const std::string& code) ABSL_LOCKS_EXCLUDED(mu_);

  // A multi-line human-readable report (wall_s: wall time of the whole run).
  std::string Report(double wall_s) const ABSL_LOCKS_EXCLUDED(mu_);
  // The same as one JSON object.
  std::string ReportJson(double wall_s) const ABSL_LOCKS_EXCLUDED(mu_);

  int failed_calls() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<double>> latencies_ms_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> calls_by_code_ ABSL_GUARDED_BY(mu_);
  double audio_s_ ABSL_GUARDED_BY(mu_) = 0.0;
};

}  // namespace jasper::client

#endif  // JASPER_CLIENT_LATENCY_STATS_H_
