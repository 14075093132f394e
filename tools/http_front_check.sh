#!/usr/bin/env bash
# HTTP front check: the stock `openai` client (PyPI), curl and a stock WebSocket client
# (`websockets`, PyPI) against jasper-server's HTTP front (--http_listen), with an API key, on
# WAV, FLAC, Ogg Opus, Ogg Vorbis and MP3 files; each transcript must equal the gRPC API's for
# the same file (jasper-client, same server): REST (tests/openai_compat_test.py), WebSocket
# streaming (tests/websocket_stream_test.py), and the browser page in headless Chromium with a
# fake microphone playing a sample (tests/browser_test.py; SCREENSHOT=FILE saves the page).
#
#   tools/http_front_check.sh BUILD_DIR [MODEL_DIR]
#
# Creates BUILD_DIR/openai-venv on first use (python3 -m venv; pip install openai websockets; needs PyPI,
# exit 77 = skipped without it). Exit status: the checks'.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [MODEL_DIR]" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$1" && pwd)"
model="${2:-$root/models/quartznet_en_tts_small}"
venv="$build/openai-venv"
python="${PYTHON:-python3}"
[[ -x "$build/server/jasper-server" ]] || { echo "build jasper-server first" >&2; exit 2; }

if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import openai, websockets" 2>/dev/null; then
  echo "creating $venv"
  if ! "$python" -m venv "$venv" ||
     ! "$venv/bin/pip" install --quiet --disable-pip-version-check --timeout 60 openai websockets; then
    rm -rf "$venv"
    echo "SKIPPED: could not install openai and websockets from PyPI" >&2
    exit 77
  fi
fi

source "$root/tools/lib/server.sh"  # start_server / stop_server
work="$(mktemp -d)"
trap 'stop_server; rm -rf "$work"' EXIT

key="test-key-$$-$RANDOM"
echo "$key" >"$work/keys"
start_server "$build/server/jasper-server" "$work/server.log" --model_dir="$model" \
  --http_listen=127.0.0.1:0 --api_keys_file="$work/keys"
port=$SERVER_PORT
http_port=$SERVER_HTTP_PORT
echo "jasper-server: gRPC 127.0.0.1:$port, HTTP 127.0.0.1:$http_port"
name="$(sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' "$model/model.json" | head -n1)"

files=("$model"/samples/sample_1.wav "$root"/tests/fixtures/codecs/sample_1.flac
       "$root"/tests/fixtures/codecs/sample_1.opus "$root"/tests/fixtures/codecs/sample_2_44k_stereo.ogg
       "$root"/tests/fixtures/codecs/sample_1.mp3 "$root"/tests/fixtures/codecs/sample_2_44k_stereo_bare.mp3)
args=()
status=0
for f in "${files[@]}"; do
  want="$("$build/client/jasper-client" --server="127.0.0.1:$port" --api_key="$key" --mode=offline \
    --output=json --report=false "$f" | sed -n 's/.*"transcript":"\([^"]*\)".*/\1/p')"
  args+=(--expect "$f=$want")
  # curl: the same form, the same transcript.
  got="$(curl -sS -H "Authorization: Bearer $key" -F "file=@$f" -F "model=$name" \
    -F response_format=text "http://127.0.0.1:$http_port/v1/audio/transcriptions")"
  if [[ "$got" == "$want" && -n "$want" ]]; then
    echo "ok   curl $(basename "$f"): '$got'"
  else
    echo "FAIL curl $(basename "$f"): '$got' != gRPC's '$want'"
    status=1
  fi
done
"$venv/bin/python" "$root/tests/openai_compat_test.py" --base_url "http://127.0.0.1:$http_port/v1" \
  --api_key "$key" --model "$name" "${args[@]}" || status=$?
"$venv/bin/python" "$root/tests/websocket_stream_test.py" \
  --url "ws://127.0.0.1:$http_port/v1/stream" --api_key "$key" "${args[@]}" || status=$?
# The browser page. Browsers cannot put a key on a WebSocket, so the page is checked against a
# second server without keys (same binary and model).
chromium="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$chromium" ]]; then
  echo "FAIL no chromium (tools/install_deps.sh installs it)"
  status=1
else
  wav="$model/samples/sample_2.wav"
  want="$("$build/client/jasper-client" --server="127.0.0.1:$port" --api_key="$key" --mode=offline \
    --output=json --report=false "$wav" | sed -n 's/.*"transcript":"\([^"]*\)".*/\1/p')"
  stop_server
  start_server "$build/server/jasper-server" "$work/open.log" --model_dir="$model" \
    --http_listen=127.0.0.1:0
  open_port=$SERVER_HTTP_PORT
  "$venv/bin/python" "$root/tests/browser_test.py" --chromium "$chromium" \
    --url "http://127.0.0.1:$open_port/" --wav "$wav" --expect "$want" \
    ${SCREENSHOT:+--screenshot "$SCREENSHOT"} || status=$?
fi
if [[ $status -ne 0 ]]; then
  echo "--- server log ---" >&2
  cat "$work/server.log" >&2
fi
exit $status
