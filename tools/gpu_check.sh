#!/usr/bin/env bash
# tools/gpu_check.sh: one command that checks the CUDA kernels and the CUDA backend on a GPU.
#
# Runs cuda_tiling_test (CPU), cuda_kernels_test (all kernel/head/backend tests), the NeMo
# parity suite on CUDA (parity_test's FP32/FP16/BF16 CUDA cases on the committed fixtures), then
# compute-sanitizer --tool memcheck and --tool racecheck on the reduced case set
# (JASPER_CUDA_TEST_QUICK=1 + a gtest filter), then the speed benchmark (issue 7: cuda_bench
# --quick in FP16 beside cuDNN, then tools/bench_cuda_torch.py for PyTorch eager, when python3
# with torch is there; cuDNN is taken from PyTorch's wheels), and prints a table: step, result,
# seconds, followed by the benchmark tables. GPU_CHECK_BENCH=0 skips the benchmark.
# Then the server (issue 20; tools/gpu_server_check.sh): jasper-server --device=cuda at each
# precision against --device=cpu on the shipped samples and longer files (Recognize and
# StreamingRecognize: identical transcripts), and the capacity of one GPU: real-time streams
# on QuartzNet 15x5 (random weights made there by tools/make_random_model.py) stepped up while
# p99 final latency <= 500 ms and p99 partial <= 300 ms. GPU_CHECK_CAPACITY="256 1024" sets
# the levels, GPU_CHECK_SERVER=0 skips both server steps.
# Order (each step with its own timeout, so an early failure does not cost the rest): tests,
# sanitizers, server transcripts, benchmarks, capacity. Budget: GPU_CHECK_BUDGET_S (540 s) for
# the whole run. The table also goes to LOGS/gpu_check.json. Exit 0 only when every step passed.
#
# Approach. The GPU machine has the NVIDIA driver, nvcc and CMake but NONE of the Debian -dev
# packages the project builds against (Abseil, GoogleTest, OpenBLAS, soxr, nlohmann-json) and no
# network, so the full tree cannot be configured there. Hence two halves:
#   1. here, on a development machine with the -dev packages and nvcc (no GPU needed):
#        tools/gpu_check.sh --package [PKG_DIR]        (default PKG_DIR: build-gpu-pkg)
#      configures build-gpu/ (Release, CUDA architecture 90 only = sm_90 SASS + PTX), builds
#      the test binaries, cuda_bench, jasper-server and jasper-client (static GoogleTest and CUDA
#      runtime, so they need the driver only), strips them and copies them with their non-system
#      shared libraries (Abseil, gRPC, OpenBLAS, ...) into PKG_DIR/{bin,lib} (it must stay under
#      the 64 MiB a device call carries; build-* is git-ignored, so carry it explicitly). The
#      shipped model and the held-out clips travel with the checkout;
#   2. on the GPU machine:
#        tools/gpu_check.sh --prebuilt PKG_DIR         (nothing is compiled there)
#   On a machine that has both the -dev packages and a GPU, `tools/gpu_check.sh` alone builds
#   (same flags) and runs in one go.
# Logs go to $GPU_CHECK_LOGS (default: PKG_DIR/logs, or build-gpu/logs when building).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
budget_s=${GPU_CHECK_BUDGET_S:-540}  # leaves headroom inside a 10-minute device call
start_s=$SECONDS
mode=build
pkg=""
case "${1:-}" in
  --package) mode=package; pkg=${2:-$repo/build-gpu-pkg} ;;
  --prebuilt)
    mode=prebuilt
    pkg=${2:?usage: $0 --prebuilt PKG_DIR}
    ;;
  "" ) ;;
  -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--package [PKG_DIR] | --prebuilt PKG_DIR]" >&2; exit 2 ;;
esac
[ -n "$pkg" ] && pkg=$(mkdir -p "$pkg" && cd "$pkg" && pwd)

build_dir=$repo/build-gpu
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)

declare -a rows=()
failed=0
row() { rows+=("$(printf '%-34s %-30s %7s' "$1" "$2" "$3")"); }

configure_and_build() {
  [ -x "$nvcc_bin" ] || { echo "nvcc not found (set PATH or install the CUDA toolkit)" >&2; return 1; }
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DJASPER_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DCMAKE_CUDA_ARCHITECTURES=90 >"$build_dir.configure.log" 2>&1 \
    || { tail -30 "$build_dir.configure.log" >&2; return 1; }
  cmake --build "$build_dir" --target cuda_tiling_test cuda_kernels_test parity_test cuda_bench \
    jasper-server jasper-client \
    >"$build_dir.build.log" 2>&1 \
    || { tail -40 "$build_dir.build.log" >&2; return 1; }
}

# Copies the shared libraries a program needs, minus what every Linux + NVIDIA driver machine
# has; prefers the project's shared helper when present.
bundle_libs() {
  local out=$1; shift
  local helper
  for helper in "$repo/../shared/tools/bundle-runtime-libs.sh" /work/shared/tools/bundle-runtime-libs.sh; do
    if [ -x "$helper" ]; then "$helper" "$out" "$@"; return; fi
  done
  local skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+\.|libgcc_s\.|libcuda\.|libnvidia)'
  local prog name arrow path
  for prog in "$@"; do
    while read -r name arrow path _; do
      if [ "$arrow" != "=>" ] || [ ! -e "$path" ]; then continue; fi
      [[ $name =~ $skip ]] && continue
      cp -Ln "$path" "$out/$name"
    done < <(ldd "$prog")
  done
}

if [ "$mode" = package ]; then
  t0=$SECONDS
  configure_and_build || exit 1
  rm -rf "${pkg:?}/bin" "${pkg:?}/lib" "${pkg:?}/logs"
  mkdir -p "$pkg/bin" "$pkg/lib"
  programs=(tests/cuda_tiling_test tests/cuda_kernels_test tests/parity_test
            tools/bench/cuda_bench server/jasper-server client/jasper-client)
  for p in "${programs[@]}"; do cp "$build_dir/$p" "$pkg/bin/"; done
  strip "$pkg"/bin/*
  bundle_libs "$pkg/lib" "$pkg"/bin/* >/dev/null || exit 1
  strip --strip-unneeded "$pkg"/lib/* 2>/dev/null
  cp "$0" "$pkg/gpu_check.sh"
  {
    echo "built: $(date -u +%FT%TZ) on $(hostname)"
    echo "source: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown) (+ working tree)"
    echo "nvcc: $("$nvcc_bin" --version | tail -1)"
    echo "cuda architectures: 90"
  } >"$pkg/MANIFEST"
  size_mb=$(du -sm "$pkg" | cut -f1)
  echo "packaged into $pkg (${size_mb} MB, $((SECONDS - t0)) s)."
  [ "$size_mb" -lt 64 ] || { echo "the package is over the 64 MiB a device call carries" >&2; exit 1; }
  echo "On the GPU machine: tools/gpu_check.sh --prebuilt $(basename "$pkg")"
  exit 0
fi

if [ "$mode" = build ]; then
  t0=$SECONDS
  if configure_and_build; then
    row "build (Release, sm_90)" "OK" "$((SECONDS - t0))"
  else
    row "build (Release, sm_90)" "FAIL" "$((SECONDS - t0))"
    printf '%s\n' "${rows[@]}"
    exit 1
  fi
  bin=$build_dir/tests
  bench_bin=$build_dir/tools/bench
  logs=${GPU_CHECK_LOGS:-$build_dir/logs}
else
  bin=$pkg/bin
  bench_bin=$pkg/bin
  logs=${GPU_CHECK_LOGS:-$pkg/logs}
  export LD_LIBRARY_PATH="$pkg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -f "$pkg/MANIFEST" ] && sed 's/^/package /' "$pkg/MANIFEST"
fi
mkdir -p "$logs"

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
else
  echo "gpu: nvidia-smi not found; the CUDA tests will skip if no device is visible" >&2
fi

sanitizer=""
for candidate in "$(command -v compute-sanitizer 2>/dev/null)" \
  "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
  "${CUDA_HOME:-/usr/local/cuda}/compute-sanitizer/compute-sanitizer"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then sanitizer=$candidate; break; fi
done

# step NAME CAP_SECONDS LOGFILE CMD...: runs with timeout min(cap, remaining budget); summarizes
# the gtest counts; a run where every test skipped is reported as SKIPPED (not a pass).
step() {
  local name=$1 cap=$2 log=$3; shift 3
  local left=$((budget_s - (SECONDS - start_s)))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -le 5 ]; then row "$name" "NOT RUN (time budget)" "0"; failed=1; return; fi
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  local dt=$((SECONDS - t0))
  local passed skipped failures result
  passed=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  skipped=$(grep -Eo '^\[  SKIPPED \] [0-9]+ test' "$log" | grep -Eo '[0-9]+' | tail -1)
  failures=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$log" | grep -Eo '[0-9]+' | tail -1)
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    result="TIMEOUT (${limit}s)"
    failed=1
  elif [ "$rc" -ne 0 ]; then
    result="FAIL rc=$rc${failures:+, $failures failed}"
    failed=1
  elif [ "${passed:-0}" -eq 0 ] && [ "${skipped:-0}" -gt 0 ]; then
    result="SKIPPED (no GPU?)"
    failed=1
  else
    result="PASS ${passed:-?}${skipped:+ (+$skipped skipped)}"
  fi
  row "$name" "$result" "$dt"
}

quick_filter='Cases/CudaKernelsTest.*:Precisions/CudaHeadTest.*:Models/CudaBackendTest.*Fp32:Models/CudaBackendTest.QuartzNetLikeFp16'
race_filter='Cases/CudaKernelsTest.*:Precisions/CudaHeadTest.LogSoftmax*'

step "cuda_tiling_test (CPU)" 60 "$logs/cuda_tiling_test.log" "$bin/cuda_tiling_test"
step "cuda_kernels_test (all)" 180 "$logs/cuda_kernels_test.log" "$bin/cuda_kernels_test"
# The fixtures are read from this checkout (the binary's compiled-in source path may differ).
step "parity_test (NeMo fixtures, CUDA)" 120 "$logs/parity_test.log" \
  env JASPER_SOURCE_DIR="$repo" "$bin/parity_test" --gtest_filter='*cuda*'
if [ -n "$sanitizer" ]; then
  step "memcheck (quick set)" 150 "$logs/memcheck.log" \
    env JASPER_CUDA_TEST_QUICK=1 "$sanitizer" --tool memcheck --error-exitcode 1 \
    "$bin/cuda_kernels_test" --gtest_filter="$quick_filter"
  step "racecheck (quick kernel set)" 150 "$logs/racecheck.log" \
    env JASPER_CUDA_TEST_QUICK=1 "$sanitizer" --tool racecheck --racecheck-report all \
    --error-exitcode 1 "$bin/cuda_kernels_test" --gtest_filter="$race_filter"
else
  row "memcheck" "NOT RUN (no compute-sanitizer)" "0"
  row "racecheck" "NOT RUN (no compute-sanitizer)" "0"
  failed=1
fi

# run_step NAME CAP_SECONDS LOGFILE CMD...: a non-gtest program; OK when it exits 0, SKIPPED
# when it exits 77 (no GPU: counts as not passed).
run_step() {
  local name=$1 cap=$2 log=$3; shift 3
  local left=$((budget_s - (SECONDS - start_s)))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -le 5 ]; then row "$name" "NOT RUN (time budget)" "0"; failed=1; return 1; fi
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    row "$name" "TIMEOUT (${limit}s)" "$((SECONDS - t0))"
  elif [ "$rc" -eq 77 ]; then
    row "$name" "SKIPPED (no GPU?)" "$((SECONDS - t0))"
  elif [ "$rc" -ne 0 ]; then
    row "$name" "FAIL rc=$rc" "$((SECONDS - t0))"
  else
    row "$name" "OK" "$((SECONDS - t0))"
    return 0
  fi
  failed=1
  return 1
}

# Library folders of PyTorch's wheels (nvidia/*/lib, torch/lib) holding CUDA libraries, joined
# with ':' (empty without python3 or torch).
wheel_lib_dirs() {
  python3 -c '
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = []
for root in roots:
    for pattern in ("nvidia/*/lib", "torch/lib"):
        for d in sorted(glob.glob(os.path.join(root, pattern))):
            if glob.glob(os.path.join(d, "libcu*.so*")) and d not in dirs:
                dirs.append(d)
print(":".join(dirs))' 2>/dev/null
}

# The server and client: PKG_DIR/bin, or the build tree's.
server_bin=$bin
if [ "$mode" = build ]; then
  server_bin=$build_dir/server-bin
  mkdir -p "$server_bin"
  cp "$build_dir/server/jasper-server" "$build_dir/client/jasper-client" "$server_bin/"
fi
bench_logs=()
if [ "${GPU_CHECK_SERVER:-1}" != 0 ]; then
  run_step "server cuda vs cpu transcripts" 120 "$logs/server_transcripts.log" \
    "$repo/tools/gpu_server_check.sh" transcripts "$server_bin" \
    "$repo/models/quartznet_en_tts_small" "$logs/server"
  bench_logs+=("$logs/server_transcripts.log")
fi

if [ "${GPU_CHECK_BENCH:-1}" != 0 ]; then
  py_libs=$(wheel_lib_dirs)
  cudnn_lib=libcudnn.so.9
  for d in ${py_libs//:/ }; do
    if [ -e "$d/libcudnn.so.9" ]; then cudnn_lib=$d/libcudnn.so.9; break; fi
  done
  if run_step "cuda_bench fp16 (vs cuDNN)" 180 "$logs/cuda_bench.log" \
    env LD_LIBRARY_PATH="${py_libs:+$py_libs:}${LD_LIBRARY_PATH:-}" "$bench_bin/cuda_bench" \
    --quick --precision=fp16 --cudnn_lib="$cudnn_lib" --json="$logs/cuda_bench_fp16.json"; then
    bench_logs+=("$logs/cuda_bench.log")
    if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
      if run_step "PyTorch eager fp16 (bench_cuda_torch)" 150 "$logs/bench_cuda_torch.log" \
        env PYTHONPATH="$repo/tools" python3 "$repo/tools/bench_cuda_torch.py" --quick \
        --ours "$logs/cuda_bench_fp16.json" --json-out "$logs/bench_fp16.json"; then
        bench_logs+=("$logs/bench_cuda_torch.log")
      fi
    else
      row "PyTorch eager (bench_cuda_torch)" "NOT RUN (no torch with CUDA)" "0"
    fi
  else
    bench_logs+=("$logs/cuda_bench.log")
  fi
fi

if [ "${GPU_CHECK_SERVER:-1}" != 0 ]; then
  if run_step "random QuartzNet 15x5 model" 60 "$logs/make_random_model.log" \
    python3 "$repo/tools/make_random_model.py" --arch quartznet15x5 --out "$logs/qn15x5"; then
    # shellcheck disable=SC2086  # the levels are a word list
    run_step "capacity (15x5 fp16, real time)" 240 "$logs/capacity.log" \
      "$repo/tools/gpu_server_check.sh" capacity "$server_bin" "$logs/qn15x5" "$logs/server" \
      ${GPU_CHECK_CAPACITY:-}
    bench_logs+=("$logs/capacity.log")
  fi
fi

python3 - "$logs/gpu_check.json" "${rows[@]}" <<'PY' 2>/dev/null
import json, re, sys
steps = []
for row in sys.argv[2:]:
    m = re.match(r"(.{34}) (.{30}) +(\d+)$", row)
    if m:
        steps.append({"step": m.group(1).strip(), "result": m.group(2).strip(), "seconds": int(m.group(3))})
json.dump({"steps": steps}, open(sys.argv[1], "w"), indent=1)
PY

echo
printf '%-34s %-30s %7s\n' "step" "result" "seconds"
printf '%s\n' "${rows[@]}"
echo "total: $((SECONDS - start_s)) s; logs in $logs"
for log in "${bench_logs[@]}"; do
  echo
  tail -n 40 "$log"
done
if [ "$failed" -ne 0 ]; then
  echo "first failures:"
  grep -hE '^\[  FAILED  \]|Failure|ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]|Hazard' \
    "$logs"/*.log 2>/dev/null | head -20
fi
exit "$failed"
