#!/usr/bin/env python3
"""Greedy-CTC WER/CER of an exported model folder on the test sets, plus the committed fixtures.

Loads models/<name>/ (model.json + model.safetensors) back into PyTorch, so what is measured is
exactly what ships. Test sets come from tools/make_speech_data.py (tools/.work/data):
  test_synth        held-out voices x held-out sentences, clean
  test_synth_noisy  the same, with training-style augmentation (noise, reverb, speed, volume)
  test_real/*       real human speech: pocketsphinx-testdata LibriVox and "cards" recordings,
                    asterisk-core-sounds-en prompts (8 kHz telephone prompts, one speaker)

With --fixtures DIR it writes the committed held-out fixture (16 kHz mono 16-bit WAVs,
transcripts.tsv, torch_results.json with the PyTorch WER, torch_logprobs.safetensors);
with --samples DIR a few demo WAVs + transcripts for the model folder.

  python tools/eval_quartznet.py --model models/quartznet_en_tts_small \
      --fixtures tests/fixtures/heldout --samples models/quartznet_en_tts_small/samples
"""
import argparse
import collections
import json
import os
import sys
import wave

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export_model import load_model_folder, write_safetensors  # noqa: E402
from quartznet_torch import Featurizer, greedy_decode, wer_cer  # noqa: E402
from train_quartznet import collate  # noqa: E402


def load_shard(path):
  d = np.load(path)
  a, off = d["audio"], d["offsets"]
  return [(a[off[i]:off[i + 1]], str(t), str(v))
          for i, (t, v) in enumerate(zip(d["texts"], d["voices"]))]


@torch.no_grad()
def transcribe(model, feat, items, bs=16):
  order = sorted(range(len(items)), key=lambda i: len(items[i][0]))
  hyps = [None] * len(items)
  for s in range(0, len(order), bs):
    ids = order[s:s + bs]
    audio, lens, _, _, _ = collate([(items[i][0], items[i][1]) for i in ids], range(len(ids)))
    x, xl = feat(audio, lens)
    lp, ol = model(x, xl)
    for i, h in zip(ids, greedy_decode(lp, ol)):
      hyps[i] = h
  return hyps


def write_wav(path, samples_i16):
  with wave.open(path, "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(16000)
    w.writeframes(np.asarray(samples_i16, dtype="<i2").tobytes())


def read_wav(path):
  with wave.open(path) as w:
    assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
    return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--model", required=True)
  ap.add_argument("--data", default=os.path.join(HERE, ".work", "data"))
  ap.add_argument("--fixtures", default=None)
  ap.add_argument("--fixture-count", type=int, default=30)
  ap.add_argument("--samples", default=None)
  ap.add_argument("--json", default=None, help="write all results here")
  ap.add_argument("--threads", type=int, default=2)
  args = ap.parse_args()
  torch.set_num_threads(args.threads)

  model, cfg = load_model_folder(args.model)
  feat = Featurizer().eval()
  results = collections.OrderedDict()
  examples = {}
  sets = collections.OrderedDict()
  for split in ("test_synth", "test_synth_noisy"):
    p = os.path.join(args.data, split, "shard_0000.npz")
    if os.path.exists(p):
      sets[split] = load_shard(p)
  p = os.path.join(args.data, "test_real", "shard_0000.npz")
  if os.path.exists(p):
    for it in load_shard(p):
      sets.setdefault("real_" + it[2].split(":", 1)[1], []).append(it)
  for name, items in sets.items():
    hyps = transcribe(model, feat, items)
    refs = [it[1] for it in items]
    w, c = wer_cer(refs, hyps)
    secs = sum(len(it[0]) for it in items) / 16000
    results[name] = {"utts": len(items), "minutes": round(secs / 60, 2),
                     "wer": round(w * 100, 2), "cer": round(c * 100, 2)}
    examples[name] = [(r, h) for r, h in zip(refs[:5], hyps[:5])]
    print(f"{name:28s} {len(items):4d} utts {secs / 60:6.1f} min  WER {w * 100:6.2f}%  "
          f"CER {c * 100:6.2f}%", flush=True)
    for r, h in examples[name][:3]:
      print(f"    ref: {r}\n    hyp: {h}")

  synth = sets.get("test_synth", [])
  if args.fixtures and synth:
    os.makedirs(args.fixtures, exist_ok=True)
    # short utterances, spread over the held-out voices, deterministic
    cand = [i for i in range(len(synth)) if len(synth[i][0]) <= 2.4 * 16000]
    by_voice = collections.defaultdict(list)
    for i in cand:
      by_voice[synth[i][2]].append(i)
    pick = []
    while len(pick) < args.fixture_count and any(by_voice.values()):
      for v in sorted(by_voice):
        if by_voice[v] and len(pick) < args.fixture_count:
          pick.append(by_voice[v].pop(0))
    rows, items = [], []
    for n, i in enumerate(pick):
      fn = f"heldout_{n:02d}.wav"
      write_wav(os.path.join(args.fixtures, fn), synth[i][0])
      a = read_wav(os.path.join(args.fixtures, fn))  # what the C++ test will read
      items.append((a, synth[i][1], synth[i][2]))
      rows.append((fn, synth[i][1], synth[i][2]))
    with open(os.path.join(args.fixtures, "transcripts.tsv"), "w") as f:
      for fn, t, _ in rows:
        f.write(f"{fn}\t{t}\n")
    hyps = transcribe(model, feat, items)
    refs = [it[1] for it in items]
    w, c = wer_cer(refs, hyps)
    with open(os.path.join(args.fixtures, "torch_results.json"), "w") as f:
      json.dump({"model": cfg["name"], "decoding": "greedy CTC (NeMo merge)",
                 "wer": w, "cer": c, "num_utterances": len(items),
                 "utterances": [{"file": fn, "voice": v, "ref": r, "hyp": h}
                                for (fn, r, v), h in zip(rows, hyps)]}, f, indent=1)
      f.write("\n")
    results["fixture_heldout"] = {"utts": len(items), "wer": round(w * 100, 2),
                                  "cer": round(c * 100, 2)}
    print(f"fixture heldout: {len(items)} utts WER {w * 100:.2f}% CER {c * 100:.2f}%")
    # per-utterance (batch of one) features and log-probs for two utterances
    tensors, meta = {}, {"model": cfg["name"], "stft_mode": cfg["preprocessor"]["stft_mode"]}
    with torch.no_grad():
      for k in range(2):
        a = torch.from_numpy(items[k][0].astype(np.float32) / 32768.0)[None]
        x, xl = feat(a, torch.tensor([a.shape[1]]))
        lp, ol = model(x, xl)
        tensors[f"features_{k}"] = x[0].T.contiguous().numpy()             # [T_pad, 64]
        tensors[f"logprobs_{k}"] = lp[0, :int(ol[0])].contiguous().numpy()  # [T', 29]
        meta[f"utt_{k}"] = json.dumps({"file": rows[k][0], "num_samples": int(a.shape[1]),
                                       "seq_len": int(xl[0]), "enc_len": int(ol[0]),
                                       "padded_frames": int(x.shape[2])})
    write_safetensors(os.path.join(args.fixtures, "torch_logprobs.safetensors"), tensors, meta)

  if args.samples and synth:
    os.makedirs(args.samples, exist_ok=True)
    hyps = transcribe(model, feat, synth)
    good = [i for i in range(len(synth)) if hyps[i] == synth[i][1]
            and 1.5 * 16000 <= len(synth[i][0]) <= 3.2 * 16000]
    chosen = []
    for i in good:  # two different held-out voices
      if all(synth[j][2] != synth[i][2] for j in chosen):
        chosen.append(i)
      if len(chosen) == 2:
        break
    if len(chosen) < 2:  # fall back to any short ones
      chosen = [i for i in range(len(synth)) if len(synth[i][0]) <= 3.2 * 16000][:2]
    with open(os.path.join(args.samples, "transcripts.tsv"), "w") as f:
      for n, i in enumerate(chosen):
        fn = f"sample_{n + 1}.wav"
        write_wav(os.path.join(args.samples, fn), synth[i][0])
        f.write(f"{fn}\t{synth[i][1]}\n")
        print(f"sample {fn}: voice {synth[i][2]} ref '{synth[i][1]}' hyp '{hyps[i]}'")

  if args.json:
    with open(args.json, "w") as f:
      json.dump({"results": results, "examples": examples}, f, indent=1)


if __name__ == "__main__":
  main()
