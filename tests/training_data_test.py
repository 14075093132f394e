#!/usr/bin/env python3
"""The CPU training run's data side (tools/train_data.py), numpy only (CTest: training_data_test).

- fixed copies: copy 0 keeps the length, the others are slower / faster within the documented
  ranges, every copy peaks at 0.5;
- the telephone channel keeps the length and leaves almost no energy above 3.4 kHz;
- the length-bucketed sampler: every batch from one 0.5 s bin, within the padded-audio budget
  and the batch-size cap, the pool mix near the requested fraction, the anchor's pool used when
  the other has nothing of that length;
- a feature cache (Pool) reads back exactly as written;
- the committed training state, when present, stays compact and its learning curve parses.
"""
import csv
import os
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import train_data  # noqa: E402

SR = 16000


def speechlike(rng, seconds):
  t = np.arange(int(seconds * SR)) / SR
  x = sum(np.sin(2 * np.pi * f * t) * rng.uniform(0.2, 1) for f in (220, 440, 1200, 2500, 5000))
  return (x * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def make_pool(name, rng, lengths, copies=1):
  items = []
  for i, T in enumerate(lengths):
    items.append((f"{name} {i}", [rng.standard_normal((64, T)).astype(np.float16)
                                  for _ in range(copies)]))
  return train_data.Pool.from_items(name, items)


class FixedCopiesTest(unittest.TestCase):
  def test_lengths_and_peaks(self):
    rng = np.random.default_rng(1)
    x = speechlike(rng, 2.0)
    for seed in range(20):
      copies = train_data.fixed_copies(x, np.random.default_rng(seed), 5)
      self.assertEqual(len(copies), 5)
      self.assertEqual(len(copies[0]), len(x))
      for k, y in enumerate(copies):
        self.assertEqual(y.dtype, np.float32)
        self.assertAlmostEqual(float(np.abs(y).max()), 0.5, places=4)
        ratio = len(y) / len(x)
        if k % 2:  # slower: 0.87..0.95 speed -> 1.05..1.15 times longer
          self.assertTrue(1 / 0.95 - 1e-3 <= ratio <= 1 / 0.87 + 1e-3, ratio)
        elif k:
          self.assertTrue(1 / 1.13 - 1e-3 <= ratio <= 1 / 1.05 + 1e-3, ratio)

  def test_telephone_band(self):
    x = speechlike(np.random.default_rng(2), 1.5)
    y = train_data.telephone(x)
    self.assertEqual(len(y), len(x))
    P = np.abs(np.fft.rfft(y)) ** 2
    hz = np.arange(len(P)) * SR / len(y)
    self.assertLess(P[hz > 3600].sum() / P.sum(), 0.01)  # mu-law noise only
    Px = np.abs(np.fft.rfft(x)) ** 2
    self.assertGreater(Px[hz > 3600].sum() / Px.sum(), 0.1)  # the input had energy there


class SamplerTest(unittest.TestCase):
  def test_buckets_budget_and_mix(self):
    rng = np.random.default_rng(3)
    nat = make_pool("natural", rng, rng.integers(60, 900, 300))
    rob = make_pool("robot", rng, rng.integers(60, 900, 300))
    budget, cap, counts = 3000, 12, {"natural": 0, "robot": 0}
    srng = np.random.default_rng(4)
    for _ in range(400):
      batch = train_data.sample_entries([nat, rob], [0.7, 0.3], budget, cap, srng)
      bins = {m.shape[1] // 50 for m, _ in batch}
      self.assertEqual(len(bins), 1, bins)
      b = bins.pop()
      self.assertLessEqual(len(batch), cap)
      self.assertLessEqual(len(batch) * (b + 1) * 50, max(budget, (b + 1) * 50))
      for _, text in batch:
        counts[text.split()[0]] += 1
    frac = counts["natural"] / sum(counts.values())
    self.assertGreater(frac, 0.62)
    self.assertLess(frac, 0.78)

  def test_missing_bin_falls_back_to_anchor_pool(self):
    rng = np.random.default_rng(5)
    nat = make_pool("natural", rng, [120] * 10)   # bin 2 only
    rob = make_pool("robot", rng, [420] * 10)     # bin 8 only
    srng = np.random.default_rng(6)
    for _ in range(100):
      batch = train_data.sample_entries([nat, rob], [0.5, 0.5], 2000, 8, srng)
      names = {t.split()[0] for _, t in batch}
      self.assertEqual(len(names), 1, names)


class PoolTest(unittest.TestCase):
  def test_round_trip(self):
    rng = np.random.default_rng(7)
    pool = make_pool("natural", rng, [80, 130, 51, 300], copies=3)
    self.assertEqual(len(pool.lengths), 12)
    with tempfile.TemporaryDirectory() as d:
      path = os.path.join(d, "p.npz")
      pool.save(path)
      back = train_data.Pool.load("natural", path)
    self.assertEqual(back.texts, pool.texts)
    for i in range(len(pool.lengths)):
      m0, t0 = pool.entry(i)
      m1, t1 = back.entry(i)
      self.assertEqual(t0, t1)
      np.testing.assert_array_equal(m0, m1)
    self.assertAlmostEqual(pool.hours(3), (80 + 130 + 51 + 300) / 100 / 3600)


class CommittedStateTest(unittest.TestCase):
  def test_state_compact_and_curve(self):
    state = os.path.join(ROOT, "tools", "training_data", "cpu_run", "state.pt")
    if not os.path.exists(state):
      self.skipTest("no committed training state")
    self.assertLess(os.path.getsize(state), 80 * 2 ** 20)
    curve = os.path.join(os.path.dirname(state), "curve.tsv")
    rows = list(csv.DictReader(open(curve), delimiter="\t"))
    self.assertTrue(rows)
    prev = 0.0
    for r in rows:
      h = float(r["audio_h"])
      self.assertGreaterEqual(h, prev)
      prev = h
      self.assertTrue(0.0 <= float(r["probe_wer"]) <= 2.0)


if __name__ == "__main__":
  unittest.main()
