// Ogg push decoder: libogg frames pages and packets as bytes arrive; the first packet says
// Opus ("OpusHead", decoded by libopus) or Vorbis (libvorbis). See codec.h.
//
// One logical stream: pages of other serial numbers (multiplexed streams) are skipped, a new
// stream after the end of the first (a chained file) is INVALID_ARGUMENT. The start (Opus
// pre-skip) and the end (the last page's granule position) are trimmed as the specs say, and
// the Opus header's output gain is applied.
#include <ogg/ogg.h>
#include <opus/opus_multistream.h>
#include <vorbis/codec.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/audio/codec_internal.h"

namespace jasper {
namespace {

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("Ogg: ", what));
}

class OggDecoder final : public CodecDecoder {
 public:
  explicit OggDecoder(int preferred_rate_hz) {
    ogg_sync_init(&sync_);
    // Opus decodes at any of these rates directly (no resampling afterwards).
    for (int r : {8000, 12000, 16000, 24000, 48000}) {
      if (r == preferred_rate_hz) opus_rate_ = r;
    }
  }
  ~OggDecoder() override {
    if (opus_ != nullptr) opus_multistream_decoder_destroy(opus_);
    if (vorbis_ready_) {
      vorbis_block_clear(&vblock_);
      vorbis_dsp_clear(&vdsp_);
    }
    if (kind_ == Kind::kVorbis) {
      vorbis_comment_clear(&vcomment_);
      vorbis_info_clear(&vinfo_);
    }
    if (stream_init_) ogg_stream_clear(&stream_);
    ogg_sync_clear(&sync_);
  }

  absl::Status Feed(absl::Span<const uint8_t> bytes) override {
    if (!error_.ok()) return error_;
    if (bytes.empty()) return absl::OkStatus();
    char* dst = ogg_sync_buffer(&sync_, static_cast<long>(bytes.size()));  // NOLINT(runtime/int)
    if (dst == nullptr) return Fail(absl::ResourceExhaustedError("Ogg: out of memory"));
    std::memcpy(dst, bytes.data(), bytes.size());
    ogg_sync_wrote(&sync_, static_cast<long>(bytes.size()));  // NOLINT(runtime/int)
    return absl::OkStatus();
  }

  absl::Status Decode(bool at_end, FrameSink sink, bool* exhausted) override {
    *exhausted = true;
    if (!error_.ok()) return error_;
    bool stop = false;
    while (!stop) {
      if (stream_init_) {
        ogg_packet packet;
        const int r = ogg_stream_packetout(&stream_, &packet);
        if (r < 0) {  // a gap: a page was lost
          if (absl::Status s = Corrupt("a missing page"); !s.ok()) return Fail(s);
          continue;
        }
        if (r == 1) {
          absl::StatusOr<bool> more = Packet(packet, sink);
          if (!more.ok()) return Fail(more.status());
          stop = !*more;
          continue;
        }
      }
      ogg_page page;
      const int r = ogg_sync_pageout(&sync_, &page);
      if (r == 0) break;  // no whole page buffered
      if (r < 0) {
        if (absl::Status s = Corrupt("bytes that are not an Ogg page"); !s.ok()) return Fail(s);
        continue;
      }
      if (absl::Status s = Page(&page); !s.ok()) return Fail(s);
    }
    if (stop) {
      *exhausted = false;
      return absl::OkStatus();
    }
    if (at_end && !HeadersDone()) return Fail(Invalid("the stream ended inside its headers"));
    return absl::OkStatus();
  }

  int64_t buffered_bytes() const override {
    int64_t n = sync_.fill - sync_.returned;
    if (stream_init_) n += stream_.body_fill - stream_.body_returned;
    return n;
  }

 private:
  enum class Kind { kUnknown, kOpus, kVorbis };

  absl::Status Fail(absl::Status s) {
    error_ = s;
    return s;
  }
  absl::Status Corrupt(absl::string_view what) {
    if (++corrupt_ > kMaxCorruptFrames) {
      return Invalid(
          absl::StrCat("more than ", kMaxCorruptFrames, " corrupt pages (last: ", what, ")"));
    }
    return absl::OkStatus();
  }
  bool HeadersDone() const {
    return (kind_ == Kind::kOpus && opus_tags_seen_) || (kind_ == Kind::kVorbis && vorbis_ready_);
  }

  absl::Status Page(ogg_page* page) {
    const int serial = ogg_page_serialno(page);
    if (!stream_init_) {
      if (!ogg_page_bos(page)) return Invalid("the first page does not begin a stream");
      ogg_stream_init(&stream_, serial);
      stream_init_ = true;
    } else if (serial != stream_.serialno) {
      if (ended_ && ogg_page_bos(page)) return Invalid("chained streams are not supported");
      return absl::OkStatus();  // another logical stream multiplexed with ours
    } else if (ended_) {
      return Invalid("pages after the end of the stream");
    }
    if (ogg_stream_pagein(&stream_, page) != 0) return Invalid("a page that does not fit");
    return absl::OkStatus();
  }

  // Trims a packet's frames so that the stream ends at the granule position of its last page.
  int64_t TrimToEnd(const ogg_packet& packet, int64_t frames, int64_t granule_rate_num,
                    int64_t granule_rate_den, int64_t granule_offset) {
    if (!packet.e_o_s || packet.granulepos < 0) return frames;
    const int64_t total = std::max<int64_t>(
        0, (packet.granulepos - granule_offset) * granule_rate_num / granule_rate_den);
    return std::clamp<int64_t>(total - emitted_, 0, frames);
  }

  absl::StatusOr<bool> Packet(ogg_packet& packet, FrameSink sink) {
    if (packet.e_o_s) ended_ = true;
    if (kind_ == Kind::kUnknown) return Header(packet);
    if (kind_ == Kind::kOpus) {
      if (!opus_tags_seen_) {
        if (packet.bytes < 8 || std::memcmp(packet.packet, "OpusTags", 8) != 0) {
          return Invalid("Opus: the second packet is not OpusTags");
        }
        opus_tags_seen_ = true;
        return true;
      }
      return OpusPacket(packet, sink);
    }
    if (vorbis_headers_ < 3) return VorbisHeader(packet);
    return VorbisAudio(packet, sink);
  }

  absl::StatusOr<bool> Header(ogg_packet& packet) {
    const uint8_t* p = packet.packet;
    const long n = packet.bytes;  // NOLINT(runtime/int)
    if (n >= 19 && std::memcmp(p, "OpusHead", 8) == 0) {
      kind_ = Kind::kOpus;
      channels_ = p[9];
      const int pre_skip = p[10] | (p[11] << 8);
      const int16_t gain_q8 = static_cast<int16_t>(p[16] | (p[17] << 8));
      const int family = p[18];
      if (channels_ < 1 || channels_ > kMaxCodecChannels) {
        return Invalid(absl::StrCat("Opus: ", channels_, " channels; 1 to ", kMaxCodecChannels,
                                    " are supported"));
      }
      int streams = 1, coupled = channels_ == 2 ? 1 : 0;
      unsigned char mapping[255] = {0, 1};
      if (family == 0) {
        if (channels_ > 2) return Invalid("Opus: mapping family 0 with more than 2 channels");
      } else {
        if (n < 21 + channels_) return Invalid("Opus: the channel mapping table is cut short");
        streams = p[19];
        coupled = p[20];
        std::memcpy(mapping, p + 21, static_cast<size_t>(channels_));
      }
      int err = OPUS_OK;
      opus_ =
          opus_multistream_decoder_create(opus_rate_, channels_, streams, coupled, mapping, &err);
      if (opus_ == nullptr || err != OPUS_OK) {
        return Invalid(absl::StrCat("Opus: bad header (", opus_strerror(err), ")"));
      }
      // Pre-skip and the end granule count 48 kHz samples.
      pre_skip_left_ = static_cast<int64_t>(pre_skip) * opus_rate_ / 48000;
      pre_skip_48k_ = pre_skip;
      gain_ = std::pow(10.0f, static_cast<float>(gain_q8) / (20.0f * 256.0f));
      return true;
    }
    if (vorbis_synthesis_idheader(&packet)) {
      kind_ = Kind::kVorbis;
      vorbis_info_init(&vinfo_);
      vorbis_comment_init(&vcomment_);
      return VorbisHeader(packet);
    }
    return Invalid("the stream is neither Opus nor Vorbis");
  }

  absl::StatusOr<bool> Emit(const ogg_packet& packet, float* pcm, int64_t frames, int rate,
                            int64_t granule_num, int64_t granule_den, int64_t granule_offset,
                            FrameSink sink) {
    frames = TrimToEnd(packet, frames, granule_num, granule_den, granule_offset);
    if (frames <= 0) return true;
    emitted_ += frames;
    return sink(pcm, frames, rate, channels_);
  }

  absl::StatusOr<bool> OpusPacket(ogg_packet& packet, FrameSink sink) {
    pcm_.resize(static_cast<size_t>(opus_rate_ / 1000 * 120) * channels_);  // 120 ms at most
    const int frames =
        opus_multistream_decode_float(opus_, packet.packet, static_cast<opus_int32>(packet.bytes),
                                      pcm_.data(), opus_rate_ / 1000 * 120, 0);
    if (frames < 0) {
      absl::Status s = Corrupt(absl::StrCat("an Opus packet: ", opus_strerror(frames)));
      if (!s.ok()) return s;
      return true;
    }
    float* pcm = pcm_.data();
    int64_t n = frames;
    const int64_t skip = std::min<int64_t>(pre_skip_left_, n);
    pre_skip_left_ -= skip;
    pcm += skip * channels_;
    n -= skip;
    if (gain_ != 1.0f) {
      for (int64_t i = 0; i < n * channels_; ++i) pcm[i] *= gain_;
    }
    for (int64_t i = 0; i < n * channels_; ++i) pcm[i] = std::clamp(pcm[i], -1.0f, 1.0f);
    return Emit(packet, pcm, n, opus_rate_, opus_rate_, 48000, pre_skip_48k_, sink);
  }

  absl::StatusOr<bool> VorbisHeader(ogg_packet& packet) {
    if (vorbis_synthesis_headerin(&vinfo_, &vcomment_, &packet) != 0) {
      return Invalid("Vorbis: a bad header packet");
    }
    if (++vorbis_headers_ < 3) return true;
    channels_ = vinfo_.channels;
    if (channels_ < 1 || channels_ > kMaxCodecChannels) {
      return Invalid(absl::StrCat("Vorbis: ", channels_, " channels; 1 to ", kMaxCodecChannels,
                                  " are supported"));
    }
    if (vinfo_.rate <= 0) return Invalid("Vorbis: a sample rate of 0");
    if (vorbis_synthesis_init(&vdsp_, &vinfo_) != 0) return Invalid("Vorbis: bad setup");
    vorbis_block_init(&vdsp_, &vblock_);
    vorbis_ready_ = true;
    return true;
  }

  absl::StatusOr<bool> VorbisAudio(ogg_packet& packet, FrameSink sink) {
    if (vorbis_synthesis(&vblock_, &packet) != 0) {
      absl::Status s = Corrupt("a Vorbis packet that does not decode");
      if (!s.ok()) return s;
      return true;
    }
    vorbis_synthesis_blockin(&vdsp_, &vblock_);
    float** planes = nullptr;
    bool more = true;
    int n;
    while ((n = vorbis_synthesis_pcmout(&vdsp_, &planes)) > 0) {
      pcm_.resize(static_cast<size_t>(n) * channels_);
      for (int f = 0; f < n; ++f) {
        for (int c = 0; c < channels_; ++c) {
          pcm_[static_cast<size_t>(f) * channels_ + c] = std::clamp(planes[c][f], -1.0f, 1.0f);
        }
      }
      vorbis_synthesis_read(&vdsp_, n);
      // pcmout may return the packet's samples in more than one piece: only the last carries
      // the packet's end-of-stream trim.
      absl::StatusOr<bool> go =
          Emit(packet, pcm_.data(), n, static_cast<int>(vinfo_.rate), 1, 1, 0, sink);
      if (!go.ok()) return go.status();
      more = more && *go;
    }
    return more;
  }

  ogg_sync_state sync_;
  ogg_stream_state stream_;
  bool stream_init_ = false;
  bool ended_ = false;  // the packet with e_o_s was decoded
  Kind kind_ = Kind::kUnknown;
  int channels_ = 0;
  int corrupt_ = 0;
  int64_t emitted_ = 0;  // frames handed to the sink (after the pre-skip)
  std::vector<float> pcm_;
  absl::Status error_;
  // Opus.
  OpusMSDecoder* opus_ = nullptr;
  int opus_rate_ = 48000;
  int64_t pre_skip_left_ = 0;  // at opus_rate_
  int pre_skip_48k_ = 0;
  float gain_ = 1.0f;
  bool opus_tags_seen_ = false;
  // Vorbis.
  vorbis_info vinfo_;
  vorbis_comment vcomment_;
  vorbis_dsp_state vdsp_;
  vorbis_block vblock_;
  int vorbis_headers_ = 0;
  bool vorbis_ready_ = false;
};

}  // namespace

std::unique_ptr<CodecDecoder> NewOggDecoder(int preferred_rate_hz) {
  return std::make_unique<OggDecoder>(preferred_rate_hz);
}

}  // namespace jasper
