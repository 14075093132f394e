#include "engine/audio/resample.h"

#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"

namespace jasper {

void Resampler::SoxrDeleter::operator()(soxr* s) const { soxr_delete(s); }

absl::StatusOr<Resampler> Resampler::Create(int in_rate, int out_rate) {
  for (int rate : {in_rate, out_rate}) {
    if (rate < kMinRate || rate > kMaxRate) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resampler: sample rate ", rate, " Hz outside [", kMinRate, ", ", kMaxRate, "]"));
    }
  }
  Resampler r(in_rate, out_rate);
  if (in_rate == out_rate) return r;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  const soxr_runtime_spec_t runtime = soxr_runtime_spec(1);
  soxr_error_t error = nullptr;
  soxr_t s = soxr_create(in_rate, out_rate, /*num_channels=*/1, &error, &io, &quality, &runtime);
  if (s == nullptr || error != nullptr) {
    if (s != nullptr) soxr_delete(s);
    return absl::InternalError(
        absl::StrCat("resampler: soxr_create failed: ", soxr_strerror(error)));
  }
  r.soxr_.reset(s);
  return r;
}

Resampler::Resampler(Resampler&&) noexcept = default;
Resampler& Resampler::operator=(Resampler&&) noexcept = default;
Resampler::~Resampler() = default;

double Resampler::delay() const { return soxr_ ? soxr_delay(soxr_.get()) : 0.0; }

absl::Status Resampler::Drive(const float* in, size_t len, std::vector<float>* out) {
  // Room for the output of this call, with slack for what soxr already holds.
  const size_t chunk = std::max<size_t>(
      1024, static_cast<size_t>(std::ceil(static_cast<double>(len) * out_rate_ / in_rate_)) + 256);
  size_t consumed = 0;
  for (;;) {
    const size_t old_size = out->size();
    out->resize(old_size + chunk);
    size_t idone = 0;
    size_t odone = 0;
    const soxr_error_t error = soxr_process(soxr_.get(), in == nullptr ? nullptr : in + consumed,
                                            in == nullptr ? 0 : len - consumed, &idone,
                                            out->data() + old_size, chunk, &odone);
    out->resize(old_size + odone);
    if (error != nullptr) {
      return absl::InternalError(absl::StrCat("resampler: soxr_process: ", error));
    }
    consumed += idone;
    // soxr limits the input it takes per call to what fits the output buffer, so keep going
    // until all input is taken and a call leaves the output buffer not full (flush: until soxr
    // returns nothing).
    if (in == nullptr ? odone == 0 : (consumed == len && odone < chunk)) break;
  }
  return absl::OkStatus();
}

absl::Status Resampler::Process(absl::Span<const float> in, std::vector<float>* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (!std::isfinite(in[i])) {
      return absl::InvalidArgumentError(absl::StrCat("resampler: sample ", i, " is not finite"));
    }
  }
  if (in.empty()) return absl::OkStatus();
  if (!soxr_) {
    out->insert(out->end(), in.begin(), in.end());
    return absl::OkStatus();
  }
  return Drive(in.data(), in.size(), out);
}

absl::Status Resampler::Flush(std::vector<float>* out) {
  if (!soxr_) return absl::OkStatus();
  JASPER_RETURN_IF_ERROR(Drive(nullptr, 0, out));
  if (const soxr_error_t error = soxr_clear(soxr_.get()); error != nullptr) {
    return absl::InternalError(absl::StrCat("resampler: soxr_clear: ", error));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Resample(absl::Span<const float> in, int in_rate, int out_rate) {
  absl::StatusOr<Resampler> r = Resampler::Create(in_rate, out_rate);
  if (!r.ok()) return r.status();
  std::vector<float> out;
  out.reserve(static_cast<size_t>(static_cast<double>(in.size()) * out_rate / in_rate) + 16);
  JASPER_RETURN_IF_ERROR(r->Process(in, &out));
  JASPER_RETURN_IF_ERROR(r->Flush(&out));
  return out;
}

}  // namespace jasper
