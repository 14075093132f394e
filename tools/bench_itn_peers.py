"""Inverse text normalization side by side: our C++ runtime (build/tools/bench/itn_bench) and
NeMo's own Python InverseNormalizer, on the same sentences, in one run, one thread each.

  /tmp/venv-itn/bin/python tools/bench_itn_peers.py [--build build] [--passes 3]

(the venv of tools/export_itn.py: nemo-text-processing + pynini). Prints a Markdown table with
microseconds per word, per-sentence p50/p99, load time, and the ratio against NeMo; then the
agreement of our written form with NeMo's on the fixture and on --random fresh strings of the
fixture's words (seed printed), where the grammars' equal-weight alternatives show.
docs/PERFORMANCE.md ("Inverse text normalization") holds the figures.
"""
import argparse
import json
import os
import random
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentile(values, q):
  v = sorted(values)
  return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--build", default=os.path.join(ROOT, "build"))
  p.add_argument("--sentences", default=os.path.join(ROOT, "tests/fixtures/itn/itn_en.tsv"))
  p.add_argument("--itn_dir", default=os.path.join(ROOT, "models/quartznet_en_tts_small/itn"))
  p.add_argument("--passes", type=int, default=3)
  p.add_argument("--random", type=int, default=1000,
                 help="fresh random strings of 1-12 fixture words to compare outputs on")
  args = p.parse_args()
  os.environ.setdefault("OMP_NUM_THREADS", "1")
  pairs = []
  with open(args.sentences) as f:
    for line in f:
      if line.startswith("#") or "\t" not in line:
        continue
      spoken, written = line.rstrip("\n").split("\t")
      pairs.append((spoken, written))
  words = sum(len(s.split()) for s, _ in pairs)

  ours = json.loads(subprocess.check_output(
      [os.path.join(args.build, "tools/bench/itn_bench"), f"--itn_dir={args.itn_dir}",
       f"--sentences={args.sentences}", f"--passes={max(5, args.passes)}", "--json"], text=True))

  t0 = time.process_time()
  from nemo_text_processing.inverse_text_normalization.inverse_normalize import InverseNormalizer
  normalizer = InverseNormalizer(lang="en", input_case="lower_cased")
  load_s = time.process_time() - t0
  agree = sum(normalizer.inverse_normalize(s, verbose=False) == w for s, w in pairs)  # warm-up
  passes, per_sentence = [], []
  for _ in range(args.passes):
    start = time.process_time()
    for s, _ in pairs:
      t = time.process_time()
      normalizer.inverse_normalize(s, verbose=False)
      per_sentence.append(1e6 * (time.process_time() - t))
    passes.append(time.process_time() - start)
  nemo_us = 1e6 * sorted(passes)[len(passes) // 2] / words

  print(f"{len(pairs)} sentences, {words} words; 1 thread, CPU time; "
        f"NeMo agrees with its fixture on {agree}/{len(pairs)}")
  print("| engine | us per word | sentence p50 | sentence p99 | load | vs NeMo |")
  print("|---|---|---|---|---|---|")
  print(f"| jasper-serve (C++, OpenFst) | {ours['us_per_word']:.1f} | "
        f"{ours['sentence_us_p50']:.0f} us | {ours['sentence_us_p99']:.0f} us | "
        f"{ours['load_ms']:.0f} ms | {nemo_us / ours['us_per_word']:.1f}x faster |")
  print(f"| NeMo InverseNormalizer (Python, pynini) | {nemo_us:.1f} | "
        f"{percentile(per_sentence, 0.5):.0f} us | {percentile(per_sentence, 0.99):.0f} us | "
        f"{1e3 * load_s:.0f} ms (grammars built) | 1.0x |")

  seed = random.SystemRandom().randrange(2 ** 32)
  rng = random.Random(seed)
  vocabulary = [w for s, _ in pairs for w in s.split()]
  strings = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 12)))
             for _ in range(args.random)]
  for name, spoken in (("fixture", [s for s, _ in pairs]), (f"random (seed {seed})", strings)):
    with tempfile.NamedTemporaryFile("w", suffix=".tsv") as f:
      f.write("".join(s + "\n" for s in spoken))
      f.flush()
      written = subprocess.check_output(
          [os.path.join(args.build, "tools/bench/itn_bench"), f"--itn_dir={args.itn_dir}",
           f"--sentences={f.name}", "--print"], text=True).split("\n")[:len(spoken)]
    differ = [(s, w, normalizer.inverse_normalize(s, verbose=False))
              for s, w in zip(spoken, written)]
    differ = [d for d in differ if d[1] != d[2]]
    print(f"\n{name}: ours = NeMo on {len(spoken) - len(differ)}/{len(spoken)} "
          f"({100 * (1 - len(differ) / len(spoken)):.1f} %)")
    for s, ours_w, nemo_w in differ[:10]:
      print(f"  {s!r}: ours {ours_w!r}, NeMo {nemo_w!r}")


if __name__ == "__main__":
  main()
