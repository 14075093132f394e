"""The ONNX peers of tools/bench_peers.py: ONNX Runtime FP32 and INT8, OpenVINO f32 and at its
default precision, all on the same ONNX export; and the machine facts the table prints (CPU
flags, package versions).

make_runner() builds, for one row, a zero-argument callable that runs one inference on the row's
input and returns the output (the timing loop calls it). Peers whose package is missing are left
out by available_peers() with a note; only onnxruntime is required.
"""
import importlib
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort

try:
    import openvino as ov
except ImportError:  # optional peer
    ov = None

try:
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process
except ImportError:  # needs the onnx package
    CalibrationDataReader = None

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")

# Table order and column labels of every peer (PyTorch eager is timed by bench_peers.py).
PEERS = [("ort", "ORT FP32"), ("ort_int8", "ORT INT8"), ("ov_f32", "OV f32"),
         ("ov_default", "OV default"), ("torch", "PyTorch")]
LABELS = dict(PEERS)


def cpu_flags():
    """The flags of CPU_FLAGS that /proc/cpuinfo lists (empty where there is no /proc)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [flag for flag in CPU_FLAGS if flag in have]
    except OSError:
        pass
    return []


def versions():
    out = {}
    for name in ("onnxruntime", "onnx", "openvino", "torch", "numpy"):
        try:
            out[name] = importlib.import_module(name).__version__
        except ImportError:
            out[name] = None
    return out


def available_peers():
    """(keys of the peers that can run here, notes on those skipped)."""
    keys, notes = ["ort"], []
    if CalibrationDataReader is not None:
        keys.append("ort_int8")
    else:
        notes.append("ORT INT8 skipped: onnxruntime.quantization needs the onnx package")
    if ov is not None:
        keys += ["ov_f32", "ov_default"]
    else:
        notes.append("OpenVINO skipped: pip install openvino (tools/requirements-bench.txt)")
    return keys + ["torch"], notes


def ort_amx_probe():
    """Whether ONNX Runtime's MLAS turned on its AMX U8S8 QGEMM kernels: at load it asks Linux
    for AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA) and uses AMX only if granted,
    so a fresh process that only imports onnxruntime shows bit 18 of ARCH_GET_XCOMP_PERM. True /
    False, or None where it cannot be told (not Linux x86-64)."""
    code = ("import ctypes, onnxruntime\n"
            "v = ctypes.c_uint64(0)\n"
            "rc = ctypes.CDLL(None).syscall(158, 0x1022, ctypes.byref(v))\n"  # SYS_arch_prctl
            "print(-1 if rc else (v.value >> 18) & 1)\n")
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        return None
    proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    value = proc.stdout.strip()
    return None if proc.returncode or value not in ("0", "1") else value == "1"


# ---------------------------------------------------------------------------------------------
# ONNX Runtime.

def ort_session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])


CALIBRATION_SAMPLES = 4
_int8_models = {}  # FP32 .onnx path -> (INT8 .onnx path, info): one quantization per export


def quantized_model(onnx_path, calib_shape):
    """Static INT8 quantization of an FP32 export, once per export (cached beside it).

    QDQ format, per-channel symmetric INT8 weights, asymmetric UINT8 activations (U8S8), MinMax
    calibration. U8S8 because that is the pair MLAS (ORT's kernels, per its source) has its fast
    x86 kernels for: AVX512-VNNI vpdpbusd (u8 x s8) in the symmetric-weight conv path
    (MlasConvSym, which QLinearConv takes for per-channel symmetric weights, depthwise included)
    and the AMX tile QGEMM (the general GEMM path, e.g. the 29-channel decoder). Its S8S8 GEMM
    has x86 kernels only with AVX-VNNI-INT8, which Sapphire Rapids lacks: QInt8 activations
    measured 1.8x slower here (89 vs 48 ms CPU, 10 s model, 1 thread). With VNNI there is no
    u8 x s8 saturation, so reduce_range stays off.

    Calibration data: CALIBRATION_SAMPLES random-normal feature tensors of calib_shape (the first
    row that uses this export); random, like the weights: there is no trained model or real audio
    here, so the scales fit these inputs only (the benchmark inputs, uniform in [-1, 1], lie inside
    their range).
    """
    if onnx_path in _int8_models:
        return _int8_models[onnx_path]
    base = onnx_path[:-len(".onnx")]
    src, info = onnx_path, {"calibration_shape": list(calib_shape),
                            "calibration_samples": CALIBRATION_SAMPLES,
                            "calibration_data": "random normal", "format": "QDQ",
                            "activations": "QUInt8", "weights": "QInt8 per-channel"}
    try:  # ORT's recommended pre-processing (shape inference + graph optimizations)
        quant_pre_process(onnx_path, base + ".pre.onnx")
        src = base + ".pre.onnx"
    except Exception as e:  # pylint: disable=broad-except
        info["pre_process_error"] = str(e)

    class RandomFeatures(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(12345)
            self.data = [{"x": rng.standard_normal(calib_shape).astype(np.float32)}
                         for _ in range(CALIBRATION_SAMPLES)]
            self.it = iter(self.data)

        def get_next(self):
            return next(self.it, None)

        def rewind(self):
            self.it = iter(self.data)

    out = base + ".int8.onnx"
    quantize_static(src, out, RandomFeatures(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    reduce_range=False, calibrate_method=CalibrationMethod.MinMax)
    _int8_models[onnx_path] = (out, info)
    return out, info


# ---------------------------------------------------------------------------------------------
# OpenVINO.

_ov_core = None


def ov_runner(onnx_path, x, threads, precision, static):
    """OpenVINO CPU plugin on the ONNX file: one synchronous infer request, LATENCY hint (one
    stream), INFERENCE_NUM_THREADS = threads; precision "f32", or None to let it pick (BF16 on
    AMX/AVX512-BF16 CPUs). static: reshape the dynamic batch/time export to the row's shape
    before compiling (default; one compile per row anyway; dynamic measured 0-10 % slower on the
    sub-block rows, ~1 % on the model)."""
    global _ov_core
    if _ov_core is None:
        _ov_core = ov.Core()
    model = _ov_core.read_model(onnx_path)
    if static:
        model.reshape({"x": list(x.shape)})
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = _ov_core.compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    info = {"inference_precision": compiled.get_property("INFERENCE_PRECISION_HINT").to_string(),
            "inference_num_threads": int(compiled.get_property("INFERENCE_NUM_THREADS")),
            "num_streams": int(compiled.get_property("NUM_STREAMS")), "static_shape": static}

    def run():
        return request.infer({0: x}, share_inputs=True)[0]
    return run, info


def make_runner(key, onnx_path, x, threads, calib_shape, ov_static=True):
    """(run, info) for an ONNX peer: run() does one inference on x and returns the output."""
    info = {}
    if key in ("ort", "ort_int8"):
        if key == "ort_int8":
            onnx_path, info = quantized_model(onnx_path, calib_shape)
        sess = ort_session(onnx_path, threads)
        feeds = {"x": x}
        return (lambda: sess.run(None, feeds)[0]), dict(info)
    if key in ("ov_f32", "ov_default"):
        return ov_runner(onnx_path, x, threads, "f32" if key == "ov_f32" else None, ov_static)
    raise ValueError(key)


def compare(out, ref, logprobs):
    """Agreement of an output with the reference (ORT FP32 or PyTorch): max abs difference and
    cosine similarity. The random-weight model's log-probs sit close to log(1/29) with a small
    per-frame spread, so for them (logprobs) the cosine is taken over the values centred per
    frame (the logits up to a constant), the max abs difference is also given relative to that
    spread, and the per-frame argmax agreement is added."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    diff = float(np.abs(out - ref).max())
    if logprobs:
        out, ref = out - out.mean(axis=1, keepdims=True), ref - ref.mean(axis=1, keepdims=True)
    r = {"max_abs_diff": diff, "max_abs_diff_rel": diff / max(1e-12, float(np.abs(ref).max())),
         "cosine": float((out * ref).sum() / max(1e-30, np.linalg.norm(out) * np.linalg.norm(ref)))}
    if logprobs:
        r["argmax_agree"] = float((out.argmax(axis=1) == ref.argmax(axis=1)).mean())
    return r
