#!/usr/bin/env bash
# A long fuzz campaign for one target (issue 8; docs/RELIABILITY.md): JOBS libFuzzer processes
# of build-fuzz/fuzz/TARGET for SECONDS each, at nice 19, with distinct seeds. Each process
# writes new inputs to its own scratch corpus and reads the others' and the committed seeds.
# At the end it prints each process's executions and the total, and appends one line to
# CAMPAIGN_DIR/tally.tsv (UTC end time, target, commit, seconds, jobs, executions, result).
#
# Usage: tools/fuzz_campaign.sh TARGET SECONDS [JOBS]
# Env: FUZZ_BUILD (build-fuzz; build it with `tools/test.sh`'s fuzz stage), CAMPAIGN_DIR
# (build-fuzz/campaign/TARGET: corpora, logs, crash artifacts), SEED_BASE (random).
# Exit status: 0 when no process found a crash, timeout or OOM (interrupted ones count as
# clean), 1 otherwise (the reproducer is in CAMPAIGN_DIR, named by the log).
#
# Stop a campaign with SIGINT (Ctrl-C) or SIGTERM: both are passed on as SIGINT, libFuzzer
# prints its final statistics and the executions so far are counted. Do not pause it with
# SIGSTOP: wall-clock timers (libFuzzer's -timeout, fuzz_stream_session's 20 s hang check)
# expire while it is stopped and report false hangs when it resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:?usage: tools/fuzz_campaign.sh TARGET SECONDS [JOBS]}
SECONDS_EACH=${2:?usage: tools/fuzz_campaign.sh TARGET SECONDS [JOBS]}
JOBS=${3:-$(nproc)}
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
BIN="$FUZZ_BUILD/fuzz/$TARGET"
SEEDS="fuzz/corpus/$TARGET"
CAMPAIGN_DIR=${CAMPAIGN_DIR:-$FUZZ_BUILD/campaign/$TARGET}
SEED_BASE=${SEED_BASE:-$((RANDOM * 32768 + RANDOM))}
if [ ! -x "$BIN" ]; then
  echo "fuzz_campaign: $BIN not found; build it first (tools/test.sh, fuzz stage)" >&2
  exit 2
fi
if [ ! -d "$SEEDS" ]; then
  echo "fuzz_campaign: no committed seeds in $SEEDS" >&2
  exit 2
fi
case "$SECONDS_EACH$JOBS" in
  *[!0-9]*) echo "fuzz_campaign: SECONDS and JOBS must be positive integers" >&2; exit 2 ;;
esac
if [ "$SECONDS_EACH" -lt 1 ] || [ "$JOBS" -lt 1 ]; then
  echo "fuzz_campaign: SECONDS and JOBS must be positive integers" >&2
  exit 2
fi
mkdir -p "$CAMPAIGN_DIR"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)

CORPORA=()
for ((j = 0; j < JOBS; ++j)); do
  mkdir -p "$CAMPAIGN_DIR/corpus$j"
  CORPORA+=("$CAMPAIGN_DIR/corpus$j")
done
PIDS=()
for ((j = 0; j < JOBS; ++j)); do
  # Own corpus first (new inputs go there), then the others', then the committed seeds.
  dirs=("${CORPORA[$j]}")
  for ((k = 0; k < JOBS; ++k)); do [ "$k" -ne "$j" ] && dirs+=("${CORPORA[$k]}"); done
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 nice -n 19 "$BIN" \
    -max_total_time="$SECONDS_EACH" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
    -seed=$((SEED_BASE + j)) -artifact_prefix="$CAMPAIGN_DIR/$STAMP-$j-" \
    "${dirs[@]}" "$SEEDS" >"$CAMPAIGN_DIR/$STAMP-$j.log" 2>&1 &
  PIDS+=($!)
done
stop() { kill -INT "${PIDS[@]}" 2>/dev/null || true; }
trap stop INT TERM
echo "fuzz_campaign: $TARGET, $JOBS x ${SECONDS_EACH}s, seeds $SEED_BASE.., logs $CAMPAIGN_DIR/$STAMP-*.log" >&2

TOTAL=0
FAILED=0
for ((j = 0; j < JOBS; ++j)); do
  rc=0
  # `wait` returns early when a trapped signal arrives; wait again until the process is gone.
  while true; do
    wait "${PIDS[$j]}" && rc=0 || rc=$?
    kill -0 "${PIDS[$j]}" 2>/dev/null || break
  done
  log="$CAMPAIGN_DIR/$STAMP-$j.log"
  runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\)/\1/p' "$log" | tail -n1)
  runs=${runs:-0}
  TOTAL=$((TOTAL + runs))
  # libFuzzer exits 0 at max_total_time and 72 when interrupted; anything else is a finding.
  state=clean
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 72 ]; then
    state="FAILED (exit $rc)"
    FAILED=1
    grep -E "==[0-9]+==ERROR|SUMMARY|Test unit written" "$log" >&2 || tail -20 "$log" >&2
  fi
  echo "process $j: $runs executions, $state ($log)"
done
RESULT=$([ "$FAILED" -eq 0 ] && echo clean || echo FAILED)
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$TARGET" "$COMMIT" \
  "$SECONDS_EACH" "$JOBS" "$TOTAL" "$RESULT" >>"$CAMPAIGN_DIR/tally.tsv"
echo "total: $TOTAL executions of $TARGET ($RESULT); all campaigns so far:" \
  "$(awk -F'\t' '{n += $6} END {print n}' "$CAMPAIGN_DIR/tally.tsv")" \
  "(tally: $CAMPAIGN_DIR/tally.tsv)"
exit "$FAILED"
