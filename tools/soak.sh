#!/usr/bin/env bash
# Soak and fault test (issue 8): starts jasper-server on a free loopback port and runs
# jasper-soak against it for DURATION_S seconds of load with STREAMS concurrent streams (faults
# interleaved, victim processes killed mid-stream, memory checked after the drain), then
# SIGTERMs the server mid-load and checks that it exits 0 within its grace period.
#
# Usage: tools/soak.sh DURATION_S [STREAMS]
# Env: BUILD_DIR (build), SERVER_BIN / SOAK_BIN (default BUILD_DIR/server/jasper-server and
# BUILD_DIR/client/jasper-soak), MODEL_DIR (models/quartznet_en_tts_small), SOAK_SPEED (4: audio
# sent at 4x real time), SOAK_RSS_BOUND_MB (50), GRACE_MS (5000), SOAK_REPORT (write the JSON
# report there too), SOAK_SEED (1), NUM_WORKERS (server scheduler workers, 1).
# Exit status: 0 when every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION_S=${1:?usage: tools/soak.sh DURATION_S [STREAMS]}
STREAMS=${2:-16}
BUILD_DIR=${BUILD_DIR:-build}
SERVER_BIN=${SERVER_BIN:-$BUILD_DIR/server/jasper-server}
SOAK_BIN=${SOAK_BIN:-$BUILD_DIR/client/jasper-soak}
MODEL_DIR=${MODEL_DIR:-models/quartznet_en_tts_small}
GRACE_MS=${GRACE_MS:-5000}
MAX_MESSAGE_BYTES=1048576
AUDIO=$(ls tests/fixtures/audio/*.wav tests/fixtures/heldout/heldout_0[0-5].wav | paste -sd, -)

# Port 0: the server picks a free port and logs it (a port picked here and passed on could be
# taken by another process in between). The log exists before the server starts.
SERVER_LOG=$(mktemp /tmp/jasper-soak-server.XXXXXX.log)
"$SERVER_BIN" --model_dir="$MODEL_DIR" --listen=127.0.0.1:0 \
  --max_message_bytes=$MAX_MESSAGE_BYTES --shutdown_grace_ms="$GRACE_MS" \
  --max_concurrent_streams=1000 --num_workers="${NUM_WORKERS:-1}" --log_level="${SERVER_LOG_LEVEL:-info}" \
  >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
cleanup() { kill -9 "$SERVER_PID" 2>/dev/null || true; }
trap cleanup EXIT
PORT=""
for _ in $(seq 1 600); do
  PORT=$(sed -n 's/.*(port \([0-9][0-9]*\)).*/\1/p' "$SERVER_LOG" | head -n1)
  [ -n "$PORT" ] && break
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    cat "$SERVER_LOG" >&2
    echo "soak: jasper-server exited before serving" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$PORT" ]; then
  cat "$SERVER_LOG" >&2
  echo "soak: jasper-server did not start within 60 s" >&2
  exit 1
fi

START=$(date +%s)
set +e
"$SOAK_BIN" --server="127.0.0.1:$PORT" --server_pid="$SERVER_PID" --audio="$AUDIO" \
  --duration_s="$DURATION_S" --streams="$STREAMS" --speed="${SOAK_SPEED:-4}" \
  --max_message_bytes=$MAX_MESSAGE_BYTES --grace_ms="$GRACE_MS" \
  --rss_bound_mb="${SOAK_RSS_BOUND_MB:-50}" --seed="${SOAK_SEED:-1}" ${SOAK_ARGS:-} >"$SERVER_LOG.report"
SOAK_RC=$?
wait "$SERVER_PID"
SERVER_RC=$?
set -e
trap - EXIT
cat "$SERVER_LOG.report"
[ -n "${SOAK_REPORT:-}" ] && cp "$SERVER_LOG.report" "$SOAK_REPORT"
echo "soak: ${DURATION_S}s load, $STREAMS streams, wall $(($(date +%s) - START))s;" \
  "jasper-soak exit $SOAK_RC, jasper-server exit $SERVER_RC" >&2
if [ "$SOAK_RC" -ne 0 ] || [ "$SERVER_RC" -ne 0 ]; then
  echo "--- server log (tail) ---" >&2
  tail -50 "$SERVER_LOG" >&2
  exit 1
fi
rm -f "$SERVER_LOG" "$SERVER_LOG.report"
