"""Inverse text normalization side by side: our C++ runtime (build/tools/bench/itn_bench) and
NeMo's own Python InverseNormalizer, on the same sentences, in one run, one thread each.

  /tmp/venv-itn/bin/python tools/bench_itn_peers.py [--build build] [--passes 3]

(the venv of tools/export_itn.py: nemo-text-processing + pynini). Prints a Markdown table with
microseconds per word, per-sentence p50/p99, load time, agreement with NeMo's output, and the
ratio against NeMo; docs/PERFORMANCE.md ("Inverse text normalization") holds the figures.
"""
import argparse
import json
import os
import subprocess
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


if __name__ == "__main__":
  main()
