#!/usr/bin/env python3
"""The numpy safetensors writer (tools/safetensors_np.py) in F32 and F16, and the C++ loader on
its F16 files (CTest: safetensors_np_test).

  safetensors_np_test.py JASPER_TRANSCRIBE

- F32 and F16 files read back as the values as stored (F16: rounded to half precision), the
  header names the dtype, and F16 data is half the F32 data;
- a value beyond F16's range is refused (ValueError), no file is left;
- tools/make_random_model.py --dtype f16 makes a folder that jasper-transcribe loads and runs,
  with transcripts equal to the F32 folder whose weights are the same values rounded to F16.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from safetensors_np import read_safetensors, write_safetensors  # noqa: E402

TRANSCRIBE = None


def header(path):
  with open(path, "rb") as f:
    raw = f.read()
  (n,) = struct.unpack("<Q", raw[:8])
  return json.loads(raw[8:8 + n]), len(raw) - 8 - n


class SafetensorsNpTest(unittest.TestCase):
  def test_f32_and_f16_round_trip(self):
    rng = np.random.default_rng(3)
    tensors = {"a.weight": rng.standard_normal((7, 5)).astype(np.float32) * 3,
               "b.running_var": rng.random(11).astype(np.float32)}
    with tempfile.TemporaryDirectory() as d:
      sizes = {}
      for dtype in ("F32", "F16"):
        path = os.path.join(d, f"{dtype}.safetensors")
        write_safetensors(path, tensors, {"k": "v"}, dtype=dtype)
        h, sizes[dtype] = header(path)
        self.assertEqual({h[k]["dtype"] for k in tensors}, {dtype})
        back = read_safetensors(path)
        for k, v in tensors.items():
          stored = v if dtype == "F32" else v.astype(np.float16).astype(np.float32)
          self.assertEqual(back[k].dtype, np.float32)
          np.testing.assert_array_equal(back[k], stored)
      self.assertEqual(sizes["F16"] * 2, sizes["F32"])

  def test_out_of_range_f16_is_refused(self):
    with tempfile.TemporaryDirectory() as d:
      path = os.path.join(d, "x.safetensors")
      with self.assertRaises(ValueError):
        write_safetensors(path, {"w": np.array([1.0, 1e6], np.float32)}, dtype="F16")
      with self.assertRaises(ValueError):
        write_safetensors(path, {"w": np.zeros(2, np.float32)}, dtype="BF16")
      self.assertEqual(os.listdir(d), [])

  def test_cpp_loader_reads_f16_folders(self):
    wav = os.path.join(ROOT, "tests/fixtures/heldout/heldout_01.wav")
    with tempfile.TemporaryDirectory() as d:
      outputs = {}
      for dtype in ("f32", "f16"):
        folder = os.path.join(d, dtype)
        subprocess.run([sys.executable, os.path.join(ROOT, "tools/make_random_model.py"),
                        "--arch", "small", "--seed", "5", "--dtype", dtype, "--out", folder],
                       check=True, capture_output=True)
        if dtype == "f32":  # the same values as the F16 folder will hold
          t = read_safetensors(os.path.join(folder, "model.safetensors"))
          write_safetensors(os.path.join(folder, "model.safetensors"),
                            {k: v.astype(np.float16).astype(np.float32) for k, v in t.items()})
        r = subprocess.run([TRANSCRIBE, "--device=cpu", f"--model_dir={folder}", wav],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        outputs[dtype] = r.stdout.split("\t", 1)[1]
      self.assertTrue(outputs["f16"].strip())
      self.assertEqual(outputs["f16"], outputs["f32"])


if __name__ == "__main__":
  TRANSCRIBE = sys.argv.pop(1)
  unittest.main()
