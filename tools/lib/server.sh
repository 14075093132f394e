# Sourced by the scripts that start a jasper-server on a picked loopback port (tools/bench/,
# tools/compare_transcripts.sh). Needs bash.
#
# start_server BIN LOG [FLAG...]: starts BIN with the flags on 127.0.0.1:0, logging to LOG;
# sets SERVER_PID and SERVER_PORT once the server says which port it listens on, and
# SERVER_HTTP_PORT to its HTTP front's port (--http_listen; logged before the gRPC port; "" when
# there is none). Exits the
# script (status 1, the log on stderr) when the server dies or does not say within 60 s.
start_server() {
  local bin=$1 log=$2
  shift 2
  rm -f "$log"  # a stale log would give a stale port
  "$bin" --listen=127.0.0.1:0 "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  SERVER_PORT=""
  for _ in $(seq 1 600); do
    SERVER_PORT=$(sed -n 's/.*(port \([0-9][0-9]*\)).*/\1/p' "$log" 2>/dev/null | head -n1)
    if [ -n "$SERVER_PORT" ]; then
      SERVER_HTTP_PORT=$(sed -n 's/.*(http port \([0-9][0-9]*\)).*/\1/p' "$log" | head -n1)
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "$bin did not start" >&2
  exit 1
}

# stop_server: SIGTERM, then waits for the exit.
stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
