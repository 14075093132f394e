#!/usr/bin/env python3
"""Generates tests/fixtures/features_golden.safetensors: torch-level golden features for
engine/features/features.cc, computed the way NeMo's FilterbankFeatures does at inference, for both STFT
behaviours:

  legacy  (NeMo <= 2.4): torch.stft pad_mode "reflect" (torch's default), seq_len = L//hop + 1
  nemo25  (NeMo >= 2.5, PR #13827): pad_mode "constant", seq_len = L//hop, pre-emphasised
          samples at n >= L zeroed (a no-op for one utterance)

The pipeline mirrors nemo/collections/asr/parts/preprocessing/features.py (FilterbankFeatures.
forward and normalize_batch) line by line; NeMo itself is not imported. Each case is computed
twice: in float32 exactly as NeMo runs it ("<mode>.features_f32"), and in float64 after the
float32 pre-emphasis ("<mode>.features", "<mode>.logmel"), which isolates the algorithm from
float32 STFT rounding.

Tensors (all F32), per case C in {a, b}:
  C.audio                  [L]            the deterministic input signal
  C.fb                     [F, n_fft/2+1] librosa.filters.mel(norm='slaney'), case a only
  C.<mode>.features        [T_pad, F]     normalised, masked, padded to pad_to; channels-last
  C.<mode>.features_f32    [T_pad, F]     same, float32 torch
  C.<mode>.logmel          [seq_len, F]   log-mel before normalisation, valid frames only
  C.<mode>.seq_len         [1]
The case parameters are in __metadata__ (JSON strings).

Usage: /work/venv/bin/python tools/gen_feature_fixture.py [output_path]
"""

import json
import math
import os
import struct
import sys

import librosa
import numpy as np
import torch

CASES = {
    # QuartzNet / Jasper preprocessor: 20 ms window, 64 mels. L is not a multiple of hop.
    "a": dict(sample_rate=16000, win_length=320, hop_length=160, n_fft=512, features=64,
              preemph=0.97, lowfreq=0.0, highfreq=8000.0, pad_to=16, num_samples=4837),
    # Citrinet-style: 25 ms window (zero-padded off-centre into n_fft 512), 80 mels, fmax below
    # Nyquist, L a multiple of hop (NeMo 2.5 then drops the last STFT frame).
    "b": dict(sample_rate=16000, win_length=400, hop_length=160, n_fft=512, features=80,
              preemph=0.97, lowfreq=20.0, highfreq=7600.0, pad_to=16, num_samples=3200),
}
GUARD = 2.0**-24  # log_zero_guard_value, "add"
CONSTANT = 1e-5  # NeMo features.py


def make_signal(n, sr, seed):
    """Tones, a chirp, LCG noise and a stretch of exact digital silence."""
    t = np.arange(n, dtype=np.float64) / sr
    x = 0.3 * np.sin(2 * np.pi * 440.0 * t)
    x += 0.15 * np.sin(2 * np.pi * 1234.5 * t + 0.3) * (0.5 + 0.5 * np.cos(2 * np.pi * 3.0 * t))
    x += 0.1 * np.sin(2 * np.pi * (200.0 * t + 2000.0 * t * t))
    state = seed
    noise = np.empty(n)
    for i in range(n):  # deterministic, platform-independent
        state = (1103515245 * state + 12345) % (1 << 31)
        noise[i] = state / float(1 << 31) - 0.5
    x += 0.02 * noise
    x[n // 3 : n // 3 + 400] = 0.0
    return x.astype(np.float32)


def featurize(audio, p, mode, dtype):
    """FilterbankFeatures.forward for one utterance (batch of 1), no dither."""
    n_fft, hop, win = p["n_fft"], p["hop_length"], p["win_length"]
    x = torch.from_numpy(audio)[None, :]  # float32, [1, L]
    length = torch.tensor([audio.shape[0]])
    # get_seq_len
    pad_amount = n_fft // 2 * 2
    seq_len = torch.floor_divide(length + pad_amount - n_fft, hop)
    if mode == "legacy":
        seq_len = seq_len + 1
    seq_len = torch.where(length == 0, torch.zeros_like(seq_len), seq_len).to(torch.long)
    # pre-emphasis (float32, as NeMo)
    x = torch.cat((x[:, 0].unsqueeze(1), x[:, 1:] - p["preemph"] * x[:, :-1]), dim=1)
    if mode == "nemo25":
        timemask = torch.arange(x.shape[1]).unsqueeze(0) < length.unsqueeze(1)
        x = x.masked_fill(~timemask, 0.0)
    window = torch.hann_window(win, periodic=False)  # NeMo's float32 window buffer
    fb = torch.tensor(
        librosa.filters.mel(sr=p["sample_rate"], n_fft=n_fft, n_mels=p["features"],
                            fmin=p["lowfreq"], fmax=p["highfreq"], norm="slaney"),
        dtype=torch.float).unsqueeze(0)
    x, window, fb = x.to(dtype), window.to(dtype), fb.to(dtype)
    kwargs = dict(n_fft=n_fft, hop_length=hop, win_length=win, center=True, window=window,
                  return_complex=True)
    if mode == "nemo25":
        kwargs["pad_mode"] = "constant"  # legacy: torch's default, "reflect"
    x = torch.stft(x, **kwargs)
    x = torch.view_as_real(x)
    x = torch.sqrt(x.pow(2).sum(-1))
    x = x.pow(2.0)
    x = torch.matmul(fb, x)
    x = torch.log(x + GUARD)
    logmel = x[0, :, : int(seq_len[0])].clone()
    # normalize_batch(per_feature)
    max_time = x.shape[2]
    valid_mask = torch.arange(max_time).unsqueeze(0).expand(1, max_time) < seq_len.unsqueeze(1)
    mean = torch.where(valid_mask.unsqueeze(1), x, 0.0).sum(axis=2) / valid_mask.sum(axis=1).unsqueeze(1)
    std = torch.sqrt(
        torch.sum(torch.where(valid_mask.unsqueeze(1), x - mean.unsqueeze(2), 0.0) ** 2, axis=2)
        / (valid_mask.sum(axis=1).unsqueeze(1) - 1.0))
    std = std.masked_fill(std.isnan(), 0.0) + CONSTANT
    x = (x - mean.unsqueeze(2)) / std.unsqueeze(2)
    # mask past seq_len, pad to a multiple of pad_to (pad_value 0)
    mask = torch.arange(max_time).repeat(1, 1) >= seq_len.unsqueeze(1)
    x = x.masked_fill(mask.unsqueeze(1), 0.0)
    pad_amt = x.size(-1) % p["pad_to"]
    if pad_amt != 0:
        x = torch.nn.functional.pad(x, (0, p["pad_to"] - pad_amt), value=0.0)
    # channels-last [T, F]
    return (x[0].T.contiguous().float().numpy(), logmel.T.contiguous().float().numpy(),
            int(seq_len[0]), fb[0].float().numpy())


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        root, "tests", "fixtures", "features_golden.safetensors")
    tensors = {}
    metadata = {"generator": "tools/gen_feature_fixture.py",
                "torch": torch.__version__, "librosa": librosa.__version__}
    for seed, (case, p) in enumerate(CASES.items(), start=1):
        audio = make_signal(p["num_samples"], p["sample_rate"], seed)
        tensors[f"{case}.audio"] = audio
        metadata[case] = json.dumps(p, sort_keys=True)
        for mode in ("legacy", "nemo25"):
            feats, logmel, seq_len, fb = featurize(audio, p, mode, torch.float64)
            feats32, _, _, _ = featurize(audio, p, mode, torch.float32)
            if case == "a" and mode == "legacy":
                tensors[f"{case}.fb"] = fb
            tensors[f"{case}.{mode}.features"] = feats
            tensors[f"{case}.{mode}.features_f32"] = feats32
            tensors[f"{case}.{mode}.logmel"] = logmel
            tensors[f"{case}.{mode}.seq_len"] = np.array([seq_len], dtype=np.float32)
            print(f"{case}/{mode}: L={audio.shape[0]} seq_len={seq_len} padded={feats.shape[0]} "
                  f"f32-vs-f64 max|diff|={np.abs(feats - feats32).max():.3g}")
    write_safetensors(out, tensors, metadata)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
