#!/usr/bin/env python3
"""Word boosting on the held-out fixture (issue 22's goal): for every utterance, each reference
word of four letters or more that greedy decoding misses is boosted alone (beam search with the
model folder's LM, --boost=WORD=B): is it in the hypothesis now? Then, for every utterance, the
missed words of another utterance (not in this one's reference) are boosted together: how many
words of the unboosted beam-search hypothesis change (word edit distance)?

  python3 tools/eval_boost.py [--transcribe build/tools/jasper-transcribe] [--boost 6]
"""
import argparse
import csv
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eval_decoders import edits  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests/fixtures/heldout")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transcribe", default=os.path.join(ROOT, "build/tools/jasper-transcribe"))
    ap.add_argument("--boost", type=float, default=6.0)
    args = ap.parse_args()
    rows = list(csv.reader(open(os.path.join(FIXTURE, "transcripts.tsv")), delimiter="\t"))

    def run(name, flags):
        out = subprocess.run([args.transcribe, *flags, os.path.join(FIXTURE, name)],
                             capture_output=True, text=True, check=True).stdout
        return out.split("\t", 1)[1].split() if "\t" in out else []

    missed = {}
    for name, ref in rows:
        greedy = run(name, ["--decoder=greedy"])
        missed[name] = [w for w in dict.fromkeys(ref.split()) if w not in greedy and len(w) >= 4]
    total = fixed = 0
    for name, _ in rows:
        for w in missed[name]:
            total += 1
            fixed += w in run(name, ["--decoder=beam", f"--boost={w}={args.boost}"])
    changed = words = 0
    names = [n for n, _ in rows]
    for i, (name, ref) in enumerate(rows):
        other = names[(i + 7) % len(names)]
        unrelated = [w for w in missed[other] if w not in ref.split()]
        if not unrelated:
            continue
        base = run(name, ["--decoder=beam"])
        boosted = run(name, ["--decoder=beam",
                             "--boost=" + ";".join(f"{w}={args.boost}" for w in unrelated)])
        changed += edits(base, boosted)
        words += len(base)
    print(f"boost {args.boost}: missed words fixed {fixed}/{total} ({100 * fixed / max(total, 1):.0f} %); "
          f"unrelated boosts changed {changed}/{words} words ({100 * changed / max(words, 1):.1f} %)")


if __name__ == "__main__":
    main()
