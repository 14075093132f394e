#!/usr/bin/env python3
"""Generate NeMo reference fixtures for jasper-serve's parity tests.

Needs torch + nemo-toolkit[asr] (see tools/requirements-fixtures.txt), espeak-ng and sox.

Create mode (NeMo >= 2.5, e.g. 3.0.0): builds small, randomly initialised EncDecCTCModels with
NeMo's own classes from configs shaped like NeMo's quartznet_15x5.yaml / jasper_10x5dr.yaml,
randomises batch-norm statistics and affine parameters (so BN folding is exercised), scales the
decoder so greedy transcripts are non-trivial, saves each with NeMo's `model.save_to()`, runs
tools/nemo_to_model.py on it and records NeMo's outputs:

    python tools/gen_fixtures.py create --out tests/fixtures \
        [--models quartznet_small,jasper_dr_small]

Restore mode (any NeMo, e.g. 2.4.1 for the legacy featurizer): restores an existing fixture's
.nemo with `EncDecCTCModel.restore_from`, reuses that fixture's audio and records what *this*
NeMo computes (its own featurizer), converting with the matching --stft-mode:

    python tools/gen_fixtures.py restore --out tests/fixtures --source quartznet_small \
        --name quartznet_small_legacy

Per fixture it writes tests/fixtures/<name>/:
    <name>.nemo                  (create mode; NeMo's own archive, re-converted by CI)
    model/model.json, model/model.safetensors   (tools/nemo_to_model.py output)
    expected.safetensors         (NeMo's outputs, see write_expected)
    expected.json                (transcripts, lengths, versions, provenance, tolerances seen)
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
import wave

import numpy as np

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import nemo_to_model  # noqa: E402  (safetensors writer/reader, shared with the converter)

LABELS = [" ", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p",
          "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "'"]

# Three utterances of different lengths (seconds at 16 kHz): 1.13 s, 0.71 s, 1.6 s.
UTTERANCES = [
    ("the quick brown fox jumps over the lazy dog", 18080),
    ("open the window please", 11360),
    ("she sells sea shells by the sea shore every morning", 25600),
]
SAMPLE_RATE = 16000


def block(filters, kernel, repeat, residual, separable, stride=1, dilation=1, dropout=0.0,
          residual_dense=None):
    b = collections.OrderedDict([
        ("dilation", [dilation]), ("dropout", dropout), ("filters", filters),
        ("kernel", [kernel]), ("repeat", repeat), ("residual", residual),
        ("separable", separable), ("stride", [stride]),
    ])
    if residual_dense is not None:
        b["residual_dense"] = residual_dense
    return b


def model_config(kind):
    """A NeMo EncDecCTCModel config shaped like NeMo's example yamls, made small."""
    if kind == "quartznet_small":  # QuartzNet: C1, B1-B3 (R=3), C2 dilated, C3 1x1
        sep = True
        jasper = [
            block(64, 11, 1, False, sep, stride=2),
            block(64, 13, 3, True, sep),
            block(96, 15, 3, True, sep),
            block(96, 17, 3, True, sep),
            block(96, 15, 1, False, sep, dilation=2),
            block(128, 1, 1, False, False),
        ]
    elif kind == "jasper_dr_small":  # Jasper DR: dense convs, 4 dense-residual blocks
        jasper = [
            block(32, 11, 1, False, False, stride=2, dropout=0.2),
            block(32, 11, 2, True, False, dropout=0.2, residual_dense=True),
            block(32, 11, 2, True, False, dropout=0.2, residual_dense=True),
            block(48, 13, 3, True, False, dropout=0.2, residual_dense=True),
            block(48, 13, 2, True, False, dropout=0.3, residual_dense=True),
            block(64, 15, 1, False, False, dilation=2, dropout=0.4),
            block(128, 1, 1, False, False, dropout=0.4),
        ]
    else:
        raise ValueError(kind)
    return {
        "sample_rate": SAMPLE_RATE,
        "labels": LABELS,
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "normalize": "per_feature", "window_size": 0.02, "sample_rate": SAMPLE_RATE,
            "window_stride": 0.01, "window": "hann", "features": 64, "n_fft": 512,
            "frame_splicing": 1, "dither": 0.00001,
        },
        "spec_augment": {
            "_target_": "nemo.collections.asr.modules.SpectrogramAugmentation",
            "rect_freq": 50, "rect_masks": 5, "rect_time": 120,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConvASREncoder",
            "feat_in": 64, "activation": "relu", "conv_mask": True,
            "jasper": [dict(b) for b in jasper],
        },
        "decoder": {
            "_target_": "nemo.collections.asr.modules.ConvASRDecoder",
            "feat_in": jasper[-1]["filters"], "num_classes": len(LABELS), "vocabulary": LABELS,
        },
    }


# ------------------------------------------------------------------------------------------
# audio
# ------------------------------------------------------------------------------------------

def synth(text, num_samples, workdir):
    """espeak-ng speech, resampled to 16 kHz by sox (-D: no dither, so it is repeatable), cut
    to num_samples from the speech onset."""
    raw = os.path.join(workdir, "raw.wav")
    res = os.path.join(workdir, "res.wav")
    subprocess.run(["espeak-ng", "-s", "190", "-w", raw, text], check=True)
    subprocess.run(["sox", raw, "-D", "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", res],
                   check=True)
    with wave.open(res, "rb") as w:
        assert w.getframerate() == SAMPLE_RATE and w.getnchannels() == 1
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    audio = pcm.astype(np.float32) / 32768.0
    onset = int(np.argmax(np.abs(audio) > 0.01))
    start = max(0, onset - 800)  # keep 50 ms before the speech starts
    audio = audio[start:start + num_samples]
    if len(audio) < num_samples:
        raise RuntimeError(f"'{text}' synthesised too short ({len(audio)} < {num_samples})")
    return np.ascontiguousarray(audio, dtype=np.float32)


# ------------------------------------------------------------------------------------------
# NeMo runs
# ------------------------------------------------------------------------------------------

def nemo_stft_mode(nemo_version):
    major, minor = nemo_to_model.parse_version(nemo_version)
    return "nemo25" if (major, minor) >= (2, 5) else "legacy"


def run_single(model, audio, torch):
    """One utterance alone: features, every block's output, logprobs (valid frames only)."""
    outs = {}
    hooks = []

    def pre_hook(_m, _inp, out):
        outs["features"] = out[0].detach().clone()
        outs["feature_len"] = int(out[1][0])

    hooks.append(model.preprocessor.register_forward_hook(pre_hook))
    for b, blk in enumerate(model.encoder.encoder):
        def h(_m, _inp, out, b=b):
            outs[f"block_{b}"] = (out[0][-1].detach().clone(), int(out[1][0]))
        hooks.append(blk.register_forward_hook(h))
    try:
        with torch.no_grad():
            x = torch.from_numpy(audio)[None, :]
            n = torch.tensor([audio.shape[0]], dtype=torch.long)
            log_probs, enc_len, _ = model.forward(input_signal=x, input_signal_length=n)
    finally:
        for hk in hooks:
            hk.remove()
    t = outs["feature_len"]
    res = {
        "features": outs["features"][0, :, :t].T.contiguous().numpy(),  # [T, F]
        "feature_len": t,
        "features_padded_frames": int(outs["features"].shape[2]),
        "enc_len": int(enc_len[0]),
        "logprobs": log_probs[0, :int(enc_len[0])].contiguous().numpy(),  # [T', V+1]
        "log_probs_tensor": log_probs,
        "enc_len_tensor": enc_len,
        "blocks": [],
    }
    for b in range(len(model.encoder.encoder)):
        y, blen = outs[f"block_{b}"]
        res["blocks"].append(y[0, :, :blen].T.contiguous().numpy())  # [T'_b, C_b]
    return res


def run_batch(model, audios, torch):
    n_max = max(a.shape[0] for a in audios)
    x = torch.zeros(len(audios), n_max)
    for i, a in enumerate(audios):
        x[i, :a.shape[0]] = torch.from_numpy(a)
    n = torch.tensor([a.shape[0] for a in audios], dtype=torch.long)
    with torch.no_grad():
        log_probs, enc_len, _ = model.forward(input_signal=x, input_signal_length=n)
    return log_probs, enc_len


def greedy_merge(ids, blank):
    """NeMo's CTC merge rule (ctc_decoding.py): emit p if (p != prev or prev == blank) and
    p != blank; prev = p."""
    out, prev = [], blank
    for p in ids:
        if (p != prev or prev == blank) and p != blank:
            out.append(p)
        prev = p
    return "".join(LABELS[p] for p in out)


def strip_space_before_punct(text):
    punct = sorted({c for tok in LABELS for c in tok if unicodedata.category(c).startswith("P")
                    and tok.strip()})
    if not punct:
        return text
    return re.sub(r"(\s)(" + "|".join(re.escape(p) for p in punct) + ")", r"\2", text)


def nemo_transcripts(model, log_probs, enc_len):
    hyps = model.decoding.ctc_decoder_predictions_tensor(log_probs, decoder_lengths=enc_len)
    if isinstance(hyps, tuple):  # older NeMo returned (hypotheses, all_hypotheses)
        hyps = hyps[0]
    return [h.text if hasattr(h, "text") else str(h) for h in hyps]


def argmax_margin(logprobs):
    s = np.sort(logprobs, axis=-1)
    return float(np.min(s[:, -1] - s[:, -2]))


# ------------------------------------------------------------------------------------------
# randomisation (create mode)
# ------------------------------------------------------------------------------------------

def randomise(model, audios, torch, seed):
    """Sets every BatchNorm's running stats/affine to random values around the statistics the
    layer actually sees on the fixture audio (so activations stay O(1) at any depth while the
    folded scale/shift are far from identity), then scales the decoder for varied argmax."""
    rng = np.random.default_rng(seed)
    bns = [m for m in model.encoder.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    saved_pad_to = model.preprocessor.featurizer.pad_to
    model.preprocessor.featurizer.pad_to = 0  # calibrate on valid frames only
    try:
        for bn in bns:  # module order == forward order (mconv before res, block by block)
            seen = []
            hk = bn.register_forward_hook(lambda m, inp, out: seen.append(inp[0].detach()))
            with torch.no_grad():
                for a in audios:
                    model.forward(input_signal=torch.from_numpy(a)[None, :],
                                  input_signal_length=torch.tensor([a.shape[0]]))
            hk.remove()
            x = torch.cat([s[0] for s in seen], dim=1).double().numpy()  # [C, sum T]
            mean, var = x.mean(axis=1), x.var(axis=1) + 1e-6
            c = mean.shape[0]
            sign = np.where(rng.random(c) < 0.1, -1.0, 1.0)
            with torch.no_grad():
                bn.running_mean.copy_(torch.from_numpy(mean + 0.3 * np.sqrt(var) *
                                                       rng.standard_normal(c)))
                bn.running_var.copy_(torch.from_numpy(var * np.exp(rng.uniform(-0.5, 0.5, c))))
                bn.weight.copy_(torch.from_numpy(sign * rng.uniform(0.6, 1.4, c)))
                bn.bias.copy_(torch.from_numpy(rng.normal(0.1, 0.3, c)))
                bn.num_batches_tracked.fill_(int(rng.integers(100, 10000)))
    finally:
        model.preprocessor.featurizer.pad_to = saved_pad_to

    # Decoder: random logits with a spread of ~3 nats and the blank bias set so ~40% of the
    # frames are blank; then the argmax of every frame is made decisive (top-1 minus top-2 of
    # at least ~1 nat) by a short hinge-loss fit that keeps each frame's class, so FP32/BF16
    # engines reproduce the greedy transcripts. Calibrated on valid frames only.
    conv = model.decoder.decoder_layers[0]
    encs = []
    hk = model.encoder.register_forward_hook(
        lambda m, inp, out: encs.append(out[0][0, :, :int(out[1][0])].detach()))
    feat = model.preprocessor.featurizer
    feat.pad_to = 0
    try:
        # Both featurizer behaviours, so that the legacy fixture (same weights, NeMo 2.4's
        # features) keeps decisive argmaxes too: NeMo <= 2.4 differs from 3.0 only in the STFT
        # pad mode (reflect), get_seq_len (+1) and preemph masking (moot for one utterance).
        for legacy in (False, True):
            if legacy:
                feat.stft = lambda x: torch.stft(
                    x, n_fft=feat.n_fft, hop_length=feat.hop_length, win_length=feat.win_length,
                    center=not feat.exact_pad, window=feat.window.to(dtype=torch.float),
                    return_complex=True)  # torch's default pad_mode="reflect"
                feat.get_seq_len = lambda n: (torch.floor_divide(
                    n + feat.n_fft // 2 * 2 - feat.n_fft, feat.hop_length) + 1).to(torch.long)
            with torch.no_grad():
                for a in audios:
                    model.forward(input_signal=torch.from_numpy(a)[None, :],
                                  input_signal_length=torch.tensor([a.shape[0]]))
    finally:
        hk.remove()
        feat.pad_to = saved_pad_to
        feat.__dict__.pop("stft", None)
        feat.__dict__.pop("get_seq_len", None)
    h = torch.cat(encs, dim=1).double()  # [C, N valid frames]
    blank = len(LABELS)
    w = rng.standard_normal((blank + 1, h.shape[0])) / np.sqrt(h.shape[0])
    z = w @ h.numpy()
    w *= 3.0 / max(z.std(), 1e-6)
    bias = rng.normal(0.0, 0.5, blank + 1)
    z = w @ h.numpy() + bias[:, None]
    lo, hi = -20.0, 20.0
    for _ in range(50):  # bisection on the blank offset for a ~40% blank rate
        mid = 0.5 * (lo + hi)
        zz = z.copy()
        zz[blank] += mid
        frac = np.mean(np.argmax(zz, axis=0) == blank)
        lo, hi = (mid, hi) if frac < 0.4 else (lo, mid)
    bias[blank] += 0.5 * (lo + hi)

    w0 = torch.from_numpy(w)
    wt = w0.clone().requires_grad_(True)
    bt = torch.from_numpy(bias).requires_grad_(True)
    with torch.no_grad():
        target = torch.argmax(wt @ h + bt[:, None], dim=0)
    onehot = torch.nn.functional.one_hot(target, blank + 1).T.bool()  # [V+1, N]
    opt = torch.optim.Adam([wt, bt], lr=0.01)
    for _ in range(2000):
        zt = wt @ h + bt[:, None]
        gap = zt[target, torch.arange(zt.shape[1])][None, :] - zt  # [V+1, N]
        hinge = torch.relu(1.2 - gap).masked_fill(onehot, 0.0)
        loss = (hinge ** 2).sum() / zt.shape[1] + 1e-3 * ((wt - w0) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        zt = wt @ h + bt[:, None]
        s = torch.sort(zt, dim=0).values
        margin = float(torch.min(s[-1] - s[-2]))  # over both featurizer modes' frames
        conv.weight.copy_(wt[:, :, None].float())
        conv.bias.copy_(bt.float())
    return margin


# ------------------------------------------------------------------------------------------
# fixture writing
# ------------------------------------------------------------------------------------------

def convert(nemo_path, model_dir, name, stft_mode):
    cmd = [sys.executable, os.path.join(TOOLS, "nemo_to_model.py"), nemo_path, model_dir,
           "--name", name, "--stft-mode", stft_mode, "--force"]
    subprocess.run(cmd, check=True)
    return ["--name", name, "--stft-mode", stft_mode]


def check_converted(model, model_dir):
    tensors, _ = nemo_to_model.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    sd = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert set(sd) == set(tensors), sorted(set(sd) ^ set(tensors))
    for k, v in sd.items():
        assert np.array_equal(v.detach().float().numpy(), tensors[k]), k
    return len(tensors)


def build_fixture(model, audios, texts, fixture_dir, name, nemo_rel, converter_args, stft_mode,
                  torch, nemo_version, extra):
    model.eval()
    model.preprocessor.featurizer.dither = 0.0
    blank = len(LABELS)

    singles = [run_single(model, a, torch) for a in audios]

    # pad_to only appends frames past the valid length; the masked convs must make it inert.
    saved = model.preprocessor.featurizer.pad_to
    model.preprocessor.featurizer.pad_to = 0
    pad_diff = 0.0
    for a, s in zip(audios, singles):
        s0 = run_single(model, a, torch)
        assert s0["enc_len"] == s["enc_len"]
        pad_diff = max(pad_diff, float(np.max(np.abs(s0["logprobs"] - s["logprobs"]))))
    model.preprocessor.featurizer.pad_to = saved

    batch_lp, batch_len = run_batch(model, audios, torch)
    batch_lp_np = batch_lp.contiguous().numpy()
    batch_diff = 0.0
    for i, s in enumerate(singles):
        assert int(batch_len[i]) == s["enc_len"], (int(batch_len[i]), s["enc_len"])
        batch_diff = max(batch_diff, float(np.max(np.abs(
            batch_lp_np[i, :s["enc_len"]] - s["logprobs"]))))

    transcripts = [nemo_transcripts(model, s["log_probs_tensor"], s["enc_len_tensor"])[0]
                   for s in singles]
    batch_transcripts = nemo_transcripts(model, batch_lp, batch_len)
    raw = [greedy_merge(np.argmax(s["logprobs"], axis=-1).tolist(), blank) for s in singles]
    for r, t in zip(raw, transcripts):
        # NeMo >= 2.x CTCDecoding (char): after the merge, one whitespace before each
        # punctuation label (unicode category P, here "'") is removed.
        assert strip_space_before_punct(r) == t, (r, t)
    margins = [argmax_margin(s["logprobs"]) for s in singles]
    distinct = sorted({int(p) for s in singles for p in np.argmax(s["logprobs"], -1)})
    assert len(distinct) >= 6, f"argmax hardly varies: {distinct}"
    assert all(len(t) >= 3 for t in transcripts), transcripts

    tensors = collections.OrderedDict()
    for i, (a, s) in enumerate(zip(audios, singles)):
        tensors[f"audio_{i}"] = a.astype(np.float32)
        tensors[f"features_{i}"] = s["features"].astype(np.float32)
        tensors[f"logprobs_{i}"] = s["logprobs"].astype(np.float32)
        for b, y in enumerate(s["blocks"]):
            tensors[f"block_{b}_{i}"] = y.astype(np.float32)
    tensors["feature_lengths"] = np.array([s["feature_len"] for s in singles], dtype=np.int32)
    tensors["encoded_lengths"] = np.array([s["enc_len"] for s in singles], dtype=np.int32)
    tensors["batch_logprobs"] = batch_lp_np.astype(np.float32)
    tensors["batch_encoded_lengths"] = batch_len.numpy().astype(np.int32)

    meta = collections.OrderedDict([
        ("name", name),
        ("nemo_version", nemo_version),
        ("torch_version", torch.__version__),
        ("stft_mode", stft_mode),
        ("labels", LABELS),
        ("blank_id", blank),
        ("sample_rate", SAMPLE_RATE),
        ("nemo_file", nemo_rel),
        ("converter_args", converter_args),
        ("utterances", [{"spoken_text": t, "num_samples": int(a.shape[0]),
                         "duration_s": a.shape[0] / SAMPLE_RATE} for t, a in zip(texts, audios)]),
        ("feature_lengths", tensors["feature_lengths"].tolist()),
        ("features_padded_frames", [s["features_padded_frames"] for s in singles]),
        ("encoded_lengths", tensors["encoded_lengths"].tolist()),
        ("transcripts", transcripts),
        ("batch_transcripts", batch_transcripts),
        ("transcripts_raw_merge", raw),
        ("decoding", "NeMo model.decoding.ctc_decoder_predictions_tensor(log_probs, "
                     "decoder_lengths=encoded_len) (CTCDecoding, greedy_batch), cross-checked "
                     "against argmax + NeMo's merge rule. NeMo's text = the raw merge with one "
                     "whitespace removed before each punctuation label (CTCDecoding "
                     "supported_punctuation = vocabulary chars of unicode category P, here "
                     "\"'\"; regex (\\s)(') -> '); transcripts_raw_merge = merge only"),
        ("block_channels", [int(y.shape[1]) for y in singles[0]["blocks"]]),
        ("min_argmax_margin_per_utterance", margins),
        ("min_argmax_margin_batch", [argmax_margin(batch_lp_np[i, :s["enc_len"]])
                                     for i, s in enumerate(singles)]),
        ("batch_transcripts_equal_single", batch_transcripts == transcripts),
        ("max_abs_diff_pad_to_16_vs_0", pad_diff),
        ("max_abs_diff_batch_vs_single_valid_frames", batch_diff),
        ("how", "model.eval(), preprocessor.featurizer.dither = 0.0; features_i/block_b_i/"
                "logprobs_i: each utterance run alone through model.forward (NeMo's pad_to=16 "
                "frames removed: valid frames only, channels-last [T, C]); block_b_i = "
                "encoder.encoder[b] output [0][-1] via forward hooks; batch_logprobs: the "
                "zero-padded batch of all three through model.forward, all frames [3, T'max, "
                "V+1] (frames past batch_encoded_lengths are NeMo's padding garbage)"),
    ])
    meta.update(extra)
    meta["tensors"] = collections.OrderedDict(
        (k, {"dtype": "F32" if v.dtype == np.float32 else "I32", "shape": list(v.shape)})
        for k, v in sorted(tensors.items()))
    st_meta = {k: (v if isinstance(v, str) else json.dumps(v)) for k, v in meta.items()
               if k != "tensors"}
    nemo_to_model.write_safetensors(os.path.join(fixture_dir, "expected.safetensors"), tensors,
                                    st_meta)
    with open(os.path.join(fixture_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, ensure_ascii=False)
        f.write("\n")
    if min(margins) < 0.1 or batch_transcripts != transcripts:
        print(f"warning: [{name}] small argmax margins {margins} or batch transcripts differ "
              f"from single ones", file=sys.stderr)
    print(f"[{name}] NeMo {nemo_version} stft_mode={stft_mode} transcripts={transcripts} "
          f"batch={batch_transcripts} margins={['%.3f' % m for m in margins]} "
          f"pad_to_diff={pad_diff:.2e} batch_diff={batch_diff:.2e}")
    return meta


def cmd_create(args):
    import torch
    import nemo
    from omegaconf import OmegaConf
    from nemo.collections.asr.models import EncDecCTCModel

    stft_mode = nemo_stft_mode(nemo.__version__)
    workdir = tempfile.mkdtemp(prefix="fixtures-", dir=args.workdir)
    audios = [synth(t, n, workdir) for t, n in UTTERANCES]
    texts = [t for t, _ in UTTERANCES]
    for k, name in enumerate(args.models.split(",")):
        torch.manual_seed(1000 + k)
        model = EncDecCTCModel(cfg=OmegaConf.create(model_config(name)))
        model.eval()
        model.preprocessor.featurizer.dither = 0.0
        margin = randomise(model, audios, torch, seed=2000 + k)
        fixture_dir = os.path.join(args.out, name)
        model_dir = os.path.join(fixture_dir, "model")
        if os.path.isdir(fixture_dir):
            shutil.rmtree(fixture_dir)
        os.makedirs(model_dir)
        nemo_path = os.path.join(fixture_dir, f"{name}.nemo")
        model.save_to(nemo_path)
        size = os.path.getsize(nemo_path)
        conv_args = convert(nemo_path, model_dir, name, stft_mode)
        n = check_converted(model, model_dir)
        extra = {"nemo_file_bytes": size, "num_model_tensors": n,
                 "decoder_calibration_min_margin_both_stft_modes": margin,
                 "weights": "random: NeMo xavier init (torch.manual_seed), BN stats/affine and "
                            "decoder re-drawn by tools/gen_fixtures.py randomise()"}
        nemo_rel = f"{name}.nemo"
        if size >= 2 * 1024 * 1024:
            print(f"warning: {nemo_path} is {size} bytes (>= 2 MB); not keeping it",
                  file=sys.stderr)
            os.unlink(nemo_path)
            nemo_rel = None
        build_fixture(model, audios, texts, fixture_dir, name, nemo_rel, conv_args, stft_mode,
                      torch, nemo.__version__, extra)
    shutil.rmtree(workdir)


def cmd_restore(args):
    import torch
    import nemo
    from nemo.collections.asr.models import EncDecCTCModel

    stft_mode = nemo_stft_mode(nemo.__version__)
    src_dir = os.path.join(args.out, args.source)
    src_meta = json.load(open(os.path.join(src_dir, "expected.json"), encoding="utf-8"))
    src_nemo = os.path.join(src_dir, src_meta["nemo_file"])
    src_tensors, _ = nemo_to_model.read_safetensors(os.path.join(src_dir, "expected.safetensors"))
    audios = [np.array(src_tensors[f"audio_{i}"], dtype=np.float32) for i in range(3)]
    texts = [u["spoken_text"] for u in src_meta["utterances"]]

    model = EncDecCTCModel.restore_from(src_nemo, map_location="cpu")
    model.eval()
    model.preprocessor.featurizer.dither = 0.0
    fixture_dir = os.path.join(args.out, args.name)
    model_dir = os.path.join(fixture_dir, "model")
    if os.path.isdir(fixture_dir):
        shutil.rmtree(fixture_dir)
    os.makedirs(model_dir)
    conv_args = convert(src_nemo, model_dir, args.name, stft_mode)
    n = check_converted(model, model_dir)
    nemo_rel = os.path.relpath(src_nemo, fixture_dir)
    extra = {"num_model_tensors": n,
             "weights": f"the {args.source} fixture's .nemo (created with NeMo "
                        f"{src_meta['nemo_version']}), restored with this NeMo's restore_from; "
                        f"audio reused from {args.source}/expected.safetensors",
             "featurizer_source": f"NeMo {nemo.__version__}'s own FilterbankFeatures"}
    build_fixture(model, audios, texts, fixture_dir, args.name, nemo_rel, conv_args, stft_mode,
                  torch, nemo.__version__, extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create", help="build + randomise + save models, write fixtures")
    c.add_argument("--out", default="tests/fixtures")
    c.add_argument("--models", default="quartznet_small,jasper_dr_small")
    c.add_argument("--workdir", default=None, help="scratch folder (default: system temp)")
    r = sub.add_parser("restore", help="re-run an existing fixture's .nemo under this NeMo")
    r.add_argument("--out", default="tests/fixtures")
    r.add_argument("--source", default="quartznet_small")
    r.add_argument("--name", default="quartznet_small_legacy")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    if args.cmd == "create":
        cmd_create(args)
    else:
        cmd_restore(args)


if __name__ == "__main__":
    main()
