// The reference sub-block: direct loops, FP32 accumulation (no double), no tiling, no BLAS.
// Written to be obviously correct, not fast; every fast kernel is tested against it.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/sub_block.h"

namespace jasper::kernels {

int ConvOutputLength(const SubBlockDesc& desc, int length) {
  // torch.nn.Conv1d: floor((L + 2p - d(K-1) - 1) / s) + 1, clamped at 0. In 64 bits so that
  // large paddings or dilations cannot overflow.
  if (desc.stride < 1) return 0;
  const std::int64_t numerator = static_cast<std::int64_t>(length) + 2LL * desc.padding -
                                 static_cast<std::int64_t>(desc.dilation) * (desc.kernel_size - 1) -
                                 1;
  // A negative numerator gives floor(num / s) <= -1, i.e. no output frame.
  if (numerator < 0) return 0;
  return static_cast<int>(numerator / desc.stride + 1);
}

bool IsValid(const SubBlockDesc& desc) {
  if (desc.in_channels <= 0 || desc.out_channels <= 0 || desc.kernel_size <= 0 ||
      desc.stride <= 0 || desc.dilation <= 0 || desc.padding < 0) {
    return false;
  }
  if (desc.activation != Activation::kIdentity && desc.activation != Activation::kRelu) {
    return false;
  }
  // The receptive field and the padded extent must fit in an int (all index math is int-based).
  const std::int64_t span = static_cast<std::int64_t>(desc.dilation) * (desc.kernel_size - 1);
  return span + 2LL * desc.padding < (1LL << 30);
}

namespace {

// Lengths are clamped to the buffer so that a caller's length larger than the padded extent
// cannot read or write out of bounds. A null lengths array means "every frame is valid".
int ClampedLength(const int* lengths, int b, int extent) {
  if (lengths == nullptr) return extent;
  return std::clamp(lengths[b], 0, extent);
}

}  // namespace

void SubBlockReference(const SubBlockDesc& desc, const SubBlockWeights& weights, const float* x,
                       const BatchGeometry& geometry, const ResidualInput* residuals,
                       int num_residuals, float* y) {
  if (!IsValid(desc)) return;
  const int c_in = desc.in_channels;
  const int c_out = desc.out_channels;
  const int k_size = desc.kernel_size;
  const int in_time = geometry.in_time;
  const int out_time = geometry.out_time;

  std::vector<float> depthwise_out(desc.separable ? c_in : 0);
  std::vector<float> acc(c_out);

  for (int b = 0; b < geometry.batch; ++b) {
    const int in_len = ClampedLength(geometry.in_lengths, b, in_time);
    const int out_len = ClampedLength(geometry.out_lengths, b, out_time);
    const float* xb = x + static_cast<std::size_t>(b) * in_time * c_in;
    float* yb = y + static_cast<std::size_t>(b) * out_time * c_out;

    for (int t = 0; t < out_time; ++t) {
      float* yt = yb + static_cast<std::size_t>(t) * c_out;
      if (t >= out_len) {
        std::fill(yt, yt + c_out, 0.0f);
        continue;
      }
      // Input frame read by tap k; masked (and out-of-range) frames read as zero, so they are
      // skipped rather than multiplied, whatever garbage the buffer holds there.
      auto input_frame = [&](int k) -> const float* {
        const int ti = t * desc.stride - desc.padding + k * desc.dilation;
        if (ti < 0 || ti >= in_len) return nullptr;
        return xb + static_cast<std::size_t>(ti) * c_in;
      };

      std::fill(acc.begin(), acc.end(), 0.0f);
      if (desc.separable) {
        // Depthwise: one K-tap filter per channel.
        std::fill(depthwise_out.begin(), depthwise_out.end(), 0.0f);
        for (int k = 0; k < k_size; ++k) {
          const float* xi = input_frame(k);
          if (xi == nullptr) continue;
          const float* wk = weights.depthwise + static_cast<std::size_t>(k) * c_in;
          for (int c = 0; c < c_in; ++c) depthwise_out[c] += wk[c] * xi[c];
        }
        // Pointwise: [C_in] x [C_in, C_out].
        for (int c = 0; c < c_in; ++c) {
          const float* wc = weights.weight + static_cast<std::size_t>(c) * c_out;
          for (int o = 0; o < c_out; ++o) acc[o] += depthwise_out[c] * wc[o];
        }
      } else {
        // Dense: weight [K, C_in, C_out].
        for (int k = 0; k < k_size; ++k) {
          const float* xi = input_frame(k);
          if (xi == nullptr) continue;
          for (int c = 0; c < c_in; ++c) {
            const float* wkc = weights.weight + (static_cast<std::size_t>(k) * c_in + c) * c_out;
            for (int o = 0; o < c_out; ++o) acc[o] += xi[c] * wkc[o];
          }
        }
      }

      if (weights.bias != nullptr) {
        for (int o = 0; o < c_out; ++o) acc[o] += weights.bias[o];
      }
      // Residual branches: a 1x1 conv of an earlier activation, read at the output frame.
      for (int p = 0; p < num_residuals; ++p) {
        const ResidualInput& r = residuals[p];
        const float* xr = r.x + (static_cast<std::size_t>(b) * out_time + t) * r.channels;
        for (int c = 0; c < r.channels; ++c) {
          const float* wc = r.weight + static_cast<std::size_t>(c) * c_out;
          for (int o = 0; o < c_out; ++o) acc[o] += xr[c] * wc[o];
        }
      }
      for (int o = 0; o < c_out; ++o) {
        yt[o] = desc.activation == Activation::kRelu ? std::max(acc[o], 0.0f) : acc[o];
      }
    }
  }
}

void DepthwiseReference(const SubBlockDesc& desc, const float* depthwise, const float* x,
                        const BatchGeometry& geometry, float* out) {
  if (!IsValid(desc) || !desc.separable || depthwise == nullptr) return;
  const int c_in = desc.in_channels;
  const int in_time = geometry.in_time;
  const int out_time = geometry.out_time;
  for (int b = 0; b < geometry.batch; ++b) {
    const int in_len = ClampedLength(geometry.in_lengths, b, in_time);
    const int out_len = ClampedLength(geometry.out_lengths, b, out_time);
    const float* xb = x + static_cast<std::size_t>(b) * in_time * c_in;
    for (int t = 0; t < out_time; ++t) {
      float* ot = out + (static_cast<std::size_t>(b) * out_time + t) * c_in;
      std::fill(ot, ot + c_in, 0.0f);
      if (t >= out_len) continue;
      for (int k = 0; k < desc.kernel_size; ++k) {
        const int ti = t * desc.stride - desc.padding + k * desc.dilation;
        if (ti < 0 || ti >= in_len) continue;
        const float* xi = xb + static_cast<std::size_t>(ti) * c_in;
        const float* wk = depthwise + static_cast<std::size_t>(k) * c_in;
        for (int c = 0; c < c_in; ++c) ot[c] += wk[c] * xi[c];
      }
    }
  }
}

}  // namespace jasper::kernels
