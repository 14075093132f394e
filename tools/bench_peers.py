#!/usr/bin/env python3
"""Side-by-side CPU benchmark: jasper-serve vs ONNX Runtime vs PyTorch, same shapes, same run.

Builds the QuartzNet 15x5 architecture in plain torch.nn (depthwise Conv1d groups=C -> pointwise
Conv1d -> BatchNorm1d(eps 1e-3) -> ReLU; residual 1x1 Conv1d + BN added before the block's last
ReLU; C1 stride 2, C2 dilation 2, C3 dense 1x1; decoder 1x1 with bias + log-softmax), random
variance-preserving weights, eval mode, no masks. Exports it (and one separable sub-block per
shape) to ONNX (opset 17, legacy TorchScript exporter, dynamic batch/time) and times:

  * ONNX Runtime, CPU EP, graph optimizations ALL, intra_op_num_threads 1 and 2, sequential;
  * PyTorch eager, torch.set_num_threads 1 and 2, torch.inference_mode();
  * jasper-serve: runs `jasper_bench --json=... --case_name=ROW --threads=N` (tools/bench/
    jasper_bench.cc) right after the two peers for the same row, and reads its JSON. Rows are
    interleaved like this so that all three see the same background load.

Shapes (batch 1 unless noted): separable sub-block C=256/K=33 and C=512/K=75 at T=25, 100 and
500 encoder frames; the whole model on 1000 feature frames (10 s) and 320 frames (3.2 s
streaming window) at batch 1 and 8.

Clock: like jasper_bench, a 1-thread row uses the median process CPU time per call (the machine
is shared; CPU time is what the process actually ran), a 2-thread row the median wall time.
Prints one table; ratios are speedups of jasper-serve (peer time / our time, > 1 = ours faster).

Ours = the CPU backend's path: kernels::FusedSubBlockCpuPacked (weights packed at load, own
AVX2/FMA GEMM micro-kernel, residual 1x1 convs concatenated along K). An N-thread row runs it
with N intra-op threads, as ORT and PyTorch do: BackendOptions::cpu_threads = N for the model
rows, and the same split (kernels::FusedSubBlockCpuPackedPart on a CpuThreadPool of N) for the
sub-block rows.

Usage: tools/bench_peers.py [--quick] [--repeats N] [--bench PATH] [--threads 1,2]
                            [--json-out FILE]
Needs: torch, onnx, onnxruntime (pip install onnx onnxruntime).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import onnxruntime as ort
import torch

from peer_models import FEATURES, QuartzNet15x5, SubBlock, randomize_bn

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SUBBLOCK_CASES = [(256, 33, 100), (256, 33, 25), (512, 75, 100), (512, 75, 25), (256, 33, 500),
                  (512, 75, 500)]
MODEL_CASES = [("offline_10s", 1, 1000), ("stream_3.2s", 1, 320), ("stream_3.2s", 8, 320)]


# ---------------------------------------------------------------------------------------------
# ONNX export of the peer models (tools/peer_models.py).

def export_onnx(module, example, path, dynamic_axes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), path, opset_version=17, dynamo=False,
                          input_names=["x"], output_names=["y"], dynamic_axes=dynamic_axes,
                          do_constant_folding=True)


# ---------------------------------------------------------------------------------------------
# Timing (same rules as jasper_bench).

class Plan:
    def __init__(self, warmup, samples, min_sample_s):
        self.warmup, self.samples, self.min_sample_s = warmup, samples, min_sample_s


def measure(fn, plan, threads):
    one = float("inf")
    for _ in range(max(1, plan.warmup)):
        t0 = time.perf_counter()
        fn()
        one = min(one, time.perf_counter() - t0)
    calls = max(1, math.ceil(plan.min_sample_s / max(one, 1e-9)))
    wall, cpu = [], []
    for _ in range(plan.samples):
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(calls):
            fn()
        wall.append((time.perf_counter() - t0) / calls)
        cpu.append((time.process_time() - c0) / calls)
    r = {"wall_ms": 1e3 * statistics.median(wall), "wall_min_ms": 1e3 * min(wall),
         "cpu_ms": 1e3 * statistics.median(cpu), "samples": plan.samples,
         "calls_per_sample": calls}
    r["clock"] = "cpu" if threads == 1 else "wall"
    r["time_ms"] = r["cpu_ms"] if threads == 1 else r["wall_ms"]
    return r


def ort_session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])


def bench_pair(module, onnx_path, x, threads, plan):
    """Times PyTorch eager and ONNX Runtime on input x; checks they agree."""
    torch.set_num_threads(threads)
    with torch.inference_mode():
        ref = module(x)
        t_torch = measure(lambda: module(x), plan, threads)
    sess = ort_session(onnx_path, threads)
    xn = x.numpy()
    out = sess.run(None, {"x": xn})[0]
    t_ort = measure(lambda: sess.run(None, {"x": xn}), plan, threads)
    scale = max(1e-6, float(ref.abs().max()))
    t_ort["max_rel_diff_vs_torch"] = float(np.abs(out - ref.numpy()).max()) / scale
    return t_torch, t_ort


# ---------------------------------------------------------------------------------------------
# Runs.

def run_all(args, workdir):
    """Measures every row as torch, ORT, then ours back to back (interleaved, so that all three
    see the same background load on a shared machine)."""
    quick = args.quick
    ours = run_ours(args, workdir, ["--sections=peak"])
    ours["subblock"], ours["model"] = [], []
    small = Plan(2 if quick else 3, 5 if quick else 15, 0.005 if quick else 0.02)
    big = Plan(1 if quick else 2, 3 if quick else 7, 0.0)
    threads_list = args.threads
    results = {"subblock": [], "model": []}
    torch.manual_seed(0)

    if "subblock" in args.sections:
        exported = {}
        for c, k, t in SUBBLOCK_CASES:
            key = (c, k)
            if key not in exported:
                m = randomize_bn(SubBlock(c, c, k), 1 + c + k)
                path = os.path.join(workdir, f"sub_c{c}_k{k}.onnx")
                export_onnx(m, torch.randn(1, c, 100), path, {"x": {0: "b", 2: "t"}})
                exported[key] = (m, path)
            m, path = exported[key]
            x = torch.rand(1, c, t) * 2 - 1
            flops = 2.0 * t * (c * k + c * c)
            for th in threads_list:
                t_torch, t_ort = bench_pair(m, path, x, th, small)
                for r in (t_torch, t_ort):
                    r["gflops"] = flops / (r["time_ms"] * 1e-3) * 1e-9
                name = f"sep_c{c}_k{k}_t{t}"
                ours["subblock"] += run_ours(args, workdir, [
                    "--sections=subblock", f"--case_name={name}", f"--threads={th}"])["subblock"]
                results["subblock"].append({"name": name, "threads": th, "flops": flops,
                                            "torch": t_torch, "ort": t_ort})
                print(f"  {name} thr {th}: torch {t_torch['time_ms']:.3f} ms, "
                      f"ort {t_ort['time_ms']:.3f} ms, ours {ours['subblock'][-1]['time_ms']:.3f} "
                      "ms", file=sys.stderr, flush=True)

    if "model" in args.sections:
        model = randomize_bn(QuartzNet15x5(), 20261202)
        path = os.path.join(workdir, "quartznet15x5.onnx")
        export_onnx(model, torch.randn(1, FEATURES, 320), path, {"x": {0: "b", 2: "t"}})
        for name, batch, frames in MODEL_CASES:
            x = torch.rand(batch, FEATURES, frames) * 2 - 1
            audio_s = 0.01 * frames * batch
            for th in threads_list:
                t_torch, t_ort = bench_pair(model, path, x, th, big)
                for r in (t_torch, t_ort):
                    r["rtfx"] = audio_s / (r["time_ms"] * 1e-3)
                ours["model"] += run_ours(args, workdir, [
                    "--sections=model", f"--case_name={name}_b{batch}",
                    f"--threads={th}"])["model"]
                results["model"].append({"name": name, "batch": batch, "frames": frames,
                                         "threads": th, "audio_s": audio_s, "torch": t_torch,
                                         "ort": t_ort})
                print(f"  {name} b{batch} thr {th}: torch {t_torch['time_ms']:.1f} ms, "
                      f"ort {t_ort['time_ms']:.1f} ms, ours {ours['model'][-1]['time_ms']:.1f} ms",
                      file=sys.stderr, flush=True)
    return ours, results


def best_of(ours_a, peers_a, ours_b, peers_b):
    """Per row and engine, keeps the measurement with the lower time (rows are in the same order
    in every repetition)."""
    for section in ("subblock", "model"):
        for i, row in enumerate(ours_b.get(section, [])):
            if row["time_ms"] < ours_a[section][i]["time_ms"]:
                ours_a[section][i] = row
        for i, row in enumerate(peers_b.get(section, [])):
            for engine in ("torch", "ort"):
                if row[engine]["time_ms"] < peers_a[section][i][engine]["time_ms"]:
                    peers_a[section][i][engine] = row[engine]
    ours_a["peak_gflops_1t"] = max(ours_a.get("peak_gflops_1t", 0), ours_b.get("peak_gflops_1t", 0))
    return ours_a, peers_a


def find_bench(path):
    if path:
        return path
    for cand in ("build/tools/bench/jasper_bench", "build-perf/tools/bench/jasper_bench",
                 "build-bench/tools/bench/jasper_bench"):
        full = os.path.join(REPO, cand)
        if os.path.exists(full):
            return full
    sys.exit("jasper_bench not found; build it (see docs/PERFORMANCE.md) or pass --bench")


def run_ours(args, workdir, extra):
    """Runs jasper_bench with `extra` flags and returns its JSON."""
    out = os.path.join(workdir, "ours.json")
    cmd = [find_bench(args.bench), f"--json={out}"] + extra
    if args.quick:
        cmd.append("--quick")
    print("running: " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"jasper_bench failed ({proc.returncode}):\n{proc.stderr}")
    with open(out) as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------------
# Table.

def ratio(peer_ms, ours_ms):
    return peer_ms / ours_ms if ours_ms > 0 else float("nan")


def print_table(ours, peers):
    ours_sub = {(r["name"], r["threads"]): r for r in ours.get("subblock", [])}
    ours_model = {(r["name"], r["batch"], r["threads"]): r for r in ours.get("model", [])}
    head = (f"{'row':<26} {'thr':>3} {'clock':>5} | {'ours ms':>9} {'ORT ms':>9} {'Torch ms':>9}"
            f" | {'ours':>7} {'ORT':>7} {'Torch':>7} | {'ours/ORT':>8} {'ours/Torch':>10}")
    lines = []
    if peers["subblock"]:
        lines.append("Separable sub-block, batch 1 (speed column: GFLOP/s = 2T(CK+C^2)/time)")
        lines.append(head)
        for p in peers["subblock"]:
            o = ours_sub.get((p["name"], p["threads"]))
            if o is None:
                continue
            om, tm, pm = o["time_ms"], p["ort"]["time_ms"], p["torch"]["time_ms"]
            lines.append(
                f"{p['name']:<26} {p['threads']:>3} {o['clock']:>5} | {om:>9.3f} {tm:>9.3f} "
                f"{pm:>9.3f} | {o['gflops']:>7.1f} {p['ort']['gflops']:>7.1f} "
                f"{p['torch']['gflops']:>7.1f} | {ratio(tm, om):>7.2f}x {ratio(pm, om):>9.2f}x")
    if peers["model"]:
        lines.append("")
        lines.append("QuartzNet 15x5, encoder + decoder + log-softmax (speed column: RTFx = "
                     "audio s / time; last column: our GFLOP/s)")
        lines.append(head + f" | {'ours GF/s':>9}")
        for p in peers["model"]:
            o = ours_model.get((p["name"], p["batch"], p["threads"]))
            if o is None:
                continue
            row = f"{p['name']} b{p['batch']} T{p['frames']}"
            om, tm, pm = o["time_ms"], p["ort"]["time_ms"], p["torch"]["time_ms"]
            lines.append(
                f"{row:<26} {p['threads']:>3} {o['clock']:>5} | {om:>9.1f} {tm:>9.1f} "
                f"{pm:>9.1f} | {o['rtfx_primary']:>7.1f} {p['ort']['rtfx']:>7.1f} "
                f"{p['torch']['rtfx']:>7.1f} | {ratio(tm, om):>7.2f}x {ratio(pm, om):>9.2f}x"
                f" | {o['flops'] / (om * 1e-3) * 1e-9:>9.1f}")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples (noisier, ~3x faster)")
    ap.add_argument("--bench", default="", help="path to jasper_bench (default: build dirs)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--sections", default="subblock,model", help="subblock and/or model")
    ap.add_argument("--json-out", default="", help="write all results (ours + peers) here")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run the whole interleaved sequence this many times and report, per row "
                         "and engine, the best (lowest) median (the machine is shared)")
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",") if t]
    args.sections = [s for s in args.sections.split(",") if s]

    load_start = open("/proc/loadavg").read().split()[:3]
    print(f"ORT {ort.__version__}, torch {torch.__version__}, load average {' '.join(load_start)}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="jasper_peers_") as workdir:
        ours, peers = run_all(args, workdir)
        for rep in range(1, max(1, args.repeats)):
            print(f"repetition {rep + 1} of {args.repeats}", file=sys.stderr, flush=True)
            ours, peers = best_of(ours, peers, *run_all(args, workdir))
    load_end = open("/proc/loadavg").read().split()[:3]
    print(f"\n=== jasper-serve vs ONNX Runtime {ort.__version__} vs PyTorch {torch.__version__} "
          f"(CPU: {ours['machine']['cpu']}, FP32 FMA peak 1 thread "
          f"{ours.get('peak_gflops_1t', 0):.0f} GFLOP/s; load {' '.join(load_start)} -> "
          f"{' '.join(load_end)}) ===")
    print("time: 1 thread = median process CPU time per call, 2 threads = median wall time; "
          f"best of {max(1, args.repeats)} repetition(s) per row and engine; "
          "ratios = peer time / our time (> 1: ours faster)")
    print_table(ours, peers)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"ours": ours, "peers": peers, "load_start": load_start,
                       "load_end": load_end, "ort_version": ort.__version__,
                       "torch_version": torch.__version__}, f, indent=2)


if __name__ == "__main__":
    main()
