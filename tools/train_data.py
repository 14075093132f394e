"""The CPU training run's data, numpy only (tools/cpu_train.py; tested by
tests/training_data_test.py without torch): the fixed copies of an utterance that the feature
cache stores, the feature cache itself (Pool) and the length-bucketed sampler.

Thread-safety: none needed; pure functions, and a Pool is read-only after construction.
"""
import os

import numpy as np

SR = 16000


def fft_resample(x, ratio):
  """x resampled to round(len(x) * ratio) samples, band-limited (FFT)."""
  n = len(x)
  m = max(1, int(round(n * ratio)))
  X = np.fft.rfft(x.astype(np.float64))
  Y = np.zeros(m // 2 + 1, np.complex128)
  k = min(len(X), len(Y))
  Y[:k] = X[:k]
  return (np.fft.irfft(Y, m) * (m / n)).astype(np.float32)


def reverberate(x, rng):
  """Convolution with a synthetic room response: exponentially decaying noise, RT60 0.15-0.7 s;
  the peak level is kept."""
  R = SR // 2
  t = np.arange(R) / SR
  rir = rng.standard_normal(R) * np.exp(-6.9 * t / rng.uniform(0.15, 0.7))
  rir[0] = 1.0 + abs(rir[0])
  rir /= np.linalg.norm(rir)
  n = len(x) + R
  wet = np.fft.irfft(np.fft.rfft(x, n) * np.fft.rfft(rir, n), n)[:len(x)]
  return (wet * (np.abs(x).max() / (np.abs(wet).max() + 1e-9))).astype(np.float32)


def telephone(x):
  """300-3400 Hz, 8 kHz, 8-bit mu-law, back to 16 kHz."""
  X = np.fft.rfft(x)
  hz = np.arange(len(X)) * SR / len(x)
  band = np.fft.irfft(X * ((hz >= 300) & (hz <= 3400)), len(x))
  band = fft_resample(band / (np.abs(band).max() + 1e-9) * 0.7, 0.5)
  mu = np.sign(band) * np.log1p(255 * np.minimum(np.abs(band), 1)) / np.log(256)
  mu = np.round(mu * 127.5) / 127.5
  lin = np.sign(mu) * (256 ** np.abs(mu) - 1) / 255
  return fft_resample(lin, 2.0)[:len(x)]


def fixed_copies(x, rng, n):
  """n copies of x (float32, 16 kHz): copy 0 at speed 1, then alternately slower (0.87-0.95)
  and faster (1.05-1.13); each with reverberation p 0.3, telephone p 0.2; peak 0.5."""
  out = []
  for k in range(n):
    f = 1.0 if k == 0 else (rng.uniform(0.87, 0.95) if k % 2 else rng.uniform(1.05, 1.13))
    y = fft_resample(x, 1.0 / f) if f != 1.0 else x.astype(np.float32)
    if rng.random() < 0.3:
      y = reverberate(y, rng)
    if rng.random() < 0.2:
      y = telephone(y)
    out.append((y / (np.abs(y).max() + 1e-9) * 0.5).astype(np.float32))
  return out


class Pool:
  """One source's cached copies: feats fp16 [64, total frames] and an entry table."""

  def __init__(self, name, feats, offsets, lengths, text_ids, texts):
    self.name, self.feats, self.texts = name, feats, texts
    self.offsets, self.lengths, self.text_ids = offsets, lengths, text_ids
    self.bins = {}
    for i, T in enumerate(lengths):
      self.bins.setdefault(int(T) // 50, []).append(i)
    self.bins = {b: np.array(v) for b, v in self.bins.items()}

  @classmethod
  def from_items(cls, name, items):
    texts, feats, offsets, lengths, tids, pos = [], [], [], [], [], 0
    for text, copies in items:
      texts.append(text)
      for f in copies:
        feats.append(f)
        offsets.append(pos)
        lengths.append(f.shape[1])
        tids.append(len(texts) - 1)
        pos += f.shape[1]
    cat = np.concatenate(feats, axis=1) if feats else np.zeros((64, 0), np.float16)
    return cls(name, cat, np.array(offsets, np.int64), np.array(lengths, np.int32),
               np.array(tids, np.int32), texts)

  def save(self, path):
    np.savez(path + ".tmp.npz", feats=self.feats, offsets=self.offsets, lengths=self.lengths,
             text_ids=self.text_ids, texts=np.array(self.texts))
    os.replace(path + ".tmp.npz", path)

  @classmethod
  def load(cls, name, path):
    z = np.load(path)
    return cls(name, z["feats"], z["offsets"], z["lengths"], z["text_ids"], list(z["texts"]))

  def hours(self, copies):
    return float(self.lengths.sum()) / 100 / 3600 / copies

  def entry(self, i):
    o, T = int(self.offsets[i]), int(self.lengths[i])
    return self.feats[:, o:o + T], self.texts[int(self.text_ids[i])]


def sample_entries(pools, weights, batch_frames, max_bs, rng):
  """Length-bucketed: a random anchor fixes the 0.5 s bin; each slot picks a pool by weight
  and an entry of that bin (the anchor's pool when the other has none)."""
  p = np.array(weights, np.float64) / sum(weights)
  a = int(rng.choice(len(pools), p=p))
  anchor = int(rng.integers(len(pools[a].lengths)))
  b = int(pools[a].lengths[anchor]) // 50
  n = max(1, min(max_bs, batch_frames // ((b + 1) * 50)))
  out = []
  for _ in range(n):
    k = int(rng.choice(len(pools), p=p))
    if b not in pools[k].bins:
      k = a
    ids = pools[k].bins[b]
    out.append(pools[k].entry(int(ids[rng.integers(len(ids))])))
  return out


