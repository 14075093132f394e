// WindowResult: what the backend's output of one window (or one offline request) gives the
// stream's decoder, in a header of its own so that the plain values (Windower, StreamDecoder)
// need not include the scheduler (threads, the backend interface).
//
// Units: encoder frames; log-probabilities in natural log, as the backend's log-softmax gives.
// Ownership: a value; owns its vectors. Thread-safety: a plain value.
#ifndef JASPER_ENGINE_STREAMING_WINDOW_RESULT_H_
#define JASPER_ENGINE_STREAMING_WINDOW_RESULT_H_

#include <vector>

namespace jasper {

struct WindowResult {
  std::vector<int> ids;               // [encoder_frames] argmax token ids
  std::vector<float> best_log_probs;  // [encoder_frames] log-probability of the argmax
  int encoder_frames = 0;             // valid encoder frames of this request
  // [encoder_frames, vocab] natural-log probabilities of every label, when the backend keeps
  // them (BackendOptions::keep_log_probs; beam search reads them); empty otherwise.
  std::vector<float> log_probs;
  int vocab = 0;
  double queue_ms = 0;    // Submit() -> batch start
  double compute_ms = 0;  // backend time of the whole batch
  int batch_size = 0;     // requests in the batch this one ran in
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_WINDOW_RESULT_H_
