#!/usr/bin/env bash
# Installs the Debian packages jasper-serve needs to build, test and run (Debian bookworm).
# Idempotent; needs root (or sudo). Nothing is downloaded at build or run time.
#   tools/install_deps.sh            build + test + run (what README, .ci/run and image builds use)
#   tools/install_deps.sh --runtime  only the shared libraries jasper-server/jasper-client load
#                                    (the images' runtime stage); --list prints the list and exits
set -euo pipefail
MODE=full
LIST=0
for arg in "$@"; do
  case "$arg" in
    --runtime) MODE=runtime ;;
    --list) LIST=1 ;;
    *) echo "usage: $0 [--runtime] [--list]" >&2; exit 2 ;;
  esac
done
# The sonamed libraries of the -dev packages below (bookworm names; tests/deploy_test.py checks
# that they cover every library the built binaries load).
RUNTIME_PACKAGES=(
  libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libspdlog1.10 libfmt9
  libsoxr0 libgomp1 libssl3
  libflac12 libogg0 libopus0 libvorbis0a libmpg123-0  # compressed audio (engine/audio/codec.h)
  libfst22  # OpenFst: inverse text normalization (engine/text/inverse_normalizer.h)
)
# Every program and runtime that tools/run_demo.sh and every stage of tools/test.sh use, by stage
# (tests/install_deps_test.py fails the suite when a stage invokes a program, imports a Python
# module or links a sanitizer runtime that no package below, or the base system, provides).
BUILD_PACKAGES=(  # tools/build.sh: the main build (CMake, Ninja, ccache, gcc; CUDA when nvcc is there)
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev nlohmann-json3-dev libopenblas-dev libsoxr-dev
  libflac-dev libogg-dev libopus-dev libvorbis-dev libmpg123-dev
  libboost-dev  # Boost.Beast/Asio (header-only): the HTTP front
  libfst-dev    # OpenFst: runs the ITN grammars (engine/text/)
  libssl-dev    # OpenSSL: TLS on the HTTP front (also pulled in by libgrpc-dev)
  libgtest-dev libgmock-dev libbenchmark-dev
)
TEST_PACKAGES=(  # test stage (CTest): converter, deploy checks, Riva venv, soak, TLS certificates
  python3 python3-numpy python3-yaml python3-venv
  sox espeak-ng clang-format openssl
  curl      # tools/http_front_check.sh posts forms with it
  chromium  # ... and opens the browser page headless (fake microphone)
  shfmt  # tests/install_deps_test.py parses the shell scripts with it
)
FUZZ_PACKAGES=(  # fuzz stage: clang-14 with libFuzzer and its ASan/UBSan runtimes
  clang-14 libclang-rt-14-dev
)
# The asan and tsan stages build with gcc (build-essential); its sanitizer runtimes (libasan8,
# libubsan1, libtsan2) come with it.
PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}" "${FUZZ_PACKAGES[@]}")
[ "$MODE" = runtime ] && PACKAGES=("${RUNTIME_PACKAGES[@]}")
if [ "$LIST" -eq 1 ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi
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
