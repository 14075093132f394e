#!/usr/bin/env bash
# The main job: installs what is needed, builds, and transcribes the shipped samples with the
# shipped default model.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build} tools/build.sh
BUILD_DIR=${BUILD_DIR:-build}
MODEL_DIR=${MODEL_DIR:-tests/fixtures/quartznet_small/model}
SAMPLES=${SAMPLES:-tests/fixtures/audio/*.wav}
"$BUILD_DIR/tools/jasper-transcribe" --model_dir="$MODEL_DIR" --words $SAMPLES
