#!/usr/bin/env python3
"""PyTorch eager on the GPU beside tools/bench/cuda_bench (issue 7): the same sub-block shapes and
the whole QuartzNet 15x5, timed the same way, then one table with the ratios to every peer and
the issue's goals checked.

    cuda_bench --precision=fp16 --json=/tmp/ours.json
    python3 tools/bench_cuda_torch.py --ours /tmp/ours.json [--quick] [--json-out FILE]

Modules: tools/peer_models.py (NeMo's sub-block as torch.nn: depthwise Conv1d(groups=C) ->
pointwise Conv1d 1x1 -> BatchNorm1d (eval) -> ReLU; dense: Conv1d K -> BN -> ReLU; the residual
row adds the block's 1x1 conv + BN of a second input before the ReLU), in the precision of the
cuda_bench run, NCW layout (PyTorch's own). cuDNN's autotuner is on (torch.backends.cudnn.
benchmark), so PyTorch gets its best algorithms.

Timing: CUDA events around samples of back-to-back calls (>= ~2 ms each), median of the samples,
after warm-up; inputs rotate over sets >= 2x the L2 size, as in cuda_bench. The model rows time
what the server's Backend::Run does: features from pinned host memory to the GPU, the forward,
the argmax, the ids back to the host (wall clock around synchronised calls).

--device cpu runs the same code on the CPU (FP32 only; a smoke test of this script).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn

from peer_models import FEATURES, QuartzNet15x5, SubBlock, _init_uniform, randomize_bn

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class ResidualSubBlock(nn.Module):
    """The last sub-block of a residual block: relu(sub(x) + bn(conv1x1(r)))."""

    def __init__(self, c, k):
        super().__init__()
        self.sub = SubBlock(c, c, k, relu=False)
        conv = nn.Conv1d(c, c, 1, bias=False)
        _init_uniform(conv.weight, c, 0.5)
        self.res = nn.Sequential(conv, nn.BatchNorm1d(c, eps=1e-3))

    def forward(self, x, r):
        return torch.relu(self.sub(x) + self.res(r))


def median_ms(fn, device, samples):
    """Median milliseconds per call of fn(i), like cuda_bench's MedianMs."""
    cuda = device.type == "cuda"

    def timed(calls, start):
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for i in range(calls):
                fn(start + i)
            end.record()
            end.synchronize()
            return begin.elapsed_time(end)
        t0 = time.perf_counter()
        for i in range(calls):
            fn(start + i)
        return 1e3 * (time.perf_counter() - t0)

    with torch.inference_mode():
        for i in range(5):
            fn(i)
        one = timed(1, 5)
        reps = max(1, min(1000, int(2.0 / max(one, 1e-3))))
        call = 6
        per_call = []
        for _ in range(samples):
            per_call.append(timed(reps, call) / reps)
            call += reps
    return statistics.median(per_call)


def l2_bytes(device):
    if device.type == "cuda":
        return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
    return 32 << 20


def bench_subblock(row, dtype, device, samples):
    c, k, b, t = row["channels"], row["kernel"], row["batch"], row["time"]
    if row["residual"]:
        module = ResidualSubBlock(c, k)
    else:
        module = SubBlock(c, c, k, separable=row["separable"])
    module = randomize_bn(module, c + k).to(device=device, dtype=dtype)
    set_bytes = b * c * t * torch.finfo(dtype).bits // 8 * (2 if row["residual"] else 1)
    sets = max(1, min(16, 2 * l2_bytes(device) // set_bytes + 1))
    xs = [torch.randn(b, c, t, device=device, dtype=dtype) for _ in range(sets)]
    if row["residual"]:
        rs = [torch.randn(b, c, t, device=device, dtype=dtype) for _ in range(sets)]
        return median_ms(lambda i: module(xs[i % sets], rs[i % sets]), device, samples)
    return median_ms(lambda i: module(xs[i % sets]), device, samples)


def bench_model(row, dtype, device, samples):
    model = randomize_bn(QuartzNet15x5(), 20261203).to(device=device, dtype=dtype)
    frames = int(round(row["seconds"] * 100))
    x_host = torch.randn(row["batch"], FEATURES, frames)
    if device.type == "cuda":
        x_host = x_host.pin_memory()
    times = []
    with torch.inference_mode():
        for i in range(3 + samples):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            x = x_host.to(device, non_blocking=True).to(dtype)
            model(x).argmax(dim=1).cpu()  # the ids back on the host, as Backend::Run
            t1 = time.perf_counter()
            if i >= 3:
                times.append(1e3 * (t1 - t0))
    return statistics.median(times)


def ratio(peer, ours):
    if peer is None or ours is None or not math.isfinite(peer) or not math.isfinite(ours):
        return float("nan")
    return peer / ours


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ours", required=True, help="cuda_bench --json output")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json-out", default="")
    args = ap.parse_args()
    ours = json.load(open(args.ours))
    dtype = DTYPES[ours["precision"]]
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("bench_cuda_torch: no CUDA device visible to PyTorch")
        torch.backends.cudnn.benchmark = True
    elif dtype != torch.float32:
        sys.exit("bench_cuda_torch: --device cpu needs an fp32 cuda_bench run")
    samples = 7 if args.quick else 21
    nan = float("nan")

    def num(v):
        return nan if v is None else float(v)

    print(f"=== {ours['device']}, {ours['precision']}: jasper-serve (cuda_bench) vs cuDNN "
          f"{ours['cudnn']} vs PyTorch {torch.__version__} eager ===")
    print(f"{'sub-block (B x T)':26} {'ours ms':>9} {'torch ms':>9} | {'x cuDNN-f':>9} "
          f"{'x cuDNN-op':>10} {'x torch':>8} | {'%roof':>6}")
    goals = []
    for row in ours.get("subblock", []):
        row["torch_ms"] = bench_subblock(row, dtype, device, samples)
        o = num(row["ours_ms"])
        rf, ro = ratio(num(row["cudnn_fused_ms"]), o), ratio(num(row["cudnn_ops_ms"]), o)
        rt = ratio(row["torch_ms"], o)
        roof = 100.0 * num(row["roofline_ms"]) / o
        print(f"{row['name']:26} {o:9.4f} {row['torch_ms']:9.4f} | {rf:8.2f}x {ro:9.2f}x "
              f"{rt:7.2f}x | {roof:5.0f}%")
        if row["separable"] and not row["residual"] and ours["precision"] == "fp16":
            goals.append((f"{row['name']}: >= 1.5x best cuDNN", rf >= 1.5))
            goals.append((f"{row['name']}: >= 2.5x PyTorch eager", rt >= 2.5))
            goals.append((f"{row['name']}: >= 50% of roofline", roof >= 50))
    if ours.get("model"):
        print(f"\n{'QuartzNet 15x5':26} {'ours ms':>9} {'torch ms':>9} | {'ours xRT':>9} "
              f"{'torch xRT':>10} {'x torch':>8}")
    for row in ours.get("model", []):
        row["torch_ms"] = bench_model(row, dtype, device, max(5, samples // 2))
        o = num(row["ms"])
        audio = row["batch"] * row["seconds"]
        print(f"{row['name']:26} {o:9.3f} {row['torch_ms']:9.3f} | {audio / o * 1e3:9.0f} "
              f"{audio / row['torch_ms'] * 1e3:10.0f} {ratio(row['torch_ms'], o):7.2f}x"
              f"{'  error: ' + row['error'] if row.get('error') else ''}")
        if row["batch"] > 1:
            goals.append((f"{row['name']}: >= 50,000x real time", audio / o * 1e3 >= 50000))
        else:
            goals.append((f"{row['name']}: <= 1 ms per forward", o <= 1.0))
    if goals:
        print("\ngoals (issue 7):")
        for name, met in goals:
            print(f"  {'met    ' if met else 'NOT met'}  {name}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(ours, f, indent=2)


if __name__ == "__main__":
    main()
