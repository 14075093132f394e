// FLAC push decoder on libFLAC's stream decoder (see codec.h).
//
// libFLAC pulls bytes through a read callback and treats "no bytes" as the end of the stream,
// so the decoder only runs when the bytes it may need are here: the whole metadata (walked
// here first, STREAMINFO parsed for the frame bound), then one frame at a time while at least
// a frame's bound is buffered (or the stream has ended).
#include <FLAC/stream_decoder.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/audio/codec_internal.h"

namespace jasper {
namespace {

class FlacDecoder final : public CodecDecoder {
 public:
  FlacDecoder() = default;
  ~FlacDecoder() override {
    if (decoder_ != nullptr) FLAC__stream_decoder_delete(decoder_);
  }

  absl::Status Feed(absl::Span<const uint8_t> bytes) override {
    if (!error_.ok()) return error_;
    // Drop what libFLAC has read before growing the buffer.
    if (read_pos_ > 0 && read_pos_ >= buf_.size() / 2) {
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(read_pos_));
      read_pos_ = 0;
    }
    buf_.insert(buf_.end(), bytes.begin(), bytes.end());
    return absl::OkStatus();
  }

  absl::Status Decode(bool at_end, FrameSink sink, bool* exhausted) override {
    *exhausted = true;
    if (!error_.ok()) return error_;
    at_end_ = at_end;
    if (decoder_ == nullptr) {
      bool complete = false;
      if (absl::Status s = WalkMetadata(&complete); !s.ok()) return Fail(s);
      if (!complete) {
        if (at_end) return Fail(Invalid("the stream ended inside its metadata"));
        return absl::OkStatus();
      }
      if (absl::Status s = Start(); !s.ok()) return Fail(s);
    }
    sink_ = &sink;
    stop_ = false;
    absl::Status status;
    while (!stop_) {
      if (!at_end && Available() < frame_bound_) break;  // a frame may not be all here yet
      if (at_end && Available() == 0) break;
      if (!FLAC__stream_decoder_process_single(decoder_) || !sink_status_.ok()) {
        status = !sink_status_.ok()
                     ? sink_status_
                     : Invalid(FLAC__stream_decoder_get_resolved_state_string(decoder_));
        break;
      }
      if (!frame_error_.ok()) {
        status = frame_error_;
        break;
      }
      const FLAC__StreamDecoderState state = FLAC__stream_decoder_get_state(decoder_);
      if (state == FLAC__STREAM_DECODER_END_OF_STREAM) {
        if (!at_end) status = Invalid("lost frame sync (corrupt data)");
        break;
      }
    }
    sink_ = nullptr;
    if (!status.ok()) return Fail(status);
    *exhausted = !stop_;
    return absl::OkStatus();
  }

  int64_t buffered_bytes() const override { return Available(); }

 private:
  static absl::Status Invalid(absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("FLAC: ", what));
  }
  absl::Status Fail(absl::Status s) {
    error_ = s;
    return s;
  }

  // Bytes not yet decoded: ours plus those libFLAC has read and not consumed.
  int64_t Available() const {
    int64_t held = static_cast<int64_t>(buf_.size() - read_pos_);
    if (decoder_ != nullptr) {
      FLAC__uint64 pos = 0;
      if (FLAC__stream_decoder_get_decode_position(decoder_, &pos) && pos <= fed_) {
        held += static_cast<int64_t>(fed_ - pos);
      }
    }
    return held;
  }

  // Walks "fLaC" and the metadata block headers in buf_; parses STREAMINFO.
  absl::Status WalkMetadata(bool* complete) {
    *complete = false;
    const size_t n = buf_.size();
    const uint8_t* p = buf_.data();
    if (std::memcmp(p, "fLaC", std::min<size_t>(n, 4)) != 0) {
      return Invalid("the stream does not start with \"fLaC\"");
    }
    size_t pos = 4;
    while (pos + 4 <= n) {
      const bool last = (p[pos] & 0x80) != 0;
      const int type = p[pos] & 0x7F;
      const size_t len = (static_cast<size_t>(p[pos + 1]) << 16) | (p[pos + 2] << 8) | p[pos + 3];
      if (pos + 4 + len > static_cast<size_t>(kMaxCodecHeaderBytes)) {
        return Invalid(absl::StrCat("metadata over ", kMaxCodecHeaderBytes, " bytes"));
      }
      if (pos == 4 && type != 0) return Invalid("the first metadata block is not STREAMINFO");
      if (pos + 4 + len > n) return absl::OkStatus();  // block not all here yet
      if (type == 0) {
        if (len < 34) return Invalid("STREAMINFO is too short");
        const uint8_t* s = p + pos + 4;
        const int max_block = (s[2] << 8) | s[3];
        const int64_t max_frame = (static_cast<int64_t>(s[7]) << 16) | (s[8] << 8) | s[9];
        const int rate = (s[10] << 12) | (s[11] << 4) | (s[12] >> 4);
        const int channels = ((s[12] >> 1) & 0x7) + 1;
        const int bps = (((s[12] & 1) << 4) | (s[13] >> 4)) + 1;
        if (rate == 0) return Invalid("STREAMINFO says a sample rate of 0");
        if (max_block < 16) return Invalid("STREAMINFO says a block size below 16");
        if (bps < 4) return Invalid("STREAMINFO says fewer than 4 bits per sample");
        // A frame's worst case (verbatim subframes, a side channel's extra bit, headers).
        int64_t bound = static_cast<int64_t>(max_block) * channels * (bps + 1) / 8 + 64;
        if (max_frame > 0) bound = std::min(bound, max_frame);
        frame_bound_ = bound;
        if (channels > kMaxCodecChannels) {
          return Invalid(
              absl::StrCat(channels, " channels; at most ", kMaxCodecChannels, " are supported"));
        }
      }
      pos += 4 + len;
      if (last) {
        *complete = true;
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  absl::Status Start() {
    decoder_ = FLAC__stream_decoder_new();
    if (decoder_ == nullptr) return absl::ResourceExhaustedError("FLAC: out of memory");
    const FLAC__StreamDecoderInitStatus init = FLAC__stream_decoder_init_stream(
        decoder_, &ReadCb, nullptr, &TellCb, nullptr, &EofCb, &WriteCb, nullptr, &ErrorCb, this);
    if (init != FLAC__STREAM_DECODER_INIT_STATUS_OK) {
      return absl::InternalError(
          absl::StrCat("FLAC: decoder init failed: ", FLAC__StreamDecoderInitStatusString[init]));
    }
    if (!FLAC__stream_decoder_process_until_end_of_metadata(decoder_) || !frame_error_.ok()) {
      return frame_error_.ok() ? Invalid("bad metadata") : frame_error_;
    }
    return absl::OkStatus();
  }

  static FLAC__StreamDecoderReadStatus ReadCb(const FLAC__StreamDecoder*, FLAC__byte buffer[],
                                              size_t* bytes, void* data) {
    auto* self = static_cast<FlacDecoder*>(data);
    const size_t left = self->buf_.size() - self->read_pos_;
    const size_t n = std::min(*bytes, left);
    *bytes = n;
    if (n == 0) return FLAC__STREAM_DECODER_READ_STATUS_END_OF_STREAM;
    std::memcpy(buffer, self->buf_.data() + self->read_pos_, n);
    self->read_pos_ += n;
    self->fed_ += n;
    return FLAC__STREAM_DECODER_READ_STATUS_CONTINUE;
  }
  static FLAC__StreamDecoderTellStatus TellCb(const FLAC__StreamDecoder*, FLAC__uint64* offset,
                                              void* data) {
    *offset = static_cast<FlacDecoder*>(data)->fed_;
    return FLAC__STREAM_DECODER_TELL_STATUS_OK;
  }
  static FLAC__bool EofCb(const FLAC__StreamDecoder*, void* data) {
    auto* self = static_cast<FlacDecoder*>(data);
    return self->at_end_ && self->read_pos_ == self->buf_.size();
  }
  static FLAC__StreamDecoderWriteStatus WriteCb(const FLAC__StreamDecoder*,
                                                const FLAC__Frame* frame,
                                                const FLAC__int32* const buffer[], void* data) {
    auto* self = static_cast<FlacDecoder*>(data);
    const int channels = static_cast<int>(frame->header.channels);
    const int bps = static_cast<int>(frame->header.bits_per_sample);
    const int64_t frames = frame->header.blocksize;
    const int rate = static_cast<int>(frame->header.sample_rate);
    if (channels < 1 || channels > kMaxCodecChannels || bps < 4 || bps > 32 || rate <= 0) {
      self->frame_error_ = Invalid("a frame header with an unsupported format");
      return FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
    }
    if (self->rate_ == 0) {
      self->rate_ = rate;
      self->channels_ = channels;
    } else if (rate != self->rate_ || channels != self->channels_) {
      self->frame_error_ = Invalid("the sample rate or channel count changes mid-stream");
      return FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
    }
    if (self->sink_ == nullptr) {  // cannot happen: frames are decoded only inside Decode()
      self->frame_error_ = absl::InternalError("FLAC: a frame outside Decode()");
      return FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
    }
    const float scale = 1.0f / static_cast<float>(int64_t{1} << (bps - 1));
    self->pcm_.resize(static_cast<size_t>(frames) * channels);
    for (int64_t f = 0; f < frames; ++f) {
      for (int c = 0; c < channels; ++c) {
        self->pcm_[f * channels + c] = static_cast<float>(buffer[c][f]) * scale;
      }
    }
    absl::StatusOr<bool> more = (*self->sink_)(self->pcm_.data(), frames, rate, channels);
    if (!more.ok()) {
      self->sink_status_ = more.status();
      return FLAC__STREAM_DECODER_WRITE_STATUS_ABORT;
    }
    if (!*more) self->stop_ = true;
    return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
  }
  static void ErrorCb(const FLAC__StreamDecoder*, FLAC__StreamDecoderErrorStatus status,
                      void* data) {
    // Lost sync, a bad header or CRC: libFLAC skips to the next frame; the stream goes on, but
    // a stream that is mostly garbage should not pass silently.
    auto* self = static_cast<FlacDecoder*>(data);
    if (++self->error_count_ > kMaxCorruptFrames) {
      self->frame_error_ = Invalid(absl::StrCat(
          "more than ", kMaxCorruptFrames,
          " corrupt frames (last: ", FLAC__StreamDecoderErrorStatusString[status], ")"));
    }
  }

  FLAC__StreamDecoder* decoder_ = nullptr;
  std::vector<uint8_t> buf_;
  size_t read_pos_ = 0;   // buf_[0, read_pos_) has been given to libFLAC
  FLAC__uint64 fed_ = 0;  // bytes given to libFLAC in all
  int64_t frame_bound_ = 0;
  bool at_end_ = false;
  FrameSink* sink_ = nullptr;  // set during Decode()
  bool stop_ = false;
  absl::Status sink_status_;
  absl::Status frame_error_;
  absl::Status error_;
  int error_count_ = 0;
  int rate_ = 0, channels_ = 0;
  std::vector<float> pcm_;
};

}  // namespace

std::unique_ptr<CodecDecoder> NewFlacDecoder() { return std::make_unique<FlacDecoder>(); }

}  // namespace jasper
