// AudioInput: turns the bytes a client streams into mono float samples at the model's rate.
//
// Decodes LINEAR_PCM (signed 16-bit little-endian), G.711 mu-law and A-law; detects a RIFF/WAV
// header at the very start of a LINEAR_PCM stream and takes the encoding and rate from it;
// decodes compressed audio (FLAC, Ogg Opus, Ogg Vorbis, MP3; engine/audio/codec.h), chosen by
// the encoding or, for a LINEAR_PCM stream, by the container's magic at its start ("fLaC",
// "OggS", "ID3"), with the rate and channels from the stream's own header;
// carries a partial sample frame over to the next Push(); averages interleaved channels into
// one (up to 8: a downmix, before anything else), or keeps one of them; resamples to the model
// rate with a streaming resampler (engine/audio/resample.h, libsoxr), so the output of a stream cut
// into pieces of any size equals that of the whole stream.
//
// Ownership: owns its decoder and resampler state.
// Thread-safety: NOT thread-safe; one AudioInput per stream, used by one thread at a time
// (StreamSession serializes its calls).
#ifndef JASPER_ENGINE_AUDIO_AUDIO_INPUT_H_
#define JASPER_ENGINE_AUDIO_AUDIO_INPUT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/audio/codec.h"

namespace jasper {

class Resampler;  // engine/audio/resample.h

// kOggOpus: an Ogg stream of Opus or Vorbis. kMp3: MPEG audio layer III (with or without an
// ID3v2 tag).
enum class AudioEncoding { kLinearPcm16, kMulaw, kAlaw, kFlac, kOggOpus, kMp3 };

// "LINEAR_PCM", "MULAW", "ALAW", "FLAC", "OGGOPUS", "MP3" (for logs and errors).
const char* AudioEncodingName(AudioEncoding encoding);

struct AudioFormat {
  AudioEncoding encoding = AudioEncoding::kLinearPcm16;
  // 0 = unknown: allowed only for LINEAR_PCM streams that start with a WAV header or a
  // compressed container, and for compressed encodings (their header says the rate; a rate
  // given for them is checked for range and otherwise ignored).
  int sample_rate_hz = 0;
  // Interleaved channels, averaged into one (a downmix) before resampling. [1, 8]
  int channels = 1;
  // kAllChannels (-1): the downmix above. c in [0, 8): only channel c (0-based) is kept, for
  // per-channel recognition; a stream with no channel c (its WAV header or codec says fewer)
  // is INVALID_ARGUMENT.
  int channel = -1;
  static constexpr int kAllChannels = -1;

  // INVALID_ARGUMENT naming the field: channels outside [1, 8], channel outside [-1, 8), rate
  // outside [8000, 48000] (0 allowed, see above), mu-law/A-law without a rate.
  absl::Status Validate() const;
};

// Channels accepted from clients (downmixed to mono).
inline constexpr int kMaxInputChannels = 8;

// Sample rates accepted from clients.
inline constexpr int kMinInputSampleRateHz = 8000;
inline constexpr int kMaxInputSampleRateHz = 48000;

class AudioInput {
 public:
  // `model_sample_rate_hz`: the rate of the samples Push() produces (the model's featurizer
  // rate). `max_samples_per_call` (> 0; 0 = no bound): compressed audio decodes to at most
  // about this many samples (at the model rate, plus one codec frame) per Push/Flush/Continue
  // call; the rest of what was pushed stays inside (has_pending()) until Continue(). PCM is
  // always decoded whole (its output is bounded by the bytes pushed).
  // Errors: INVALID_ARGUMENT from AudioFormat::Validate().
  static absl::StatusOr<std::unique_ptr<AudioInput>> Create(const AudioFormat& format,
                                                            int model_sample_rate_hz,
                                                            int64_t max_samples_per_call = 0);
  ~AudioInput();

  // Decodes `bytes` and appends mono float samples at the model rate (decoded in [-1, 1];
  // resampling clipped audio may ring a little beyond) to
  // *samples_out (which may receive fewer samples than the bytes hold: the resampler keeps a
  // short delay line until Flush()).
  // A LINEAR_PCM stream whose first bytes are "RIFF" is parsed as WAV: the header (which may be
  // split across pushes; up to 64 KiB is buffered while it is incomplete) overrides encoding
  // and rate (PCM 16-bit, mu-law, A-law). Errors (INVALID_ARGUMENT, the stream is then
  // unusable): a WAV header that is malformed or says more than 8 channels, an unsupported WAV
  // encoding or bit depth, a rate outside [8000, 48000], a sample rate of 0 with no WAV header
  // ("sample_rate_hertz is required for raw audio"), Push after Flush; compressed audio that is
  // corrupt or unsupported (the codec's message), a compressed stream of more than 8 channels or
  // a rate outside [8000, 48000]. Push while has_pending() is FAILED_PRECONDITION.
  absl::Status Push(absl::Span<const uint8_t> bytes, std::vector<float>* samples_out);

  // End of stream: drains the resampler. A dangling odd byte is dropped. An incomplete WAV
  // header, or a compressed stream that ends inside its header, is INVALID_ARGUMENT. Compressed
  // audio may leave output pending (has_pending()): the stream has ended once Continue() has
  // drained it.
  absl::Status Flush(std::vector<float>* samples_out);

  // Compressed audio: output is pending (the last call stopped at max_samples_per_call).
  bool has_pending() const { return pending_decode_; }
  // Decodes the next max_samples_per_call of pending output (after a Flush, draining the
  // resampler at the end). No-op when nothing is pending. Errors as Push.
  absl::Status Continue(std::vector<float>* samples_out);

  // The format in effect (after a WAV header, the header's); rate 0 until known.
  const AudioFormat& format() const { return format_; }
  int model_sample_rate_hz() const { return model_rate_; }
  // Input samples decoded so far (at the input rate).
  int64_t input_samples() const { return input_samples_; }

 private:
  AudioInput(const AudioFormat& format, int model_rate, int64_t max_samples_per_call);
  // Compressed audio: creates the codec and feeds it `bytes`.
  absl::Status StartCompressed(Codec codec, absl::Span<const uint8_t> bytes);
  // Decodes what the codec holds, up to max_samples_per_call_ (see has_pending()); at the end of
  // the stream (flushed_input_) and with nothing left, drains the resampler.
  absl::Status DecodeCompressed(std::vector<float>* samples_out);
  // The codec's first frame: checks its format, creates the resampler.
  absl::Status StartCompressedFormat(int rate, int channels);
  // INVALID_ARGUMENT when format_.channel names a channel the stream (of `channels`) lacks.
  absl::Status CheckChannel(int channels) const;
  // A resampler from format_'s rate to the model's, when they differ.
  absl::Status StartResampler();
  // Header complete in pending_ (or raw audio): checks the format, creates the resampler.
  absl::Status StartData();
  // Tries to parse the WAV header held in pending_. Sets *complete when it is.
  absl::Status ParseWavHeader(bool* complete);
  // Decodes whole samples of `bytes` (after the header) and resamples them.
  absl::Status DecodeData(absl::Span<const uint8_t> bytes, std::vector<float>* samples_out);
  absl::Status Fail(absl::Status status);

  AudioFormat format_;
  int model_rate_ = 0;
  int64_t max_samples_per_call_ = 0;
  enum class State { kSniffing, kWavHeader, kData, kCompressed, kFlushed, kFailed };
  State state_ = State::kSniffing;
  std::vector<uint8_t> pending_;  // header bytes seen so far / partial sample carried over
  // WAV input: the header with the data chunk's size set to "unknown", so that each push's
  // data can be decoded by DecodeWav (engine/audio/wav.h) whatever the sample format.
  bool is_wav_ = false;
  std::vector<uint8_t> wav_header_;
  int block_align_ = 2;                   // bytes per sample frame of the input
  int64_t wav_data_bytes_left_ = -1;      // declared data bytes still expected; -1 = unknown
  std::unique_ptr<Resampler> resampler_;  // null when the rates are equal
  std::vector<float> scratch_;
  std::vector<uint8_t> wav_scratch_;
  int64_t input_samples_ = 0;
  // Compressed audio.
  std::unique_ptr<CodecDecoder> codec_;
  bool flushed_input_ = false;   // Flush() was called: the codec has all the bytes
  bool pending_decode_ = false;  // see has_pending()
};

}  // namespace jasper

#endif  // JASPER_ENGINE_AUDIO_AUDIO_INPUT_H_
