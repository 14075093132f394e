"""Safetensors files in F32 or F16 with numpy only (no torch, no PyYAML): the writer and reader
of tools/export_model.py and tools/make_random_model.py (the same byte layout as the
converter's, tools/nemo_to_model.py: header padded so the data is 8-byte aligned). F16 halves the
file; the C++ loader converts it to FP32 before folding (docs/MODEL_FORMAT.md, "Dtypes")."""
import collections
import json
import os
import struct

import numpy as np


_DTYPES = {"F32": "<f4", "F16": "<f2"}


def write_safetensors(path, tensors, metadata=None, dtype="F32"):
  """Writes float tensors as `dtype` (F32 or F16). F16: every value must stay finite."""
  if dtype not in _DTYPES:
    raise ValueError(f"dtype {dtype!r} is not one of {sorted(_DTYPES)}")
  header = collections.OrderedDict()
  if metadata:
    header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
  blobs, off = [], 0
  for name in sorted(tensors):
    with np.errstate(over="ignore"):
      values = np.ascontiguousarray(tensors[name], dtype=_DTYPES[dtype])
    if not np.all(np.isfinite(values)):
      raise ValueError(f"{name}: values not finite in {dtype}")
    data = values.tobytes()
    header[name] = {"dtype": dtype, "shape": list(tensors[name].shape),
                    "data_offsets": [off, off + len(data)]}
    blobs.append(data)
    off += len(data)
  h = json.dumps(header, separators=(",", ":")).encode()
  h += b" " * ((-(8 + len(h))) % 8)
  tmp = path + ".tmp"
  with open(tmp, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
  os.replace(tmp, path)


def read_safetensors(path, skip_other_dtypes=False):
  """{name: float32 array}. A tensor of another dtype (e.g. I64 ids) is an error, or skipped with
  skip_other_dtypes."""
  with open(path, "rb") as f:
    raw = f.read()
  (n,) = struct.unpack("<Q", raw[:8])
  header = json.loads(raw[8:8 + n])
  header.pop("__metadata__", None)
  data = raw[8 + n:]
  out = {}
  for name, e in header.items():
    if skip_other_dtypes and e["dtype"] not in _DTYPES:
      continue
    assert e["dtype"] in _DTYPES, (name, e["dtype"])
    b, end = e["data_offsets"]
    raw_values = np.frombuffer(data[b:end], dtype=_DTYPES[e["dtype"]])
    out[name] = raw_values.astype(np.float32).reshape(e["shape"])
  return out
