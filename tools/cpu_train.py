#!/usr/bin/env python3
"""Trains the default model on the CPU, one session at a time (issue 26; docs/TRAINING.md).

The run is planned as a whole (--plan-hours of audio seen, cosine schedule over it) and carried
from session to session in one committed file, tools/training_data/cpu_run/state.pt: weights
with batch-norm statistics (FP32), the weight EMA and AdamW's moments (BF16), step, audio seen,
the session count and the sampler's RNG state. Each session:

  nice -n 19 VENV/bin/python tools/cpu_train.py &     # resumes from state.pt, trains until
                                                      # SIGTERM / SIGINT (or --train-min)
  kill -USR1 PID     # write state.pt now and go on
  kill -STOP PID / kill -CONT PID                     # pause while timing something else
  kill -TERM PID     # write state.pt, append the learning curve, exit (then commit both)
  VENV/bin/python tools/cpu_train.py --export DIR     # EMA weights -> a model folder

Data pipeline (the step must not wait on data; both cores train):
1. Once per session, 2 worker processes build a feature cache under --work: the committed
   natural-voice shards (Kokoro, hibari) and a fresh robotic pool (espeak-ng, flite; new seeds
   every session) are each rendered as --variants fixed copies (speed 1.0 / slower / faster,
   each with reverberation p 0.3 and the 8 kHz mu-law telephone channel p 0.2) and stored as
   FP16 log-mel before normalization (46 MB per hour of audio per copy).
2. Per batch, on the fly, in the log-mel domain: gain (-30..-1 dBFS peak, against the dither
   floor), coloured noise (white..brown, 5-30 dB SNR, p 0.5; real noise frames featurized once,
   added as power), babble (another utterance of the batch at 5-20 dB, p 0.15), then NeMo's
   per-feature normalization and SpecAugment. Batches are length-bucketed (0.5 s bins).
3. train_core.Trainer: BF16 autocast where the CPU computes BF16 (AMX / AVX-512 BF16), CTC,
   AdamW, EMA.
"""
import argparse
import glob
import hashlib
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import train_core  # noqa: E402
from pack_speech_data import read_shard, shard_prefixes  # noqa: E402
from train_data import Pool, fixed_copies, fft_resample, sample_entries  # noqa: E402

SR = 16000
CACHE_VERSION = 1
DEFAULT_STATE = os.path.join(HERE, "training_data", "cpu_run", "state.pt")


# ----------------------------------------------------------------------------- cache workers
_W = {}


def _worker_init(texts, words):
  import torch
  torch.set_num_threads(1)
  from quartznet_torch import Featurizer
  _W.update(torch=torch, feat=Featurizer().eval(), texts=texts, words=words)
  signal.signal(signal.SIGINT, signal.SIG_IGN)


def _log_mel16(x):
  torch = _W["torch"]
  a = torch.from_numpy(x)[None, :]
  mel, n = _W["feat"].log_mel(a, torch.tensor([len(x)]))
  return mel[0, :, :int(n[0])].numpy().astype(np.float16)


class _SoundfileReader:
  """pack_speech_data.read_shard's reader, through the soundfile package (installed here)."""

  @staticmethod
  def read_int16(path):
    import soundfile as sf
    x, sr = sf.read(path, dtype="int16")
    return (x.mean(axis=1).astype(np.int16) if x.ndim > 1 else x), sr


def natural_shard_job(args):
  """(shard prefix, copies, seed) -> [(text, [fp16 log-mel [64, T] per copy])]."""
  prefix, copies, seed = args
  rng = np.random.default_rng(seed)
  out = []
  for a, text, _voice in read_shard(prefix, _SoundfileReader):
    if len(a) < SR // 4 or not text:
      continue
    x = a.astype(np.float32) / 32768.0
    out.append((text, [_log_mel16(y) for y in fixed_copies(x, rng, copies)]))
  return out


def robot_job(args):
  """(seed, utterances, copies) -> the same as natural_shard_job, from espeak-ng / flite."""
  seed, count, copies = args
  import make_speech_data as msd
  from gpu_train_job import robot_voice
  rng = random.Random(seed)
  nrng = np.random.default_rng(seed)
  engines = [e for e, b in (("espeak", "espeak-ng"), ("flite", "flite")) if shutil.which(b)]
  out = []
  for _ in range(count):
    if rng.random() < 0.2:
      text = " ".join(rng.choice(_W["words"]) for _ in range(rng.randint(2, 7)))
    else:
      text = rng.choice(_W["texts"])
    try:
      x, sr = msd.read_wav_bytes(msd.synth(robot_voice(engines, rng), text, rng, vary=True))
    except Exception:
      continue
    x = msd.trim(fft_resample(x, SR / sr) if sr != SR else x)
    if not 0.3 * SR <= len(x) <= 15 * SR:
      continue
    out.append((text, [_log_mel16(y) for y in fixed_copies(x, nrng, copies)]))
  return out


def build_pools(args, session, log):
  """Natural (cached on disk, keyed by the shards and copies) and robotic (per session)."""
  os.makedirs(args.work, exist_ok=True)
  shards = shard_prefixes(os.path.join(args.natural, "train"))
  key = hashlib.sha256(json.dumps([CACHE_VERSION, args.variants] + [
      (os.path.basename(p), os.path.getsize(p + ".ogg")) for p in shards]).encode()).hexdigest()
  nat_path = os.path.join(args.work, f"natural_{key[:12]}.npz")
  # One robotic pool per machine: a restart on the same machine reuses it; a new machine (a new
  # session) makes a new one with new seeds.
  tail = f"_{args.robot_hours:g}h_v{args.variants}_{CACHE_VERSION}.npz"
  made = sorted(glob.glob(os.path.join(args.work, "robot_s*" + tail)), key=os.path.getmtime)
  rob_path = made[-1] if made else os.path.join(args.work, f"robot_s{session}{tail}")
  need_nat, need_rob = not os.path.exists(nat_path), args.robot_hours > 0 and not os.path.exists(
      rob_path)
  if need_nat or need_rob:
    texts = words = []
    if need_rob:
      from spoken_text import text_pool
      texts, _, words = text_pool()
    t0 = time.time()
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.cache_workers, initializer=_worker_init, initargs=(texts, words)) as pool:
      if need_nat:
        items = []
        for r in pool.imap(natural_shard_job, [(p, args.variants, 1000 + i)
                                               for i, p in enumerate(shards)]):
          items += r
        Pool.from_items("natural", items).save(nat_path)
        log(f"natural cache: {len(items)} utts x {args.variants} copies in "
            f"{time.time() - t0:.0f} s -> {nat_path}")
      if need_rob:
        t1, items, secs = time.time(), [], 0.0
        seed = 7_000_000 + 100_000 * session
        while secs < args.robot_hours * 3600:
          jobs = [(seed + i, 25, args.variants) for i in range(4 * args.cache_workers)]
          seed += len(jobs)
          for r in pool.imap_unordered(robot_job, jobs):
            items += r
            secs += sum(c[0].shape[1] for _, c in r) / 100
          if not items:
            raise RuntimeError("no robotic utterance could be made (espeak-ng / flite missing?)")
        Pool.from_items("robot", items).save(rob_path)
        log(f"robot cache: {len(items)} utts, {secs / 3600:.2f} h x {args.variants} copies in "
            f"{time.time() - t1:.0f} s -> {rob_path}")
  pools = [Pool.load("natural", nat_path)]
  if args.robot_hours > 0:
    pools.append(Pool.load("robot", rob_path))
  return pools


# ----------------------------------------------------------------------------- batches
def noise_textures(torch, feat, rng):
  """Mel power of 20 s of coloured noise (spectral slope 0 = white .. 2 = brown, 5 steps),
  unit mean power: [5, 64, 2000]; and the dither floor's mel power [64]."""
  n = 20 * SR
  out = []
  for alpha in (0.0, 0.5, 1.0, 1.5, 2.0):
    X = np.fft.rfft(rng.standard_normal(n))
    f = np.maximum(np.arange(len(X)), 1).astype(np.float64)
    x = np.fft.irfft(X * f ** (-alpha / 2), n)
    x = (x / np.abs(x).max() * 0.5).astype(np.float32)
    mel, _ = feat.log_mel(torch.from_numpy(x)[None], torch.tensor([n]))
    p = torch.exp(mel[0]) - 2 ** -24
    out.append(p / p.mean())
  feat.train()
  d, _ = feat.log_mel(torch.zeros(1, 4 * SR), torch.tensor([4 * SR]))
  feat.eval()
  floor = (torch.exp(d[0]) - 2 ** -24).clamp(min=0).mean(1)
  return torch.stack(out)[:, :, :2000], floor


def pad_log_mel(torch, mels):
  """[fp16 log-mel [64, T_i]] -> float32 [B, 64, max T] padded with log(2^-24) (silence), and
  the lengths [B]."""
  T = max(m.shape[1] for m in mels)
  out = torch.full((len(mels), 64, T), float(np.log(2 ** -24)))
  for i, m in enumerate(mels):
    out[i, :, :m.shape[1]] = torch.from_numpy(m.astype(np.float32))
  return out, torch.tensor([m.shape[1] for m in mels])


def make_batch(torch, entries, textures, floor, rng, g, augment=True):
  """entries [(fp16 log-mel [64, T], text)] -> normalized features [B, 64, T16], lengths,
  texts; with augment: gain, noise, babble, SpecAugment (see the module doc)."""
  from quartznet_torch import normalize_per_feature
  mel, lens = pad_log_mel(torch, [m for m, _ in entries])
  B, T = len(entries), mel.shape[2]
  if augment:
    valid = (torch.arange(T)[None, :] < lens[:, None]).float()[:, None, :]
    P = (torch.exp(mel) - 2 ** -24).clamp(min=0) * valid
    # gain: cached copies peak at 0.5; draw -30..-1 dBFS (power ratio), then the dither floor
    peak_db = torch.from_numpy(rng.uniform(-30, -1, B)).float()
    P = P * (10 ** (peak_db / 10) / 0.25)[:, None, None]
    ps = P.sum((1, 2)) / (lens * 64)
    # coloured noise at 5-30 dB SNR (p 0.5): a random texture and offset per utterance
    for i in np.nonzero(rng.random(B) < 0.5)[0]:
      tex = textures[int(rng.integers(len(textures)))]
      reps = -(-T // tex.shape[1])
      nz = torch.roll(tex.repeat(1, reps)[:, :T], int(rng.integers(tex.shape[1])), 1)
      snr = rng.uniform(5, 30)
      P[i] += nz * (ps[i] / 10 ** (snr / 10)) * valid[i]
    # babble: another utterance of the batch, shifted, at 5-20 dB (p 0.15)
    if B > 1:
      for i in np.nonzero(rng.random(B) < 0.15)[0]:
        j = (int(i) + 1 + int(rng.integers(B - 1))) % B
        pj = P[j].sum() / (lens[j] * 64) + 1e-20
        snr = rng.uniform(5, 20)
        P[i] += torch.roll(P[j], int(rng.integers(T)), 1) * (ps[i] / pj / 10 ** (snr / 10)) \
            * valid[i]
    mel = torch.log(P + floor[None, :, None] + 2 ** -24)
  feats = normalize_per_feature(mel, lens)
  if augment:
    feats = train_core.spec_augment(torch, feats, lens, g)
  return feats, lens, [t for _, t in entries]


def probe_batches(torch, items, bs=32):
  """The natural probe (held-out sentences, other speakers): copy 0, no augmentation."""
  from quartznet_torch import normalize_per_feature
  order = sorted(range(len(items)), key=lambda i: items[i][1].shape[1])
  out = []
  for s in range(0, len(order), bs):
    chunk = [items[i] for i in order[s:s + bs]]
    mel, lens = pad_log_mel(torch, [m for _, m, _ in chunk])
    out.append((normalize_per_feature(mel, lens), lens, [t for t, _, _ in chunk],
                [src for _, _, src in chunk]))
  return out


def load_probe(torch, folder):
  from quartznet_torch import Featurizer
  feat = Featurizer().eval()
  items = []
  for prefix in shard_prefixes(os.path.join(folder, "probe")):
    for a, text, voice in read_shard(prefix, _SoundfileReader):
      x = a.astype(np.float32)
      x *= np.float32(0.5) / (np.abs(x).max() + np.float32(1e-9))
      mel, ln = feat.log_mel(torch.from_numpy(x)[None], torch.tensor([len(x)]))
      items.append((text, mel[0, :, :int(ln[0])].numpy().astype(np.float16),
                    voice.split(":")[0]))
  return items


# ----------------------------------------------------------------------------- export
def export(torch, state_path, out_dir, name, lm):
  """The state file's EMA weights -> a model folder (tools/export_model.py), with the n-gram LM
  file `lm` copied in and named in model.json (none when lm is empty)."""
  blob = torch.load(state_path, map_location="cpu", weights_only=False)
  sd = {k: (blob["ema"][k].float() if k in blob["ema"] else v) for k, v in blob["model"].items()}
  with tempfile.TemporaryDirectory() as td:
    ck = os.path.join(td, "ckpt.pt")
    torch.save({"model": sd, "blocks": blob["blocks"], "state": blob["state"]}, ck)
    subprocess.run([sys.executable, os.path.join(HERE, "export_model.py"), "--ckpt", ck,
                    "--out", out_dir, "--name", name], check=True)
  if lm:
    shutil.copyfile(lm, os.path.join(out_dir, "lm.bin"))
    cfg_path = os.path.join(out_dir, "model.json")
    cfg = json.load(open(cfg_path))
    cfg = {"format_version": cfg["format_version"], "name": cfg["name"],
           "language_model": "lm.bin", **cfg}
    with open(cfg_path, "w") as f:
      f.write(json.dumps(cfg, indent=2) + "\n")
  return blob["state"]


# ----------------------------------------------------------------------------- main
def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--state", default=DEFAULT_STATE, help="resumed from and written to")
  ap.add_argument("--work", default=os.path.join(HERE, ".work", "cpu_run"),
                  help="feature caches and the log (git-ignored)")
  ap.add_argument("--natural", default=os.path.join(HERE, "training_data", "natural"))
  ap.add_argument("--arch", default="qn5x5_480", choices=sorted(train_core.ARCHS))
  ap.add_argument("--plan-hours", type=float, default=600.0,
                  help="audio seen over the whole run (all sessions): the cosine's length")
  ap.add_argument("--lr", type=float, default=2e-3)
  ap.add_argument("--wd", type=float, default=1e-3)
  ap.add_argument("--warmup", type=int, default=400, help="steps")
  ap.add_argument("--batch-seconds", type=float, default=64.0, help="padded audio per batch")
  ap.add_argument("--max-bs", type=int, default=32)
  ap.add_argument("--natural-frac", type=float, default=0.6)
  ap.add_argument("--variants", type=int, default=3, help="fixed copies per utterance")
  ap.add_argument("--robot-hours", type=float, default=3.0, help="new robotic audio per session")
  ap.add_argument("--cache-workers", type=int, default=2)
  ap.add_argument("--threads", type=int, default=2)
  ap.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
  ap.add_argument("--train-min", type=float, default=1e9, help="stop after this many minutes")
  ap.add_argument("--max-steps", type=int, default=10 ** 9, help="stop after this step")
  ap.add_argument("--ckpt-min", type=float, default=10.0)
  ap.add_argument("--probe-min", type=float, default=15.0)
  ap.add_argument("--log-s", type=float, default=60.0)
  ap.add_argument("--curve", default=None,
                  help="learning-curve TSV (default: curve.tsv beside --state)")
  ap.add_argument("--init", metavar="CKPT",
                  help="with no state yet: start from these weights (the GPU job's ckpt_fp16.pt "
                       "or any {'model', 'blocks'} checkpoint of tools/export_model.py's kind)")
  ap.add_argument("--export", metavar="DIR", help="write the EMA model folder and exit")
  ap.add_argument("--name", default="quartznet_en_natural")
  ap.add_argument("--lm", default=os.path.join(ROOT, "models", "quartznet_en_tts_small", "lm.bin"),
                  help="with --export: the LM to put in the folder ('' for none; the default "
                       "is built from the training side of the text pool, tools/build_lm.py)")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()

  t_begin = time.time()
  import torch
  torch.set_num_threads(args.threads)
  if args.export:
    st = export(torch, args.state, args.export, args.name, args.lm)
    print(f"exported step {st['step']}, {st['audio_s'] / 3600:.1f} h seen -> {args.export}")
    return
  os.makedirs(args.work, exist_ok=True)
  log = train_core.Log(os.path.join(args.work, "train.log"))
  curve = args.curve or os.path.join(os.path.dirname(os.path.abspath(args.state)), "curve.tsv")
  amp = torch.bfloat16 if (args.precision == "bf16" or (
      args.precision == "auto" and train_core.cpu_has_bf16())) else torch.float32
  dev = torch.device("cpu")
  trainer = train_core.Trainer(torch, train_core.ARCHS[args.arch], dev, args.lr, args.wd,
                               args.warmup, amp)
  extra = {"session": 0, "plan_hours": args.plan_hours}
  if os.path.exists(args.state):
    extra = trainer.load(args.state)
    if extra.get("plan_hours") != args.plan_hours:
      log(f"note: the state was planned for {extra.get('plan_hours')} h; keeping that plan")
      args.plan_hours = extra["plan_hours"]
    log(f"resumed {args.state}: step {trainer.step_count}, "
        f"{trainer.state['audio_s'] / 3600:.1f} h seen, session {extra['session']}")
  elif args.init:
    ck = torch.load(args.init, map_location="cpu", weights_only=False)
    if ck["blocks"] != trainer.blocks:
      sys.exit(f"error: {args.init} is not a {args.arch} checkpoint")
    trainer.model.load_state_dict({k: v.float() if v.is_floating_point() else v
                                   for k, v in ck["model"].items()})
    trainer.reset_ema()
    extra["init"] = {"from": os.path.basename(args.init), "state": ck.get("state", {})}
    log(f"initialized from {args.init} ({ck.get('state', {})}); optimizer and schedule new")
  # A session is a machine: a restart on the machine that made the last session's robotic pool
  # (still in --work) continues that session; anything else starts the next one.
  session = extra["session"]
  if not glob.glob(os.path.join(args.work, f"robot_s{session}_*.npz")):
    session += 1
  extra.update(session=session, plan_hours=args.plan_hours)
  rng = np.random.default_rng(args.seed + 7919 * session)
  if "np_rng" in extra:
    rng.bit_generator.state = extra["np_rng"]
  g = torch.Generator()
  g.manual_seed(args.seed * 1000 + session)
  log(f"session {session}: {args.arch} {trainer.nparams} parameters, {amp}, "
      f"{args.threads} threads, plan {args.plan_hours} h, args {vars(args)}")

  stop = {"now": False, "save": False}
  signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
  signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
  signal.signal(signal.SIGUSR1, lambda *_: stop.update(save=True))

  pools = build_pools(args, session, log)
  for p in pools:
    log(f"pool {p.name}: {len(p.texts)} utts, {p.hours(args.variants):.2f} h x "
        f"{args.variants} copies, {p.feats.nbytes / 2 ** 20:.0f} MiB")
  from quartznet_torch import Featurizer, QuartzNet
  textures, floor = noise_textures(torch, Featurizer().eval(), np.random.default_rng(5))
  probe = probe_batches(torch, load_probe(torch, args.natural))
  eval_model = QuartzNet(trainer.blocks)

  def run_probe():
    eval_model.load_state_dict(trainer.ema_state_dict())
    r = train_core.greedy_wer(torch, eval_model, probe, dev, amp)
    for src, v in r.items():
      log(f"probe {src} (EMA): WER {v['wer'] * 100:.1f}% CER {v['cer'] * 100:.1f}% "
          f"({v['utts']} utts) | {v['example']}")
    return r

  def save(reason):
    extra["np_rng"] = rng.bit_generator.state
    n = trainer.save(args.state, extra)
    log(f"state saved ({reason}): step {trainer.step_count}, {n / 2 ** 20:.1f} MiB -> "
        f"{args.state}")

  def record(r, loss):
    os.makedirs(os.path.dirname(curve), exist_ok=True)
    new = not os.path.exists(curve)
    with open(curve, "a") as f:
      if new:
        f.write("date\tsession\tstep\taudio_h\ttrain_h\tlr\tloss\tprobe_wer\tprobe_cer\n")
      n = max(1, sum(v["utts"] for v in r.values()))
      w, c = (sum(v[k] * v["utts"] for v in r.values()) / n for k in ("wer", "cer"))
      f.write(f"{time.strftime('%Y-%m-%d %H:%M')}\t{session}\t{trainer.step_count}\t"
              f"{trainer.state['audio_s'] / 3600:.2f}\t{trainer.state['train_s'] / 3600:.3f}\t"
              f"{last_lr:.2e}\t{loss:.3f}\t{w:.4f}\t{c:.4f}\n")

  t_start = time.time()
  last_log = last_ckpt = last_probe = time.time()
  # Time that counts for the end-to-end rate: every iteration's wall time, except that an
  # iteration 20 s longer than usual (SIGSTOP while something else is timed) counts as usual.
  sess_audio, active_s, losses, last_lr = 0.0, 0.0, [], 0.0
  sess_t0 = t_iter = time.time()
  log_audio, log_active = 0.0, 0.0
  batch_frames = int(args.batch_seconds * 100)
  weights = [args.natural_frac, 1 - args.natural_frac][:len(pools)]
  while not stop["now"] and (time.time() - t_start) < args.train_min * 60 \
      and trainer.step_count < args.max_steps:
    entries = sample_entries(pools, weights, batch_frames, args.max_bs, rng)
    feats, lens, texts = make_batch(torch, entries, textures, floor, rng, g)
    src_s = float(lens.sum()) / 100
    progress = trainer.state["audio_s"] / 3600 / args.plan_hours
    loss, gn, last_lr = trainer.step(feats, lens, texts, progress, src_s)
    sess_audio += src_s
    losses.append(loss)
    now = time.time()
    dt, t_iter = now - t_iter, now
    active_s += dt if dt < 20 else 2.0
    if now - last_log >= args.log_s or trainer.step_count <= 3:
      log(f"step {trainer.step_count} loss {np.mean(losses[-50:]):.3f} gn {gn:.2f} "
          f"lr {last_lr:.2e} bs {len(texts)} x {feats.shape[2] / 100:.1f} s | seen "
          f"{trainer.state['audio_s'] / 3600:.2f} h (plan {progress * 100:.1f}%) | session "
          f"{sess_audio / 3600:.2f} h, end to end {sess_audio / max(active_s, 1e-3):.1f}x real "
          f"time ({(sess_audio - log_audio) / max(active_s - log_active, 1e-3):.1f}x lately)")
      last_log, log_audio, log_active = now, sess_audio, active_s
    if now - last_probe >= args.probe_min * 60:
      record(run_probe(), float(np.mean(losses[-200:])))
      last_probe = time.time()
    if stop["save"] or now - last_ckpt >= args.ckpt_min * 60:
      save("periodic" if not stop["save"] else "SIGUSR1")
      stop["save"], last_ckpt = False, time.time()
  log(f"session {session} stops: {sess_audio / 3600:.2f} h of audio in {active_s / 60:.1f} min "
      f"of training ({sess_audio / max(1.0, active_s):.1f}x real time end to end: batches, "
      f"probes and checkpoints; {(time.time() - sess_t0 - active_s) / 60:.1f} min paused); "
      f"setup before it took {sess_t0 - t_begin:.0f} s")
  runs = extra.setdefault("sessions", [])
  if not runs or runs[-1]["session"] != session:
    runs.append({"session": session, "date": time.strftime("%Y-%m-%d"), "audio_h": 0.0,
                 "train_min": 0.0, "setup_s": 0})
  r = runs[-1]  # a restart within the session adds to it
  r["audio_h"] = round(r["audio_h"] + sess_audio / 3600, 2)
  r["train_min"] = round(r["train_min"] + active_s / 60, 1)
  r["setup_s"] += round(sess_t0 - t_begin)
  r["x_real_time"] = round(r["audio_h"] * 60 / max(r["train_min"], 1e-3), 1)
  save("end of session")
  if losses:
    record(run_probe(), float(np.mean(losses[-200:])))


if __name__ == "__main__":
  main()
