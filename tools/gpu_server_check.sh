#!/usr/bin/env bash
# tools/gpu_server_check.sh: the server half of tools/gpu_check.sh (issue 20), one subcommand
# per step so that gpu_check.sh gives each its own timeout.
#
#   gpu_server_check.sh transcripts BIN_DIR MODEL_DIR OUT_DIR
#       Makes a few longer WAVs (heldout clips joined: ~20 s and ~60 s) beside the shipped
#       samples and the held-out clips; transcribes them all with jasper-server --device=cpu,
#       then --device=cuda at each --gpu_precision (fp32, fp16, bf16), through Recognize and
#       StreamingRecognize (jasper-client); every CUDA transcript must equal the CPU one.
#       Writes OUT_DIR/transcripts.tsv (file, mode, device, precision, transcript).
#   gpu_server_check.sh capacity BIN_DIR MODEL_DIR OUT_DIR [N ...]
#       jasper-server --device=cuda --gpu_precision=fp16 on MODEL_DIR (QuartzNet 15x5 with random
#       weights: tools/make_random_model.py), then jasper-client --mode=streaming
#       --simulate_realtime --interim_results --parallel=N for each N (default 256 1024 2048
#       4096 8192) while every call succeeds and p99 final latency <= CAPACITY_FINAL_P99_MS (500);
#       p99 partial latency is reported, and a stop rule too when CAPACITY_PARTIAL_P99_MS is set
#       (off by default: the client counts a word's partial latency from the first interim that
#       spells it as the final does, which random weights never make meaningful). Per N:
#       the latencies, the calls' statuses, GPU utilization and memory (nvidia-smi, sampled every
#       500 ms), server and client CPU seconds per stream. Writes OUT_DIR/capacity.json.
#       The streaming windows are Riva's low-latency setting (0.16 s chunks, 1.92 s of context
#       each side: partial text every 160 ms); CAPACITY_STREAMING_FLAGS replaces them.
#       CAPACITY_DEVICE=cpu runs the same step on the CPU backend (a rehearsal without a GPU).
# Exit: 0 pass, 1 fail, 77 no GPU (the CUDA server cannot start: reported as SKIPPED).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cmd=${1:?usage: $0 transcripts|capacity BIN_DIR MODEL_DIR OUT_DIR [N ...]}
bin=${2:?BIN_DIR}
model=${3:?MODEL_DIR}
out=${4:?OUT_DIR}
shift 4
mkdir -p "$out"
server_pid=""
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"
    wait "$server_pid" 2>/dev/null
  fi
  server_pid=""
}
trap stop_server EXIT

# start_server LOG FLAGS...: starts jasper-server on a free loopback port; sets $port.
# Returns 77 when a CUDA server cannot start for want of a GPU, 1 on any other failure.
start_server() {
  local log=$1
  shift
  "$bin/jasper-server" --model_dir="$model" --listen=127.0.0.1:0 "$@" >"$log" 2>&1 &
  server_pid=$!
  port=""
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*(port \([0-9][0-9]*\)).*/\1/p' "$log" | head -n1)
    [ -n "$port" ] && return 0
    if ! kill -0 "$server_pid" 2>/dev/null; then
      server_pid=""
      tail -5 "$log" >&2
      if [[ " $* " == *" --device=cuda "* ]] &&
        { ! nvidia-smi -L >/dev/null 2>&1 || grep -qiE "no CUDA|CUDA driver|cudaErrorNoDevice|no CUDA-capable" "$log"; }; then
        return 77
      fi
      return 1
    fi
    sleep 0.1
  done
  echo "jasper-server did not start within 60 s" >&2
  return 1
}

# client ARGS...: jasper-client against the running server.
client() { "$bin/jasper-client" --server="127.0.0.1:$port" "$@"; }

transcripts() {
  local audio=$out/audio
  mkdir -p "$audio"
  cp "$model"/samples/*.wav "$repo"/tests/fixtures/heldout/heldout_0*.wav "$audio/"
  # Longer files: held-out clips joined (same rate and format), ~20 s and ~60 s.
  python3 - "$repo/tests/fixtures/heldout" "$audio" <<'EOF' || return 1
import glob, os, sys, wave
clips = sorted(glob.glob(os.path.join(sys.argv[1], "heldout_*.wav")))
for name, seconds in (("long_20s.wav", 20), ("long_60s.wav", 60)):
    frames, params, total = [], None, 0.0
    for i in range(1000):
        with wave.open(clips[i % len(clips)], "rb") as w:
            params = params or w.getparams()
            frames.append(w.readframes(w.getnframes()))
            total += w.getnframes() / w.getframerate()
        if total >= seconds:
            break
    with wave.open(os.path.join(sys.argv[2], name), "wb") as w:
        w.setparams(params)
        w.writeframes(b"".join(frames))
EOF
  local table=$out/transcripts.tsv rc=0 device precision mode
  : >"$table"
  for device in cpu cuda; do
    for precision in fp32 fp16 bf16; do
      [ "$device" = cpu ] && [ "$precision" != fp32 ] && continue
      start_server "$out/server-$device-$precision.log" --device="$device" \
        --gpu_precision="$precision" || return $?
      for mode in offline streaming; do
        client --mode="$mode" --report=false "$audio"/*.wav 2>"$out/client-$device-$precision-$mode.err" |
          sed -n 's/^\(.*\.wav\): \(.*\)$/\1\t\2/p' | sort |
          while IFS=$'\t' read -r file text; do
            printf '%s\t%s\t%s\t%s\t%s\n' "$(basename "$file")" "$mode" "$device" "$precision" "$text"
          done >>"$table"
      done
      stop_server
    done
  done
  local files
  files=$(ls "$audio"/*.wav | wc -l)
  printf '%-10s %-10s %-26s\n' precision mode "identical to CPU (files)"
  for precision in fp32 fp16 bf16; do
    for mode in offline streaming; do
      local same total
      total=$(awk -F'\t' -v m="$mode" -v p="$precision" '$2==m && $3=="cuda" && $4==p' "$table" | wc -l)
      same=$(awk -F'\t' -v m="$mode" -v p="$precision" '
        $2==m && $3=="cpu" {ref[$1]=$5}
        $2==m && $3=="cuda" && $4==p && ($1 in ref) && ref[$1]==$5 {n++}
        END {print n+0}' "$table")
      printf '%-10s %-10s %s/%s\n' "$precision" "$mode" "$same" "$files"
      if [ "$same" -ne "$files" ] || [ "$total" -ne "$files" ]; then rc=1; fi
    done
  done
  return $rc
}

# cpu_seconds PID: user+system CPU seconds of a process so far.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo 0
}

capacity() {
  local levels=("$@")
  [ ${#levels[@]} -gt 0 ] || levels=(256 1024 2048 4096 8192)
  local audio=$out/capacity-audio
  mkdir -p "$audio"
  cp "$repo"/tests/fixtures/heldout/heldout_0*.wav "$audio/"
  # CAPACITY_DEVICE=cpu rehearses the step (and its parsing) on a machine without a GPU.
  start_server "$out/server-capacity.log" --device="${CAPACITY_DEVICE:-cuda}" --gpu_precision=fp16 \
    --max_concurrent_streams=100000 --max_batch_size=256 --max_queued_windows=1000000 \
    --num_workers=1 ${CAPACITY_STREAMING_FLAGS:---chunk_ms=160 --left_context_ms=1920 --right_context_ms=1920} \
    || return $?
  local json=$out/capacity.json first=1 rc=0 n
  echo "[" >"$json"
  printf '%7s %10s %10s %10s %10s %8s %10s %12s %12s\n' streams final_p50 final_p99 \
    partial_p99 calls_ok gpu_util gpu_mem_mb srv_cpu_s/st cli_cpu_s/st
  for n in "${levels[@]}"; do
    local smi=$out/nvidia-smi-$n.csv report=$out/client-$n.json
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits \
      -lms 500 >"$smi" 2>/dev/null &
    local smi_pid=$! s0 c0 t0=$SECONDS
    s0=$(cpu_seconds "$server_pid")
    # N streams at once, each a held-out clip (~2 s) sent in real time; 2N calls in all (the
    # client's --iterations repeats the file list), so every level holds N open streams.
    local files iterations
    files=$(ls "$audio"/*.wav | wc -l)
    iterations=$(((2 * n + files - 1) / files))
    # The client's CPU time: getrusage of the child (no /usr/bin/time on the GPU machine).
    python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{r.ru_utime} {r.ru_stime}\n")
sys.exit(rc)' "$out/client-$n.time" "$bin/jasper-client" \
      --server="127.0.0.1:$port" --mode=streaming --simulate_realtime --interim_results \
      --parallel="$n" --iterations="$iterations" --output=json --timeout_ms=120000 "$audio" \
      >"$report" 2>"$out/client-$n.err"
    local client_rc=$? s1
    s1=$(cpu_seconds "$server_pid")
    kill "$smi_pid" 2>/dev/null
    wait "$smi_pid" 2>/dev/null
    python3 - "$report" "$smi" "$out/client-$n.time" "$n" "$s0" "$s1" "$client_rc" \
      "$((SECONDS - t0))" >"$out/level-$n.json" <<'EOF'
import json, sys
report_path, smi_path, time_path, n, s0, s1, client_rc, wall = sys.argv[1:]
n = int(n)
lines = [l for l in open(report_path) if l.startswith("{")]
report = json.loads(lines[-1]) if lines else {}
report = report.get("report", report)  # the client's last line: {"report": {...}}
lat = report.get("latency", {})
util, mem = [], []
for line in open(smi_path):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == 2 and parts[0].isdigit():
        util.append(int(parts[0])); mem.append(int(parts[1]))
try:
    user, system = map(float, open(time_path).read().split()[-2:])
except Exception:
    user = system = float("nan")
calls = report.get("calls", {})
streams = max(1, sum(calls.values()))
print(json.dumps({
    "streams": n, "client_rc": int(client_rc), "wall_s": int(wall), "calls": calls,
    "final_p50_ms": lat.get("final", {}).get("p50_ms"), "final_p99_ms": lat.get("final", {}).get("p99_ms"),
    "partial_p99_ms": lat.get("partial", {}).get("p99_ms"),
    "gpu_util_mean": sum(util) / len(util) if util else None, "gpu_util_max": max(util) if util else None,
    "gpu_mem_max_mb": max(mem) if mem else None,
    "server_cpu_s_per_stream": (float(s1) - float(s0)) / streams,
    "client_cpu_s_per_stream": (user + system) / streams}))
EOF
    python3 - "$out/level-$n.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"
ok = d["calls"].get("OK", 0)
print(f'{d["streams"]:7d} {f(d["final_p50_ms"]):>10} {f(d["final_p99_ms"]):>10} {f(d["partial_p99_ms"]):>10} '
      f'{ok:10d} {f(d["gpu_util_mean"]):>8} {f(d["gpu_mem_max_mb"], 0):>10} '
      f'{f(d["server_cpu_s_per_stream"], 3):>12} {f(d["client_cpu_s_per_stream"], 3):>12}')
EOF
    [ "$first" = 1 ] || echo "," >>"$json"
    first=0
    cat "$out/level-$n.json" >>"$json"
    # Stop stepping up once a level misses the latency goals or a call failed.
    if ! python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
ok = d["calls"].get("OK", 0) == sum(d["calls"].values()) and d["client_rc"] == 0
good = ok and (d["final_p99_ms"] or 1e9) <= float(sys.argv[2])
if float(sys.argv[3]) > 0:
    good = good and (d["partial_p99_ms"] or 1e9) <= float(sys.argv[3])
sys.exit(0 if good else 1)' "$out/level-$n.json" "${CAPACITY_FINAL_P99_MS:-500}" \
      "${CAPACITY_PARTIAL_P99_MS:-0}"; then
      echo "stopped at $n streams: a latency goal missed or a call failed (see $out/client-$n.err)"
      break
    fi
  done
  echo "]" >>"$json"
  stop_server
  return $rc
}

case "$cmd" in
  transcripts) transcripts ;;
  capacity) capacity "$@" ;;
  *) echo "unknown subcommand $cmd" >&2; exit 2 ;;
esac
