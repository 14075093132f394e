#include "kernels/cuda/weight_pack.h"

#include <cstring>

namespace jasper::kernels::cuda {
namespace {

std::uint32_t FloatBits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsFloat(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

std::uint16_t FloatToHalfBits(float value) {
  const std::uint32_t bits = FloatBits(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN (quiet NaN keeps a mantissa bit)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  // 65520 = the midpoint between 65504 (max half) and 65536 rounds up to Inf (ties-to-even).
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  const int exponent = static_cast<int>(abs >> 23) - 127;
  if (exponent >= -14) {
    // Normal half: keep 10 mantissa bits, round to nearest even on the 13 dropped bits.
    const std::uint32_t mantissa = abs & 0x7fffffu;
    std::uint32_t half = (static_cast<std::uint32_t>(exponent + 15) << 10) | (mantissa >> 13);
    const std::uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into exponent
    return static_cast<std::uint16_t>(sign | half);
  }
  if (exponent < -25) return sign;  // below half the smallest subnormal: rounds to zero
  // Subnormal half: value = m * 2^-24 with m = round(full_mantissa * 2^(exponent + 1)).
  const std::uint32_t full = (abs & 0x7fffffu) | 0x800000u;  // 24 bits, value = full * 2^(e-23)
  const int shift = -exponent - 1;                           // 14 .. 24; m = full >> shift
  std::uint32_t m = full >> shift;
  const std::uint32_t rest = full & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (m & 1u))) ++m;  // m == 1024 becomes the min normal
  return static_cast<std::uint16_t>(sign | m);
}

float HalfBitsToFloat(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) return BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return BitsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in FP32.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
  return sign ? -magnitude : magnitude;
}

std::uint16_t FloatToBf16Bits(float value) {
  const std::uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  }
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float Bf16BitsToFloat(std::uint16_t bits) {
  return BitsFloat(static_cast<std::uint32_t>(bits) << 16);
}

void ConvertFromFloat(Precision precision, const float* src, std::size_t count, void* dst) {
  switch (precision) {
    case Precision::kFp32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case Precision::kFp16: {
      auto* out = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < count; ++i) out[i] = FloatToHalfBits(src[i]);
      return;
    }
    case Precision::kBf16: {
      auto* out = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < count; ++i) out[i] = FloatToBf16Bits(src[i]);
      return;
    }
    case Precision::kInt8:  // rejected by PackSubBlock
      return;
  }
}

void ConvertToFloat(Precision precision, const void* src, std::size_t count, float* dst) {
  switch (precision) {
    case Precision::kFp32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case Precision::kFp16: {
      const auto* in = static_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < count; ++i) dst[i] = HalfBitsToFloat(in[i]);
      return;
    }
    case Precision::kBf16: {
      const auto* in = static_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < count; ++i) dst[i] = Bf16BitsToFloat(in[i]);
      return;
    }
    case Precision::kInt8:  // rejected by PackSubBlock
      return;
  }
}

int KSteps(const SubBlockDesc& desc, const int* residual_channels, int num_residuals) {
  int steps = MainSteps(desc.in_channels, desc.kernel_size, desc.separable);
  for (int p = 0; p < num_residuals; ++p) steps += Chunks(residual_channels[p]);
  return steps;
}

bool PackSubBlock(const SubBlockDesc& desc, const SubBlockWeights& weights,
                  const float* const* residual_weights, const int* residual_channels,
                  int num_residuals, Precision precision, PackedSubBlock* packed,
                  std::string* error) {
  auto fail = [error](const char* message) {
    if (error != nullptr) *error = message;
    return false;
  };
  if (packed == nullptr) return fail("PackSubBlock: null output");
  if (!IsValid(desc)) return fail("PackSubBlock: invalid sub-block description");
  if (weights.weight == nullptr) return fail("PackSubBlock: null weight");
  if (precision == Precision::kInt8) return fail("PackSubBlock: the CUDA kernels have no INT8");
  if (desc.separable && weights.depthwise == nullptr) {
    return fail("PackSubBlock: separable sub-block without depthwise weights");
  }
  if (num_residuals < 0 || num_residuals > kMaxResiduals) {
    return fail("PackSubBlock: too many residual branches");
  }
  for (int p = 0; p < num_residuals; ++p) {
    if (residual_weights == nullptr || residual_channels == nullptr ||
        residual_weights[p] == nullptr || residual_channels[p] <= 0) {
      return fail("PackSubBlock: residual branch without weights or channels");
    }
  }

  const int c_in = desc.in_channels;
  const int c_out = desc.out_channels;
  const int taps = desc.kernel_size;
  PackedSubBlock& out = *packed;
  out.desc = desc;
  out.precision = precision;
  out.n_padded = PaddedOutChannels(c_out);
  out.k_steps = KSteps(desc, residual_channels, num_residuals);
  out.residual_channels.assign(residual_channels, residual_channels + num_residuals);

  // FP32 staging of the packed matrix, converted once at the end.
  const std::size_t n_pad = static_cast<std::size_t>(out.n_padded);
  std::vector<float> matrix(static_cast<std::size_t>(out.k_steps) * kChunk * n_pad, 0.0f);
  auto put_row = [&](int packed_row, const float* src) {
    float* dst = matrix.data() + static_cast<std::size_t>(packed_row) * n_pad;
    std::memcpy(dst, src, sizeof(float) * c_out);
  };
  if (desc.separable) {
    for (int c = 0; c < c_in; ++c) {
      put_row(PackedMainRow(c, 0, taps, true),
              weights.weight + static_cast<std::size_t>(c) * c_out);
    }
  } else {
    for (int k = 0; k < taps; ++k) {
      for (int c = 0; c < c_in; ++c) {
        put_row(PackedMainRow(c, k, taps, false),
                weights.weight + (static_cast<std::size_t>(k) * c_in + c) * c_out);
      }
    }
  }
  const int main_steps = MainSteps(c_in, taps, desc.separable);
  int chunks_before = 0;
  for (int p = 0; p < num_residuals; ++p) {
    for (int c = 0; c < residual_channels[p]; ++c) {
      put_row(PackedResidualRow(main_steps, chunks_before, c),
              residual_weights[p] + static_cast<std::size_t>(c) * c_out);
    }
    chunks_before += Chunks(residual_channels[p]);
  }
  out.weight.resize(matrix.size() * static_cast<std::size_t>(PrecisionBytes(precision)));
  ConvertFromFloat(precision, matrix.data(), matrix.size(), out.weight.data());

  out.depthwise.clear();
  if (desc.separable) {
    const int c_pad = Chunks(c_in) * kChunk;
    out.depthwise.assign(static_cast<std::size_t>(taps) * c_pad, 0.0f);
    for (int k = 0; k < taps; ++k) {
      std::memcpy(out.depthwise.data() + static_cast<std::size_t>(k) * c_pad,
                  weights.depthwise + static_cast<std::size_t>(k) * c_in, sizeof(float) * c_in);
    }
  }
  out.bias.assign(n_pad, 0.0f);
  if (weights.bias != nullptr) std::memcpy(out.bias.data(), weights.bias, sizeof(float) * c_out);
  return true;
}

}  // namespace jasper::kernels::cuda
