#!/usr/bin/env python3
"""Builds a word n-gram LM (interpolated modified Kneser-Ney, Chen & Goodman 1998) as ARPA text
from English text that Debian ships, for beam search (engine/decoding/ctc_beam.h), then the
compact binary form with jasper-lm.

  python3 tools/build_lm.py --out models/quartznet_en_tts_small/lm.arpa \\
      --binary models/quartznet_en_tts_small/lm.bin --jasper-lm build/tools/jasper-lm

Text: the sentence pool of tools/make_speech_data.py (fortunes-min, flite's examples, Debian's
common licenses, man pages; packages wamerican fortunes-min flite), training side only: every
sentence the held-out split keeps for testing (is_test_text) is left out, and so is any sentence
equal to a reference of a test set (tests/fixtures/heldout, pocketsphinx-testdata,
asterisk-core-sounds-en, when installed). The test sets never train the LM.

Estimation (pure Python, no toolkit): counts of 1..N-grams over <s> sentence </s>; lower orders
use continuation counts (distinct left contexts) except n-grams that start with <s>; three
discounts per order from the count-of-counts; probabilities interpolated down to a uniform
distribution over the vocabulary; written in backoff form (the interpolation weight of a
context is its backoff). Highest-order n-grams seen fewer than --prune times are dropped after
estimation, which keeps the file small; the backoff weights of their contexts are then
recomputed so that every conditional distribution still sums to one.
Why not a toolkit: KenLM's estimator (lmplz) is not in Debian or PyPI (the PyPI kenlm only
queries), and IRSTLM's "modified shift-beta" is a different smoothing; this is ~150 lines.
"""
import argparse
import collections
import gzip
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def test_references():
    """Every reference text of the project's test sets that is on this machine."""
    refs = set()
    tsv = os.path.join(HERE, "..", "tests", "fixtures", "heldout", "transcripts.tsv")
    if os.path.exists(tsv):
        for line in open(tsv):
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 2:
                refs.add(parts[1].strip())
    from make_speech_data import normalize, read_sphinx_transcripts
    base = "/usr/share/pocketsphinx/test/data"
    for tr in ("librivox/transcription", "cards/cards.transcription"):
        if os.path.exists(os.path.join(base, tr)):
            refs.update(read_sphinx_transcripts(os.path.join(base, tr)).values())
    tx = "/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
    if os.path.exists(tx):
        for line in gzip.open(tx, "rt", errors="ignore"):
            if ":" in line:
                refs.add(normalize(line.split(":", 1)[1]))
    return {r for r in refs if r}


def training_sentences():
    from make_speech_data import is_test_text, load_texts
    sentences, _ = load_texts()
    refs = test_references()
    kept = [s for s in sentences if not is_test_text(s) and s not in refs]
    return kept, len(sentences) - len(kept), len(refs)


def estimate(sentences, order, prune, prune_lower=False):
    """{n: {ngram tuple: (log10 p, log10 backoff or None)}} in backoff form. With prune_lower,
    every order above 1 is count-pruned (prune_all_orders), not only the highest."""
    counts = [collections.Counter() for _ in range(order + 1)]  # counts[n][ngram]
    for s in sentences:
        words = ["<s>"] + s.split() + ["</s>"]
        for n in range(1, order + 1):
            for i in range(len(words) - n + 1):
                counts[n][tuple(words[i:i + n])] += 1
    # Adjusted counts: raw for the highest order and for n-grams starting with <s>; otherwise the
    # number of distinct words seen before the n-gram (continuation counts).
    adjusted = [None] * (order + 1)
    adjusted[order] = counts[order]
    for n in range(order - 1, 0, -1):
        cont = collections.Counter()
        for g in counts[n + 1]:
            cont[g[1:]] += 1
        adj = collections.Counter()
        for g, c in counts[n].items():
            adj[g] = c if g[0] == "<s>" else cont.get(g, 0)
        adjusted[n] = adj
    # Discounts D1, D2, D3+ per order from the count-of-counts of the adjusted counts.
    discounts = [None] * (order + 1)
    for n in range(1, order + 1):
        coc = collections.Counter(c for c in adjusted[n].values() if c <= 4)
        n1, n2, n3, n4 = (max(coc.get(k, 0), 1) for k in (1, 2, 3, 4))
        y = n1 / (n1 + 2 * n2)
        discounts[n] = (0.0, max(1 - 2 * y * n2 / n1, 0.05), max(2 - 3 * y * n3 / n2, 0.05),
                        max(3 - 4 * y * n4 / n3, 0.05))
    vocab = [g[0] for g in adjusted[1] if g != ("<s>",)]
    # Per context: total adjusted count and how many continuations have count 1, 2, 3+.
    stats = [None] * (order + 1)
    for n in range(1, order + 1):
        st = collections.defaultdict(lambda: [0, 0, 0, 0])
        for g, c in adjusted[n].items():
            if g == ("<s>",):
                continue  # never predicted: no share of the unigram distribution
            s = st[g[:-1]]
            s[0] += c
            s[min(c, 3)] += 1
        stats[n] = st
    prob = [None] * (order + 1)
    gamma = [None] * (order + 1)
    uniform = 1.0 / len(vocab)
    for n in range(1, order + 1):
        d = discounts[n]
        gam = {}
        for h, (total, k1, k2, k3) in stats[n].items():
            gam[h] = (d[1] * k1 + d[2] * k2 + d[3] * k3) / total
        p = {}
        for g, c in adjusted[n].items():
            h = g[:-1]
            if g == ("<s>",):
                continue  # written as log10 p = -99 below
            lower = prob[n - 1].get(g[1:]) if n > 1 else uniform
            if lower is None:  # a lower-order n-gram absent (cannot happen with full counts)
                lower = uniform
            p[g] = max(c - d[min(c, 3)], 0.0) / stats[n][h][0] + gam[h] * lower
        prob[n], gamma[n] = p, gam
    if prune_lower and prune > 1:
        full = {n: dict.fromkeys(prob[n]) for n in range(2, order + 1)}
        full[1] = {g: (math.log10(p), None) for g, p in prob[1].items()}
        full[1][("<s>",)] = (-99.0, None)
        return prune_all_orders(full, counts, prob, prune)
    result = {}
    for n in range(1, order + 1):
        table = {}
        if n == 1:
            table[("<s>",)] = (-99.0, None)
        for g, p in prob[n].items():
            if n == order and n > 1 and counts[n][g] < prune:
                continue
            table[g] = (math.log10(p), None)
        result[n] = table
    # Backoffs: a context's interpolation weight, for every n-gram that is a context. Below the
    # highest order nothing is pruned, so that weight is exact; for contexts of the pruned
    # highest order it is recomputed so that P(. | h) still sums to one:
    #   bo(h) = (1 - sum of kept p(w | h)) / (1 - sum of p(w | h') over the same w).
    kept_mass = collections.defaultdict(lambda: [0.0, 0.0])
    if order > 1:
        for g in result[order]:
            m = kept_mass[g[:-1]]
            m[0] += prob[order][g]
            m[1] += prob[order - 1][g[1:]]
    for n in range(1, order):
        for g in list(result[n]):
            w = gamma[n + 1].get(g)
            if w is None:
                continue
            if n == order - 1 and prune > 1:
                num, den = kept_mass.get(g, (0.0, 0.0))
                w = (1.0 - num) / max(1.0 - den, 1e-12)
            if w > 0:
                result[n][g] = (result[n][g][0], math.log10(w))
    return result


def prune_all_orders(model, counts, prob, prune):
    """Count pruning of every order above 1, in backoff form: an n-gram seen fewer than `prune`
    times is dropped unless it is the context of a kept longer one; every context's backoff is
    then recomputed so that each conditional distribution still sums to one:
      bo(h) = (1 - sum of kept p(w | h)) / (1 - sum over the same w of P(w | h')),
    with P(w | h') the pruned model's own (backoff) probability. `model` is estimate()'s result
    before pruning (only its keys are used); returns a new one."""
    order = max(model)
    kept = {1: dict(model[1])}
    for n in range(order, 1, -1):
        longer = kept.get(n + 1, {})
        contexts = {g[:-1] for g in longer}
        kept[n] = {g: model[n][g] for g in model[n]
                   if counts[n][g] >= prune or g in contexts}
    result = {n: {g: (math.log10(prob[n][g]) if n > 1 or g != ("<s>",) else -99.0, None)
                  for g in kept[n]} for n in kept}
    result[1] = {g: (v[0], None) for g, v in model[1].items()}

    def p_final(g):
        """P(g[-1] | g[:-1]) in the pruned model (lower orders' backoffs already final)."""
        n = len(g)
        if g in result[n]:
            return 10.0 ** result[n][g][0]
        h = g[:-1]
        bo = result[n - 1][h][1] if h in result[n - 1] and result[n - 1][h][1] is not None \
            else 0.0
        return 10.0 ** bo * p_final(g[1:])

    for n in range(2, order + 1):
        mass = collections.defaultdict(lambda: [0.0, 0.0])
        for g in result[n]:
            m = mass[g[:-1]]
            m[0] += prob[n][g]
            m[1] += p_final(g[1:])
        for h, (num, den) in mass.items():
            w = (1.0 - num) / max(1.0 - den, 1e-12)
            if w > 0 and h in result[n - 1]:
                result[n - 1][h] = (result[n - 1][h][0], math.log10(w))
    return result


def write_arpa(path, model):
    with open(path, "w") as f:
        f.write("\\data\\\n")
        for n in sorted(model):
            f.write(f"ngram {n}={len(model[n])}\n")
        for n in sorted(model):
            f.write(f"\n\\{n}-grams:\n")
            for g in sorted(model[n]):
                p, bo = model[n][g]
                line = f"{p:.6f}\t{' '.join(g)}"
                if bo is not None:
                    line += f"\t{bo:.6f}"
                f.write(line + "\n")
        f.write("\n\\end\\\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="ARPA file to write")
    ap.add_argument("--binary", help="also write the binary form here (needs --jasper-lm)")
    ap.add_argument("--jasper-lm", default=os.path.join(HERE, "..", "build", "tools", "jasper-lm"))
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--prune", type=int, default=2,
                    help="drop highest-order n-grams seen fewer times (1: keep all)")
    args = ap.parse_args()
    sentences, dropped, refs = training_sentences()
    words = sum(len(s.split()) for s in sentences)
    print(f"text: {len(sentences)} sentences, {words} words ({dropped} held out or test "
          f"references; {refs} test references checked)", flush=True)
    model = estimate(sentences, args.order, args.prune)
    write_arpa(args.out, model)
    print(f"wrote {args.out}: " + ", ".join(f"{len(model[n])} {n}-grams" for n in sorted(model)))
    if args.binary:
        subprocess.run([args.jasper_lm, "convert", args.out, args.binary], check=True)


if __name__ == "__main__":
    main()
