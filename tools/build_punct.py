#!/usr/bin/env python3
"""Builds the punctuation and capitalization model (a hidden-event n-gram LM and a case table)
that engine/text/punctuator.h runs, from English prose that Debian ships, and its held-out set.

  apt-get install fortunes jargon-text dict-gcide
  python3 tools/build_punct.py --out models/quartznet_en_tts_small/punct \\
      --heldout tests/fixtures/punct/heldout.tsv --jasper-lm build/tools/jasper-lm

The method (Stolcke & Shriberg 1996, "hidden event language models"; truecasing after Lita et
al. 2003): an n-gram LM over the cased words of real text with the marks , . ? as tokens of
their own between them. At serve time the punctuator searches, over the recognizer's words, for
the most probable token string that the LM could have produced: which cased form each word takes
(from the case table) and which mark, if any, follows it. Sentence-initial capitals are positional,
so the LM's text holds each sentence's first word in its usual case and the punctuator
capitalizes the word after . or ? itself.

Text (licenses: docs/MODEL_CARD's punctuation section), split into documents, each document
deterministically in the held-out part, the dev part or the training part by a hash of its text
(1, 1 and 23 in 25). --sources picks the training sources (default: the three below, as the
shipped punct/ is trained); the others were tried (docs/PERFORMANCE.md) and gave no gain:
  fortunes     /usr/share/games/fortunes/* (package fortunes; BSD-style and public domain)
  jargon       The Jargon File 4.4.7 paragraphs (package jargon-text; public domain)
  gcide        quotations of the GNU Collaborative International Dictionary of English, mostly
               from 1913 Webster's literary citations (package dict-gcide; GPL-3+)
  devil        Ambrose Bierce's The Devil's Dictionary (package dict-devil; public domain)
  perl         Perl's manual pages, prose paragraphs (package perl-doc; Artistic or GPL)
  gnome        GNOME's desktop help, paragraphs and question headings (gnome-user-docs; CC-BY-SA)
  kjv          the King James Bible, a chapter per document (package bible-kjv; public domain)
The held-out and dev passages come from the three fixture sources (--heldout-sources). A training
passage that shares a run of 8 words with any dev or held-out passage is dropped (a quotation two
documents both carry): 235 of the three sources' 49,882 were, and the punct/ built before this
guard (2026-12-06) had trained on them.
Normalization: ! and ; count as . ; : and dashes as , ; quotes, brackets and other symbols go;
hyphenated words split; a period after a known abbreviation or a single letter is not a mark;
any token with a digit is <num> to the LM (the punctuator maps ITN's digits the same way); passages
more than half in capitals are dropped.

--out DIR writes (docs/MODEL_FORMAT.md, "punct/"):
  lm.bin       the hidden-event LM (jasper-lm binary form of an interpolated modified
               Kneser-Ney ARPA model, tools/build_lm.py's estimator)
  case.tsv     `word<TAB>Form<TAB>form...`: the cased forms of each word seen other than in
               lower case, most frequent first, at least 2 and 5 % of its mid-sentence uses
  punct.json   format version, marks, file sizes and SHA-256, provenance and text counts
--heldout FILE writes `input<TAB>reference` passages of the held-out part (input: lower case,
no marks, as a recognizer writes it), which tests/punctuator_test.cc scores.
"""
import argparse
import collections
import gzip
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_lm  # noqa: E402

FORMAT_VERSION = 1
MARKS = (",", ".", "?")
TERMINAL = (".", "?")
NUM = "<num>"
ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "gen", "col", "lt", "sgt", "capt", "rev",
    "vs", "etc", "cf", "ca", "vol", "no", "pp", "ch", "fig", "inc", "ltd", "co", "corp", "dept",
    "esq", "hon", "mt", "ft", "oz", "lb", "viz", "obs", "approx", "jan", "feb", "mar", "apr",
    "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "sq", "gov", "rep", "sen", "ave",
}
MAX_PASSAGE_WORDS = 60


def fortunes():
    base = "/usr/share/games/fortunes"
    if not os.path.isdir(base):
        return
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name)
        if "." in name or not os.path.isfile(path) or "art" in name:
            continue
        text = open(path, encoding="utf-8", errors="ignore").read()
        for cookie in text.split("\n%\n"):
            lines = [ln for ln in cookie.split("\n")
                     if not re.match(r"^\s*(--|-- |\u2014)", ln)]
            # Dialogue and verse keep their line structure; a cookie is a passage either way.
            yield "fortunes", " ".join(ln.strip() for ln in lines)


def jargon():
    path = "/usr/share/doc/jargon-text/jargon.txt.gz"
    if not os.path.exists(path):
        return
    para = []
    for line in gzip.open(path, "rt", encoding="utf-8", errors="ignore"):
        s = line.strip()
        if not s:
            if para:
                yield "jargon", " ".join(para)
            para = []
        elif s.startswith(":") or re.match(r"^\d+\.\s*$", s):
            para = []
        else:
            para.append(re.sub(r"^\d+\.\s+", "", s))
    if para:
        yield "jargon", " ".join(para)


def gcide():
    path = "/usr/share/dictd/gcide.dict.dz"
    if not os.path.exists(path):
        return
    import gzip as gz
    quote = []
    for line in gz.open(path, "rt", encoding="utf-8", errors="ignore"):
        if line.startswith("            ") and not line.strip().startswith("["):
            s = line.strip()
            ends = re.search(r"\s*--\s*[A-Z][^.]*\.?\s*$", s)
            quote.append(s[:ends.start()] if ends else s)
            if ends:
                yield "gcide", " ".join(quote)
                quote = []
            continue
        if quote:
            yield "gcide", " ".join(quote)
            quote = []


def devil():
    """The Devil's Dictionary (Ambrose Bierce, 1911; public domain): each definition, its
    headword and part of speech cut off."""
    path = "/usr/share/dictd/devil.dict.dz"
    if not os.path.exists(path):
        return
    text = gzip.open(path, "rt", encoding="utf-8", errors="ignore").read()
    head = re.compile(r"^[A-Z][A-Z' .-]*,\s*(?:[a-z]{1,6}\.\s*)+")
    for para in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in para.split("\n")]
        if not lines or lines[0].startswith(("00-", "http")):
            continue
        yield "devil", head.sub("", " ".join(lines)).replace("_", "")


def perl_pod():
    """Perl's manual pages (package perl-doc; Artistic or GPL): the prose paragraphs of every
    page but the release notes (code, lists of names and POD commands dropped), and the
    headings that are questions (the FAQ's "How do I ...?")."""
    base = "/usr/share/perl/5.36/pod"
    if not os.path.isdir(base):
        return
    for name in sorted(os.listdir(base)):
        if not name.endswith(".pod") or "delta" in name or "toc" in name:
            continue
        text = open(os.path.join(base, name), encoding="utf-8", errors="ignore").read()
        for para in re.split(r"\n\s*\n", text):
            if not para or para[0].isspace():
                continue  # verbatim code
            if para.startswith("="):
                m = re.match(r"=head\d\s+(.*\?)\s*$", para.strip(), re.S)
                if not m:
                    continue
                para = m.group(1)
            for _ in range(3):  # formatting codes: C<x>, L<text|link>, B<< x >>
                para = re.sub(r"[A-Z]<+\s*(?:([^<>|]*)\|)?([^<>]*?)\s*>+",
                              lambda m: m.group(1) or m.group(2), para)
            if re.search(r"[$@%{};=]|->|::", para):
                continue  # prose about code, full of symbols the recognizer never writes
            yield "perl", para


def gnome_help():
    """The GNOME desktop's user help (package gnome-user-docs; CC-BY-SA 3.0): every paragraph
    and every heading that is a question, from the English pages."""
    import xml.etree.ElementTree as ET
    base = "/usr/share/help/C/gnome-help"
    if not os.path.isdir(base):
        return
    for name in sorted(os.listdir(base)):
        if not name.endswith(".page"):
            continue
        try:
            root = ET.parse(os.path.join(base, name)).getroot()
        except ET.ParseError:
            continue
        for el in root.iter():
            tag = el.tag.rsplit("}", 1)[-1]
            if tag not in ("p", "title"):
                continue
            text = " ".join("".join(el.itertext()).split())
            if tag == "title" and not text.endswith("?"):
                continue
            yield "gnome", text


def kjv():
    """The King James Bible (package bible-kjv-text; public domain): one document a chapter."""
    try:
        out = subprocess.run(["bible", "-f", "Ge1:1-Re22:21"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return
    chapter, verses = None, []
    for line in out.split("\n"):
        m = re.match(r"^([1-3]?[A-Za-z]+)(\d+):\d+ (.*)", line)
        if m:
            if (m.group(1), m.group(2)) != chapter and verses:
                yield "kjv", " ".join(verses)
                verses = []
            chapter = (m.group(1), m.group(2))
            verses.append(m.group(3))
        elif line.strip() and verses:
            verses[-1] += " " + line.strip()
    if verses:
        yield "kjv", " ".join(verses)


SOURCES = {"fortunes": fortunes, "jargon": jargon, "gcide": gcide, "devil": devil,
           "perl": perl_pod, "gnome": gnome_help, "kjv": kjv}
PACKAGES = {"fortunes": "fortunes", "jargon": "jargon-text", "gcide": "dict-gcide",
            "devil": "dict-devil", "perl": "perl-doc", "gnome": "gnome-user-docs",
            "kjv": "bible-kjv"}
# The sources of the committed held-out set (tests/fixtures/punct/heldout.tsv).
FIXTURE_SOURCES = ("fortunes", "jargon", "gcide")


TOKEN = re.compile(r"\$?\d[\d,.:/]*\d(?:st|nd|rd|th|s|%)?|\$?\d(?:st|nd|rd|th|s|%)?|"
                   r"[A-Za-z]+(?:'[A-Za-z]+)*|[.!?;:,]|--|\u2014|\u2013")


def tokenize(text):
    """(token, mark) pairs: a cased word or <num>, and the mark that follows it ('' for none).
    None when the passage is unusable."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    letters = [c for c in text if c.isalpha()]
    if len(letters) < 10 or sum(c.isupper() for c in letters) > 0.5 * len(letters):
        return None
    text = re.sub(r"(?<=[A-Za-z])-(?=[A-Za-z])", " ", text)
    out = []
    for m in TOKEN.finditer(text):
        t = m.group(0)
        if t in ("!", ";", ".", "?"):
            mark = "?" if t == "?" else "."
        elif t in (":", ",", "--", "\u2014", "\u2013"):
            mark = ","
        else:
            if not any(c.isdigit() for c in t):
                t = t.strip("'")
                if not t:
                    continue
            out.append([t, ""])
            continue
        if not out:
            continue
        prev = out[-1]
        if mark == "." and t == "." and (prev[0].lower() in ABBREVIATIONS or
                                          (len(prev[0]) == 1 and prev[0] not in ("I", "a"))):
            continue  # "Dr.", "J. R. R.": not a sentence end
        # At most one mark between two words: ? over . over ,
        rank = {"": 0, ",": 1, ".": 2, "?": 3}
        if rank[mark] > rank[prev[1]]:
            prev[1] = mark
    if len(out) < 3:
        return None
    if out[-1][1] not in TERMINAL:
        out[-1][1] = "."
    return out


def passages(tokens):
    """Cuts a long document at sentence ends into passages of at most MAX_PASSAGE_WORDS."""
    cur = []
    for tok in tokens:
        cur.append(tok)
        if tok[1] in TERMINAL and len(cur) >= MAX_PASSAGE_WORDS // 2:
            yield cur
            cur = []
    if cur:
        yield cur


def load_splits(sources=FIXTURE_SOURCES, guard=8):
    """(train, dev, test, words per source): every document of `sources` once, tokenized, cut
    into passages, each in the split its text hashes to. Each passage is a (source, tokens) pair.
    A training passage that shares a run of `guard` words with a dev or held-out passage (a
    quotation that two sources both carry, say) is dropped, so no held-out text is trained on.
    tools/train_punct.py reads the same."""
    splits = {"train": [], "dev": [], "test": []}
    seen = set()
    per_source = collections.Counter()
    for source in sources:
        for _, text in SOURCES[source]():
            text = " ".join(text.split())
            if not text or text in seen:
                continue
            seen.add(text)
            toks = tokenize(text)
            if toks is None:
                continue
            per_source[source] += len(toks)
            splits[split_of(text)].extend((source, p) for p in passages(toks))
    if guard:
        def runs(p):
            w = [t.lower() for t, _ in p]
            return {" ".join(w[i:i + guard]) for i in range(len(w) - guard + 1)}
        kept = set()
        for name in ("dev", "test"):
            for _, p in splits[name]:
                kept |= runs(p)
        before = len(splits["train"])
        splits["train"] = [(s, p) for s, p in splits["train"] if not runs(p) & kept]
        dropped = before - len(splits["train"])
        if dropped:
            print(f"dropped {dropped} training passages that share {guard} words with dev or "
                  "held-out text", flush=True)
    return splits["train"], splits["dev"], splits["test"], per_source


def split_of(text):
    """'test' (1 in 25 documents: the held-out set), 'dev' (1 in 25: tuning the mark biases and
    the question weight) or 'train'."""
    bucket = zlib.crc32(text.encode()) % 25
    return "test" if bucket == 0 else "dev" if bucket == 1 else "train"


def sentence_initial(passage):
    initial = [True]
    for _, mark in passage[:-1]:
        initial.append(mark in TERMINAL)
    return initial


def lm_word(word):
    return NUM if any(c.isdigit() for c in word) else word


def case_table(train):
    forms = collections.defaultdict(collections.Counter)
    for p in train:
        for (word, _), first in zip(p, sentence_initial(p)):
            if lm_word(word) != NUM and not first:
                forms[word.lower()][word] += 1
    table = {}
    for key, counter in forms.items():
        total = sum(counter.values())
        kept = [f for f, c in counter.most_common(3) if c >= 2 and c >= 0.05 * total]
        if not kept:
            kept = [counter.most_common(1)[0][0]]
        if kept != [key]:
            table[key] = kept
    return table


def sentence_starts(train):
    """{start: (log10 P(. | start) / P(.), log10 P(? | start) / P(?))} for the first word and the
    first two words (lower case, numbers as <num>) of sentences seen at least 3 times: how much a
    sentence's opening says about its closing mark ("where is ..." ends in ?)."""
    ends = collections.defaultdict(lambda: [0, 0])
    total = [0, 0]
    for p in train:
        start = None
        for i, ((word, mark), first) in enumerate(zip(p, sentence_initial(p))):
            if first:
                start = i
            if mark in TERMINAL:
                k = 0 if mark == "." else 1
                total[k] += 1
                w = [lm_word(x).lower() for x, _ in p[start:start + 2]]
                ends[w[0]][k] += 1
                if len(w) == 2 and i > start:
                    ends[w[0] + " " + w[1]][k] += 1
    prior = [t / sum(total) for t in total]
    table = {}
    for key, (periods, questions) in ends.items():
        n = periods + questions
        if n < 3:
            continue
        # Add-2 smoothing toward the prior.
        p = [(periods + 2 * prior[0]) / (n + 2), (questions + 2 * prior[1]) / (n + 2)]
        table[key] = tuple(round(math.log10(p[k] / prior[k]), 4) for k in (0, 1))
    return table


def usual_form(word, table):
    forms = table.get(word.lower())
    return forms[0] if forms else word.lower()


def lm_sentence(passage, table):
    """The LM's token string: sentence-initial words in their usual case, marks as tokens."""
    toks = []
    for (word, mark), first in zip(passage, sentence_initial(passage)):
        word = lm_word(word)
        toks.append(usual_form(word, table) if first and word != NUM else word)
        if mark:
            toks.append(mark)
    return " ".join(toks)


def reference(passage):
    """The text the punctuator aims at: the original words, marks, and a capital after . or ?
    (which the mark mapping makes of a ; or !)."""
    out = []
    for (word, mark), first in zip(passage, sentence_initial(passage)):
        out.append((word[:1].upper() + word[1:] if first else word) + mark)
    return " ".join(out)


def recognizer_input(passage):
    return " ".join(w.lower() for w, _ in passage)


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="model folder to write (punct/)")
    ap.add_argument("--heldout", help="held-out passages to write (input<TAB>reference)")
    ap.add_argument("--heldout-count", type=int, default=1200)
    ap.add_argument("--dev", help="dev passages to write (input<TAB>reference), for tuning")
    ap.add_argument("--sources", default=",".join(FIXTURE_SOURCES),
                    help="comma-separated text sources to train on, of: " + ", ".join(SOURCES))
    ap.add_argument("--heldout-sources", default=",".join(FIXTURE_SOURCES),
                    help="the sources --heldout and --dev draw from (default: the committed "
                         "fixture's)")
    ap.add_argument("--bias", type=float, nargs=3, default=[0.3, 0.0, 0.0],
                    help="log10 bonus per placed , . ? (punct.json mark_bias)")
    ap.add_argument("--question-weight", type=float, default=1.0,
                    help="weight of the sentence-start evidence (punct.json question_weight)")
    ap.add_argument("--jasper-lm", default=os.path.join(HERE, "..", "build", "tools", "jasper-lm"))
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--prune", type=int, default=2,
                    help="drop n-grams of every order above 1 seen fewer times (unless a kept "
                         "longer one needs them as its context)")
    args = ap.parse_args()

    sources = [x for x in args.sources.split(",") if x]
    held_sources = [x for x in args.heldout_sources.split(",") if x]
    unknown = [x for x in sources + held_sources if x not in SOURCES]
    if unknown:
        sys.exit(f"unknown source(s) {unknown}; known: {', '.join(SOURCES)}")
    # Every source that is scored or trained is split, so the guard sees all held-out text.
    train, dev, held, per_source = load_splits(
        [x for x in SOURCES if x in sources or x in held_sources])
    train = [p for s, p in train if s in sources]
    dev = [p for s, p in dev if s in held_sources]
    held = [p for s, p in held if s in held_sources]
    if not train or not held:
        sys.exit("no text: apt-get install fortunes jargon-text dict-gcide")
    words = sum(len(p) for p in train)
    print(f"text: {len(train)} training passages ({words} words), {len(held)} held out; "
          f"words per source {dict(per_source)}", flush=True)
    table = case_table(train)
    starts = sentence_starts(train)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "case.tsv"), "w") as f:
        for key in sorted(table):
            f.write(key + "\t" + "\t".join(table[key]) + "\n")
    with open(os.path.join(args.out, "starts.tsv"), "w") as f:
        for key in sorted(starts):
            f.write(f"{key}\t{starts[key][0]}\t{starts[key][1]}\n")
    model = build_lm.estimate([lm_sentence(p, table) for p in train], args.order, args.prune,
                              prune_lower=True)
    arpa = os.path.join(args.out, "lm.arpa")
    build_lm.write_arpa(arpa, model)
    subprocess.run([args.jasper_lm, "convert", arpa, os.path.join(args.out, "lm.bin")],
                   check=True)
    os.remove(arpa)
    files = {}
    for name in ("lm.bin", "case.tsv", "starts.tsv"):
        path = os.path.join(args.out, name)
        files[name] = {"bytes": os.path.getsize(path), "sha256": sha256(path)}
    manifest = {
        "format_version": FORMAT_VERSION,
        "language": "en",
        "method": "hidden_event_lm",
        "marks": list(MARKS),
        "number_token": NUM,
        "language_model": "lm.bin",
        "case_table": "case.tsv",
        "sentence_starts": "starts.tsv",
        # Added to a hypothesis's log10 score per mark it places, and the weight of the
        # sentence-start evidence for . and ? (tuned on the dev part: --bias, --question-weight).
        "mark_bias": dict(zip(MARKS, args.bias)),
        "question_weight": args.question_weight,
        "files": files,
        "training_text": {"passages": len(train), "words": words,
                          "words_per_source": {k: per_source[k] for k in sources},
                          "sources": "Debian " + ", ".join(PACKAGES[x] for x in sources)},
        "lm": {"order": args.order, "prune": args.prune,
               "ngrams": {str(n): len(model[n]) for n in sorted(model)}},
    }
    with open(os.path.join(args.out, "punct.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(f"wrote {args.out}: " + ", ".join(f"{len(model[n])} {n}-grams" for n in sorted(model)) +
          f", {len(table)} case entries")
    if args.dev:
        with open(args.dev, "w") as f:
            for p in dev:
                f.write(recognizer_input(p) + "\t" + reference(p) + "\n")
    if args.heldout:
        os.makedirs(os.path.dirname(args.heldout), exist_ok=True)
        step = max(1, len(held) // args.heldout_count)
        with open(args.heldout, "w") as f:
            for p in held[::step][:args.heldout_count]:
                f.write(recognizer_input(p) + "\t" + reference(p) + "\n")


if __name__ == "__main__":
    main()
