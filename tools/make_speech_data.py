#!/usr/bin/env python3
"""Synthesizes an English speech corpus from Debian's TTS engines and Debian's English text.

Everything it uses ships in Debian bookworm (see tools/requirements-train.txt):
  speech: espeak-ng (many voices and +variants), flite (kal16/slt/awb/rms), festival (kal_diphone)
  text:   fortunes-min/fortune-mod data, flite's Alice example, /usr/share/common-licenses,
          man pages (troff stripped, dictionary-word sentences only), wamerican word list.
Transcripts are normalized to lowercase a-z, space and apostrophe (the 28-label CTC vocabulary).

Train and test are kept apart BY TEXT (a sentence hash puts ~8% of sentences in the test pool,
and any sentence in the test pool is never spoken in training) AND BY VOICE (TEST_* voices
below never speak in training).

Output (under --out, default tools/.work/data):
  train/shard_XXXX.npz : audio (int16, concatenated, 16 kHz mono), offsets, texts, voices
  test_synth/shard_0000.npz : held-out voices x held-out sentences, clean (no augmentation)
  test_synth_noisy/shard_0000.npz : same sentences and voices, augmented like training
  test_real/shard_0000.npz : real human speech (pocketsphinx-testdata LibriVox + cards, and
                             asterisk-core-sounds-en prompts when installed), test only

Usage: nice -n 19 python tools/make_speech_data.py --train-utts 16000 --jobs 2
"""
import argparse
import gzip
import hashlib
import io
import multiprocessing as mp
import os
import random
import re
import subprocess
import sys
import tempfile
import wave

import numpy as np

SR = 16000
ALLOWED = re.compile(r"^[a-z' ]+$")

# ----------------------------------------------------------------------------- voices
ESPEAK_BASES_TRAIN = ["en-us", "en", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029"]
ESPEAK_VARIANTS_TRAIN = ["", "m1", "m2", "m4", "m5", "m6", "m7", "f1", "f3", "f4", "klatt",
                         "klatt2", "klatt4", "Andy", "annie", "david", "edward", "linda",
                         "robert", "steph", "max", "paul", "shelby", "aunty", "john"]
# Held out: a whole accent (Scotland) and variants never used in training.
ESPEAK_BASES_TEST = ["en-gb-scotland", "en-us", "en"]
ESPEAK_VARIANTS_TEST = ["m3", "f2", "f5", "klatt3", "benjamin", "Alicia"]
FLITE_TRAIN = ["kal16", "slt", "awb"]
FLITE_TEST = ["rms"]
FESTIVAL_TRAIN = ["kal_diphone"]


def pick_train_voice(rng):
  r = rng.random()
  if r < 0.72:
    return ("espeak", rng.choice(ESPEAK_BASES_TRAIN), rng.choice(ESPEAK_VARIANTS_TRAIN))
  if r < 0.94:
    return ("flite", rng.choice(FLITE_TRAIN), "")
  return ("festival", rng.choice(FESTIVAL_TRAIN), "")


def pick_test_voice(rng):
  r = rng.random()
  if r < 0.75:
    base = rng.choice(ESPEAK_BASES_TEST)
    if base == "en-gb-scotland":  # the whole accent is held out: any variant
      var = rng.choice(ESPEAK_VARIANTS_TEST + ["", "m1", "f1"])
    else:
      var = rng.choice(ESPEAK_VARIANTS_TEST)
    return ("espeak", base, var)
  return ("flite", rng.choice(FLITE_TEST), "")


def voice_name(v):
  return f"{v[0]}:{v[1]}" + (f"+{v[2]}" if v[2] else "")


def read_wav_bytes(data):
  with wave.open(io.BytesIO(data)) as w:
    sr, ch, sw = w.getframerate(), w.getnchannels(), w.getsampwidth()
    frames = w.readframes(w.getnframes())
  assert sw == 2, sw
  x = np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0
  if ch > 1:
    x = x.reshape(-1, ch).mean(axis=1)
  return x, sr


def sox_process(wav_bytes, effects):
  """Runs sox on a WAV in memory; returns 16 kHz mono float32."""
  cmd = ["sox", "-V1", "-t", "wav", "-", "-t", "raw", "-r", str(SR), "-c", "1", "-b", "16",
         "-e", "signed-integer", "-L", "-"] + effects
  out = subprocess.run(cmd, input=wav_bytes, capture_output=True, check=True).stdout
  return np.frombuffer(out, dtype="<i2").astype(np.float32) / 32768.0


def synth(voice, text, rng, vary=True):
  """Returns WAV bytes from one engine, with varied rate/pitch when vary."""
  engine, name, var = voice
  if engine == "espeak":
    rate = rng.randint(125, 205) if vary else 165
    pitch = rng.randint(25, 75) if vary else 50
    v = name + (f"+{var}" if var else "")
    cmd = ["espeak-ng", "-v", v, "-s", str(rate), "-p", str(pitch), "--stdout", text]
    return subprocess.run(cmd, capture_output=True, check=True).stdout
  with tempfile.NamedTemporaryFile(suffix=".wav", dir="/dev/shm" if os.path.isdir("/dev/shm")
                                   else None) as f:
    if engine == "flite":
      stretch = rng.uniform(0.85, 1.2) if vary else 1.0
      f0 = rng.uniform(0.85, 1.2) if vary else 1.0
      cmd = ["flite", "-voice", name, "--setf", f"duration_stretch={stretch:.3f}", "-t", text,
             "-o", f.name]
      if vary and name in ("kal16", "slt", "awb", "rms"):
        base_f0 = {"kal16": 105, "slt": 160, "awb": 120, "rms": 100}[name]
        cmd[5:5] = ["--setf", f"int_f0_target_mean={base_f0 * f0:.1f}"]
      subprocess.run(cmd, capture_output=True, check=True)
    else:
      subprocess.run(["text2wave", "-o", f.name, "-eval", f"(voice_{name})"],
                     input=text.encode(), capture_output=True, check=True)
    return open(f.name, "rb").read()


AUG = {"noise_prob": 0.6, "snr_min": 5.0, "reverb_prob": 0.25}


def augment(wav_bytes, rng):
  """Speed, small reverberation (sox), then noise and volume (numpy)."""
  effects = []
  if rng.random() < 0.5:
    effects += ["speed", f"{rng.uniform(0.9, 1.1):.3f}"]
  if rng.random() < AUG["reverb_prob"]:
    effects += ["reverb", str(rng.randint(5, 40)), "50", str(rng.randint(10, 60))]
  effects += ["rate", str(SR)]
  x = sox_process(wav_bytes, effects)
  x = add_silence(x, rng)
  peak = np.abs(x).max() + 1e-9
  x = x / peak * (10 ** (rng.uniform(-26, -1) / 20))  # volume: peak -26..-1 dBFS
  if rng.random() < AUG["noise_prob"]:
    kind = rng.random()
    n = np.random.default_rng(rng.randrange(1 << 30)).standard_normal(len(x)).astype(np.float32)
    if kind < 0.35:  # brown-ish (low-frequency) noise
      n = np.cumsum(n)
      n -= np.convolve(n, np.ones(401) / 401, mode="same")
    elif kind < 0.6:  # pink-ish: sum of smoothed whites
      n = n + np.convolve(n, np.ones(4) / 2, mode="same") + np.convolve(n, np.ones(16) / 4,
                                                                       mode="same")
    snr = rng.uniform(AUG["snr_min"], 40)
    ps = np.mean(x ** 2) + 1e-12
    pn = np.mean(n ** 2) + 1e-12
    x = x + n * np.sqrt(ps / pn / 10 ** (snr / 10))
  return np.clip(x, -1, 1)


def add_silence(x, rng):
  a = np.zeros(int(rng.uniform(0.0, 0.35) * SR), np.float32)
  b = np.zeros(int(rng.uniform(0.0, 0.35) * SR), np.float32)
  return np.concatenate([a, x, b])


def trim(x, thresh=1e-3):
  idx = np.nonzero(np.abs(x) > thresh)[0]
  if len(idx) == 0:
    return x
  return x[max(0, idx[0] - 1600): idx[-1] + 1600]


# ----------------------------------------------------------------------------- text
def normalize(s):
  s = s.lower().replace("`", "'").replace("’", "'")
  s = re.sub(r"[-_/]", " ", s)
  s = re.sub(r"[^a-z' ]", " ", s)
  s = re.sub(r"(^| )'+|'+( |$)", " ", s)  # quotes, not apostrophes
  return " ".join(s.split())


def strip_troff(text):
  out = []
  for line in text.splitlines():
    if line.startswith((".", "'")):
      # keep text of .B/.I lines
      m = re.match(r"^\.(B|I|BI|IB|BR|RB|IR|RI)\s+(.*)$", line)
      if m:
        out.append(m.group(2).replace('"', ""))
      else:
        out.append("\n")
      continue
    line = re.sub(r"\\f[BIRP]|\\f\(..|\\\(..|\\[-&e]|\\s[-+]?\d", "", line)
    out.append(line)
  return " ".join(out)


def load_texts(max_man_pages=3000):
  words = set()
  for p in ("/usr/share/dict/words", "/usr/share/dict/american-english"):
    if os.path.exists(p):
      for w in open(p, encoding="utf-8", errors="ignore"):
        w = w.strip()
        if w and w == w.lower():
          words.add(w.lower())
  raw = []
  for p in ("/usr/share/games/fortunes/fortunes", "/usr/share/games/fortunes/literature",
            "/usr/share/games/fortunes/riddles", "/usr/share/doc/flite/examples/alice",
            "/usr/share/doc/flite/examples/intro.txt"):
    if os.path.exists(p):
      raw.append(("lit", open(p, encoding="utf-8", errors="ignore").read()))
  lic = "/usr/share/common-licenses"
  if os.path.isdir(lic):
    for f in sorted(os.listdir(lic)):
      fp = os.path.join(lic, f)
      if os.path.isfile(fp):
        raw.append(("doc", open(fp, encoding="utf-8", errors="ignore").read()))
  mandir = "/usr/share/man/man1"
  if os.path.isdir(mandir):
    for f in sorted(os.listdir(mandir))[:max_man_pages]:
      if f.endswith(".gz"):
        try:
          raw.append(("doc", strip_troff(gzip.open(os.path.join(mandir, f), "rt",
                                                   errors="ignore").read())))
        except Exception:
          pass
  sents = set()
  for kind, t in raw:
    t = t.replace("\n%\n", ".\n")
    t = re.sub(r"\s+", " ", t)
    for piece in re.split(r"[.!?;:()\"]+|--| - ", t):
      if re.search(r"[0-9@#$%^&*=<>\[\]{}|~\\]", piece):
        continue
      # long sentences: split at commas into clauses
      for clause in ([piece] if len(piece.split()) <= 10 else piece.split(",")):
        s = normalize(clause)
        n = len(s.split())
        if n < 2 or n > 10 or not ALLOWED.match(s):
          continue
        ws = s.split()
        if any(len(w) < 2 and w not in ("a", "i") for w in ws):
          continue
        if kind == "doc" and not all(w in words for w in ws):
          continue
        if not all(w in words or w.endswith("'s") or len(w) <= 3 for w in ws):
          # keep rare words out so the test is about speech, not OOV proper names
          if sum(w not in words for w in ws) > 1:
            continue
        sents.add(s)
  return sorted(sents), sorted(w for w in words if ALLOWED.match(w) and "'" not in w[:1])


def is_test_text(s):
  return int(hashlib.md5(s.encode()).hexdigest(), 16) % 100 < 8


# ----------------------------------------------------------------------------- workers
def make_utt(args):
  idx, text, split, seed = args
  rng = random.Random(seed)
  for attempt in range(3):
    try:
      if split == "train":
        v = pick_train_voice(rng)
        wav = synth(v, text, rng, vary=True)
        x = augment(wav, rng)
      elif split == "test_synth_noisy":
        v = pick_test_voice(rng)
        wav = synth(v, text, rng, vary=True)
        x = augment(wav, rng)
      else:  # test_synth: held-out voices, rate/pitch varied, no noise/reverb
        v = pick_test_voice(rng)
        wav = synth(v, text, rng, vary=True)
        x = trim(sox_process(wav, ["rate", str(SR)]))
        x = np.concatenate([np.zeros(1600, np.float32), x, np.zeros(1600, np.float32)])
        x = x / (np.abs(x).max() + 1e-9) * 0.5
      if len(x) < SR * 0.3 or len(x) > SR * 12:
        raise ValueError("bad length")
      return idx, (x * 32767).astype(np.int16), text, voice_name(v)
    except Exception as e:  # a voice can fail on odd text: try another voice
      rng = random.Random(seed + 7919 * (attempt + 1))
  return idx, None, text, ""


def write_shard(path, items):
  items = [it for it in items if it[1] is not None]
  audio = np.concatenate([it[1] for it in items])
  offsets = np.cumsum([0] + [len(it[1]) for it in items]).astype(np.int64)
  tmp = path + ".tmp.npz"
  np.savez(tmp, audio=audio, offsets=offsets, texts=np.array([it[2] for it in items]),
           voices=np.array([it[3] for it in items]))
  os.replace(tmp, path)
  return sum(len(it[1]) for it in items) / SR


def gen_split(out_dir, split, jobs_list, jobs, shard_size):
  os.makedirs(os.path.join(out_dir, split), exist_ok=True)
  total = 0.0
  with mp.Pool(jobs) as pool:
    for s0 in range(0, len(jobs_list), shard_size):
      path = os.path.join(out_dir, split, f"shard_{s0 // shard_size:04d}.npz")
      if os.path.exists(path):
        continue
      items = sorted(pool.map(make_utt, jobs_list[s0:s0 + shard_size], chunksize=8))
      secs = write_shard(path, items)
      total += secs
      print(f"{split}: wrote {path} ({secs / 60:.1f} min audio)", flush=True)
  return total


def read_sphinx_transcripts(path):
  out = {}
  for line in open(path):
    m = re.match(r"^\s*(.*?)\s*\((\S+)\)\s*$", line)
    if m:
      t = m.group(1).replace("<s>", "").replace("</s>", "")
      out[m.group(2)] = normalize(t)
  return out


def load_audio_any(path):
  """Any format sox reads -> 16 kHz mono float32."""
  if path.endswith(".raw"):
    cmd = ["sox", "-V1", "-t", "raw", "-r", "16000", "-e", "signed-integer", "-b", "16", "-c",
           "1", path, "-t", "wav", "-"]
  else:
    cmd = ["sox", "-V1", path, "-t", "wav", "-"]
  wav = subprocess.run(cmd, capture_output=True, check=True).stdout
  return sox_process(wav, ["rate", str(SR)])


def gen_real(out_dir):
  items = []
  base = "/usr/share/pocketsphinx/test/data"
  for sub, tr in (("librivox", "librivox/transcription"), ("cards", "cards/cards.transcription")):
    tp = os.path.join(base, tr)
    if not os.path.exists(tp):
      continue
    for uid, text in sorted(read_sphinx_transcripts(tp).items()):
      wp = os.path.join(base, sub, uid + ".wav")
      if os.path.exists(wp) and text:
        x = load_audio_any(wp)
        items.append((len(items), (x * 32767).astype(np.int16), text, f"real:pocketsphinx-{sub}"))
  # asterisk-core-sounds-en(-wav): 8 kHz prompts by one speaker, transcripts in core-sounds-en.txt
  tx = "/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
  snd = "/usr/share/asterisk/sounds/en"
  if os.path.exists(tx) and os.path.isdir(snd):
    for line in gzip.open(tx, "rt", errors="ignore"):
      if ":" not in line:
        continue
      name, text = line.split(":", 1)
      name = name.strip()
      if re.search(r"[0-9]", text) or "[" in text or "<" in text:
        continue
      text = normalize(text)
      wp = os.path.join(snd, name + ".wav")
      if text and len(text.split()) >= 2 and os.path.exists(wp):
        try:
          x = load_audio_any(wp)
        except Exception:
          continue
        items.append((len(items), (x * 32767).astype(np.int16), text, "real:asterisk-allison"))
  if items:
    os.makedirs(os.path.join(out_dir, "test_real"), exist_ok=True)
    secs = write_shard(os.path.join(out_dir, "test_real", "shard_0000.npz"), items)
    print(f"test_real: {len(items)} utts, {secs / 60:.1f} min", flush=True)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                ".work", "data"))
  ap.add_argument("--train-utts", type=int, default=16000)
  ap.add_argument("--test-utts", type=int, default=300)
  ap.add_argument("--word-seq-frac", type=float, default=0.2,
                  help="fraction of training utterances that are random dictionary-word strings")
  ap.add_argument("--jobs", type=int, default=2)
  ap.add_argument("--shard-size", type=int, default=500)
  ap.add_argument("--seed", type=int, default=1234)
  ap.add_argument("--train-split", default="train", help="output folder name for training data")
  ap.add_argument("--noise-prob", type=float, default=0.6)
  ap.add_argument("--snr-min", type=float, default=5.0)
  ap.add_argument("--reverb-prob", type=float, default=0.25)
  ap.add_argument("--skip-tests", action="store_true")
  args = ap.parse_args()

  sents, words = load_texts()
  train_s = [s for s in sents if not is_test_text(s)]
  test_s = [s for s in sents if is_test_text(s)]
  test_words = set(w for s in test_s for w in s.split())
  print(f"{len(sents)} sentences: {len(train_s)} train, {len(test_s)} test; "
        f"{len(words)} dictionary words", flush=True)
  rng = random.Random(args.seed)
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "texts_train.txt"), "w") as f:
    f.write("\n".join(train_s) + "\n")
  with open(os.path.join(args.out, "texts_test.txt"), "w") as f:
    f.write("\n".join(test_s) + "\n")

  AUG.update(noise_prob=args.noise_prob, snr_min=args.snr_min, reverb_prob=args.reverb_prob)
  rng.shuffle(test_s)
  test_list = test_s[:args.test_utts]
  if not args.skip_tests:
    gen_real(args.out)
  gen_split(args.out, "test_synth", [(i, t, "test_synth", args.seed * 1000 + i)
                                     for i, t in enumerate(test_list)], args.jobs, 10 ** 6)
  gen_split(args.out, "test_synth_noisy", [(i, t, "test_synth_noisy", args.seed * 2000 + i)
                                           for i, t in enumerate(test_list)], args.jobs, 10 ** 6)
  train_list = []
  for i in range(args.train_utts):
    if rng.random() < args.word_seq_frac:
      t = " ".join(rng.choice(words) for _ in range(rng.randint(2, 7)))
    else:
      t = train_s[rng.randrange(len(train_s))]
    train_list.append((i, t, "train", args.seed * 7 + i))
  total = gen_split(args.out, args.train_split, train_list, args.jobs, args.shard_size)
  print(f"train: {total / 3600:.2f} h new audio", flush=True)


if __name__ == "__main__":
  main()
