#!/usr/bin/env bash
# Installs the Debian packages jasper-serve needs to build, test and run (Debian bookworm).
# Idempotent; needs root (or sudo). Nothing is downloaded at build or run time.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev nlohmann-json3-dev libopenblas-dev libsoxr-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-yaml python3-venv
  sox espeak-ng clang-format
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
