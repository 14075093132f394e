#!/usr/bin/env python3
"""One-call GPU job: a larger QuartzNet trained on natural + robotic voices, then exported.

Made for a lent GPU machine that has PyTorch, numpy and the Python standard library but no
network, pip or apt, and that carries in only the pack of tools/pack_speech_data.py
(tools/.work/gpu_pack, <= 64 MiB). Everything happens in this one process tree:

1. Unpacks engines.tar.xz (espeak-ng, flite, their libraries and glibc's loader) into a temp
   folder and starts --synth-workers processes that synthesize fresh robotic utterances
   (tools/make_speech_data.py's voices, rates and pitches; text from the pack) all through
   training, on the CPU cores the GPU leaves idle. Engines that fail a self-test are left out.
2. Decodes the natural-voice Opus shards (Kokoro, hibari) through the carried libsndfile.
3. Trains with bf16 autocast: length-bucketed batches drawn from both pools
   (--natural-frac of the utterances natural), augmentation on the device (speed 0.85-1.15,
   gain, reverberation with synthetic room responses, white-to-brown noise, babble made from
   other utterances of the batch, 8 kHz telephone channel with mu-law, VTLP in the
   featurizer, SpecAugment), NeMo's featurizer, character CTC (the 28 labels), AdamW, linear
   warm-up then cosine decay over a wall-clock budget.
4. Stops at --train-min of training or --deadline-min after start, whichever is first (the
   schedule is sized to finish by then), and also on SIGTERM or an error in training: a
   checkpoint is always written. Exports it with tools/export_model.py.

Written under --out (default $OUT, else tools/.work/gpu_out), each file <= 16 MiB:
  train.log             everything printed
  results.json          steps, audio seen, training time, pool sizes, probe WER per source,
                        size and sha256 of model.safetensors
  ckpt_fp16.pt          weights (FP16) + blocks + state; rewritten every --ckpt-min minutes,
                        so a killed run still returns one; tools/export_model.py reads it
  model/model.json      the exported model folder; model.safetensors (F32) split into
  model/model.safetensors.partN  parts of <= 15 MiB: cat model.safetensors.part* > model.safetensors

GPU run (one device call; see docs/TRAINING.md):
  bash tools/gpu_train.sh
Rehearsal on this CPU (same code path and pack, tiny model, a few steps):
  OMP_NUM_THREADS=1 nice -n 19 python tools/gpu_train_job.py --device cpu --tiny \
      --pack tools/.work/gpu_pack --out /tmp/gpu_out
"""
import argparse
import concurrent.futures
import hashlib
import json
import lzma
import math
import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_speech_data as msd  # noqa: E402
from pack_speech_data import SR, Sndfile, fft_resample, read_shard, shard_prefixes  # noqa: E402
from train_core import ARCHS, Log, Trainer, greedy_wer, spec_augment  # noqa: E402,F401


# ----------------------------------------------------------------------------- robotic voices
def install_engines(tar, base):
  """engines.tar.xz -> a new folder under base (None: the system temp folder); PATH wrappers
  named espeak-ng / flite that run the carried binaries through the carried loader. Returns
  the wrapper folder."""
  if base:
    os.makedirs(base, exist_ok=True)
  top = tempfile.mkdtemp(prefix="jsengines_", dir=base)
  with tarfile.open(tar) as t:  # relative symlinks only: the "data" filter accepts them
    t.extractall(top, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
  root = os.path.join(top, "engines")
  libs = ":".join(os.path.join(root, d) for d in ("hostlibs", "usr/lib/x86_64-linux-gnu",
                                                  "lib/x86_64-linux-gnu"))
  loader = os.path.join(root, "hostlibs", "ld-linux-x86-64.so.2")
  bindir = os.path.join(top, "bin")
  os.makedirs(bindir)
  for name in ("espeak-ng", "flite"):
    if not os.path.exists(os.path.join(root, "usr/bin", name)):
      continue
    env = f"ESPEAK_DATA_PATH={root}/usr/lib/x86_64-linux-gnu " if name == "espeak-ng" else ""
    with open(os.path.join(bindir, name), "w") as f:
      f.write(f"#!/bin/sh\n{env}exec {loader} --library-path {libs} "
              f"{root}/usr/bin/{name} \"$@\"\n")
    os.chmod(os.path.join(bindir, name), 0o755)
  return bindir


def working_engines(bindir, rng, log):
  """The engines whose wrapper in bindir speaks a test sentence (only wrappers there count:
  a system copy on PATH must not stand in for a missing one)."""
  old_path = os.environ.get("PATH", "")
  os.environ["PATH"] = bindir + os.pathsep + old_path
  engines = []
  for eng, voice in (("espeak", ("espeak", "en-us", "")), ("flite", ("flite", "kal16", ""))):
    if not os.path.exists(os.path.join(bindir, "espeak-ng" if eng == "espeak" else eng)):
      continue
    try:
      x, sr = msd.read_wav_bytes(msd.synth(voice, "testing one two three", rng, vary=False))
      assert len(x) > sr // 2, "too short"
      engines.append(eng)
    except Exception as e:
      log(f"{eng} self-test in {bindir} failed: {e!r}"[:400])
  os.environ["PATH"] = old_path
  return engines


def robot_voice(engines, rng):
  """A training voice of tools/make_speech_data.py (held-out voices never), engines given."""
  if "flite" in engines and ("espeak" not in engines or rng.random() < 0.3):
    return ("flite", rng.choice(msd.FLITE_TRAIN), "")
  return ("espeak", rng.choice(msd.ESPEAK_BASES_TRAIN), rng.choice(msd.ESPEAK_VARIANTS_TRAIN))


_W = {}


def _robot_init(bindir, texts, words, engines):
  os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
  _W.update(texts=texts, words=words, engines=engines)
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler: terminate() kills


def robot_utt(seed):
  """seed -> (int16 audio 16 kHz, text, voice) or None."""
  rng = random.Random(seed)
  if rng.random() < 0.2:
    text = " ".join(rng.choice(_W["words"]) for _ in range(rng.randint(2, 7)))
  else:
    text = rng.choice(_W["texts"])
  voice = robot_voice(_W["engines"], rng)
  try:
    x, sr = msd.read_wav_bytes(msd.synth(voice, text, rng, vary=True))
  except Exception:
    return None
  x = msd.trim(fft_resample(x, sr, SR))
  if not 0.3 * SR <= len(x) <= 15 * SR:
    return None
  x = x / (np.abs(x).max() + 1e-9) * 0.5
  return (x * 32767).astype(np.int16), text, msd.voice_name(voice)


class UttPool:
  """Utterances of one source, bucketed by length (0.5 s bins). One thread appends while the
  trainer samples: `count` grows only after an utterance is in its bin, so every index below
  it is safe to use."""

  def __init__(self, name):
    self.name, self.utts, self.bins, self.samples, self.count = name, [], {}, 0, 0

  def add(self, audio, text):
    if not text or len(audio) < SR // 4:
      return
    i = len(self.utts)
    self.utts.append((audio, text))
    self.bins.setdefault(len(audio) // (SR // 2), []).append(i)
    self.samples += len(audio)
    self.count = i + 1

  def hours(self):
    return self.samples / SR / 3600


def start_robot_feeder(pool, bindir, texts, words, engines, workers, max_hours, stop, log):
  """A process pool synthesizing into `pool` until `stop` is set or max_hours are reached."""
  ctx = mp.get_context("fork")  # before CUDA is touched
  procs = ctx.Pool(workers, initializer=_robot_init, initargs=(bindir, texts, words, engines))

  def feed():
    seed = 10 ** 6
    try:
      while not stop.is_set() and pool.hours() < max_hours:
        for r in procs.imap_unordered(robot_utt, range(seed, seed + 16 * workers)):
          if r is not None:
            pool.add(r[0], r[1])
          if stop.is_set():
            break
        seed += 16 * workers
    except Exception as e:  # the pool is closed at shutdown
      if not stop.is_set():
        log(f"robot feeder stopped: {e}")

  th = threading.Thread(target=feed, daemon=True)
  th.start()
  return procs, th


# ----------------------------------------------------------------------------- batches
def sample_batch(pools, weights, batch_samples, max_bs, rng):
  """Length-bucketed batch: a random anchor utterance fixes the 0.5 s length bin; the batch is
  filled from that bin of each pool, chosen per utterance by weight."""
  live = [(p, w) for p, w in zip(pools, weights) if p.count and w > 0]
  anchor_pool = rng.choices([p for p, _ in live], [w for _, w in live])[0]
  b = len(anchor_pool.utts[rng.randrange(anchor_pool.count)][0]) // (SR // 2)
  n = max(1, min(max_bs, batch_samples // ((b + 1) * (SR // 2))))
  out = []
  for _ in range(n):
    p = rng.choices([p for p, _ in live], [w for _, w in live])[0]
    ids = p.bins.get(b) or anchor_pool.bins[b]
    src = p if p.bins.get(b) else anchor_pool
    out.append(src.utts[ids[rng.randrange(len(ids))]])
  return out


def collate(items, torch):
  L = max(len(a) for a, _ in items)
  audio = np.zeros((len(items), L), np.int16)
  for i, (a, _) in enumerate(items):
    audio[i, :len(a)] = a
  lens = torch.tensor([len(a) for a, _ in items])
  return torch.from_numpy(audio), lens, [t for _, t in items]


# ----------------------------------------------------------------------------- augmentation
def fft_resample_batch(torch, x, n_out):
  X = torch.fft.rfft(x, dim=1)
  keep = min(X.shape[1], n_out // 2 + 1)
  Y = torch.zeros(x.shape[0], n_out // 2 + 1, dtype=X.dtype, device=x.device)
  Y[:, :keep] = X[:, :keep]
  return torch.fft.irfft(Y, n=n_out, dim=1) * (n_out / x.shape[1])


def augment(torch, x, lens, rng, g):
  """x [B, L] float32 on the device, lens [B] samples -> augmented x, lens."""
  B, L = x.shape
  dev = x.device

  def rows(p):
    return (torch.rand(B, 1, device=dev, generator=g) < p).float()

  def valid():
    return (torch.arange(x.shape[1], device=dev)[None, :] < lens[:, None]).float()

  if rng.random() < 0.8:  # speed (tempo and pitch), one factor per batch
    f = rng.uniform(0.85, 1.15)
    n = int(round(L / f))
    x = fft_resample_batch(torch, x, n)
    lens = torch.clamp((lens.float() / f).long(), max=n)
    L = n
  x = x * valid()
  # reverberation: exponentially decaying noise tails, RT60 0.15-0.7 s, convolved by FFT
  R = SR // 2
  t = torch.arange(R, device=dev)[None, :] / SR
  rt60 = 0.15 + 0.55 * torch.rand(B, 1, device=dev, generator=g)
  rir = torch.randn(B, R, device=dev, generator=g) * torch.exp(-6.9 * t / rt60)
  rir[:, 0] = 1.0 + rir[:, 0].abs()
  rir = rir / rir.norm(dim=1, keepdim=True)
  nfft = L + R
  wet = torch.fft.irfft(torch.fft.rfft(x, n=nfft) * torch.fft.rfft(rir, n=nfft), n=nfft)[:, :L]
  wet = wet * (x.abs().amax(1, keepdim=True) / (wet.abs().amax(1, keepdim=True) + 1e-9))
  r = rows(0.3)
  x = r * wet + (1 - r) * x
  # noise: white (0) to brown (2) spectral slope, SNR 5-30 dB
  v = valid()
  ps = (x ** 2).sum(1, keepdim=True) / lens[:, None].clamp(min=1)
  N = torch.fft.rfft(torch.randn(B, L, device=dev, generator=g))
  f = torch.arange(N.shape[1], device=dev).clamp(min=1)[None, :].float()
  alpha = 2 * torch.rand(B, 1, device=dev, generator=g)
  noise = torch.fft.irfft(N * f ** (-alpha / 2), n=L) * v
  pn = (noise ** 2).sum(1, keepdim=True) / lens[:, None].clamp(min=1) + 1e-12
  snr = 5 + 25 * torch.rand(B, 1, device=dev, generator=g)
  x = x + rows(0.5) * noise * torch.sqrt(ps / pn / 10 ** (snr / 10))
  # babble: 3-6 other utterances of the batch, shifted in time, SNR 5-20 dB
  if B > 3:
    k = rng.randint(3, min(6, B - 1))
    bab = sum(torch.roll(torch.roll(x, i, dims=0), rng.randrange(L), dims=1)
              for i in range(1, k + 1)) * v
    pb = (bab ** 2).sum(1, keepdim=True) / lens[:, None].clamp(min=1) + 1e-12
    snr = 5 + 15 * torch.rand(B, 1, device=dev, generator=g)
    x = x + rows(0.2) * bab * torch.sqrt(ps / pb / 10 ** (snr / 10))
  # gain: peak at -30..-1 dBFS
  peak = 10 ** ((-30 + 29 * torch.rand(B, 1, device=dev, generator=g)) / 20)
  x = x / (x.abs().amax(1, keepdim=True) + 1e-9) * peak
  # telephone: 300-3400 Hz, 8 kHz, 8-bit mu-law, back to 16 kHz (15 % of the utterances; the
  # batch-level draw keeps the host from waiting on the device)
  if rng.random() < 0.5:
    tel = rows(0.3)
    X = torch.fft.rfft(x, dim=1)
    hz = torch.arange(X.shape[1], device=dev) * SR / L
    band = fft_resample_batch(torch, torch.fft.irfft(X * ((hz >= 300) & (hz <= 3400)), n=L),
                              L // 2)
    mu = torch.sign(band) * torch.log1p(255 * band.abs().clamp(max=1)) / math.log(256)
    mu = torch.round(mu * 127.5) / 127.5
    lin = torch.sign(mu) * (256 ** mu.abs() - 1) / 255
    x = tel * fft_resample_batch(torch, lin, L) + (1 - tel) * x
  return (x * valid()).clamp(-1, 1), lens


# ----------------------------------------------------------------------------- main
def save_fp16(torch, path, model, blocks, state):
  tmp = path + ".tmp"
  sd = {k: (v.half() if v.is_floating_point() else v).cpu() for k, v in model.state_dict().items()}
  torch.save({"model": sd, "blocks": blocks, "state": dict(state)}, tmp)
  os.replace(tmp, path)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--pack", default=os.path.join(HERE, ".work", "gpu_pack"))
  ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(HERE, ".work",
                                                                          "gpu_out"))
  ap.add_argument("--device", default="cuda")
  ap.add_argument("--tiny", action="store_true",
                  help="rehearsal: tiny model, small batches, --max-steps 6, 1 minute")
  ap.add_argument("--arch", default="qn5x5_480", choices=sorted(ARCHS))
  ap.add_argument("--name", default="quartznet_en_natural")
  ap.add_argument("--train-min", type=float, default=7.5, help="training wall-clock budget")
  ap.add_argument("--deadline-min", type=float, default=9.0,
                  help="hard limit from start to the end of export")
  ap.add_argument("--export-reserve-s", type=float, default=45.0)
  ap.add_argument("--max-steps", type=int, default=10 ** 6)
  ap.add_argument("--batch-seconds", type=float, default=1200.0, help="padded audio per batch")
  ap.add_argument("--max-bs", type=int, default=256)
  ap.add_argument("--lr", type=float, default=3e-3)
  ap.add_argument("--wd", type=float, default=1e-3)
  ap.add_argument("--warmup", type=int, default=200)
  ap.add_argument("--natural-frac", type=float, default=0.5)
  ap.add_argument("--synth-workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
  ap.add_argument("--robot-max-hours", type=float, default=150.0)
  ap.add_argument("--min-start-utts", type=int, default=200,
                  help="wait (at most 60 s) for this many utterances before the first step")
  ap.add_argument("--log-s", type=float, default=15.0)
  ap.add_argument("--probe-s", type=float, default=120.0)
  ap.add_argument("--ckpt-min", type=float, default=2.0)
  ap.add_argument("--cudnn-benchmark", action="store_true",
                  help="let cuDNN time its algorithms per shape (batch shapes vary a lot: "
                       "off by default so no time goes to autotuning)")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()
  if args.tiny:
    args.arch, args.batch_seconds, args.max_bs = "tiny", 24.0, 8
    args.max_steps = min(args.max_steps, 6)
    args.train_min, args.min_start_utts, args.warmup = min(args.train_min, 1.0), 20, 2
    args.synth_workers = min(args.synth_workers, 1)
  t_start = time.time()
  os.makedirs(os.path.join(args.out, "model"), exist_ok=True)
  log = Log(os.path.join(args.out, "train.log"))
  log(f"args {vars(args)}")
  stop = threading.Event()
  signal.signal(signal.SIGTERM, lambda *_: stop.set())
  rng = random.Random(args.seed)
  manifest = json.load(open(os.path.join(args.pack, "manifest.json")))
  log(f"pack {args.pack}: {manifest['total_bytes'] / 2 ** 20:.1f} MiB, natural "
      f"{manifest['natural']}")

  # 1. robotic voices (the process pool forks before torch touches the device)
  texts = lzma.open(os.path.join(args.pack, "texts_train.txt.xz"), "rt").read().split("\n")
  words = lzma.open(os.path.join(args.pack, "words.txt.xz"), "rt").read().split("\n")
  texts, words = [t for t in texts if t], [w for w in words if w]
  robot = UttPool("robot")
  procs = None
  tar = os.path.join(args.pack, "engines.tar.xz")
  bindir, engines = None, []
  if os.path.exists(tar):
    for base in (None, os.path.join(HERE, ".work")):  # a noexec temp folder: try the checkout
      try:
        bindir = install_engines(tar, base)
      except Exception as e:
        log(f"unpacking {tar} under {base or 'the temp folder'} failed: {e!r}")
        continue
      engines = working_engines(bindir, rng, log)
      if engines:
        break
      shutil.rmtree(os.path.dirname(bindir), ignore_errors=True)
      bindir = None
  log(f"robotic engines: {engines or 'none'}" + ("" if os.path.exists(tar) else f" (no {tar})"))
  if engines:
    procs, _ = start_robot_feeder(robot, bindir, texts, words, engines, args.synth_workers,
                                  args.robot_max_hours, stop, log)

  import torch
  from quartznet_torch import Featurizer
  dev = torch.device(args.device)
  torch.manual_seed(args.seed)
  g = torch.Generator(device=dev)
  g.manual_seed(args.seed)
  if dev.type == "cuda":
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    log(f"device {torch.cuda.get_device_name(dev)}, torch {torch.__version__}")

  # 2. natural voices
  natural, probe = UttPool("natural"), []
  sndfile = Sndfile(os.path.join(args.pack, "libsndfile_x86_64.so.xz"))
  t0 = time.time()
  with concurrent.futures.ThreadPoolExecutor(8) as ex:  # ctypes calls release the GIL
    for split in ("train", "probe"):
      for items in ex.map(lambda p: read_shard(p, sndfile),
                          shard_prefixes(os.path.join(args.pack, "natural", split))):
        for a, t, v in items:
          if split == "train":
            natural.add(a, t)
          else:
            probe.append((a, t, v.split(":")[0]))
  el = max(time.time() - t0, 1e-6)
  secs = (natural.samples + sum(len(a) for a, _, _ in probe)) / SR
  log(f"natural: {len(natural.utts)} utts {natural.hours():.2f} h + probe {len(probe)}, "
      f"decoded in {el:.1f} s ({secs / el:.0f}x real time)")

  blocks = ARCHS[args.arch]
  trainer = Trainer(torch, blocks, dev, args.lr, args.wd, args.warmup, torch.bfloat16,
                    fused=dev.type == "cuda")
  model, state = trainer.model, trainer.state
  state["arch"] = args.arch
  feat = Featurizer().to(dev)
  log(f"model {args.arch}: {trainer.nparams} parameters")
  results = {"arch": args.arch, "params": trainer.nparams, "probe": {}}

  @torch.no_grad()
  def probe_batches():
    feat.eval()
    order = sorted(range(len(probe)), key=lambda i: len(probe[i][0]))
    for s in range(0, len(order), 32):
      items = [probe[i] for i in order[s:s + 32]]
      audio, lens, texts_ = collate([(a, t) for a, t, _ in items], torch)
      x, xl = feat(audio.to(dev).float() / 32768.0, lens.to(dev))
      yield x, xl, texts_, [src for _, _, src in items]
    feat.train()

  def run_probe():
    out = greedy_wer(torch, model, probe_batches(), dev, torch.bfloat16)
    for src, v in out.items():
      log(f"probe {src}: WER {v['wer'] * 100:.1f}% CER {v['cer'] * 100:.1f}% ({v['utts']} utts)"
          f" | {v['example']}")
    return out

  # 3. train
  wait_until = time.time() + 60
  while len(natural.utts) + len(robot.utts) < args.min_start_utts and time.time() < wait_until:
    time.sleep(1)
  if not natural.utts and not robot.utts:
    sys.exit("error: no training data (no natural shards and no working engine)")
  train_start = time.time()
  budget = min(args.train_min * 60,
               args.deadline_min * 60 - args.export_reserve_s - (train_start - t_start))
  log(f"training for {budget / 60:.2f} min; robot pool {len(robot.utts)} utts so far")
  last_log = last_probe = last_ckpt = time.time()
  ckpt_path = os.path.join(args.out, "ckpt_fp16.pt")
  model.train()
  feat.train()
  try:
    while not stop.is_set():
      progress = max(state["step"] / args.max_steps, (time.time() - train_start) / budget)
      if progress >= 1.0:
        break
      items = sample_batch([natural, robot], [args.natural_frac, 1 - args.natural_frac],
                           int(args.batch_seconds * SR), args.max_bs, rng)
      audio, lens, texts_ = collate(items, torch)
      src_s = float(lens.sum()) / SR  # source audio, before speed perturbation
      audio = audio.to(dev, non_blocking=True).float() / 32768.0
      lens = lens.to(dev)
      x, lens = augment(torch, audio, lens, rng, g)
      warp = 0.9 + 0.2 * torch.rand(len(texts_), device=dev, generator=g)
      feats, flens = feat(x, lens, warp=warp)
      feats = spec_augment(torch, feats, flens, g)
      loss, gn, lr = trainer.step(feats, flens, texts_, progress, src_s)
      now = time.time()
      if now - last_log >= args.log_s or state["step"] <= 3:
        mem = (f" mem {torch.cuda.max_memory_allocated(dev) / 2 ** 30:.1f} GiB"
               if dev.type == "cuda" else "")
        log(f"step {state['step']} loss {loss:.3f} gn {gn:.2f} lr {lr:.2e} "
            f"bs {len(texts_)} x {audio.shape[1] / SR:.1f} s | seen {state['audio_s'] / 3600:.2f} h"
            f" ({state['audio_s'] / state['train_s']:.0f}x real time) | pools natural "
            f"{natural.hours():.2f} h, robot {robot.hours():.2f} h ({len(robot.utts)} utts) | "
            f"prog {progress:.3f}{mem}")
        last_log = now
      if now - last_probe >= args.probe_s and probe:
        results["probe"][str(state["step"])] = run_probe()
        last_probe = time.time()
      if now - last_ckpt >= args.ckpt_min * 60:
        save_fp16(torch, ckpt_path, model, blocks, state)
        last_ckpt = time.time()
  except Exception:
    log("training stopped by an error; saving what there is:\n" + traceback.format_exc())
    results["error"] = traceback.format_exc()[-2000:]
  stop.set()
  if procs is not None:
    procs.terminate()
  if bindir:
    shutil.rmtree(os.path.dirname(bindir), ignore_errors=True)
  log(f"trained {state['step']} steps, {state['audio_s'] / 3600:.2f} h of audio in "
      f"{state['train_s'] / 60:.2f} min; robot pool {robot.hours():.2f} h")

  # 4. checkpoint, probe, export
  save_fp16(torch, ckpt_path, model, blocks, state)
  if probe:
    results["probe"]["final"] = run_probe()
  with tempfile.TemporaryDirectory() as td:
    full = os.path.join(td, "ckpt.pt")
    torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()}, "blocks": blocks,
                "state": dict(state)}, full)
    folder = os.path.join(td, args.name)
    r = subprocess.run([sys.executable, os.path.join(HERE, "export_model.py"), "--ckpt", full,
                        "--out", folder, "--name", args.name], capture_output=True, text=True)
    log(f"export: rc {r.returncode} {r.stdout.strip()} {r.stderr.strip()[-1500:]}")
    if r.returncode == 0:
      os.replace(os.path.join(folder, "model.json"), os.path.join(args.out, "model", "model.json"))
      raw = open(os.path.join(folder, "model.safetensors"), "rb").read()
      part = 15 * 2 ** 20
      for i in range(0, len(raw), part):
        with open(os.path.join(args.out, "model", f"model.safetensors.part{i // part}"),
                  "wb") as f:
          f.write(raw[i:i + part])
      results["model_safetensors"] = {"bytes": len(raw),
                                      "sha256": hashlib.sha256(raw).hexdigest(),
                                      "parts": (len(raw) + part - 1) // part}
  results.update(state=state, natural_hours=natural.hours(), robot_hours=robot.hours(),
                 robot_utts=len(robot.utts), engines=engines,
                 wall_s=round(time.time() - t_start, 1))
  with open(os.path.join(args.out, "results.json"), "w") as f:
    json.dump(results, f, indent=1)
  log(f"done in {time.time() - t_start:.1f} s; outputs in {args.out}")


if __name__ == "__main__":
  main()
