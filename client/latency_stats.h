// Latency samples and the load report of jasper-client: p50/p90/p99 per kind of latency,
// throughput and real-time factor; and WordFirstShown, which turns a stream's results into
// partial latencies as DESIGN.md defines them.
//
// Thread-safety: LoadStats is internally synchronized (many stream threads add to it);
// WordFirstShown is not (one per stream, used by the thread reading its responses).
#ifndef JASPER_CLIENT_LATENCY_STATS_H_
#define JASPER_CLIENT_LATENCY_STATS_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace jasper::client {

// The q-th percentile (q in [0, 100]) of `values` by linear interpolation between closest
// ranks; 0 for an empty vector. Sorts a copy.
double Percentile(std::vector<double> values, double q);

class LoadStats {
 public:
  // Latency kinds used by the client: "partial" (per word: from sending the audio that contains
  // it to the first result that shows it, see WordFirstShown), "final" (half-close or
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

// When each word of a stream was first shown. DESIGN.md: partial latency = time from sending
// the audio that contains a word to the first result that shows it. Interim results carry no
// word times, so the words are matched by position: word i of an utterance is shown by a
// result of that utterance whose i-th word (space-separated) is the final result's i-th word.
// An interim may show a word early (from the server's look-ahead) or a wrong version of it;
// only the final's version counts, and a word no interim showed is first shown by the final.
class WordFirstShown {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // A result (interim or final) of utterance `utterance_index` arrived at `at`.
  void AddResult(int utterance_index, absl::string_view transcript, TimePoint at);

  // For the final result of `utterance_index` (already passed to AddResult), given its words in
  // order: when each was first shown; TimePoint::max() for a word no result showed at its
  // position (word list and transcript disagree). Forgets the utterance.
  std::vector<TimePoint> TakeFinal(int utterance_index, const std::vector<std::string>& words);

 private:
  // Per utterance, per word position: the first time each spelling was shown there.
  std::map<int, std::vector<std::map<std::string, TimePoint>>> shown_;
};

}  // namespace jasper::client

#endif  // JASPER_CLIENT_LATENCY_STATS_H_
