// Shared by the codec implementations (codec_*.cc); not part of the engine's interface.
#ifndef JASPER_ENGINE_AUDIO_CODEC_INTERNAL_H_
#define JASPER_ENGINE_AUDIO_CODEC_INTERNAL_H_

#include <memory>

#include "engine/audio/codec.h"

namespace jasper {

// Streams with more channels are INVALID_ARGUMENT (AudioInput downmixes up to 8).
inline constexpr int kMaxCodecChannels = 8;
// Corrupt frames/pages a stream may have (each is skipped) before it is INVALID_ARGUMENT.
inline constexpr int kMaxCorruptFrames = 16;

std::unique_ptr<CodecDecoder> NewFlacDecoder();
std::unique_ptr<CodecDecoder> NewOggDecoder(int preferred_rate_hz);
absl::StatusOr<std::unique_ptr<CodecDecoder>> NewMp3Decoder();

}  // namespace jasper

#endif  // JASPER_ENGINE_AUDIO_CODEC_INTERNAL_H_
