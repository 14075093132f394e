#!/usr/bin/env bash
# Head-of-line benchmark (issue 28): do real-time streams keep their latency while long offline
# requests are in flight? For each server binary given, one run of three phases against the
# same server process:
#   alone      STREAMS real-time streams with interim results (jasper-client --simulate_realtime)
#   +offline   the same, while OFFLINE offline Recognize calls of a 2.5-minute file run in a loop
#   alone      the streams again, to show the server came back
# and prints the streams' partial and final latency p50/p90/p99 per phase and the +offline /
# alone ratio of the p99s (alone = the mean of the two alone phases). Give the binaries of two
# builds (e.g. before and after a change) to compare them in one run, on the same machine state.
#
# Usage: tools/bench/hol_bench.sh SERVER_BIN [SERVER_BIN...]
# Env: CLIENT_BIN (build/client/jasper-client), MODEL_DIR (models/quartznet_en_tts_small),
#   STREAMS (64), ITER (60: each clip sent ITER times per phase), OFFLINE (4), CHUNK_MS (160),
#   CLIPS (the LibriVox clips of Debian's pocketsphinx-testdata), SERVER_ARGS (extra flags).
# The offline file is the clips concatenated six times (2.5 min, made with sox).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/lib/server.sh
[ $# -ge 1 ] || { echo "usage: $0 SERVER_BIN [SERVER_BIN...]" >&2; exit 2; }
CLIENT_BIN=${CLIENT_BIN:-build/client/jasper-client}
MODEL_DIR=${MODEL_DIR:-models/quartznet_en_tts_small}
STREAMS=${STREAMS:-64}
ITER=${ITER:-60}
OFFLINE=${OFFLINE:-4}
CHUNK_MS=${CHUNK_MS:-160}
CLIPS=${CLIPS:-/usr/share/pocketsphinx/test/data/librivox}
command -v sox >/dev/null || { echo "$0: needs sox (apt-get install sox)" >&2; exit 2; }
ls "$CLIPS"/*.wav >/dev/null 2>&1 || {
  echo "$0: no clips in $CLIPS (apt-get install pocketsphinx-testdata, or set CLIPS)" >&2
  exit 2
}

WORK=$(mktemp -d /tmp/jasper-hol.XXXXXX)
SERVER_PID=""
OFFLINE_PID=""
cleanup() {
  [ -n "$OFFLINE_PID" ] && kill "$OFFLINE_PID" 2>/dev/null || true
  [ -n "$SERVER_PID" ] && kill -9 "$SERVER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
# shellcheck disable=SC2046
sox $(for _ in 1 2 3 4 5 6; do ls "$CLIPS"/*.wav; done) "$WORK/long.wav"
echo "offline file: $(soxi -D "$WORK/long.wav") s; streams: $STREAMS x $ITER x $(ls "$CLIPS"/*.wav | wc -l) clips per phase" >&2

streams() {  # $1 = port, $2 = output JSON file
  "$CLIENT_BIN" --server="127.0.0.1:$1" --audio="$CLIPS" --mode=streaming --simulate_realtime \
    --chunk_ms="$CHUNK_MS" --interim_results --parallel="$STREAMS" --iterations="$ITER" \
    --output=json 2>/dev/null | grep '^{"report"' >"$2"
}

n=0
for server in "$@"; do
  n=$((n + 1))
  log="$WORK/server$n.log"
  # shellcheck disable=SC2086
  start_server "$server" "$log" --model_dir="$MODEL_DIR" --max_concurrent_streams=1000 \
    ${SERVER_ARGS:-}
  port=$SERVER_PORT
  echo "$server on port $port" >&2
  streams "$port" "$WORK/$n.alone1.json"
  "$CLIENT_BIN" --server="127.0.0.1:$port" --audio="$WORK/long.wav" --mode=offline \
    --parallel="$OFFLINE" --iterations=1000000 --report=false >/dev/null 2>&1 &
  OFFLINE_PID=$!
  sleep 2  # the offline calls are in flight before the streams start
  streams "$port" "$WORK/$n.offline.json"
  kill "$OFFLINE_PID" 2>/dev/null || true
  wait "$OFFLINE_PID" 2>/dev/null || true
  OFFLINE_PID=""
  sleep 2
  streams "$port" "$WORK/$n.alone2.json"
  stop_server
  echo "$server" >"$WORK/$n.name"
done

python3 - "$WORK" "$n" <<'EOF'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
def lat(path, kind):
    rep = json.loads(open(path).read().strip().splitlines()[-1])["report"]
    return rep["latency"].get(kind, {}), rep["calls"]
print("| server | phase | final p50 / p90 / p99 ms | partial p50 / p90 / p99 ms | calls |")
print("|---|---|---|---|---|")
ratios = []
for i in range(1, n + 1):
    name = open(f"{work}/{i}.name").read().strip()
    p99 = {}
    for phase in ("alone1", "offline", "alone2"):
        cells = []
        for kind in ("final", "partial"):
            l, calls = lat(f"{work}/{i}.{phase}.json", kind)
            cells.append(" / ".join(f"{l.get(k, 0):.0f}" for k in ("p50_ms", "p90_ms", "p99_ms")))
            p99[(phase, kind)] = l.get("p99_ms", 0.0)
        label = {"alone1": "alone", "offline": "+ offline", "alone2": "alone again"}[phase]
        calls_text = ", ".join(f"{v} {k}" for k, v in sorted(calls.items()))
        print(f"| {name} | {label} | {cells[0]} | {cells[1]} | {calls_text} |")
    for kind in ("final", "partial"):
        alone = (p99[("alone1", kind)] + p99[("alone2", kind)]) / 2
        ratios.append((name, kind, p99[("offline", kind)] / alone if alone > 0 else float("nan")))
print()
for name, kind, r in ratios:
    print(f"{name}: {kind} p99 with offline / alone = {r:.2f} ({(r - 1) * 100:+.0f} %)")
EOF
