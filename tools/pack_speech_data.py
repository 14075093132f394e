#!/usr/bin/env python3
"""Packs training data for a GPU machine that has no network, no pip and no apt.

The GPU job (tools/gpu_train_job.py) may carry 64 MiB of git-ignored files per call and can
rely only on PyTorch, numpy and the Python standard library. So:

* Natural-voice audio (Kokoro, hibari; synthesized here by tools/make_natural_speech.py) travels
  as Ogg/Opus shards: 16 kHz mono, one Ogg stream per shard holding the utterances back to back,
  with a TSV of (first sample, sample count, voice, transcript). The default target of
  16 kbit/s comes out at about 19 kbit/s, 8.1 MiB per hour of speech, so about 7 h fit beside
  the ~6 MiB of engines, libsndfile and text. It is decoded there through ctypes by the
  libsndfile that the PyPI `soundfile` wheel bundles (libsndfile_x86_64.so: Ogg, Vorbis, Opus,
  FLAC linked in statically, needs only glibc), carried xz-compressed; no Python package is
  needed to read it.
* espeak-ng (and flite with --engines espeak,flite) run THERE, on the CPU cores that the GPU
  leaves idle, producing fresh utterances all through training: their .deb files (`apt-get download`, unpacked with
  `dpkg-deb -x` into a folder, never into /) plus every shared library they load (the `ldd`
  closure, glibc's loader included) go in engines.tar.xz. The job runs them through the
  carried ld-linux-x86-64.so.2 with --library-path, so the remote system's libraries do not
  matter.
* Text: the spoken-form training sentences and the word list (tools/spoken_text.py), xz.

Layout of --out (default tools/.work/gpu_pack):
  natural/train/shard_XXXX.{ogg,tsv}  natural/probe/shard_XXXX.{ogg,tsv}
  texts_train.txt.xz  words.txt.xz  engines.tar.xz  libsndfile_x86_64.so.xz  manifest.json

Library use (both sides): write_shard(prefix, items, kbps) needs the soundfile package;
read_shard(prefix, Sndfile(path)) needs only ctypes; fft_resample(x, sr_in, sr_out).

  nice -n 19 python tools/pack_speech_data.py --natural tools/training_data/natural \
      --out tools/.work/gpu_pack --budget-mib 63
"""
import argparse
import ctypes
import glob
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

SR = 16000
ENGINES = {  # engine -> (its .deb packages, its binary)
    "espeak": (["espeak-ng", "libespeak-ng1", "espeak-ng-data", "libsonic0", "libpcaudio0"],
               "usr/bin/espeak-ng"),
    "flite": (["flite", "libflite1"], "usr/bin/flite"),
}


# ----------------------------------------------------------------------------- audio
def fft_resample(x, sr_in, sr_out):
  """Band-limited resampling of a 1-D float array by FFT (exact for any ratio)."""
  if sr_in == sr_out:
    return np.asarray(x, np.float32)
  n = len(x)
  m = max(1, int(round(n * sr_out / sr_in)))
  spec = np.fft.rfft(np.asarray(x, np.float64))
  keep = min(len(spec), m // 2 + 1)
  out = np.zeros(m // 2 + 1, np.complex128)
  out[:keep] = spec[:keep]
  return (np.fft.irfft(out, m) * (m / n)).astype(np.float32)


def opus_level(kbps):
  """libsndfile's Opus "compression level" for a target bit rate (measured at 16 kHz mono:
  level 0 -> 259 kbit/s, 0.9 -> 27.5 kbit/s, linear in between)."""
  return float(min(1.0, max(0.0, (259.3 - kbps) / 257.5)))


def write_shard(prefix, items, kbps=16.0):
  """items: (audio float32 in [-1, 1] or int16 at 16 kHz, text, voice) -> prefix.ogg/.tsv."""
  import soundfile as sf  # packing side only
  parts, rows, pos = [], [], 0
  for audio, text, voice in items:
    a = np.asarray(audio)
    a = a.astype(np.float32) / 32768.0 if a.dtype == np.int16 else a.astype(np.float32)
    parts.append(a)
    rows.append(f"{pos}\t{len(a)}\t{voice}\t{text}\n")
    pos += len(a)
  tmp = prefix + ".tmp.ogg"
  sf.write(tmp, np.concatenate(parts), SR, format="OGG", subtype="OPUS",
           compression_level=opus_level(kbps))
  with open(prefix + ".tsv.tmp", "w") as f:
    f.writelines(rows)
  os.replace(tmp, prefix + ".ogg")
  os.replace(prefix + ".tsv.tmp", prefix + ".tsv")
  return pos / SR


class _SfInfo(ctypes.Structure):
  _fields_ = [("frames", ctypes.c_int64), ("samplerate", ctypes.c_int),
              ("channels", ctypes.c_int), ("format", ctypes.c_int), ("sections", ctypes.c_int),
              ("seekable", ctypes.c_int)]


class Sndfile:
  """The few libsndfile calls a reader needs, through ctypes (no soundfile/cffi)."""
  SFM_READ = 0x10

  def __init__(self, path):
    if path.endswith(".xz"):  # carried compressed: load a private temp copy, then delete it
      fd, so = tempfile.mkstemp(suffix=".so")
      os.write(fd, lzma.decompress(open(path, "rb").read()))
      os.close(fd)
      try:
        lib = ctypes.CDLL(so)
      finally:
        os.unlink(so)  # the mapping stays
    else:
      lib = ctypes.CDLL(path)
    lib.sf_open.restype = ctypes.c_void_p
    lib.sf_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(_SfInfo)]
    lib.sf_readf_short.restype = ctypes.c_int64
    lib.sf_readf_short.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.sf_close.argtypes = [ctypes.c_void_p]
    lib.sf_strerror.restype = ctypes.c_char_p
    lib.sf_strerror.argtypes = [ctypes.c_void_p]
    self.lib = lib

  def read_int16(self, path):
    """Whole file -> (int16 [frames] mono, sample rate)."""
    info = _SfInfo()
    h = self.lib.sf_open(path.encode(), self.SFM_READ, ctypes.byref(info))
    if not h:
      raise IOError(f"{path}: {self.lib.sf_strerror(None).decode()}")
    try:
      chunks = []
      while True:
        buf = np.empty((1 << 20) * info.channels, np.int16)
        n = self.lib.sf_readf_short(h, buf.ctypes.data, 1 << 20)
        if n <= 0:
          break
        chunks.append(buf[:n * info.channels])
    finally:
      self.lib.sf_close(h)
    x = np.concatenate(chunks) if chunks else np.zeros(0, np.int16)
    if info.channels > 1:
      x = x.reshape(-1, info.channels).mean(axis=1).astype(np.int16)
    return x, info.samplerate


def read_shard(prefix, sndfile):
  """prefix.ogg/.tsv -> list of (int16 audio at 16 kHz, text, voice)."""
  audio, sr = sndfile.read_int16(prefix + ".ogg")
  assert sr == SR, (prefix, sr)
  out = []
  for line in open(prefix + ".tsv"):
    start, n, voice, text = line.rstrip("\n").split("\t")
    start, n = int(start), int(n)
    if start + n > len(audio):
      raise ValueError(f"{prefix}: utterance at {start}+{n} past the decoded {len(audio)}")
    out.append((audio[start:start + n], text, voice))
  return out


def shard_prefixes(folder):
  return sorted(p[:-4] for p in glob.glob(os.path.join(folder, "shard_*.tsv")))


# ----------------------------------------------------------------------------- engines
def build_engines(out_path, workdir, engines):
  """apt-get download + dpkg-deb -x the engines' packages, keep only English data, add the
  ldd closure of the binaries (glibc and its loader included), tar.xz it."""
  debs = os.path.join(workdir, "debs")
  root = os.path.join(workdir, "engines")
  os.makedirs(debs, exist_ok=True)
  subprocess.run(["apt-get", "download"] + [d for e in engines for d in ENGINES[e][0]],
                 cwd=debs, check=True, capture_output=True)
  for deb in sorted(glob.glob(os.path.join(debs, "*.deb"))):
    subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
  for sub in ("usr/share/doc", "usr/share/man", "usr/share/lintian", "usr/share/vim"):
    shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
  for d in glob.glob(os.path.join(root, "usr/lib/x86_64-linux-gnu/espeak-ng-data/*_dict")):
    if os.path.basename(d) != "en_dict":
      os.remove(d)
  libdirs = [os.path.join(root, d) for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")]
  hostlibs = os.path.join(root, "hostlibs")
  os.makedirs(hostlibs, exist_ok=True)
  env = dict(os.environ, LD_LIBRARY_PATH=":".join(libdirs))
  for b in (ENGINES[e][1] for e in engines):
    out = subprocess.run(["ldd", os.path.join(root, b)], env=env, capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
      m = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
      if not m:
        if "not found" in line:
          raise RuntimeError(f"{b}: {line.strip()}")
        continue
      lib = m.group(1)
      if not os.path.realpath(lib).startswith(os.path.realpath(root)):
        shutil.copy2(os.path.realpath(lib), os.path.join(hostlibs, os.path.basename(lib)))
  with tarfile.open(out_path, "w:xz", preset=9) as t:
    t.add(root, arcname="engines")
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


# ----------------------------------------------------------------------------- pack
def xz_lines(path, lines):
  with lzma.open(path, "wt", preset=9) as f:
    f.write("\n".join(lines) + "\n")


def sha256(path):
  return hashlib.sha256(open(path, "rb").read()).hexdigest()


def main():
  here = os.path.dirname(os.path.abspath(__file__))
  ap = argparse.ArgumentParser()
  ap.add_argument("--natural", default=os.path.join(here, "training_data", "natural"),
                  help="tools/make_natural_speech.py's output (train/ and probe/ shards)")
  ap.add_argument("--out", default=os.path.join(here, ".work", "gpu_pack"))
  ap.add_argument("--budget-mib", type=float, default=63.0,
                  help="fail when the pack is larger (a device call carries 64 MiB in all)")
  ap.add_argument("--engines", default="espeak",
                  help="robotic engines run on the GPU machine (comma list of espeak, flite)")
  ap.add_argument("--max-train-shards", type=int, default=0,
                  help="take at most this many natural training shards (0: all that fit)")
  args = ap.parse_args()
  sys.path.insert(0, here)
  from spoken_text import text_pool

  if os.path.exists(args.out):
    shutil.rmtree(args.out)
  os.makedirs(args.out)
  manifest = {"files": {}}
  train, test, words = text_pool()
  xz_lines(os.path.join(args.out, "texts_train.txt.xz"), train)
  xz_lines(os.path.join(args.out, "words.txt.xz"), words)
  manifest["texts"] = {"train_sentences": len(train), "held_out_sentences": len(test),
                       "words": len(words)}
  with tempfile.TemporaryDirectory() as wd:
    manifest["engines_unpacked_bytes"] = build_engines(
        os.path.join(args.out, "engines.tar.xz"), wd, args.engines.split(","))
  manifest["engines"] = args.engines.split(",")
  import soundfile
  so = os.path.join(os.path.dirname(soundfile.__file__), "_soundfile_data",
                    "libsndfile_x86_64.so")
  with open(os.path.join(args.out, "libsndfile_x86_64.so.xz"), "wb") as f:
    f.write(lzma.compress(open(so, "rb").read(), preset=9))

  def used():
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(args.out) for f in fs)

  budget = int(args.budget_mib * 2 ** 20) - 4096  # room for manifest.json
  natural = {}
  for split in ("probe", "train"):  # the probe first: it is small and always wanted
    os.makedirs(os.path.join(args.out, "natural", split))
    secs, n_utts, n_shards = 0.0, 0, 0
    for prefix in shard_prefixes(os.path.join(args.natural, split)):
      if split == "train" and args.max_train_shards and n_shards >= args.max_train_shards:
        break
      size = os.path.getsize(prefix + ".ogg") + os.path.getsize(prefix + ".tsv")
      if used() + size > budget:
        print(f"budget reached: {prefix} and later shards left out", flush=True)
        break
      for ext in (".ogg", ".tsv"):
        shutil.copy2(prefix + ext, os.path.join(args.out, "natural", split))
      rows = [l.split("\t") for l in open(prefix + ".tsv")]
      secs += sum(int(r[1]) for r in rows) / SR
      n_utts += len(rows)
      n_shards += 1
    natural[split] = {"shards": n_shards, "utterances": n_utts, "hours": round(secs / 3600, 4)}
  manifest["natural"] = natural
  for d, _, fs in os.walk(args.out):
    for f in sorted(fs):
      p = os.path.join(d, f)
      manifest["files"][os.path.relpath(p, args.out)] = {"bytes": os.path.getsize(p),
                                                         "sha256": sha256(p)}
  total = used()
  manifest["total_bytes"] = total
  ogg = sum(v["bytes"] for k, v in manifest["files"].items() if k.endswith(".ogg"))
  hours = sum(v["hours"] for v in natural.values())
  if hours:
    manifest["opus_mib_per_hour"] = round(ogg / 2 ** 20 / hours, 3)
  with open(os.path.join(args.out, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
  print(json.dumps({k: v for k, v in manifest.items() if k != "files"}, indent=1))
  for k, v in sorted(manifest["files"].items()):
    if not k.startswith("natural/"):
      print(f"  {k}: {v['bytes'] / 2 ** 20:.2f} MiB")
  print(f"pack {args.out}: {total / 2 ** 20:.2f} MiB of {args.budget_mib} MiB", flush=True)
  if total > args.budget_mib * 2 ** 20:
    sys.exit("error: pack over budget")


if __name__ == "__main__":
  main()
