#!/usr/bin/env python3
"""Exports a tools/train_quartznet.py checkpoint to a jasper-serve model folder.

Writes <out>/model.json (docs/MODEL_FORMAT.md schema, NeMo key names, the same layout
tools/nemo_to_model.py produces) and <out>/model.safetensors (F32, or F16 with --dtype f16: half
the file, converted to FP32 at load; NeMo tensor names, batch-norm statistics unfused,
num_batches_tracked dropped). Also loads the folder back into PyTorch and checks the round trip
(exact: against the checkpoint's weights as stored, i.e. rounded to F16 for --dtype f16).

  python tools/export_model.py --ckpt tools/.work/run1/ckpt.pt --out models/quartznet_en_tts_small
"""
import argparse
import collections
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from quartznet_torch import LABELS, PREPROCESSOR, QuartzNet  # noqa: E402

from safetensors_np import read_safetensors, write_safetensors  # noqa: E402


def model_json(name, blocks):
  pre = collections.OrderedDict((k, v) for k, v in PREPROCESSOR.items() if k != "_target_")
  pre["highfreq"] = PREPROCESSOR["sample_rate"] / 2  # NeMo's None -> sr/2, as the converter writes
  jasper = []
  for b in blocks:
    d = collections.OrderedDict(b)
    d["residual_mode"] = "add"
    d["se"] = False
    d["groups"] = 1
    jasper.append(d)
  return collections.OrderedDict([
      ("format_version", 1),
      ("name", name),
      ("sample_rate", 16000),
      ("labels", LABELS),
      ("preprocessor", pre),
      ("encoder", collections.OrderedDict([("feat_in", 64), ("activation", "relu"),
                                           ("conv_mask", True), ("jasper", jasper)])),
      ("decoder", collections.OrderedDict([("feat_in", blocks[-1]["filters"]),
                                           ("num_classes", len(LABELS))])),
  ])


def load_model_folder(folder):
  """model folder -> (QuartzNet in eval mode, model.json dict)."""
  cfg = json.load(open(os.path.join(folder, "model.json")))
  blocks = [{k: b[k] for k in ("filters", "repeat", "kernel", "stride", "dilation", "dropout",
                               "residual", "separable", "residual_dense")}
            for b in cfg["encoder"]["jasper"]]
  m = QuartzNet(blocks)
  tensors = read_safetensors(os.path.join(folder, "model.safetensors"))
  sd = m.state_dict()
  for k in sd:
    if k.endswith("num_batches_tracked"):
      continue
    sd[k] = torch.from_numpy(tensors.pop(k))
  assert not tensors, f"unexpected tensors {sorted(tensors)[:5]}"
  m.load_state_dict(sd)
  m.eval()
  return m, cfg


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--ckpt", default=os.path.join(HERE, ".work", "run1", "ckpt.pt"))
  ap.add_argument("--out", default=os.path.join(HERE, "..", "models", "quartznet_en_tts_small"))
  ap.add_argument("--name", default=None)
  ap.add_argument("--dtype", choices=("f32", "f16"), default="f32",
                  help="storage of model.safetensors (f16: half the size)")
  args = ap.parse_args()
  d = torch.load(args.ckpt, map_location="cpu", weights_only=False)
  name = args.name or os.path.basename(os.path.normpath(args.out))
  m = QuartzNet(d["blocks"])
  m.load_state_dict(d["model"])
  tensors = {k: v.detach().float().numpy() for k, v in m.state_dict().items()
             if not k.endswith("num_batches_tracked")}
  for k, v in tensors.items():
    assert np.all(np.isfinite(v)), k
  os.makedirs(args.out, exist_ok=True)
  meta = {"format": "pt", "producer": "jasper-serve tools/export_model.py",
          "stft_mode": PREPROCESSOR["stft_mode"], "train_step": str(d["state"]["step"])}
  write_safetensors(os.path.join(args.out, "model.safetensors"), tensors, meta,
                    dtype=args.dtype.upper())
  if args.dtype == "f16":  # the reference for the round trip: the weights as stored
    m.load_state_dict({k: v.half().float() if v.is_floating_point() else v
                       for k, v in m.state_dict().items()})
  with open(os.path.join(args.out, "model.json"), "w") as f:
    f.write(json.dumps(model_json(name, d["blocks"]), indent=2) + "\n")
  # round trip
  m2, _ = load_model_folder(args.out)
  m.eval()
  x = torch.randn(2, 64, 160)
  l = torch.tensor([160, 101])
  with torch.no_grad():
    a, _ = m(x, l)
    b, _ = m2(x, l)
  assert torch.equal(a, b), "round trip mismatch"
  n = sum(v.size for v in tensors.values())
  print(f"wrote {args.out}: {len(tensors)} tensors, {n} values, "
        f"{os.path.getsize(os.path.join(args.out, 'model.safetensors'))} bytes, "
        f"step {d['state']['step']}")


if __name__ == "__main__":
  main()
