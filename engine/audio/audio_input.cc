#include "engine/audio/audio_input.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/audio/resample.h"
#include "engine/audio/wav.h"
#include "engine/status_macros.h"

namespace jasper {
namespace {

// Largest WAV header (everything before the data chunk's samples) we buffer while it arrives.
constexpr size_t kMaxWavHeaderBytes = 64 * 1024;

uint32_t Le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void PutLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

absl::Status CheckRate(int rate, const char* what) {
  if (rate < kMinInputSampleRateHz || rate > kMaxInputSampleRateHz) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", rate, " Hz is outside [",
                                                   kMinInputSampleRateHz, ", ",
                                                   kMaxInputSampleRateHz, "]"));
  }
  return absl::OkStatus();
}

// Interleaved [frames, channels] -> [frames], in place: the mean of the channels per frame, or
// channel `keep` alone (keep >= 0).
void DownmixInPlace(int channels, int keep, std::vector<float>* samples) {
  if (channels <= 1) return;
  const size_t frames = samples->size() / static_cast<size_t>(channels);
  float* x = samples->data();
  if (keep >= 0) {
    for (size_t f = 0; f < frames; ++f) x[f] = x[f * channels + keep];
    samples->resize(frames);
    return;
  }
  for (size_t f = 0; f < frames; ++f) {
    float sum = 0.0f;
    for (int c = 0; c < channels; ++c) sum += x[f * channels + c];
    x[f] = sum / static_cast<float>(channels);
  }
  samples->resize(frames);
}

}  // namespace

const char* AudioEncodingName(AudioEncoding encoding) {
  switch (encoding) {
    case AudioEncoding::kLinearPcm16:
      return "LINEAR_PCM";
    case AudioEncoding::kMulaw:
      return "MULAW";
    case AudioEncoding::kAlaw:
      return "ALAW";
    case AudioEncoding::kFlac:
      return "FLAC";
    case AudioEncoding::kOggOpus:
      return "OGGOPUS";
    case AudioEncoding::kMp3:
      return "MP3";
  }
  return "UNKNOWN";
}

absl::Status AudioFormat::Validate() const {
  if (channels < 1 || channels > kMaxInputChannels) {
    return absl::InvalidArgumentError(absl::StrCat("audio_channel_count must be in [1, ",
                                                   kMaxInputChannels, "], got ", channels));
  }
  if (channel < kAllChannels || channel >= kMaxInputChannels) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel must be in [-1, ", kMaxInputChannels, "), got ", channel));
  }
  switch (encoding) {
    case AudioEncoding::kLinearPcm16:
    case AudioEncoding::kMulaw:
    case AudioEncoding::kAlaw:
    case AudioEncoding::kFlac:
    case AudioEncoding::kOggOpus:
    case AudioEncoding::kMp3:
      break;
    default:
      return absl::InvalidArgumentError("encoding: unsupported audio encoding");
  }
  if (sample_rate_hz != 0) return CheckRate(sample_rate_hz, "sample_rate_hertz");
  return absl::OkStatus();
}

AudioInput::AudioInput(const AudioFormat& format, int model_rate, int64_t max_samples_per_call)
    : format_(format), model_rate_(model_rate), max_samples_per_call_(max_samples_per_call) {}

AudioInput::~AudioInput() = default;

absl::StatusOr<std::unique_ptr<AudioInput>> AudioInput::Create(const AudioFormat& format,
                                                               int model_sample_rate_hz,
                                                               int64_t max_samples_per_call) {
  JASPER_RETURN_IF_ERROR(format.Validate());
  JASPER_RETURN_IF_ERROR(CheckRate(model_sample_rate_hz, "model sample rate"));
  if (max_samples_per_call < 0) {
    return absl::InvalidArgumentError("max_samples_per_call must be >= 0");
  }
  return std::unique_ptr<AudioInput>(
      new AudioInput(format, model_sample_rate_hz, max_samples_per_call));
}

absl::Status AudioInput::Fail(absl::Status status) {
  state_ = State::kFailed;
  pending_.clear();
  pending_decode_ = false;
  return status;
}

absl::Status AudioInput::StartData() {
  if (format_.channels < 1 || format_.channels > kMaxInputChannels) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("the WAV header says ", format_.channels,
                                                        " channels; at most ", kMaxInputChannels,
                                                        " are supported")));
  }
  if (absl::Status s = CheckChannel(format_.channels); !s.ok()) return Fail(s);
  if (format_.sample_rate_hz == 0) {
    return Fail(absl::InvalidArgumentError("sample_rate_hertz is required for raw audio"));
  }
  if (absl::Status s = CheckRate(format_.sample_rate_hz, "sample rate"); !s.ok()) {
    return Fail(s);
  }
  if (absl::Status s = StartResampler(); !s.ok()) return Fail(s);
  if (!is_wav_) {
    block_align_ = (format_.encoding == AudioEncoding::kLinearPcm16 ? 2 : 1) * format_.channels;
  }
  state_ = State::kData;
  return absl::OkStatus();
}

absl::Status AudioInput::ParseWavHeader(bool* complete) {
  *complete = false;
  const uint8_t* p = pending_.data();
  const size_t n = pending_.size();
  // Walk the chunks up to the data chunk's header.
  size_t pos = 12;
  bool have_fmt = false;
  int fmt_tag = 0;
  while (pos + 8 <= n) {
    const uint32_t size = Le32(p + pos + 4);
    if (std::memcmp(p + pos, "data", 4) == 0) {
      if (!have_fmt) {
        return Fail(absl::InvalidArgumentError("WAV: data chunk before the fmt chunk"));
      }
      // Header complete: pending_[0, pos + 8) is the header, the rest is sample data.
      const size_t header_end = pos + 8;
      wav_header_.assign(p, p + header_end);
      PutLe32(wav_header_.data() + pos + 4, 0xFFFFFFFFu);  // decode whatever we pass
      PutLe32(wav_header_.data() + 4, 0xFFFFFFFFu);
      // 0 and 0xFFFFFFFF are what streaming writers put in the size field: unknown length.
      wav_data_bytes_left_ = (size == 0 || size == 0xFFFFFFFFu) ? -1 : size;
      // Let the WAV decoder validate the format (tag, bits, block align, rate, channels).
      absl::StatusOr<Audio> probe = DecodeWav(wav_header_);
      if (!probe.ok()) return Fail(probe.status());
      is_wav_ = true;
      format_.sample_rate_hz = probe->sample_rate;
      format_.channels = probe->channels;
      if (fmt_tag == 7) format_.encoding = AudioEncoding::kMulaw;
      if (fmt_tag == 6) format_.encoding = AudioEncoding::kAlaw;
      if (fmt_tag == 1) format_.encoding = AudioEncoding::kLinearPcm16;  // any PCM depth
      *complete = true;
      return absl::OkStatus();
    }
    if (std::memcmp(p + pos, "fmt ", 4) == 0) {
      if (pos + 8 + size > n) return absl::OkStatus();  // fmt body not all here yet
      if (size < 16) {
        return Fail(absl::InvalidArgumentError(
            absl::StrCat("WAV: fmt chunk is ", size, " bytes, need at least 16")));
      }
      have_fmt = true;
      fmt_tag = Le16(p + pos + 8);
      if (fmt_tag == 0xFFFE && size >= 40) fmt_tag = Le16(p + pos + 8 + 24);
      block_align_ = std::max<int>(1, Le16(p + pos + 8 + 12));
    }
    const uint64_t next = pos + 8 + static_cast<uint64_t>(size) + (size & 1);
    if (next > kMaxWavHeaderBytes) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("WAV: no data chunk within the first ", kMaxWavHeaderBytes, " bytes")));
    }
    pos = static_cast<size_t>(next);
  }
  if (n > kMaxWavHeaderBytes) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("WAV: no data chunk within the first ", kMaxWavHeaderBytes, " bytes")));
  }
  return absl::OkStatus();
}

absl::Status AudioInput::DecodeData(absl::Span<const uint8_t> bytes,
                                    std::vector<float>* samples_out) {
  // Honour the declared data size: anything after it (LIST chunks, ...) is not audio.
  if (wav_data_bytes_left_ >= 0) {
    const int64_t take = std::min<int64_t>(wav_data_bytes_left_, bytes.size());
    bytes = bytes.subspan(0, static_cast<size_t>(take));
    wav_data_bytes_left_ -= take;
  }
  if (bytes.empty()) return absl::OkStatus();
  // Prepend the carried partial sample, keep the new partial one.
  const uint8_t* data = bytes.data();
  size_t size = bytes.size();
  std::vector<uint8_t> joined;
  if (!pending_.empty()) {
    joined.reserve(pending_.size() + size);
    joined.insert(joined.end(), pending_.begin(), pending_.end());
    joined.insert(joined.end(), bytes.begin(), bytes.end());
    pending_.clear();
    data = joined.data();
    size = joined.size();
  }
  const size_t whole = size - size % static_cast<size_t>(block_align_);
  pending_.assign(data + whole, data + size);
  if (whole == 0) return absl::OkStatus();

  scratch_.clear();
  if (is_wav_) {
    wav_scratch_.assign(wav_header_.begin(), wav_header_.end());
    wav_scratch_.insert(wav_scratch_.end(), data, data + whole);
    absl::StatusOr<Audio> audio = DecodeWav(wav_scratch_);
    if (!audio.ok()) return Fail(audio.status());
    scratch_ = std::move(audio->samples);
    // Float WAV samples pass through DecodeWav unscaled and may be huge (the resampler then
    // overflows to inf); the contract here is [-1, 1].
    for (float& v : scratch_) v = std::clamp(v, -1.0f, 1.0f);
  } else {
    switch (format_.encoding) {
      case AudioEncoding::kLinearPcm16:
        scratch_.resize(whole / 2);
        for (size_t i = 0; i < scratch_.size(); ++i) {
          scratch_[i] = static_cast<int16_t>(Le16(data + 2 * i)) / 32768.0f;
        }
        break;
      case AudioEncoding::kMulaw:
        scratch_.resize(whole);
        for (size_t i = 0; i < whole; ++i) scratch_[i] = MuLawToFloat(data[i]);
        break;
      case AudioEncoding::kAlaw:
        scratch_.resize(whole);
        for (size_t i = 0; i < whole; ++i) scratch_[i] = ALawToFloat(data[i]);
        break;
      case AudioEncoding::kFlac:
      case AudioEncoding::kOggOpus:
      case AudioEncoding::kMp3:  // decoded by DecodeCompressed, never here
        return Fail(absl::InternalError("compressed audio in the PCM decoder"));
    }
  }
  DownmixInPlace(format_.channels, format_.channel, &scratch_);
  input_samples_ += static_cast<int64_t>(scratch_.size());
  if (resampler_ == nullptr) {
    samples_out->insert(samples_out->end(), scratch_.begin(), scratch_.end());
    return absl::OkStatus();
  }
  if (absl::Status s = resampler_->Process(scratch_, samples_out); !s.ok()) return Fail(s);
  return absl::OkStatus();
}

absl::Status AudioInput::Push(absl::Span<const uint8_t> bytes, std::vector<float>* samples_out) {
  switch (state_) {
    case State::kFailed:
      return absl::InvalidArgumentError("audio input already failed");
    case State::kFlushed:
      return absl::FailedPreconditionError("audio pushed after the end of the stream");
    case State::kData:
      return DecodeData(bytes, samples_out);
    case State::kCompressed:
      if (pending_decode_) {
        return absl::FailedPreconditionError("audio pushed while decoded output is pending");
      }
      if (absl::Status s = codec_->Feed(bytes); !s.ok()) return Fail(s);
      return DecodeCompressed(samples_out);
    case State::kSniffing:
    case State::kWavHeader:
      break;
  }
  pending_.insert(pending_.end(), bytes.begin(), bytes.end());
  // Nothing received yet (empty pushes): nothing to sniff. Also keeps memcmp's pointer valid.
  if (pending_.empty()) return absl::OkStatus();
  if (state_ == State::kSniffing) {
    // Compressed audio: by the encoding, or by its container's magic in a LINEAR_PCM stream.
    const bool may_be_compressed =
        format_.encoding != AudioEncoding::kMulaw && format_.encoding != AudioEncoding::kAlaw;
    const SniffResult sniffed = may_be_compressed ? SniffCodec(pending_) : SniffResult::kNone;
    if (sniffed == SniffResult::kNeedMore) return absl::OkStatus();
    std::optional<Codec> codec;
    switch (format_.encoding) {
      case AudioEncoding::kFlac:
        if (sniffed != SniffResult::kFlac) {
          return Fail(absl::InvalidArgumentError("FLAC audio must start with \"fLaC\""));
        }
        codec = Codec::kFlac;
        break;
      case AudioEncoding::kOggOpus:
        if (sniffed != SniffResult::kOgg) {
          return Fail(absl::InvalidArgumentError("OGGOPUS audio must start with an Ogg page"));
        }
        codec = Codec::kOgg;
        break;
      case AudioEncoding::kMp3:
        codec = Codec::kMp3;
        break;
      case AudioEncoding::kLinearPcm16:
        if (sniffed == SniffResult::kFlac) codec = Codec::kFlac;
        if (sniffed == SniffResult::kOgg) codec = Codec::kOgg;
        if (sniffed == SniffResult::kMp3) codec = Codec::kMp3;
        break;
      default:
        break;
    }
    if (codec.has_value()) {
      std::vector<uint8_t> data = std::move(pending_);
      pending_.clear();
      JASPER_RETURN_IF_ERROR(StartCompressed(*codec, data));
      return DecodeCompressed(samples_out);
    }
    // Decide between WAV and raw as soon as the first 12 bytes (or a mismatch) are there.
    static constexpr char kRiff[] = "RIFF";
    const size_t check = std::min<size_t>(pending_.size(), 4);
    const bool riff_prefix = std::memcmp(pending_.data(), kRiff, check) == 0 ||
                             std::memcmp(pending_.data(), "RIFX", check) == 0 ||
                             std::memcmp(pending_.data(), "RF64", check) == 0;
    if (riff_prefix && pending_.size() < 12) return absl::OkStatus();
    if (riff_prefix && LooksLikeWav(pending_)) {
      if (std::memcmp(pending_.data(), "RIFF", 4) != 0) {
        return Fail(
            absl::InvalidArgumentError("WAV: RIFX (big-endian) and RF64 files are not supported"));
      }
      state_ = State::kWavHeader;
    } else {
      std::vector<uint8_t> data = std::move(pending_);
      pending_.clear();
      JASPER_RETURN_IF_ERROR(StartData());
      return DecodeData(data, samples_out);
    }
  }
  bool complete = false;
  JASPER_RETURN_IF_ERROR(ParseWavHeader(&complete));
  if (!complete) return absl::OkStatus();
  std::vector<uint8_t> data(pending_.begin() + wav_header_.size(), pending_.end());
  pending_.clear();
  JASPER_RETURN_IF_ERROR(StartData());
  return DecodeData(data, samples_out);
}

absl::Status AudioInput::Flush(std::vector<float>* samples_out) {
  switch (state_) {
    case State::kFailed:
      return absl::InvalidArgumentError("audio input already failed");
    case State::kFlushed:
      return absl::OkStatus();
    case State::kWavHeader:
      return Fail(absl::InvalidArgumentError("WAV: the stream ended inside the WAV header"));
    case State::kCompressed:
      if (pending_decode_) {
        return absl::FailedPreconditionError("Flush while decoded output is pending");
      }
      flushed_input_ = true;
      return DecodeCompressed(samples_out);
    case State::kSniffing: {
      if (format_.encoding == AudioEncoding::kFlac || format_.encoding == AudioEncoding::kOggOpus ||
          format_.encoding == AudioEncoding::kMp3) {
        // A compressed stream shorter than its magic.
        if (pending_.empty()) {
          state_ = State::kFlushed;
          return absl::OkStatus();
        }
        return Fail(absl::InvalidArgumentError(absl::StrCat(
            AudioEncodingName(format_.encoding), ": the stream ended inside its header")));
      }
      // Fewer than 12 bytes in all: raw audio.
      std::vector<uint8_t> data = std::move(pending_);
      pending_.clear();
      if (data.empty() && format_.sample_rate_hz == 0) {
        state_ = State::kFlushed;  // no audio at all: nothing to complain about
        return absl::OkStatus();
      }
      JASPER_RETURN_IF_ERROR(StartData());
      JASPER_RETURN_IF_ERROR(DecodeData(data, samples_out));
      break;
    }
    case State::kData:
      break;
  }
  pending_.clear();  // a dangling partial sample is dropped
  if (resampler_ != nullptr) {
    if (absl::Status s = resampler_->Flush(samples_out); !s.ok()) return Fail(s);
  }
  state_ = State::kFlushed;
  return absl::OkStatus();
}

absl::Status AudioInput::StartCompressed(Codec codec, absl::Span<const uint8_t> bytes) {
  absl::StatusOr<std::unique_ptr<CodecDecoder>> decoder = CodecDecoder::Create(codec, model_rate_);
  if (!decoder.ok()) return Fail(decoder.status());
  codec_ = std::move(*decoder);
  switch (codec) {
    case Codec::kFlac:
      format_.encoding = AudioEncoding::kFlac;
      break;
    case Codec::kOgg:
      format_.encoding = AudioEncoding::kOggOpus;
      break;
    case Codec::kMp3:
      format_.encoding = AudioEncoding::kMp3;
      break;
  }
  format_.sample_rate_hz = 0;  // the stream's header says
  state_ = State::kCompressed;
  if (absl::Status s = codec_->Feed(bytes); !s.ok()) return Fail(s);
  return absl::OkStatus();
}

absl::Status AudioInput::StartCompressedFormat(int rate, int channels) {
  const char* name = AudioEncodingName(format_.encoding);
  if (channels < 1 || channels > kMaxInputChannels) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", channels, " channels; at most ",
                                                   kMaxInputChannels, " are supported"));
  }
  JASPER_RETURN_IF_ERROR(CheckRate(rate, absl::StrCat(name, " sample rate").c_str()));
  JASPER_RETURN_IF_ERROR(CheckChannel(channels));
  format_.sample_rate_hz = rate;
  format_.channels = channels;
  return StartResampler();
}

absl::Status AudioInput::CheckChannel(int channels) const {
  if (format_.channel < channels) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("per-channel recognition asked for channel ", format_.channel + 1,
                   " (audio_channel_count), but the audio has ", channels));
}

absl::Status AudioInput::StartResampler() {
  if (format_.sample_rate_hz == model_rate_) return absl::OkStatus();
  absl::StatusOr<Resampler> r = Resampler::Create(format_.sample_rate_hz, model_rate_);
  if (!r.ok()) return r.status();
  resampler_ = std::make_unique<Resampler>(std::move(*r));
  return absl::OkStatus();
}

absl::Status AudioInput::DecodeCompressed(std::vector<float>* samples_out) {
  int64_t produced = 0;
  auto sink = [&](const float* x, int64_t frames, int rate, int channels) -> absl::StatusOr<bool> {
    // The stream's first frame: its header's format (the rate is 0 until then).
    if (format_.sample_rate_hz == 0) JASPER_RETURN_IF_ERROR(StartCompressedFormat(rate, channels));
    scratch_.assign(x, x + frames * channels);
    DownmixInPlace(channels, format_.channel, &scratch_);
    input_samples_ += frames;
    const size_t before = samples_out->size();
    if (resampler_ == nullptr) {
      samples_out->insert(samples_out->end(), scratch_.begin(), scratch_.end());
    } else {
      JASPER_RETURN_IF_ERROR(resampler_->Process(scratch_, samples_out));
    }
    produced += static_cast<int64_t>(samples_out->size() - before);
    return max_samples_per_call_ <= 0 || produced < max_samples_per_call_;
  };
  bool exhausted = true;
  if (absl::Status s = codec_->Decode(flushed_input_, sink, &exhausted); !s.ok()) return Fail(s);
  pending_decode_ = !exhausted;
  if (flushed_input_ && exhausted) {
    if (resampler_ != nullptr) {
      if (absl::Status s = resampler_->Flush(samples_out); !s.ok()) return Fail(s);
    }
    state_ = State::kFlushed;
  }
  return absl::OkStatus();
}

absl::Status AudioInput::Continue(std::vector<float>* samples_out) {
  if (state_ == State::kFailed) return absl::InvalidArgumentError("audio input already failed");
  if (state_ != State::kCompressed || !pending_decode_) return absl::OkStatus();
  return DecodeCompressed(samples_out);
}

}  // namespace jasper
