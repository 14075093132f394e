#!/usr/bin/env bash
# Do two server builds give the same transcripts? Starts each server binary in turn with the
# shipped default model, sends every file through jasper-client offline and streaming, greedy
# and beam (the client sends as fast as flow control allows), and prints per mode how many
# transcripts differ and how many calls failed. Exit status 1 when any differ or fail.
#
# Usage: tools/compare_transcripts.sh OLD_SERVER_BIN NEW_SERVER_BIN [FILE...]
# Default files: the held-out clips, the LibriVox clips of pocketsphinx-testdata, the model's
# samples and the asterisk prompts (asterisk-core-sounds-en-wav), where installed.
# Env: CLIENT_BIN (build/client/jasper-client), MODEL_DIR (models/quartznet_en_tts_small).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/lib/server.sh
[ $# -ge 2 ] || { echo "usage: $0 OLD_SERVER_BIN NEW_SERVER_BIN [FILE...]" >&2; exit 2; }
CLIENT_BIN=${CLIENT_BIN:-build/client/jasper-client}
MODEL_DIR=${MODEL_DIR:-models/quartznet_en_tts_small}
servers=("$1" "$2")
shift 2
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  shopt -s nullglob
  files=(tests/fixtures/heldout/*.wav /usr/share/pocketsphinx/test/data/librivox/*.wav
         "$MODEL_DIR"/samples/*.wav /usr/share/asterisk/sounds/en/*.wav)
fi
WORK=$(mktemp -d /tmp/jasper-compare.XXXXXX)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill -9 "$SERVER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
for i in 0 1; do
  log="$WORK/server$i.log"
  start_server "${servers[$i]}" "$log" --model_dir="$MODEL_DIR"
  port=$SERVER_PORT
  for mode in offline streaming; do
    for decoder in greedy beam; do
      "$CLIENT_BIN" --server="127.0.0.1:$port" --mode="$mode" --decoder="$decoder" \
        --report=false "${files[@]}" 2>/dev/null | sort >"$WORK/$i.$mode.$decoder"
    done
  done
  stop_server
done
status=0
for mode in offline streaming; do
  for decoder in greedy beam; do
    differ=$(diff "$WORK/0.$mode.$decoder" "$WORK/1.$mode.$decoder" | grep -c '^<' || true)
    failed=$(cat "$WORK/0.$mode.$decoder" "$WORK/1.$mode.$decoder" | grep -c ': ERROR ' || true)
    echo "$mode $decoder: $differ of $(wc -l <"$WORK/1.$mode.$decoder") transcripts differ, $failed calls failed"
    [ "$differ" -eq 0 ] && [ "$failed" -eq 0 ] || status=1
  done
done
exit $status
