#!/usr/bin/env python3
"""Trains a small character-CTC QuartzNet on the corpus from tools/make_speech_data.py.

Pure PyTorch (tools/quartznet_torch.py): NeMo's featurizer ("nemo25" behaviour) and NeMo's
module names, so tools/export_model.py writes a model folder that loads like a converted NeMo
checkpoint. One command, resumable: rerunning it continues from --work/ckpt.pt.

The learning-rate schedule is driven by a wall-clock budget (--budget-min) as well as a step
budget (--max-steps): progress = max(steps/max_steps, train_seconds/budget_seconds), so the
cosine decay ends on time however busy the shared CPU is. Linear warm-up, AdamW, light
SpecAugment (after the first --specaug-after steps), SortaGrad (the first epoch runs from
short to long utterances), gradient clipping. A checkpoint is written every --ckpt-min minutes (atomic
rename), and a short greedy-WER probe runs then.

  nice -n 19 python tools/train_quartznet.py --budget-min 80
"""
import argparse
import glob
import math
import os
import random
import sys
import time

# Under a busy shared CPU, OpenMP's default spin-waiting burns the cores' share for nothing
# (measured here: ~10x slower steps); sleep instead. Must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quartznet_torch import (BLANK, LABELS, Featurizer, QuartzNet, default_blocks,  # noqa: E402
                             greedy_decode, wer_cer)

CHAR = {c: i for i, c in enumerate(LABELS)}


def load_split(dirname, skip=()):
  utts = []
  for p in sorted(glob.glob(os.path.join(dirname, "shard_*.npz"))):
    if p in skip or p.endswith(".tmp.npz"):
      continue
    d = np.load(p)
    a, off = d["audio"], d["offsets"]
    for i, t in enumerate(d["texts"]):
      utts.append((a[off[i]:off[i + 1]], str(t)))
  return utts


def make_batches(utts, max_samples, max_bs, rng, sorta=False):
  idx = sorted(range(len(utts)), key=lambda i: len(utts[i][0]) * rng.uniform(0.9, 1.1))
  batches, cur, cur_max = [], [], 0
  for i in idx:
    n = len(utts[i][0])
    if cur and (max(cur_max, n) * (len(cur) + 1) > max_samples or len(cur) >= max_bs):
      batches.append(cur)
      cur, cur_max = [], 0
    cur.append(i)
    cur_max = max(cur_max, n)
  if cur:
    batches.append(cur)
  if not sorta:  # SortaGrad: the first epoch runs short utterances first (faster CTC start)
    rng.shuffle(batches)
  return batches


def collate(utts, ids):
  L = max(len(utts[i][0]) for i in ids)
  audio = torch.zeros(len(ids), L)
  lens = torch.zeros(len(ids), dtype=torch.long)
  targets, tlens, texts = [], [], []
  for b, i in enumerate(ids):
    a, t = utts[i]
    audio[b, :len(a)] = torch.from_numpy(a.astype(np.float32) / 32768.0)
    lens[b] = len(a)
    targets += [CHAR[c] for c in t]
    tlens.append(len(t))
    texts.append(t)
  return audio, lens, torch.tensor(targets, dtype=torch.long), torch.tensor(tlens), texts


def spec_augment(x, lens, rng, freq_masks=2, freq_width=12, time_masks=2, time_width=20):
  """In place on [B, 64, T]; masked values = 0 (NeMo's mask_value)."""
  B, Fdim, _ = x.shape
  for b in range(B):
    for _ in range(freq_masks):
      w = rng.randint(0, freq_width)
      f0 = rng.randint(0, Fdim - w)
      x[b, f0:f0 + w, :] = 0.0
    T = int(lens[b])
    n = time_masks + T // 300
    for _ in range(n):
      w = rng.randint(0, min(time_width, max(1, T // 8)))
      t0 = rng.randint(0, max(0, T - w))
      x[b, :, t0:t0 + w] = 0.0
  return x


@torch.no_grad()
def evaluate(model, feat, utts, bs=16, limit=None):
  model.eval()
  feat.eval()
  utts = utts[:limit] if limit else utts
  order = sorted(range(len(utts)), key=lambda i: len(utts[i][0]))
  refs, hyps = [None] * len(utts), [None] * len(utts)
  for s in range(0, len(order), bs):
    ids = order[s:s + bs]
    audio, lens, _, _, texts = collate(utts, ids)
    x, xl = feat(audio, lens)
    lp, ol = model(x, xl)
    for i, h, r in zip(ids, greedy_decode(lp, ol), texts):
      refs[i], hyps[i] = r, h
  model.train()
  feat.train()
  return wer_cer(refs, hyps), refs, hyps


def save_ckpt(path, model, opt, state):
  tmp = path + ".tmp"
  torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state,
              "blocks": model.blocks}, tmp)
  os.replace(tmp, path)


def main():
  here = os.path.dirname(os.path.abspath(__file__))
  ap = argparse.ArgumentParser()
  ap.add_argument("--data", default=os.path.join(here, ".work", "data"))
  ap.add_argument("--work", default=os.path.join(here, ".work", "run1"))
  ap.add_argument("--budget-min", type=float, default=80.0, help="wall-clock training budget")
  ap.add_argument("--max-steps", type=int, default=100000)
  ap.add_argument("--lr", type=float, default=1.5e-3)
  ap.add_argument("--wd", type=float, default=1e-3)
  ap.add_argument("--warmup", type=int, default=200)
  ap.add_argument("--batch-seconds", type=float, default=40.0, help="padded audio per batch")
  ap.add_argument("--max-bs", type=int, default=32)
  ap.add_argument("--specaug-after", type=int, default=400, help="steps without SpecAugment")
  ap.add_argument("--ckpt-min", type=float, default=4.0)
  ap.add_argument("--threads", type=int, default=2)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--init", default=None,
                  help="start a new run (fresh optimizer and schedule) from this checkpoint's "
                       "weights: a second cosine cycle")
  ap.add_argument("--init-model", default=None,
                  help="like --init, but from an exported model folder (e.g. the shipped "
                       "models/quartznet_en_tts_small), so training continues where it left off")
  args = ap.parse_args()

  torch.set_num_threads(args.threads)
  os.makedirs(args.work, exist_ok=True)
  rng = random.Random(args.seed)
  torch.manual_seed(args.seed)

  model = QuartzNet(default_blocks())
  feat = Featurizer()
  opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.wd,
                          betas=(0.9, 0.98))
  state = {"step": 0, "train_s": 0.0, "epoch": 0, "audio_s": 0.0}
  ckpt = os.path.join(args.work, "ckpt.pt")
  if args.init and not os.path.exists(ckpt):
    model.load_state_dict(torch.load(args.init, map_location="cpu", weights_only=False)["model"])
    state["epoch"] = 1  # no SortaGrad pass
    print(f"initialized from {args.init}", flush=True)
  elif args.init_model and not os.path.exists(ckpt):
    from export_model import load_model_folder  # noqa: E402
    src, _ = load_model_folder(args.init_model)
    model.load_state_dict(src.state_dict())
    state["epoch"] = 1
    print(f"initialized from model folder {args.init_model}", flush=True)
  if os.path.exists(ckpt):
    d = torch.load(ckpt, map_location="cpu", weights_only=False)
    model.load_state_dict(d["model"])
    opt.load_state_dict(d["opt"])
    state = d["state"]
    print(f"resumed at step {state['step']}, {state['train_s'] / 60:.1f} min trained", flush=True)
  nparams = sum(p.numel() for p in model.parameters())
  print(f"params {nparams}", flush=True)

  probe = load_split(os.path.join(args.data, "test_synth"))
  rng_probe = random.Random(1)
  probe = rng_probe.sample(probe, min(50, len(probe)))
  budget_s = args.budget_min * 60
  last_ckpt = time.time()
  log = open(os.path.join(args.work, "train.log"), "a")
  model.train()
  feat.train()
  done = False
  while not done:
    utts = load_split(os.path.join(args.data, "train"))
    hours = sum(len(a) for a, _ in utts) / 16000 / 3600
    print(f"epoch {state['epoch']}: {len(utts)} utts, {hours:.2f} h", flush=True)
    batches = make_batches(utts, int(args.batch_seconds * 16000), args.max_bs, rng,
                           sorta=state["epoch"] == 0)
    for ids in batches:
      t0 = time.time()
      progress = max(state["step"] / args.max_steps, state["train_s"] / budget_s)
      if progress >= 1.0:
        done = True
        break
      warm = min(1.0, (state["step"] + 1) / args.warmup)
      lr = args.lr * warm * max(0.01, 0.5 * (1 + math.cos(math.pi * progress)))
      for g in opt.param_groups:
        g["lr"] = lr
      audio, lens, targets, tlens, _ = collate(utts, ids)
      x, xl = feat(audio, lens)
      if state["step"] >= args.specaug_after:
        x = spec_augment(x, xl, rng)
      lp, ol = model(x, xl)
      loss = F.ctc_loss(lp.transpose(0, 1), targets, ol, tlens, blank=BLANK,
                        reduction="mean", zero_infinity=True)
      opt.zero_grad(set_to_none=True)
      loss.backward()
      gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
      opt.step()
      state["step"] += 1
      state["audio_s"] += float(lens.sum()) / 16000
      state["train_s"] += time.time() - t0
      if state["step"] % 10 == 0:
        msg = (f"step {state['step']} loss {loss.item():.3f} gn {gn:.2f} lr {lr:.2e} "
               f"bs {len(ids)} trained {state['train_s'] / 60:.1f} min "
               f"audio {state['audio_s'] / 3600:.2f} h prog {progress:.3f}")
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()
      if time.time() - last_ckpt > args.ckpt_min * 60:
        save_ckpt(ckpt, model, opt, state)
        (w, c), refs, hyps = evaluate(model, feat, probe)
        msg = (f"ckpt step {state['step']}: probe WER {w * 100:.1f}% CER {c * 100:.1f}% | "
               f"ref '{refs[0]}' hyp '{hyps[0]}'")
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()
        last_ckpt = time.time()
    else:
      state["epoch"] += 1
  save_ckpt(ckpt, model, opt, state)
  (w, c), _, _ = evaluate(model, feat, probe)
  print(f"final step {state['step']}: probe WER {w * 100:.1f}% CER {c * 100:.1f}%", flush=True)


if __name__ == "__main__":
  main()
