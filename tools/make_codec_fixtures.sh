#!/usr/bin/env bash
# Writes the compressed-audio fixtures of tests/codec_test.cc and the server tests
# (tests/fixtures/codecs/) from the shipped model's samples, with Debian's reference encoders:
#   apt-get install flac opus-tools vorbis-tools lame sox
#   tools/make_codec_fixtures.sh
# The fixtures are committed (CI needs no encoder); rerun only to change them.
set -euo pipefail
cd "$(dirname "$0")/.."
src=models/quartznet_en_tts_small/samples
out=tests/fixtures/codecs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
# sample_2 as 44.1 kHz stereo: the decoders' rate and channel handling, resampling, downmix.
sox "$src/sample_2.wav" -r 44100 -c 2 -b 16 "$tmp/s2.wav"
flac -s --best -f -o "$out/sample_1.flac" "$src/sample_1.wav"            # lossless: exact
flac -s -f -o "$out/sample_2_44k_stereo.flac" "$tmp/s2.wav"
opusenc --quiet --bitrate 24 "$src/sample_1.wav" "$out/sample_1.opus"     # Ogg Opus
opusenc --quiet --bitrate 48 "$tmp/s2.wav" "$out/sample_2_44k_stereo.opus"
oggenc -Q -q 4 -o "$out/sample_2_44k_stereo.ogg" "$tmp/s2.wav"             # Ogg Vorbis
oggenc -Q -q 2 -o "$out/sample_1.ogg" "$src/sample_1.wav"
# ID3v2-tagged; at 16 kHz, 48 kbit/s is the lowest rate whose first frame holds the LAME
# gapless tag (without it no decoder can trim the encoder delay).
lame --quiet -b 48 --add-id3v2 --tt sample_1 "$src/sample_1.wav" "$out/sample_1.mp3"
lame --quiet -b 96 --resample 44.1 "$tmp/s2.wav" "$out/sample_2_44k_stereo_bare.mp3"  # untagged: MP3 by name
# Two minutes of digital silence in a few hundred bytes: the output bound per decode step.
sox -D -n -r 16000 -c 1 -b 16 "$tmp/silence.wav" trim 0 120
flac -s -f --blocksize=4608 -o "$out/silence_120s.flac" "$tmp/silence.wav"
ls -l "$out"
