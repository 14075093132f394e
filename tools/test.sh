#!/usr/bin/env bash
# The test command: installs what is needed, builds everything (CUDA too when nvcc is present)
# and runs the whole suite with CTest. Used by the README and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build} tools/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" --timeout 900
