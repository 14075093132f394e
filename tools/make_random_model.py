#!/usr/bin/env python3
"""Writes a model folder with random weights for timing (never for accuracy): QuartzNet 15x5
(NeMo's QuartzNet15x5Base-En encoder, 18.9 M parameters, ~76 MB in FP32) or the shipped small
architecture, in the same layout as tools/export_model.py (model.json + model.safetensors, NeMo
tensor names, batch-norm statistics unfused).

  python3 tools/make_random_model.py --arch quartznet15x5 --out /tmp/qn15x5 [--seed 1]

Needs numpy only (no torch): made on the GPU machine by tools/gpu_check.sh rather than carried.
Weights are He-scaled (variance 2 / fan-in) and batch norm is near identity, so activations stay
O(1) through the 15 blocks (no FP16 overflow, no denormals to distort timings).
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from safetensors_np import write_safetensors  # noqa: E402


def blk(filters, repeat, k, stride=1, dil=1, residual=True, separable=True):
    return {"filters": filters, "repeat": repeat, "kernel": [k], "stride": [stride],
            "dilation": [dil], "dropout": 0.0, "residual": residual, "separable": separable,
            "residual_dense": False}


def quartznet15x5_blocks():
    blocks = [blk(256, 1, 33, stride=2, residual=False)]  # C1
    for filters, k in zip((256, 256, 512, 512, 512), (33, 39, 51, 63, 75)):
        blocks += [blk(filters, 5, k)] * 3  # B1..B5, each 3 times
    blocks += [blk(512, 1, 87, dil=2, residual=False),  # C2
               blk(1024, 1, 1, residual=False, separable=False)]  # C3
    return blocks


def small_blocks():
    return [blk(128, 1, 33, stride=2, residual=False), blk(128, 2, 33), blk(128, 2, 39),
            blk(128, 2, 51), blk(192, 2, 63), blk(192, 2, 75),
            blk(192, 1, 87, dil=2, residual=False), blk(256, 1, 1, residual=False, separable=False)]


def random_tensors(blocks, feat_in, num_outputs, rng):
    """NeMo state_dict names and shapes of ConvASREncoder + ConvASRDecoder: a sub-block's mconv
    list is [depthwise, pointwise, bn, relu, dropout] (separable) or [conv, bn, relu, dropout],
    so repeat j starts at index 5j or 4j; residual panes are res.0.{0.conv, 1 (bn)}."""
    t = {}

    def he(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    def bn(prefix, c):
        t[prefix + ".weight"] = rng.uniform(0.8, 1.2, c).astype(np.float32)
        t[prefix + ".bias"] = rng.uniform(-0.1, 0.1, c).astype(np.float32)
        t[prefix + ".running_mean"] = rng.uniform(-0.1, 0.1, c).astype(np.float32)
        t[prefix + ".running_var"] = rng.uniform(0.8, 1.2, c).astype(np.float32)

    cin = feat_in
    for i, b in enumerate(blocks):
        p, block_in, k, cout = f"encoder.encoder.{i}.", cin, b["kernel"][0], b["filters"]
        for j in range(b["repeat"]):
            if b["separable"]:
                t[f"{p}mconv.{5 * j}.conv.weight"] = he((cin, 1, k), k)
                t[f"{p}mconv.{5 * j + 1}.conv.weight"] = he((cout, cin, 1), cin)
                bn(f"{p}mconv.{5 * j + 2}", cout)
            else:
                t[f"{p}mconv.{4 * j}.conv.weight"] = he((cout, cin, k), cin * k)
                bn(f"{p}mconv.{4 * j + 1}", cout)
            cin = cout
        if b["residual"]:
            # Scaled down so the residual sum keeps unit variance over 15 blocks.
            t[f"{p}res.0.0.conv.weight"] = he((cout, block_in, 1), block_in) * 0.5
            bn(f"{p}res.0.1", cout)
    t["decoder.decoder_layers.0.weight"] = he((num_outputs, cin, 1), cin)
    t["decoder.decoder_layers.0.bias"] = np.zeros(num_outputs, np.float32)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=("quartznet15x5", "small"), default="quartznet15x5")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", choices=("f32", "f16"), default="f32",
                    help="storage of model.safetensors")
    args = ap.parse_args()
    blocks = quartznet15x5_blocks() if args.arch == "quartznet15x5" else small_blocks()
    # The shipped model's featurizer and vocabulary; only the name and architecture change.
    with open(os.path.join(HERE, "..", "models", "quartznet_en_tts_small", "model.json")) as f:
        config = json.load(f)
    name = f"{args.arch}-random"
    config["name"] = name
    config.pop("language_model", None)  # the shipped model's LM file is not copied
    config.pop("inverse_text_normalization", None)  # nor its ITN grammars
    config.pop("punctuation", None)  # nor its punctuation model
    config["encoder"]["jasper"] = [dict(b, residual_mode="add", se=False, groups=1) for b in blocks]
    config["decoder"]["feat_in"] = blocks[-1]["filters"]
    feat_in = config["encoder"]["feat_in"]
    rng = np.random.default_rng(args.seed)
    tensors = random_tensors(blocks, feat_in, len(config["labels"]) + 1, rng)
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors,
                      {"format": "pt", "producer": "jasper-serve tools/make_random_model.py",
                       "note": "random weights, for timing only"},
                      dtype=args.dtype.upper())
    with open(os.path.join(args.out, "model.json"), "w") as f:
        f.write(json.dumps(config, indent=2) + "\n")
    n = sum(v.size for v in tensors.values())
    print(f"wrote {args.out}: {name}, {len(tensors)} tensors, {n / 1e6:.2f} M parameters")


if __name__ == "__main__":
    main()
