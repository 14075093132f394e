#!/usr/bin/env bash
# Riva wire-compatibility check: the real nvidia-riva-client (PyPI) against jasper-server.
#
#   tools/riva_compat_check.sh BUILD_DIR [MODEL_DIR]
#
# Creates BUILD_DIR/riva-venv on first use (python3 -m venv; pip install nvidia-riva-client
# grpcio-reflection; needs PyPI, exit 77 = skipped without it), starts BUILD_DIR/server/jasper-server on a free loopback
# port, runs tests/riva_compat_test.py on tests/fixtures/audio/*.wav (or an espeak-ng
# sentence when there are none), stops the server. Exit status: the test's.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [MODEL_DIR]" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$1" && pwd)"
model="${2:-$root/tests/fixtures/quartznet_small/model}"
server_bin="$build/server/jasper-server"
venv="$build/riva-venv"
python="${PYTHON:-python3}"

[[ -x "$server_bin" ]] || { echo "no $server_bin: build the jasper-server target first" >&2; exit 2; }
[[ -f "$model/model.json" ]] || { echo "no model at $model" >&2; exit 2; }

if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import riva.client" 2>/dev/null; then
  echo "creating $venv"
  # Without PyPI (an offline machine) the check cannot run: exit 77, which CTest reports as
  # skipped (SKIP_RETURN_CODE), not passed.
  if ! "$python" -m venv "$venv" ||
     ! "$venv/bin/pip" install --quiet --disable-pip-version-check --timeout 60 \
         nvidia-riva-client grpcio-reflection; then
    rm -rf "$venv"
    echo "SKIPPED: could not install nvidia-riva-client from PyPI" >&2
    exit 77
  fi
fi

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"
    wait "$server_pid" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

audio=("$root"/tests/fixtures/audio/*.wav)
if [[ ! -f "${audio[0]}" ]]; then
  espeak-ng -w "$work/raw.wav" "the quick brown fox jumps over the lazy dog"
  sox "$work/raw.wav" -r 16000 -c 1 -b 16 "$work/fox.wav"
  audio=("$work/fox.wav")
fi

# Port 0: the server picks a free port and logs it. The log exists before the server starts:
# the background child opens it only after the fork, and the loop below reads it at once.
: >"$work/server.log"
"$server_bin" --model_dir="$model" --listen=127.0.0.1:0 >"$work/server.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 300); do
  port="$(sed -n 's/.*(port \([0-9][0-9]*\)).*/\1/p' "$work/server.log" | head -n1)"
  [[ -n "$port" ]] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    cat "$work/server.log" >&2
    echo "jasper-server exited before serving" >&2
    exit 1
  fi
  sleep 0.1
done
if [[ -z "$port" ]]; then
  cat "$work/server.log" >&2
  echo "jasper-server did not start within 30 s" >&2
  exit 1
fi
echo "jasper-server on 127.0.0.1:$port (pid $server_pid)"

args=()
for f in "${audio[@]}"; do args+=(--audio "$f"); done
status=0
"$venv/bin/python" "$root/tests/riva_compat_test.py" --server "127.0.0.1:$port" "${args[@]}" ||
  status=$?
if [[ $status -ne 0 ]]; then
  echo "--- server log ---" >&2
  cat "$work/server.log" >&2
fi
exit $status
