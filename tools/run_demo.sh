#!/usr/bin/env bash
# The main job: installs what is needed, builds, starts jasper-server on loopback with the
# shipped default model, transcribes the shipped samples with jasper-client (offline and
# streaming), then stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
BUILD_DIR="$BUILD_DIR" tools/build.sh
MODEL_DIR=${MODEL_DIR:-models/quartznet_en_natural}
PORT=${PORT:-50051}
"$BUILD_DIR/server/jasper-server" --model_dir="$MODEL_DIR" --listen="127.0.0.1:$PORT" &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  "$BUILD_DIR/client/jasper-client" --server="127.0.0.1:$PORT" --list_models >/dev/null 2>&1 && break
  sleep 0.2
done
echo "== offline (Recognize)"
"$BUILD_DIR/client/jasper-client" --server="127.0.0.1:$PORT" --mode=offline "$MODEL_DIR"/samples/*.wav
echo "== streaming (StreamingRecognize, interim results)"
"$BUILD_DIR/client/jasper-client" --server="127.0.0.1:$PORT" --mode=streaming --interim_results \
  "$MODEL_DIR"/samples/*.wav
echo "== references"
cat "$MODEL_DIR"/samples/transcripts.tsv
