// MP3 push decoder on libmpg123's feed mode (see codec.h): bytes go into mpg123's feeder, one
// MPEG frame is decoded per step (float output, the stream's own rate and channel count). ID3v2
// tags and junk before the first frame are skipped by mpg123 (its resync limit applies);
// gapless trimming (LAME/Xing header) is mpg123's.
#include <mpg123.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/audio/codec_internal.h"

namespace jasper {
namespace {

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("MP3: ", what));
}

class Mp3Decoder final : public CodecDecoder {
 public:
  explicit Mp3Decoder(mpg123_handle* handle) : mh_(handle) {}
  ~Mp3Decoder() override {
    mpg123_close(mh_);
    mpg123_delete(mh_);
  }

  absl::Status Feed(absl::Span<const uint8_t> bytes) override {
    if (!error_.ok()) return error_;
    if (bytes.empty()) return absl::OkStatus();
    if (mpg123_feed(mh_, bytes.data(), bytes.size()) != MPG123_OK) {
      return Fail(Invalid(mpg123_strerror(mh_)));
    }
    fed_any_ = true;
    return absl::OkStatus();
  }

  absl::Status Decode(bool at_end, FrameSink sink, bool* exhausted) override {
    *exhausted = true;
    if (!error_.ok()) return error_;
    while (true) {
      off_t num = 0;
      unsigned char* audio = nullptr;
      size_t bytes = 0;
      const int r = mpg123_decode_frame(mh_, &num, &audio, &bytes);
      if (r == MPG123_NEED_MORE) break;
      if (r == MPG123_NEW_FORMAT) {
        long rate = 0;  // NOLINT(runtime/int)
        int channels = 0, encoding = 0;
        mpg123_getformat(mh_, &rate, &channels, &encoding);
        if (rate_ != 0 && (rate != rate_ || channels != channels_)) {
          return Fail(Invalid("the sample rate or channel count changes mid-stream"));
        }
        if (encoding != MPG123_ENC_FLOAT_32) return Fail(Invalid("unexpected output encoding"));
        rate_ = static_cast<int>(rate);
        channels_ = channels;
        continue;
      }
      if (r != MPG123_OK) {
        if (r == MPG123_ERR && ++corrupt_ <= kMaxCorruptFrames) continue;  // mpg123 resyncs
        return Fail(Invalid(r == MPG123_ERR ? mpg123_strerror(mh_) : mpg123_plain_strerror(r)));
      }
      if (bytes == 0 || rate_ == 0) continue;
      const int64_t frames = static_cast<int64_t>(bytes / sizeof(float)) / channels_;
      float* pcm = reinterpret_cast<float*>(audio);
      for (int64_t i = 0; i < frames * channels_; ++i) pcm[i] = std::clamp(pcm[i], -1.0f, 1.0f);
      absl::StatusOr<bool> more = sink(pcm, frames, rate_, channels_);
      if (!more.ok()) return Fail(more.status());
      if (!*more) {
        *exhausted = false;
        return absl::OkStatus();
      }
    }
    if (at_end && rate_ == 0 && fed_any_) {
      return Fail(Invalid("no MPEG audio frame in the stream"));
    }
    return absl::OkStatus();
  }

  int64_t buffered_bytes() const override {
    long fill = 0;  // NOLINT(runtime/int)
    double unused = 0;
    if (mpg123_getstate(mh_, MPG123_BUFFERFILL, &fill, &unused) != MPG123_OK) return 0;
    return fill;
  }

 private:
  absl::Status Fail(absl::Status s) {
    error_ = s;
    return s;
  }

  mpg123_handle* const mh_;
  int rate_ = 0, channels_ = 0;
  int corrupt_ = 0;
  bool fed_any_ = false;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CodecDecoder>> NewMp3Decoder() {
  static std::once_flag init_once;
  static int init_result = MPG123_OK;
  std::call_once(init_once, [] { init_result = mpg123_init(); });
  if (init_result != MPG123_OK) return absl::InternalError("MP3: mpg123_init failed");
  int err = MPG123_OK;
  mpg123_handle* mh = mpg123_new(nullptr, &err);
  if (mh == nullptr) {
    return absl::InternalError(absl::StrCat("MP3: ", mpg123_plain_strerror(err)));
  }
  auto decoder = std::make_unique<Mp3Decoder>(mh);  // owns mh from here
  mpg123_param(mh, MPG123_ADD_FLAGS, MPG123_QUIET, 0.0);
  mpg123_format_none(mh);
  const long* rates = nullptr;  // NOLINT(runtime/int)
  size_t count = 0;
  mpg123_rates(&rates, &count);
  for (size_t i = 0; i < count; ++i) {
    mpg123_format(mh, rates[i], MPG123_MONO | MPG123_STEREO, MPG123_ENC_FLOAT_32);
  }
  if (mpg123_open_feed(mh) != MPG123_OK) {
    return absl::InternalError(absl::StrCat("MP3: ", mpg123_strerror(mh)));
  }
  return decoder;
}

}  // namespace jasper
