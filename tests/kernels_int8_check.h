// kernels_test's INT8 oracle: the activation scales a calibration would give for one case's
// data, and the error bound INT8 is held to.
//
// With per-tensor activation scale s_q and per-column weight scale w_q[o] for each weight group
// q (W_main, each W_res_p; sub_block.h), rounding to the nearest step moves each operand by at
// most half a step, so each product a * w of a group is off by at most
//   s_q/2 |w| + w_q[o]/2 |a| + s_q w_q[o] / 4
// and per output element
//   |int8 - reference| <= sum_q ( s_q/2 sum_k |w_k| + w_q[o]/2 sum_k |a_k| + K_q s_q w_q[o] / 4 )
// when no activation is clipped (the scales here are the data's own max / 127). sum_k |a_k| is
// bounded through the reference run on |x| (and |depthwise|) with every weight of group q set
// to w_q[o] / 2. A separable sub-block's depthwise conv runs in INT8 as well (input scale s_x,
// per-channel weight scale v_c), so each depthwise output a_c is off by at most
//   e_c = sum over valid taps ( s_x/2 |dw_kc| + v_c/2 |x_kc| + s_x v_c / 4 )
// before the GEMM quantizes it (with per-channel input scales, s_x is channel c's own); that
// error, and the clipping it can cause against the scale of
// the exact output (at most e_c more), adds sum_c 2 e_c (|w_co| + w_0[o]/2) per output.
// Header-only: included by kernels_test.cc alone.
#ifndef JASPER_TESTS_KERNELS_INT8_CHECK_H_
#define JASPER_TESTS_KERNELS_INT8_CHECK_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/sub_block.h"

namespace jasper::kernels::int8_check {

struct Int8Oracle {
  std::vector<float> scales;  // PackSubBlock's int8_input_scales
  // PackSubBlock's depthwise_channel_scales (each channel's max / 127, or / 255 on the unsigned
  // grid); empty unless asked for.
  std::vector<float> channel_scales;
  std::vector<float> bound;  // [batch, out_time, C_out]: the bound above (valid frames)
};

inline float ScaleOf(float max_abs) { return max_abs > 0.0f ? max_abs / 127.0f : 1.0f; }

// residuals[p].x is the p-th residual input. x's frames past in_lengths and the residual inputs'
// frames past out_lengths are masked (never read by the kernels, so never measured here).
// `nonnegative_input`: x >= 0, packed for the unsigned grid; the depthwise input's scale (a dense
// sub-block's GEMM input's) is then its max / 255 (the same bound with the finer step); likewise
// each residual input marked ResidualInput::nonnegative. `per_channel` (separable): the depthwise
// input's scales per channel as well, each from that channel's valid frames.
inline Int8Oracle MakeInt8Oracle(const SubBlockDesc& desc, const SubBlockWeights& w, const float* x,
                                 const BatchGeometry& g,
                                 const std::vector<ResidualInput>& residuals,
                                 bool nonnegative_input = false, bool per_channel = false) {
  const int c_in = desc.in_channels;
  const int c_out = desc.out_channels;
  const int taps = desc.separable ? 1 : desc.kernel_size;
  const int k_main = taps * c_in;
  auto in_len = [&](int b) { return std::clamp(g.in_lengths[b], 0, g.in_time); };
  auto out_len = [&](int b) { return std::clamp(g.out_lengths[b], 0, g.out_time); };
  Int8Oracle o;

  // Activation scales: A_main's valid values, then each residual input's valid frames.
  float main_max = 0.0f;
  if (desc.separable) {
    std::vector<float> dw(static_cast<std::size_t>(g.batch) * g.out_time * c_in);
    DepthwiseReference(desc, w.depthwise, x, g, dw.data());
    for (float v : dw) main_max = std::max(main_max, std::fabs(v));  // masked frames are 0
  } else {
    for (int b = 0; b < g.batch; ++b) {
      const float* xb = x + static_cast<std::size_t>(b) * g.in_time * c_in;
      for (std::size_t i = 0; i < static_cast<std::size_t>(in_len(b)) * c_in; ++i) {
        main_max = std::max(main_max, std::fabs(xb[i]));
      }
    }
  }
  // A dense sub-block's non-negative input, and each non-negative residual input, on the
  // unsigned grid: max / 255.
  auto grid_scale = [](float m, bool unsigned_grid) {
    return unsigned_grid ? (m > 0.0f ? m / 255.0f : 1.0f) : ScaleOf(m);
  };
  o.scales.push_back(grid_scale(main_max, !desc.separable && nonnegative_input));
  for (const ResidualInput& r : residuals) {
    float m = 0.0f;
    for (int b = 0; b < g.batch; ++b) {
      const float* rb = r.x + static_cast<std::size_t>(b) * g.out_time * r.channels;
      for (std::size_t i = 0; i < static_cast<std::size_t>(out_len(b)) * r.channels; ++i) {
        m = std::max(m, std::fabs(rb[i]));
      }
    }
    o.scales.push_back(grid_scale(m, r.nonnegative));
  }
  float x_max = 0.0f;  // the depthwise input's valid frames
  for (int b = 0; b < g.batch; ++b) {
    const float* xb = x + static_cast<std::size_t>(b) * g.in_time * c_in;
    for (std::size_t i = 0; i < static_cast<std::size_t>(in_len(b)) * c_in; ++i) {
      x_max = std::max(x_max, std::fabs(xb[i]));
    }
  }
  auto input_scale = [nonnegative_input](float m) {
    return nonnegative_input ? (m > 0.0f ? m / 255.0f : 1.0f) : ScaleOf(m);
  };
  if (desc.separable) o.scales.push_back(input_scale(x_max));
  if (desc.separable && per_channel) {
    std::vector<float> channel_max(c_in, 0.0f);
    for (int b = 0; b < g.batch; ++b) {
      const float* xb = x + static_cast<std::size_t>(b) * g.in_time * c_in;
      for (int t = 0; t < in_len(b); ++t) {
        for (int c = 0; c < c_in; ++c) {
          channel_max[c] = std::max(channel_max[c], std::fabs(xb[t * c_in + c]));
        }
      }
    }
    for (float m : channel_max) o.channel_scales.push_back(input_scale(m));
  }

  // Per column: weight scale, sum |w| and K of each group -> the constant terms; the half
  // steps of the weights -> the matrices of the |a| run.
  std::vector<float> constant(c_out, 0.0f);
  auto group_terms = [&](const float* wq, int rows, float s, std::vector<float>* half_steps) {
    half_steps->assign(static_cast<std::size_t>(rows) * c_out, 0.0f);
    for (int col = 0; col < c_out; ++col) {
      float max_abs = 0.0f;
      double sum_abs = 0.0;
      for (int k = 0; k < rows; ++k) {
        const float v = std::fabs(wq[static_cast<std::size_t>(k) * c_out + col]);
        max_abs = std::max(max_abs, v);
        sum_abs += v;
      }
      const double step = max_abs / 127.0;
      constant[col] += static_cast<float>(s / 2 * sum_abs + rows * s * step / 4);
      for (int k = 0; k < rows; ++k) {
        (*half_steps)[static_cast<std::size_t>(k) * c_out + col] = static_cast<float>(step / 2);
      }
    }
  };
  std::vector<float> main_half;
  group_terms(w.weight, k_main, o.scales[0], &main_half);
  std::vector<std::vector<float>> res_half(residuals.size());
  std::vector<std::vector<float>> res_abs_x(residuals.size());
  std::vector<ResidualInput> abs_residuals;
  for (std::size_t p = 0; p < residuals.size(); ++p) {
    group_terms(residuals[p].weight, residuals[p].channels, o.scales[p + 1], &res_half[p]);
    const std::size_t n = static_cast<std::size_t>(g.batch) * g.out_time * residuals[p].channels;
    res_abs_x[p].assign(residuals[p].x, residuals[p].x + n);
    for (float& v : res_abs_x[p]) v = std::fabs(v);
  }
  for (std::size_t p = 0; p < residuals.size(); ++p) {
    abs_residuals.push_back({res_abs_x[p].data(), res_half[p].data(), residuals[p].channels});
  }
  std::vector<float> abs_x(x, x + static_cast<std::size_t>(g.batch) * g.in_time * c_in);
  for (float& v : abs_x) v = std::fabs(v);
  std::vector<float> abs_dw;
  if (desc.separable) {
    abs_dw.assign(w.depthwise, w.depthwise + static_cast<std::size_t>(desc.kernel_size) * c_in);
    for (float& v : abs_dw) v = std::fabs(v);
  }
  SubBlockDesc abs_desc = desc;
  abs_desc.activation = Activation::kIdentity;
  SubBlockWeights abs_w;
  abs_w.depthwise = desc.separable ? abs_dw.data() : nullptr;
  abs_w.weight = main_half.data();
  o.bound.assign(static_cast<std::size_t>(g.batch) * g.out_time * c_out, 0.0f);
  SubBlockReference(abs_desc, abs_w, abs_x.data(), g, abs_residuals.data(),
                    static_cast<int>(abs_residuals.size()), o.bound.data());
  for (std::size_t i = 0; i < o.bound.size(); ++i) o.bound[i] += constant[i % c_out];
  if (!desc.separable) return o;

  // The INT8 depthwise's error e[b, t, c], through two depthwise reference runs: ones (valid
  // frames count taps) against s_x/2 |dw| + s_x v_c/4, and |x| against v_c/2.
  const int dw_taps = desc.kernel_size;
  std::vector<float> w_const(static_cast<std::size_t>(dw_taps) * c_in);
  std::vector<float> w_half(static_cast<std::size_t>(dw_taps) * c_in);
  for (int c = 0; c < c_in; ++c) {
    float v_max = 0.0f;
    for (int k = 0; k < dw_taps; ++k) v_max = std::max(v_max, std::fabs(w.depthwise[k * c_in + c]));
    const float v = v_max / 127.0f;
    const float s_x = per_channel ? o.channel_scales[c] : o.scales.back();
    for (int k = 0; k < dw_taps; ++k) {
      w_const[k * c_in + c] = s_x / 2 * std::fabs(w.depthwise[k * c_in + c]) + s_x * v / 4;
      w_half[k * c_in + c] = v / 2;
    }
  }
  const std::size_t out_size = static_cast<std::size_t>(g.batch) * g.out_time * c_in;
  const std::vector<float> ones(abs_x.size(), 1.0f);
  std::vector<float> e(out_size), e_x(out_size);
  DepthwiseReference(desc, w_const.data(), ones.data(), g, e.data());
  DepthwiseReference(desc, w_half.data(), abs_x.data(), g, e_x.data());
  for (std::size_t i = 0; i < out_size; ++i) e[i] += e_x[i];
  for (std::size_t row = 0; row < static_cast<std::size_t>(g.batch) * g.out_time; ++row) {
    float* bound = o.bound.data() + row * c_out;
    for (int c = 0; c < c_in; ++c) {
      const float ec = 2 * e[row * c_in + c];
      if (ec == 0.0f) continue;
      const float* wc = w.weight + static_cast<std::size_t>(c) * c_out;
      const float* half = main_half.data() + static_cast<std::size_t>(c) * c_out;  // w_0[o] / 2
      for (int col = 0; col < c_out; ++col) bound[col] += ec * (std::fabs(wc[col]) + half[col]);
    }
  }
  return o;
}

}  // namespace jasper::kernels::int8_check

#endif  // JASPER_TESTS_KERNELS_INT8_CHECK_H_
