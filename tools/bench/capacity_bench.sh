#!/usr/bin/env bash
# Real-time stream capacity (issue 28): for each N in STREAMS_LIST and each server binary given,
# starts the server, runs N real-time streams (jasper-client --simulate_realtime, interim
# results, 160 ms chunks, the held-out clips ITER times each) and prints the calls and the final
# and partial latency p50/p90/p99 (one table row each). Give two builds to compare them in one
# run. TRANSPORTS="grpc websocket" runs the same load over each transport against the same
# server start (the WebSocket streams go to its --http_listen front, /v1/stream).
# Results: docs/PERFORMANCE.md, "Real-time stream capacity".
#
# Usage: tools/bench/capacity_bench.sh SERVER_BIN [SERVER_BIN...]
# Env: CLIENT_BIN (build/client/jasper-client), MODEL_DIR (models/quartznet_en_tts_small),
#   STREAMS_LIST ("256 384"), ITER (60), CLIPS (tests/fixtures/heldout), TRANSPORTS ("grpc").
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/lib/server.sh
[ $# -ge 1 ] || { echo "usage: $0 SERVER_BIN [SERVER_BIN...]" >&2; exit 2; }
CLIENT_BIN=${CLIENT_BIN:-build/client/jasper-client}
MODEL_DIR=${MODEL_DIR:-models/quartznet_en_tts_small}
ITER=${ITER:-60}
CLIPS=${CLIPS:-tests/fixtures/heldout}
LOG=$(mktemp /tmp/jasper-capacity.XXXXXX)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill -9 "$SERVER_PID" 2>/dev/null || true
  rm -f "$LOG"
}
trap cleanup EXIT
http_flags=()
[[ " ${TRANSPORTS:-grpc} " == *" websocket "* ]] &&
  http_flags=(--http_listen=127.0.0.1:0 --http_max_connections=1000)
for n in ${STREAMS_LIST:-256 384}; do
  for server in "$@"; do
    start_server "$server" "$LOG" --model_dir="$MODEL_DIR" --max_concurrent_streams=1000 \
      "${http_flags[@]}"
    for transport in ${TRANSPORTS:-grpc}; do
      port=$SERVER_PORT
      [ "$transport" = websocket ] && port=$SERVER_HTTP_PORT
      transport_flag=()
      [ "$transport" = grpc ] || transport_flag=(--transport="$transport")
      "$CLIENT_BIN" --server="127.0.0.1:$port" "${transport_flag[@]}" --audio="$CLIPS" \
        --mode=streaming --simulate_realtime --chunk_ms=160 --interim_results --parallel="$n" \
        --iterations="$ITER" --output=json 2>/dev/null | grep '^{"report"' | tail -1 |
        python3 -c '
import json, sys
n, server = sys.argv[1], sys.argv[2]
r = json.loads(sys.stdin.read())["report"]
def cells(kind):
    l = r["latency"].get(kind, {})
    return " / ".join("%.0f" % l.get(k, 0) for k in ("p50_ms", "p90_ms", "p99_ms"))
calls = ", ".join(f"{v} {k}" for k, v in sorted(r["calls"].items()))
fin, par = cells("final"), cells("partial")
print(f"| {n} | {server} | {calls} | {fin} | {par} |")
' "$n" "$server ($transport)"
    done
    stop_server
  done
done
