#!/usr/bin/env python3
"""Side-by-side CPU benchmark: jasper-serve vs ONNX Runtime, OpenVINO and PyTorch, same shapes.

Builds the QuartzNet 15x5 architecture in plain torch.nn (depthwise Conv1d groups=C -> pointwise
Conv1d -> BatchNorm1d(eps 1e-3) -> ReLU; residual 1x1 Conv1d + BN added before the block's last
ReLU; C1 stride 2, C2 dilation 2, C3 dense 1x1; decoder 1x1 with bias + log-softmax), random
variance-preserving weights, eval mode, no masks. Exports it (and one separable sub-block per
shape) to ONNX (opset 17, legacy TorchScript exporter, BN folded, dynamic batch/time) and times,
per row, one after the other (tools/bench_peer_engines.py has the ONNX peers):

  * PyTorch eager, torch.set_num_threads(N), torch.inference_mode();
  * ONNX Runtime FP32: CPU EP, graph optimizations ALL, intra_op_num_threads N, sequential;
  * ONNX Runtime INT8: the same export statically quantized (QDQ, per-channel symmetric INT8
    weights, UINT8 activations: the U8S8 pair MLAS runs with AVX512-VNNI / AMX; MinMax
    calibration on a few random-normal inputs of the first row's shape, random like the
    weights), once per export; same session options;
  * OpenVINO CPU, f32 (INFERENCE_PRECISION_HINT f32) and default precision (what it picks: BF16
    on AMX / AVX512-BF16 CPUs): INFERENCE_NUM_THREADS N, PERFORMANCE_HINT LATENCY, one
    synchronous infer request; the export reshaped to the row's static shape before compiling
    (--ov-dynamic keeps batch/time dynamic);
  * jasper-serve: `jasper_bench --json=... --case_name=ROW --threads=N --precision=P`
    (tools/bench/jasper_bench.cc) for each P of --precisions, right after the peers, read from
    its JSON. Rows are interleaved like this so that every engine sees the same background load.

Outputs are checked against ORT FP32 on every row (PyTorch against ORT FP32 too; ORT INT8 and
OpenVINO BF16 are approximate: cosine of the per-frame-centred log-probs, argmax agreement).

Shapes (batch 1 unless noted): separable sub-block C=256/K=33 and C=512/K=75 at T=25, 100 and
500 encoder frames; the whole model on 1000 feature frames (10 s) and 320 frames (3.2 s
streaming window) at batch 1 and 8.

Clock: like jasper_bench, a 1-thread row uses the median process CPU time per call (the machine
is shared; CPU time is what the process actually ran), a 2-thread row the median wall time.
Prints the CPU flags that matter and the peer versions, then one table per section: every
engine's time per call (sub-blocks) or x real time (model), and ratios of our fastest precision
vs each peer (peer time / our time, > 1 = ours faster), with the fastest peer of each row.

Ours = the CPU backend's path: kernels::FusedSubBlockCpuPacked (weights packed at load, own
GEMM micro-kernel, residual 1x1 convs concatenated along K). An N-thread row runs it with N
intra-op threads, as the peers do: BackendOptions::cpu_threads = N for the model rows, and the
same split (kernels::FusedSubBlockCpuPackedPart on a CpuThreadPool of N) for the sub-block rows.

Usage: tools/bench_peers.py [--quick] [--repeats N] [--bench PATH] [--threads 1,2]
                            [--sections subblock,model] [--precisions fp32,bf16]
                            [--peers ort,ort_int8,ov_f32,ov_default,torch] [--ov-dynamic]
                            [--json-out FILE]
Needs: torch, onnx, onnxruntime; optional: openvino (pip install -r tools/requirements-bench.txt).
Missing optional peers are skipped with a note.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch

import bench_peer_engines as pe
from peer_models import FEATURES, QuartzNet15x5, SubBlock, randomize_bn

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SUBBLOCK_CASES = [(256, 33, 100), (256, 33, 25), (512, 75, 100), (512, 75, 25), (256, 33, 500),
                  (512, 75, 500)]
MODEL_CASES = [("offline_10s", 1, 1000), ("stream_3.2s", 1, 320), ("stream_3.2s", 8, 320)]
PRECISIONS = ("fp32", "bf16", "int8")  # jasper_bench --precision


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


def time_peers(args, module, onnx_path, x, threads, plan, calib_shape, logprobs):
    """Times PyTorch, then each ONNX peer, on input x; checks every output against ORT FP32."""
    engines = {}
    torch.set_num_threads(threads)
    with torch.inference_mode():
        ref_torch = module(x).numpy()
        if "torch" in args.peers:
            engines["torch"] = measure(lambda: module(x), plan, threads)
    xn, ref = x.numpy(), None
    for key in [k for k, _ in pe.PEERS if k in args.peers and k != "torch"]:
        try:
            run, info = pe.make_runner(key, onnx_path, xn, threads, calib_shape,
                                       ov_static=not args.ov_dynamic)
            out = run()
            r = measure(run, plan, threads)
        except Exception as e:  # pylint: disable=broad-except
            engines[key] = {"error": f"{type(e).__name__}: {e}"}
            print(f"  {pe.LABELS[key]} failed: {engines[key]['error']}", file=sys.stderr)
            continue
        finally:
            run = None  # frees the session / compiled model before the next engine runs
        r.update(info)
        if key == "ort":  # first in pe.PEERS: the reference of the others
            ref = out
            r["vs_torch"] = pe.compare(out, ref_torch, logprobs)
        elif ref is not None:
            r["vs_ort_fp32"] = pe.compare(out, ref, logprobs)
        engines[key] = r
    if "torch" in engines and ref is not None:
        engines["torch"]["vs_ort_fp32"] = pe.compare(ref_torch, ref, logprobs)
    return engines


# ---------------------------------------------------------------------------------------------
# Ours.

def find_bench(path):
    if path:
        return path
    for cand in ("build/tools/bench/jasper_bench", "build-perf/tools/bench/jasper_bench",
                 "build-bench/tools/bench/jasper_bench"):
        full = os.path.join(REPO, cand)
        if os.path.exists(full):
            return full
    sys.exit("jasper_bench not found; build it (see docs/PERFORMANCE.md) or pass --bench")


def bench_has_precision_flag(bench):
    proc = subprocess.run([bench, "--helpfull"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    return re.search(r"--precision\b", proc.stdout) is not None


def run_ours(args, workdir, extra, precision=None):
    """Runs jasper_bench with `extra` flags (and --precision where given) and returns its JSON."""
    out = os.path.join(workdir, "ours.json")
    cmd = [args.bench, f"--json={out}"] + extra
    if precision is not None and args.bench_precision_flag:
        cmd.append(f"--precision={precision}")
    if args.quick:
        cmd.append("--quick")
    print("running: " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"jasper_bench failed ({proc.returncode}):\n{proc.stderr}")
    with open(out) as f:
        return json.load(f)


def time_ours(args, workdir, section, case_name, threads):
    engines = {}
    for p in args.precisions:
        rows = run_ours(args, workdir, [f"--sections={section}", f"--case_name={case_name}",
                                        f"--threads={threads}"], p)[section]
        engines[f"jasper_{p}"] = dict(rows[0], precision=p)
    return engines


# ---------------------------------------------------------------------------------------------
# Runs.

def log_row(label, threads, engines, unit_ms_fmt):
    parts = [f"{k} {unit_ms_fmt.format(r['time_ms'])}" for k, r in engines.items() if "time_ms" in r]
    print(f"  {label} thr {threads}: " + ", ".join(parts) + " ms", file=sys.stderr, flush=True)


def run_all(args, workdir):
    """Measures every row: the peers, then ours per precision, back to back (interleaved, so that
    all engines see the same background load on a shared machine)."""
    quick = args.quick
    meta = run_ours(args, workdir, ["--sections=peak"])
    small = Plan(2 if quick else 3, 5 if quick else 15, 0.005 if quick else 0.02)
    big = Plan(1 if quick else 2, 3 if quick else 7, 0.0)
    results = {"subblock": [], "model": []}
    torch.manual_seed(0)

    if "subblock" in args.sections:
        exported = {}
        for c, k, t in SUBBLOCK_CASES:
            if (c, k) not in exported:
                m = randomize_bn(SubBlock(c, c, k), 1 + c + k)
                path = os.path.join(workdir, f"sub_c{c}_k{k}.onnx")
                export_onnx(m, torch.randn(1, c, 100), path, {"x": {0: "b", 2: "t"}})
                exported[(c, k)] = (m, path, (1, c, t))  # INT8 calibrated on the first row's shape
            m, path, calib_shape = exported[(c, k)]
            x = torch.rand(1, c, t) * 2 - 1
            name = f"sep_c{c}_k{k}_t{t}"
            for th in args.threads:
                engines = time_peers(args, m, path, x, th, small, calib_shape, logprobs=False)
                engines.update(time_ours(args, workdir, "subblock", name, th))
                results["subblock"].append({"name": name, "threads": th, "channels": c,
                                            "kernel": k, "frames": t, "batch": 1,
                                            "flops": 2.0 * t * (c * k + c * c), "engines": engines})
                log_row(name, th, engines, "{:.3f}")

    if "model" in args.sections:
        model = randomize_bn(QuartzNet15x5(), 20261202)
        path = os.path.join(workdir, "quartznet15x5.onnx")
        export_onnx(model, torch.randn(1, FEATURES, 320), path, {"x": {0: "b", 2: "t"}})
        calib_shape = None
        for name, batch, frames in MODEL_CASES:
            x = torch.rand(batch, FEATURES, frames) * 2 - 1
            calib_shape = calib_shape or tuple(x.shape)
            for th in args.threads:
                engines = time_peers(args, model, path, x, th, big, calib_shape, logprobs=True)
                engines.update(time_ours(args, workdir, "model", f"{name}_b{batch}", th))
                results["model"].append({"name": name, "batch": batch, "frames": frames,
                                         "threads": th, "audio_s": 0.01 * frames * batch,
                                         "engines": engines})
                log_row(f"{name} b{batch}", th, engines, "{:.1f}")
    return meta, results


def best_of(meta_a, rows_a, meta_b, rows_b):
    """Per row and engine, keeps the measurement with the lower time (rows are in the same order
    in every repetition)."""
    for section, rows in rows_b.items():
        for i, row in enumerate(rows):
            best = rows_a[section][i]["engines"]
            for key, r in row["engines"].items():
                if "time_ms" in r and r["time_ms"] < best.get(key, {}).get("time_ms", math.inf):
                    best[key] = r
    meta_a["peak_gflops_1t"] = max(meta_a.get("peak_gflops_1t", 0), meta_b.get("peak_gflops_1t", 0))
    return meta_a, rows_a


# ---------------------------------------------------------------------------------------------
# Report.

SHORT = {"ort": "ORT32", "ort_int8": "ORT8", "ov_f32": "OVf32", "ov_default": "OVdef",
         "torch": "Torch"}


def print_checks(rows):
    """One line per export (first row that ran it): every peer's output vs ORT FP32."""
    seen = set()
    for section, rows_s in rows.items():
        for row in rows_s:
            key = (section, row.get("channels"), row.get("kernel"))
            if key in seen:
                continue
            seen.add(key)
            what = (f"sub-block C={row['channels']} K={row['kernel']} T={row['frames']}"
                    if section == "subblock" else
                    f"QuartzNet 15x5 log-probs, b{row['batch']} T{row['frames']}")
            parts = []
            for k, label in pe.PEERS:
                c = row["engines"].get(k, {}).get("vs_ort_fp32")
                if c:
                    parts.append(f"{label} max|d| {c['max_abs_diff']:.2g} "
                                 f"({100 * c['max_abs_diff_rel']:.2g}%) cos {c['cosine']:.5f}"
                                 + (f" argmax {100 * c['argmax_agree']:.1f}%"
                                    if "argmax_agree" in c else ""))
            ov = row["engines"].get("ov_default", {}).get("inference_precision")
            print(f"check vs ORT FP32, {what}: " + "; ".join(parts)
                  + (f" (OV default ran {ov})" if ov else ""))


def ratio(peer_ms, ours_ms):
    if not peer_ms or not ours_ms:
        return "-"
    r = peer_ms / ours_ms
    return f"{r:.2f}x" if r < 100 else f"{r:.0f}x"


def print_section(title, rows, args, model):
    peers = [k for k, _ in pe.PEERS if k in args.peers]
    ours = [f"jasper_{p}" for p in args.precisions]
    cols = peers + ours
    label = {**pe.LABELS, "ov_default": "OV def", **{f"jasper_{p}": f"jasper {p}"
                                                    for p in args.precisions}}
    width = {k: max(8, len(label[k])) for k in cols}
    print(f"\n{title}")
    print(f"{'row':<21} {'thr':>3} {'clk':>4} | " + " ".join(f"{label[k]:>{width[k]}}" for k in cols)
          + f" | {'ours':>4} vs: " + " ".join(f"{SHORT[k]:>6}" for k in peers) + " | fastest peer")
    wins = {}
    for row in rows:
        e = row["engines"]

        def t(k):
            return e.get(k, {}).get("time_ms")

        def speed(k):
            if t(k) is None:
                return "-"
            return f"{row['audio_s'] / (t(k) * 1e-3):.1f}" if model else f"{t(k):.3f}"

        timed_ours = [k for k in ours if t(k)]
        best_ours = min(timed_ours, key=t) if timed_ours else None
        timed_peers = [k for k in peers if t(k)]
        fastest = min(timed_peers, key=t) if timed_peers else None
        wins[fastest] = wins.get(fastest, 0) + 1
        ratios = [f"{ratio(t(k), t(best_ours)):>6}" for k in peers]
        name = f"{row['name']} b{row['batch']} T{row['frames']}" if model else row["name"]
        clock = e.get(best_ours or fastest or "", {}).get("clock", "-")
        print(f"{name:<21} {row['threads']:>3} {clock:>4} | "
              + " ".join(f"{speed(k):>{width[k]}}" for k in cols)
              + f" | {best_ours[len('jasper_'):] if best_ours else '-':>4}     "
              + " ".join(ratios) + f" | {pe.LABELS.get(fastest, '-')}")
    print("fastest peer: " + ", ".join(f"{pe.LABELS.get(k, '-')} in {n} of {len(rows)} rows"
                                       for k, n in sorted(wins.items(), key=lambda kv: -kv[1])))


def print_report(args, rows):
    if rows["subblock"]:
        print_section("Separable sub-block, batch 1: time per call, ms (lower is better); ratios: "
                      "peer time / time of our fastest precision ('ours'), > 1 = ours faster",
                      rows["subblock"], args, model=False)
    if rows["model"]:
        print_section("QuartzNet 15x5, encoder + decoder + log-softmax: x real time (audio s / "
                      "compute s, higher is better); ratios as above", rows["model"], args,
                      model=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples (noisier, ~3x faster)")
    ap.add_argument("--bench", default="", help="path to jasper_bench (default: build dirs)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--sections", default="subblock,model", help="subblock and/or model")
    ap.add_argument("--precisions", default="fp32",
                    help="our precisions, comma-separated: fp32, bf16, int8 (jasper_bench "
                         "--precision); one column each")
    ap.add_argument("--peers", default=",".join(k for k, _ in pe.PEERS),
                    help="peers to time (default: all whose package is installed)")
    ap.add_argument("--ov-dynamic", action="store_true",
                    help="compile OpenVINO with dynamic batch/time instead of the row's shape")
    ap.add_argument("--json-out", default="", help="write all results (ours + peers) here")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run the whole interleaved sequence this many times and report, per row "
                         "and engine, the best (lowest) median (the machine is shared)")
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",") if t]
    args.sections = [s for s in args.sections.split(",") if s]
    args.precisions = [p for p in args.precisions.split(",") if p]
    bad = [p for p in args.precisions if p not in PRECISIONS]
    if bad or not args.precisions:
        sys.exit(f"--precisions: expected some of {', '.join(PRECISIONS)}, got {bad or 'none'}")
    available, notes = pe.available_peers()
    wanted = [p for p in args.peers.split(",") if p]
    unknown = [p for p in wanted if p not in pe.LABELS]
    if unknown:
        sys.exit(f"--peers: unknown {unknown}; known: {', '.join(pe.LABELS)}")
    args.peers = [p for p in wanted if p in available]
    if "ort" not in args.peers:
        args.peers.insert(0, "ort")  # the reference of the output checks
    try:
        import onnx  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        sys.exit("torch.onnx.export needs the onnx package: pip install onnx")
    args.bench = find_bench(args.bench)
    args.bench_precision_flag = bench_has_precision_flag(args.bench)
    if not args.bench_precision_flag:
        if args.precisions != ["fp32"]:
            sys.exit(f"{args.bench} has no --precision flag (an older build): it runs FP32 only; "
                     "rebuild it or use --precisions fp32")
        notes.append(f"{args.bench} has no --precision flag: ran it without (FP32)")

    flags = pe.cpu_flags()
    ver = pe.versions()
    amx = pe.ort_amx_probe()
    load_start = open("/proc/loadavg").read().split()[:3]
    print("CPU flags: " + " ".join(f if f in flags else f"-{f}" for f in pe.CPU_FLAGS)
          + "   ('-': absent)")
    print("versions: " + ", ".join(f"{k} {v.split('-')[0]}" for k, v in ver.items() if v))
    print("ORT MLAS AMX U8S8 GEMM kernels: " + {True: "on", False: "off", None: "unknown"}[amx]
          + f"; load average {' '.join(load_start)}")
    for n in notes:
        print("note: " + n)
    sys.stdout.flush()
    with tempfile.TemporaryDirectory(prefix="jasper_peers_") as workdir:
        meta, rows = run_all(args, workdir)
        for rep in range(1, max(1, args.repeats)):
            print(f"repetition {rep + 1} of {args.repeats}", file=sys.stderr, flush=True)
            meta, rows = best_of(meta, rows, *run_all(args, workdir))
    load_end = open("/proc/loadavg").read().split()[:3]
    print(f"\n=== jasper-serve ({', '.join(args.precisions)}) vs "
          + ", ".join(pe.LABELS[k] for k, _ in pe.PEERS if k in args.peers)
          + f" (CPU: {meta['machine']['cpu']}, our FP32 FMA peak 1 thread "
          f"{meta.get('peak_gflops_1t', 0):.0f} GFLOP/s; load {' '.join(load_start)} -> "
          f"{' '.join(load_end)}) ===")
    print("time: 1 thread = median process CPU time per call, 2 threads = median wall time; "
          f"best of {max(1, args.repeats)} repetition(s) per row and engine")
    print_checks(rows)
    print_report(args, rows)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rows": rows, "ours_meta": meta, "precisions": args.precisions,
                       "peers": args.peers, "notes": notes, "cpu_flags": flags,
                       "ort_mlas_amx": amx, "versions": ver, "ov_static_shapes":
                       not args.ov_dynamic, "repeats": max(1, args.repeats),
                       "load_start": load_start, "load_end": load_end}, f, indent=2)


if __name__ == "__main__":
    main()
