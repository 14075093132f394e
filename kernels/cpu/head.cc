// CTC head: per-frame log-softmax and argmax over the vocabulary.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/sub_block.h"

namespace jasper::kernels {

void LogSoftmaxArgmax(const float* logits, int batch, int time, int vocab, const int* lengths,
                      float* log_probs, int* ids, float* best_log_probs) {
  if (batch <= 0 || time <= 0) return;
  const int v_count = std::max(vocab, 0);
  for (int b = 0; b < batch; ++b) {
    // A null lengths array means every frame is valid.
    const int len = lengths == nullptr ? time : std::clamp(lengths[b], 0, time);
    for (int t = 0; t < time; ++t) {
      const std::size_t frame = static_cast<std::size_t>(b) * time + t;
      const float* in = logits + frame * v_count;
      float* out = log_probs + frame * v_count;
      if (t >= len || v_count == 0) {
        std::fill(out, out + v_count, 0.0f);
        ids[frame] = -1;
        best_log_probs[frame] = 0.0f;
        continue;
      }
      // Max first (and the argmax with it: the first maximum wins, as torch.argmax does), so that
      // exp never overflows; the sum is in double because it is cheap and vocab is small.
      int best = 0;
      float max_logit = in[0];
      for (int v = 1; v < v_count; ++v) {
        if (in[v] > max_logit) {
          max_logit = in[v];
          best = v;
        }
      }
      double sum = 0.0;
      for (int v = 0; v < v_count; ++v) sum += std::exp(static_cast<double>(in[v]) - max_logit);
      const double log_norm = max_logit + std::log(sum);
      // Each out[v] is written after its in[v] is read, so `out` may alias `in`.
      for (int v = 0; v < v_count; ++v) out[v] = static_cast<float>(in[v] - log_norm);
      ids[frame] = best;
      best_log_probs[frame] = out[best];
    }
  }
}

}  // namespace jasper::kernels
