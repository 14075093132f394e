#!/usr/bin/env bash
# Configures and builds jasper-serve into ${BUILD_DIR:-build} (Release, Ninja, ccache).
# CUDA is built when nvcc is found (JASPER_CUDA=AUTO); pass JASPER_CUDA=OFF to skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
if [ -z "${CMAKE_CUDA_COMPILER:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DJASPER_CUDA="${JASPER_CUDA:-AUTO}" ${JASPER_SANITIZE:+-DJASPER_SANITIZE="$JASPER_SANITIZE"} \
  ${CMAKE_EXTRA_ARGS:-}
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
