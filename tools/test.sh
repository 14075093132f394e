#!/usr/bin/env bash
# The test command: installs what is needed, builds everything (CUDA too when nvcc is present)
# and runs the whole suite with CTest. Used by the README and by .ci/run.
#
# Then the reliability stages (issue 8; docs/RELIABILITY.md), skipped with JASPER_CI_EXTRA=0:
#   fuzz   clang/libFuzzer build in build-fuzz, each fuzz target run for FUZZ_SECONDS (25) on
#          its committed corpus (a crash fails the run; reproducers land in build-fuzz/artifacts)
#   asan   ASan+UBSan build in build-asan, the whole CTest suite
#   tsan   TSan build in build-tsan: scheduler, stream-session, CPU thread pool, server and
#          multi-model server tests
# Sanitizer builds skip CUDA and build only what their tests need. Each stage's time is printed
# at the end. JOBS (default: nproc) bounds build parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache hits across clones in other folders (CI's clean clone, a developer's tree).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
JOBS=${JOBS:-$(nproc)}
export JOBS
# The compilers of the stages (tools/install_deps.sh installs them; tests/install_deps_test.py
# checks that it does): the main, asan and tsan stages use CMake's default (gcc, build-essential).
FUZZ_CC=clang-14
FUZZ_CXX=clang++-14

TIMES=()
stage() {  # stage NAME COMMAND...: runs it, records its wall time
  local name=$1 start=$SECONDS
  shift
  echo "=== stage $name ===" >&2
  "$@"
  TIMES+=("$name $((SECONDS - start))s")
  echo "=== stage $name done in $((SECONDS - start)) s ===" >&2
}
report() {
  echo "=== stage times: ${TIMES[*]:-none} ===" >&2
}
trap report EXIT

main_build() { BUILD_DIR=${BUILD_DIR:-build} tools/build.sh; }
main_test() {
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" --timeout 900
}

FUZZ_TARGETS=(fuzz_wav fuzz_audio_input fuzz_resample fuzz_model_config fuzz_safetensors
              fuzz_stream_session fuzz_ngram_lm fuzz_codec fuzz_multipart)

fuzz_stage() {
  CC=$FUZZ_CC CXX=$FUZZ_CXX cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DJASPER_CUDA=OFF -DJASPER_FUZZ=ON -DJASPER_BUILD_TESTS=OFF \
    -DJASPER_SANITIZE="address;undefined" \
    -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link -fsanitize-coverage-ignorelist=$PWD/fuzz/coverage_ignorelist.txt" \
    >/dev/null
  # ccache does not hash the ignorelist's contents (only its path is on the command line), so
  # it is named as an extra input: an edited list then recompiles instead of hitting the cache.
  CCACHE_EXTRAFILES="$PWD/fuzz/coverage_ignorelist.txt" \
    cmake --build build-fuzz -j "$JOBS" --target fuzzers
  mkdir -p build-fuzz/artifacts
  for t in "${FUZZ_TARGETS[@]}"; do
    # New inputs go to the first (scratch) folder; the committed seeds are read-only here.
    mkdir -p "build-fuzz/corpus/$t"
    echo "--- $t: ${FUZZ_SECONDS:-25} s ---" >&2
    local log="build-fuzz/artifacts/$t.log" rc=0
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "build-fuzz/fuzz/$t" -max_total_time="${FUZZ_SECONDS:-25}" -timeout=30 \
      -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$t-" \
      "build-fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
    grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)" "$log" >&2 || true
    if [ "$rc" -ne 0 ]; then
      tail -60 "$log" >&2
      echo "fuzz target $t failed (exit $rc; reproducer in build-fuzz/artifacts)" >&2
      return 1
    fi
  done
}

asan_stage() {
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DJASPER_CUDA=OFF \
    -DJASPER_SANITIZE="address;undefined" >/dev/null
  cmake --build build-asan -j "$JOBS"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$(nproc)" --timeout 1800
}

TSAN_TESTS=(scheduler_test task_pool_test stream_session_test stream_session_window_test
  stream_session_threads_test stream_session_codec_test cpu_threads_test server_test
  server_models_test server_audio_formats_test server_http_test server_https_test
  server_channels_test client_ws_test itn_test punctuator_test punct_cnn_test server_text_test)
tsan_stage() {
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DJASPER_CUDA=OFF \
    -DJASPER_SANITIZE=thread >/dev/null
  cmake --build build-tsan -j "$JOBS" --target "${TSAN_TESTS[@]}"
  # One process per suite; any TSan report makes the process exit non-zero (exitcode=66).
  # The server tests need the suppressions for Debian's uninstrumented gRPC/protobuf (tests/).
  # history_size=7 keeps the previous access's stack restorable in long runs: a report whose
  # earlier stack is lost ("failed to restore the stack") cannot match a suppression.
  local t supp
  for t in "${TSAN_TESTS[@]}"; do
    supp=""
    case "$t" in server_* | client_*) supp="suppressions=$PWD/tests/server_test.tsan.supp" ;; esac
    echo "--- $t under TSan ---" >&2
    # A hung suite fails the stage after TSAN_SUITE_TIMEOUT seconds instead of stalling CI.
    TSAN_OPTIONS="second_deadlock_stack=1 history_size=7 $supp ${TSAN_OPTIONS:-}" \
      timeout -k 10 "${TSAN_SUITE_TIMEOUT:-900}" "build-tsan/tests/$t" --gtest_brief=1
  done
}

stage deps tools/install_deps.sh
stage build main_build
stage test main_test
if [ "${JASPER_CI_EXTRA:-1}" = 0 ]; then
  echo "JASPER_CI_EXTRA=0: skipping the fuzz, ASan/UBSan and TSan stages" >&2
  exit 0
fi
stage fuzz fuzz_stage
stage asan asan_stage
stage tsan tsan_stage
