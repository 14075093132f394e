#!/usr/bin/env bash
# Issue 19's GPU training run in one device call (docs/TRAINING.md).
#
# Runs tools/gpu_train_job.py on the pack built by tools/pack_speech_data.py, which the call
# must carry (tools/.work/gpu_pack is git-ignored). Results go to $OUT (the device tool's
# output folder), else tools/.work/gpu_out. Extra arguments go to the job, e.g. a rehearsal here:
#   OMP_NUM_THREADS=1 nice -n 19 bash tools/gpu_train.sh --device cpu --tiny
# On the GPU machine (run tool: carry ["tools/.work/gpu_pack"], timeout_s 600):
#   bash tools/gpu_train.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python3 || command -v python)}
OUT=${OUT:-tools/.work/gpu_out}
PACK=${PACK:-tools/.work/gpu_pack}
mkdir -p "$OUT"
{
  echo "host $(hostname) cores $(getconf _NPROCESSORS_ONLN) python $("$PY" -V 2>&1)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
      --format=csv,noheader || echo "no nvidia-smi"
  echo "pack $PACK: $(du -sh "$PACK" | cut -f1)"
} | tee "$OUT/host.txt"
exec "$PY" tools/gpu_train_job.py --pack "$PACK" --out "$OUT" "$@"
