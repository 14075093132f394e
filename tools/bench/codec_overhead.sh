#!/usr/bin/env bash
# What decoding compressed audio adds to an offline request: one server, the same ~53 s of
# speech (the 30 held-out fixture sentences, concatenated: used here for timing only) sent by
# jasper-client as WAV, FLAC, Ogg Opus, Ogg Vorbis and MP3, ITERATIONS Recognize calls each
# (one at a time, interleaved by round), median call time per format against the WAV's.
# Needs the encoders (apt-get install flac opus-tools vorbis-tools lame sox; not CI's).
#   tools/bench/codec_overhead.sh [BUILD_DIR]     (ITERATIONS=15 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/lib/server.sh
build=${1:-build}
iterations=${ITERATIONS:-15}
tmp=$(mktemp -d)
trap 'stop_server; rm -rf "$tmp"' EXIT
sox tests/fixtures/heldout/heldout_*.wav "$tmp/speech.wav"
flac -s -f -o "$tmp/speech.flac" "$tmp/speech.wav"
opusenc --quiet --bitrate 32 "$tmp/speech.wav" "$tmp/speech.opus"
oggenc -Q -q 3 -o "$tmp/speech.ogg" "$tmp/speech.wav"
lame --quiet -b 64 "$tmp/speech.wav" "$tmp/speech.mp3"
start_server "$build/server/jasper-server" "$tmp/server.log" --warmup=true
for f in wav flac opus ogg mp3; do : >"$tmp/$f.ms"; done
for _ in $(seq 1 "$iterations"); do
  for f in wav flac opus ogg mp3; do
    "$build/client/jasper-client" --server="127.0.0.1:$SERVER_PORT" --mode=offline \
      --output=json --report=false "$tmp/speech.$f" |
      sed -n 's/.*"wall_ms":\([0-9.]*\).*/\1/p' >>"$tmp/$f.ms"
  done
done
median() { sort -g "$1" | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
wav_ms=$(median "$tmp/wav.ms")
printf '%-6s %10s %12s %10s\n' format bytes "median ms" "vs WAV"
for f in wav flac opus ogg mp3; do
  ms=$(median "$tmp/$f.ms")
  printf '%-6s %10d %12.1f %+9.1f%%\n' "$f" "$(stat -c %s "$tmp/speech.$f")" "$ms" \
    "$(echo "($ms / $wav_ms - 1) * 100" | bc -l)"
done
