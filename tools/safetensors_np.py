"""Safetensors files in F32 with numpy only (no torch, no PyYAML): the writer and reader of
tools/export_model.py and tools/make_random_model.py (the same byte layout as the converter's,
tools/nemo_to_model.py: header padded so the data is 8-byte aligned)."""
import collections
import json
import os
import struct

import numpy as np


def write_safetensors(path, tensors, metadata=None):
  header = collections.OrderedDict()
  if metadata:
    header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
  blobs, off = [], 0
  for name in sorted(tensors):
    data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
    header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                    "data_offsets": [off, off + len(data)]}
    blobs.append(data)
    off += len(data)
  h = json.dumps(header, separators=(",", ":")).encode()
  h += b" " * ((-(8 + len(h))) % 8)
  tmp = path + ".tmp"
  with open(tmp, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
  os.replace(tmp, path)


def read_safetensors(path):
  raw = open(path, "rb").read()
  (n,) = struct.unpack("<Q", raw[:8])
  header = json.loads(raw[8:8 + n])
  header.pop("__metadata__", None)
  data = raw[8 + n:]
  out = {}
  for name, e in header.items():
    assert e["dtype"] == "F32", (name, e["dtype"])
    b, end = e["data_offsets"]
    out[name] = np.frombuffer(data[b:end], dtype="<f4").reshape(e["shape"]).copy()
  return out
