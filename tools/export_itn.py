"""Compiles NeMo's English inverse-text-normalization grammars into the FST files the server runs.

Needs `nemo-text-processing` and `pynini` from PyPI (a venv; never at serve or build time):

  python3 -m venv /tmp/venv-itn && /tmp/venv-itn/bin/pip install nemo-text-processing pynini
  /tmp/venv-itn/bin/python tools/export_itn.py --out models/quartznet_en_tts_small/itn \
      --fixture tests/fixtures/itn/itn_en.tsv --strings-fixture tests/fixtures/itn/itn_en_strings.tsv

--out DIR writes (docs/MODEL_FORMAT.md, "itn/"):
  tagger.fst      ClassifyFst (lower-cased input): spoken words -> 'tokens { ... }' tags; NeMo's
                  own optimized graph with its input-epsilon paths folded into the next arc
                  (remove_input_epsilons), input-label sorted (OpenFst vector FST, standard arcs)
  tagger_labels.json  the tagger's output strings (labels >= 256)
  verbalizer.fst  VerbalizeFinalFst: tags -> written text, as NeMo's InverseNormalizer builds it
                  (not optimized, so its shortest paths break ties as NeMo's do), input-label sorted
  itn.json        format version, language, input case, provenance (package versions), sizes
                  and SHA-256 of the files, the permutation limit of NeMo's normalizer

--fixture FILE writes the agreement set that tests/itn_test.cc checks the C++ runtime against:
one `spoken<TAB>written` line per sentence, `written` from NeMo's own InverseNormalizer. The
spoken sentences come from the project's spoken-text tool (tools/spoken_text.py: its number
templates and spell_out over written templates for e-mail, URLs, measures, decimals, money,
ordinals and years) with a fixed seed, plus plain sentences with no number in them; none comes
from a test set of any model.

--strings-fixture FILE writes the same for 400 strings of 1-12 of those words drawn at random
(fixed seed): where several taggings weigh the same, they check that the runtime picks NeMo's.
"""
import argparse
import hashlib
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spoken_text  # noqa: E402

FORMAT_VERSION = 2
MAX_PERMUTATIONS_PER_SPLIT = 729  # NeMo's InverseNormalizer default


def _sha256(path):
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def export_grammars(out_dir):
  from importlib import metadata
  import pynini
  from nemo_text_processing.inverse_text_normalization.en.taggers.tokenize_and_classify import (
      ClassifyFst)
  from nemo_text_processing.inverse_text_normalization.en.verbalizers.verbalize_final import (
      VerbalizeFinalFst)
  os.makedirs(out_dir, exist_ok=True)
  tagger, labels = remove_input_epsilons(ClassifyFst(input_case="lower_cased", cache_dir=None).fst)
  verbalizer = VerbalizeFinalFst().fst
  files = {}
  with open(os.path.join(out_dir, "tagger_labels.json"), "w", encoding="ascii") as f:
    json.dump(labels, f, separators=(",", ":"))
    f.write("\n")
  for name, fst in (("tagger.fst", tagger), ("verbalizer.fst", verbalizer)):
    fst = pynini.arcsort(fst.copy(), sort_type="ilabel")
    path = os.path.join(out_dir, name)
    fst.write(path)
    files[name] = {"bytes": os.path.getsize(path), "sha256": _sha256(path),
                   "states": fst.num_states(),
                   "arcs": sum(fst.num_arcs(s) for s in fst.states())}
  path = os.path.join(out_dir, "tagger_labels.json")
  files["tagger_labels.json"] = {"bytes": os.path.getsize(path), "sha256": _sha256(path),
                                 "labels": len(labels)}
  manifest = {
      "format_version": FORMAT_VERSION,
      "language": "en",
      "input_case": "lower_cased",
      "max_permutations_per_split": MAX_PERMUTATIONS_PER_SPLIT,
      "source": {"nemo_text_processing": metadata.version("nemo_text_processing"),
                 "pynini": metadata.version("pynini"),
                 "tool": "tools/export_itn.py"},
      "files": files,
  }
  with open(os.path.join(out_dir, "itn.json"), "w") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
  for name, info in files.items():
    print(f"{name}: " + ", ".join(f"{v} {k}" for k, v in info.items() if k != "sha256"))


def remove_input_epsilons(tagger):
  """The tagger with no input-epsilon arc: every path of arcs that read nothing (NeMo's grammars
  insert tag text such as 'tokens { money { integer_part: "' that way) is folded into the next
  arc that reads a byte, whose output becomes the whole string. Composing a sentence with NeMo's
  tagger walks every such insertion for every class at every word start, one state per byte;
  this form reads the same relation with the same path weights and explores ~6x fewer states.
  Output labels >= 256 name strings: tagger_labels.json is the list of them (label 256 + i is
  entry i; each character is one byte, U+0000-U+00FF). An output string left at the end of a
  path goes on an input-epsilon arc into one added final state."""
  import pynini
  weight_type = tagger.weight_type()
  zero, one = pynini.Weight.zero(weight_type), pynini.Weight.one(weight_type)
  strings, index = [], {}

  def text(label):
    return "" if label == 0 else chr(label) if label < 256 else strings[label - 256]

  def label(s):
    if not s:
      return 0
    if len(s) == 1:
      return ord(s)
    if s not in index:
      index[s] = 256 + len(strings)
      strings.append(s)
    return index[s]

  arcs = [list(tagger.arcs(s)) for s in tagger.states()]
  closures = {}

  def closure(state, depth=0):  # (state reached, output, weight) over input-epsilon paths
    if state not in closures:
      if depth > 1000:
        raise ValueError("a cycle of input-epsilon arcs in the tagger")
      found = [(state, "", one)]
      for a in arcs[state]:
        if a.ilabel == 0:
          for q, o, w in closure(a.nextstate, depth + 1):
            found.append((q, text(a.olabel) + o, pynini.times(a.weight, w)))
      closures[state] = found
    return closures[state]

  out = pynini.Fst()
  out.add_states(len(arcs))
  out.set_start(tagger.start())
  end = out.add_state()
  out.set_final(end, one)
  for p in range(len(arcs)):
    for q, o, w in closure(p):
      for a in arcs[q]:
        if a.ilabel != 0:
          out.add_arc(p, pynini.Arc(a.ilabel, label(o + text(a.olabel)),
                                    pynini.times(w, a.weight), a.nextstate))
      final = tagger.final(q)
      if final != zero:
        if o:
          out.add_arc(p, pynini.Arc(0, label(o), pynini.times(w, final), end))
        else:
          old = out.final(p)
          out.set_final(p, pynini.times(w, final) if old == zero else pynini.plus(old, pynini.times(w, final)))
  out.connect()
  return out, strings


def _extra_written(rng):
  """Written sentences for the semiotic classes number_sentences() has few of."""
  users = ["john", "mary", "support", "info", "sales", "anna"]
  hosts = ["gmail", "example", "yahoo", "nvidia", "debian"]
  tlds = ["com", "org", "net"]
  units = ["kg", "km", "cm", "mm", "mph", "ft", "lbs", "%"]
  return rng.choice([
      lambda: f"write to {rng.choice(users)} at {rng.choice(hosts)} dot {rng.choice(tlds)}",
      lambda: f"the site is www dot {rng.choice(hosts)} dot {rng.choice(tlds)}",
      lambda: f"it weighs {rng.randint(1, 900)} {rng.choice(units)}",
      lambda: f"the rate went up {rng.randint(1, 30)}.{rng.randint(1, 9)}% this year",
      lambda: f"he paid ${rng.randint(1, 99999)} for {rng.randint(2, 40)} tickets",
      lambda: f"the {rng.randint(1, 99)}th and {rng.randint(1, 99)}th runners finished",
      lambda: f"we met in {rng.randint(1950, 2030)} and again in {rng.randint(1950, 2030)}",
      lambda: f"{rng.randint(2, 12)} of the {rng.randint(13, 99)} cars were red",
      lambda: f"on {rng.choice(spoken_text.MONTHS)} {rng.randint(1, 28)} at "
              f"{rng.randint(1, 12)}:{rng.randint(10, 59)} a.m.",
      lambda: f"the answer is {rng.randint(0, 99)}.{rng.randint(0, 999)}",
  ])()


def agreement_sentences(n_numbers=260, n_extra=80, seed=20261206):
  rng = random.Random(seed)
  out = spoken_text.number_sentences(rng, n_numbers)
  while len(out) < n_numbers + n_extra:
    s = spoken_text.spell_out(_extra_written(rng))
    if s:
      out.append(s)
  out += [  # no numbers: the normalizer must leave them alone
      "the quick brown fox jumps over the lazy dog",
      "she said that it was not her fault",
      "we will see what happens next week",
      "one of the best things about it is the view",
      "i want to go home now",
      "a man and a woman walked into the room",
      "no one knows where they went",
      "it was the first time i saw the sea",
      "he won the second round",
      "doctor lee paid twenty three dollars fifty cents on may third nineteen ninety eight",
  ]
  seen = set()
  return [s for s in out if not (s in seen or seen.add(s))]


def word_strings(n=400, seed=20261207):
  """Strings of 1-12 words drawn at random from the agreement sentences' words: number words
  side by side with no sentence around them, where the grammars' equal-weight alternatives
  ("votes dot six": "votes.6" or "votes.six") show which one a runtime's search picks."""
  rng = random.Random(seed)
  vocabulary = [w for s in agreement_sentences() for w in s.split()]
  out, seen = [], set()
  while len(out) < n:
    s = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 12)))
    if s not in seen:
      seen.add(s)
      out.append(s)
  return out


def write_fixture(path, sentences, flag):
  from nemo_text_processing.inverse_text_normalization.inverse_normalize import InverseNormalizer
  normalizer = InverseNormalizer(lang="en", input_case="lower_cased",
                                 max_number_of_permutations_per_split=MAX_PERMUTATIONS_PER_SPLIT)
  with open(path, "w") as f:
    f.write(f"# spoken<TAB>written by NeMo's InverseNormalizer (tools/export_itn.py {flag})\n")
    for s in sentences:
      written = normalizer.inverse_normalize(s, verbose=False)
      assert "\t" not in written and "\n" not in written
      f.write(f"{s}\t{written}\n")
  print(f"{path}: {len(sentences)} sentences")


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out", help="folder for tagger.fst, verbalizer.fst and itn.json")
  p.add_argument("--fixture", help="write the spoken/written agreement set here")
  p.add_argument("--strings-fixture", help="write the random word strings' agreement set here")
  args = p.parse_args()
  if not args.out and not args.fixture and not args.strings_fixture:
    p.error("nothing to do: give --out, --fixture and/or --strings-fixture")
  if args.out:
    export_grammars(args.out)
  if args.fixture:
    write_fixture(args.fixture, agreement_sentences(), "--fixture")
  if args.strings_fixture:
    write_fixture(args.strings_fixture, word_strings(), "--strings-fixture")


if __name__ == "__main__":
  main()
