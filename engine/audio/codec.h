// Compressed audio: push decoders for FLAC (libFLAC), Ogg Opus (libogg + libopus), Ogg Vorbis
// (libogg + libvorbis) and MP3 (libmpg123), used by AudioInput (engine/audio/audio_input.h).
//
// Each decoder takes bytes as they arrive (Feed) and decodes what they complete (Decode), so a
// stream cut into pieces of any size decodes to the same samples as the whole file, and interim
// results work for compressed streams too. Decode hands the samples to a sink one codec frame
// (or packet) at a time and stops as soon as the sink says so: a few bytes of FLAC silence can
// hold minutes of audio, so the caller bounds the output of each call, not the input.
//
// Memory: besides the codec's own state, a decoder holds the input it has not decoded yet:
// at most one frame's bound for FLAC (from STREAMINFO; metadata blocks up to kMaxCodecHeaderBytes),
// one Ogg page (64 KiB), and what libmpg123 buffers (one frame and its resync window), plus
// whatever the caller fed and has not asked to decode yet.
//
// Ownership: a decoder owns its library handles.
// Thread-safety: NOT thread-safe; one decoder per stream, one thread at a time.
#ifndef JASPER_ENGINE_AUDIO_CODEC_H_
#define JASPER_ENGINE_AUDIO_CODEC_H_

#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace jasper {

enum class Codec { kFlac, kOgg, kMp3 };

// "FLAC", "Ogg", "MP3".
const char* CodecName(Codec codec);

// FLAC metadata (before the first frame; album art included) larger than this is
// INVALID_ARGUMENT: the decoder must hold all of it before it can decode anything.
inline constexpr int64_t kMaxCodecHeaderBytes = 4 << 20;

// What the first bytes of a stream say. kNeedMore: too few bytes to tell (a prefix of a magic);
// kNone: no container this module decodes.
enum class SniffResult { kNone, kNeedMore, kFlac, kOgg, kMp3 };
// "fLaC" -> FLAC, "OggS" -> Ogg, "ID3" (an ID3v2 tag, as MP3 files start) -> MP3. A bare MPEG
// frame sync is not sniffed (raw PCM can start with the same bytes): MP3 without a tag needs
// the MP3 encoding set explicitly.
SniffResult SniffCodec(absl::Span<const uint8_t> prefix);

class CodecDecoder {
 public:
  // Receives `frames` interleaved frames of `channels` float samples in [-1, 1] at
  // `sample_rate_hz` (both fixed for the stream: the header's). Returns whether to go on
  // decoding (false: stop after this frame; the rest stays buffered), or an error that ends
  // the decode (Decode returns it).
  using FrameSink = absl::FunctionRef<absl::StatusOr<bool>(const float* interleaved, int64_t frames,
                                                           int sample_rate_hz, int channels)>;

  // `preferred_rate_hz`: a rate the decoder may produce directly when the codec can (Opus
  // decodes at 8, 12, 16, 24 or 48 kHz); others ignore it.
  static absl::StatusOr<std::unique_ptr<CodecDecoder>> Create(Codec codec, int preferred_rate_hz);
  virtual ~CodecDecoder() = default;

  // Takes a copy of `bytes` (the next bytes of the stream).
  virtual absl::Status Feed(absl::Span<const uint8_t> bytes) = 0;

  // Decodes the fed bytes, frame by frame, into `sink` until the sink says stop (*exhausted =
  // false: call again to go on) or the fed bytes complete no further frame (*exhausted = true).
  // `at_end`: no more bytes will be fed, so a trailing partial frame is the end of the stream
  // (dropped, or an error when the header itself is incomplete).
  // Errors: INVALID_ARGUMENT naming the codec (corrupt or unsupported stream: wrong magic,
  // more than 8 channels, a stream that ended inside its header, ...), or the sink's error.
  // After an error the decoder is unusable.
  virtual absl::Status Decode(bool at_end, FrameSink sink, bool* exhausted) = 0;

  // Bytes fed and not yet decoded (an approximation where the library keeps its own buffer).
  virtual int64_t buffered_bytes() const = 0;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_AUDIO_CODEC_H_
