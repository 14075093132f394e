#!/bin/sh
# Generates the small speech samples the streaming tests use (tests/fixtures/audio/*.wav):
# 16 kHz mono 16-bit PCM WAV, synthesized with espeak-ng (Debian package espeak-ng) and
# converted with sox. Deterministic for a given espeak-ng version; the committed files are
# what the tests read, so re-running this is only needed to change them.
#
# Usage: tools/make_test_audio.sh [OUT_DIR]   (default: tests/fixtures/audio)
set -eu
out="${1:-$(dirname "$0")/../tests/fixtures/audio}"
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

say() {  # say NAME VOICE SPEED TEXT
  espeak-ng -v "$2" -s "$3" -w "$tmp/$1.raw.wav" "$4"
  # Trim leading/trailing silence to 0.1 s, resample to 16 kHz, 16-bit mono.
  sox "$tmp/$1.raw.wav" -r 16000 -c 1 -b 16 -e signed-integer "$out/$1.wav" \
    silence 1 0.02 0.5% reverse silence 1 0.02 0.5% reverse pad 0.1 0.1
}

say hello en-us 160 "hello world"
say fox en-us 170 "the quick brown fox jumps over the lazy dog"
ls -l "$out"
