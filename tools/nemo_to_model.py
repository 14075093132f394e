#!/usr/bin/env python3
"""Convert a NeMo CTC char model checkpoint (.nemo) into a jasper-serve model folder.

    nemo_to_model.py MODEL.nemo OUT_DIR [--name NAME] [--stft-mode {auto,legacy,nemo25}] [--force]

Writes OUT_DIR/model.json (architecture, featurizer, vocabulary) and OUT_DIR/model.safetensors
(the checkpoint's tensors under NeMo's own names, F32, `*.num_batches_tracked` dropped).

Needs only python3, numpy and pyyaml: torch and NeMo are NOT imported. The checkpoint
(model_weights.ckpt, PyTorch's zip format) is read with zipfile and a restricted unpickler that
builds numpy arrays and refuses every global other than the few PyTorch uses for plain tensors,
so a hostile .nemo cannot run code (tools/nemo_checkpoint.py).

Supported: nemo.collections.asr EncDecCTCModel with AudioToMelSpectrogramPreprocessor,
ConvASREncoder made of JasperBlocks (Jasper, Jasper DR, QuartzNet) and ConvASRDecoder over a
character vocabulary. Rejected with a message: BPE/subword tokenizers, squeeze-excite (Citrinet),
grouped convolutions, heads, stride_last, future_context, kernel_size_factor != 1, non-batch
normalization, frame_splicing != 1, conv_mask false, activations other than relu.

--stft-mode: NeMo 2.5 changed FilterbankFeatures (zero instead of reflect STFT padding and
L//hop instead of L//hop+1 valid frames). The only version record inside a .nemo is the
`nemo_version` key that NeMo's ModelPT writes into the model config when the model is first
constructed (it is kept through save/restore and fine-tuning, so it tells which NeMo *created*
the model, not which one trained it last). `auto` (the default) picks `nemo25` when that key
says >= 2.5 and `legacy` otherwise (including when the key is missing, as in checkpoints made
before it existed).

Exit status: 0 on success, 2 on bad input (message on stderr prefixed with "error:").
"""

import argparse
import collections
import json
import math
import os
import re
import struct
import sys
import tempfile

import numpy as np
import yaml

from nemo_checkpoint import ConversionError, fail, load_torch_state_dict, read_nemo_archive

FORMAT_VERSION = 1
LOG_ZERO_GUARD_DEFAULT = 2.0 ** -24
FLOAT32_TINY = float(np.finfo(np.float32).tiny)
FLOAT32_EPS = float(np.finfo(np.float32).eps)


# --------------------------------------------------------------------------------------------
# Config validation and model.json
# --------------------------------------------------------------------------------------------

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_no_interpolation(obj, where):
    if isinstance(obj, str) and "${" in obj:
        fail(f"model_config.yaml: {where} holds an unresolved interpolation '{obj}'")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_no_interpolation(v, f"{where}.{k}")
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_no_interpolation(v, f"{where}[{i}]")


def _target_name(section):
    t = section.get("_target_") or section.get("cls") or ""
    return str(t).rsplit(".", 1)[-1]


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats such as 1e-5 (PyYAML's YAML 1.1 resolver
    returns them as strings; OmegaConf, which wrote the file, reads them as floats)."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def parse_version(text):
    m = re.match(r"\s*v?(\d+)\.(\d+)", str(text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def build_preprocessor(pcfg, sample_rate, stft_mode):
    if not isinstance(pcfg, dict):
        fail("model_config.yaml: 'preprocessor' section missing")
    target = _target_name(pcfg)
    if target != "AudioToMelSpectrogramPreprocessor":
        fail(f"preprocessor '{pcfg.get('_target_')}' is not supported "
             f"(only AudioToMelSpectrogramPreprocessor)")
    sr = pcfg.get("sample_rate", 16000)
    if not _is_int(sr) or sr != sample_rate:
        fail(f"preprocessor.sample_rate {sr!r} disagrees with the model sample_rate {sample_rate}")

    def win(seconds_key, samples_key, default):
        secs, samples = pcfg.get(seconds_key), pcfg.get(samples_key)
        if secs and samples:
            fail(f"preprocessor sets both {seconds_key} and {samples_key}")
        if samples:
            if not _is_int(samples) or samples <= 0:
                fail(f"preprocessor.{samples_key} must be a positive int, got {samples!r}")
            secs = samples / sample_rate
            if int(secs * sample_rate) != samples:
                fail(f"preprocessor.{samples_key}={samples} cannot be expressed in seconds exactly")
            return secs
        if secs is None:
            secs = default
        if not _is_num(secs) or secs <= 0 or int(secs * sample_rate) <= 0:
            fail(f"preprocessor.{seconds_key} must be a positive number of seconds, got {secs!r}")
        return secs

    window_size = win("window_size", "n_window_size", 0.02)
    window_stride = win("window_stride", "n_window_stride", 0.01)
    win_length = int(window_size * sample_rate)
    hop_length = int(window_stride * sample_rate)

    n_fft = pcfg.get("n_fft")
    if n_fft is None:
        n_fft = 2 ** math.ceil(math.log2(win_length))
    if not _is_int(n_fft) or n_fft < win_length:
        fail(f"preprocessor.n_fft {n_fft!r} must be an int >= the window length {win_length}")

    window = pcfg.get("window", "hann")
    if window not in ("hann", "hamming", "blackman", "bartlett"):
        fail(f"preprocessor.window {window!r} is not supported "
             f"(hann, hamming, blackman, bartlett)")

    features = pcfg.get("features", 64)
    if not _is_int(features) or features <= 0:
        fail(f"preprocessor.features must be a positive int, got {features!r}")

    preemph = pcfg.get("preemph", 0.97)
    if preemph is not None and not _is_num(preemph):
        fail(f"preprocessor.preemph must be a number or null, got {preemph!r}")

    lowfreq = pcfg.get("lowfreq", 0)
    highfreq = pcfg.get("highfreq", None)
    if not _is_num(lowfreq) or (highfreq is not None and not _is_num(highfreq)):
        fail("preprocessor.lowfreq/highfreq must be numbers")
    # FilterbankFeatures: `highfreq = highfreq or sample_rate / 2` (so 0 means Nyquist too).
    highfreq = highfreq or sample_rate / 2

    log = pcfg.get("log", True)
    guard_type = pcfg.get("log_zero_guard_type", "add")
    if guard_type not in ("add", "clamp"):
        fail(f"preprocessor.log_zero_guard_type {guard_type!r} must be 'add' or 'clamp'")
    guard = pcfg.get("log_zero_guard_value", LOG_ZERO_GUARD_DEFAULT)
    if guard == "tiny":  # resolved for float32, the dtype NeMo's featurizer runs in
        guard = FLOAT32_TINY
    elif guard == "eps":
        guard = FLOAT32_EPS
    if not _is_num(guard):
        fail(f"preprocessor.log_zero_guard_value {guard!r} must be a number, 'tiny' or 'eps'")

    normalize = pcfg.get("normalize", "per_feature")
    if isinstance(normalize, dict):
        fail("preprocessor.normalize with fixed_mean/fixed_std is not supported")
    if normalize in (None, "", "none", "None", "NA", "na", False):
        normalize = "none"  # NeMo: anything but per_feature/all_features means no normalization
    if normalize not in ("per_feature", "all_features", "none"):
        fail(f"preprocessor.normalize {normalize!r} is not supported")

    pad_to = pcfg.get("pad_to", 16)
    if not _is_int(pad_to) or pad_to < 0:
        fail(f"preprocessor.pad_to must be a non-negative int, got {pad_to!r}")
    pad_value = pcfg.get("pad_value", 0)
    mag_power = pcfg.get("mag_power", 2.0)
    dither = pcfg.get("dither", 1e-5)
    mel_norm = pcfg.get("mel_norm", "slaney")
    frame_splicing = pcfg.get("frame_splicing", 1)
    exact_pad = pcfg.get("exact_pad", False)
    for key, val in (("pad_value", pad_value), ("mag_power", mag_power), ("dither", dither)):
        if not _is_num(val):
            fail(f"preprocessor.{key} must be a number, got {val!r}")
    if mel_norm not in ("slaney", None):
        fail(f"preprocessor.mel_norm {mel_norm!r} must be 'slaney' or null")
    if frame_splicing != 1:
        fail(f"preprocessor.frame_splicing={frame_splicing!r} is not supported (only 1)")
    if not isinstance(exact_pad, bool) or not isinstance(log, bool):
        fail("preprocessor.exact_pad and preprocessor.log must be booleans")
    if exact_pad and hop_length % 2 == 1:
        fail("preprocessor.exact_pad needs an even hop length (NeMo refuses it too)")
    for dep in ("stft_conv", "stft_exact_pad", "use_torchaudio"):
        if pcfg.get(dep):
            print(f"warning: preprocessor.{dep} is set; NeMo >= 1.x ignores it and so do we",
                  file=sys.stderr)

    return collections.OrderedDict([
        ("window_size", window_size),
        ("window_stride", window_stride),
        ("n_fft", n_fft),
        ("features", features),
        ("window", window),
        ("preemph", preemph),
        ("lowfreq", lowfreq),
        ("highfreq", highfreq),
        ("log", log),
        ("log_zero_guard_type", guard_type),
        ("log_zero_guard_value", guard),
        ("mag_power", mag_power),
        ("normalize", normalize),
        ("pad_to", pad_to),
        ("pad_value", pad_value),
        ("mel_norm", mel_norm),
        ("dither", dither),
        ("frame_splicing", frame_splicing),
        ("exact_pad", exact_pad),
        ("stft_mode", stft_mode),
    ]), win_length


def _one(value, key, where):
    """NeMo block fields kernel/stride/dilation: a one-element list (a scalar is accepted)."""
    if _is_int(value):
        value = [value]
    if (not isinstance(value, list) or len(value) != 1 or not _is_int(value[0])
            or value[0] <= 0):
        fail(f"{where}.{key} must be a one-element list of positive ints, got {value!r}")
    return value


def build_encoder(ecfg):
    if not isinstance(ecfg, dict):
        fail("model_config.yaml: 'encoder' section missing")
    if _target_name(ecfg) != "ConvASREncoder":
        fail(f"encoder '{ecfg.get('_target_')}' is not supported (only ConvASREncoder)")
    feat_in = ecfg.get("feat_in")
    if not _is_int(feat_in) or feat_in <= 0:
        fail(f"encoder.feat_in must be a positive int, got {feat_in!r}")
    activation = ecfg.get("activation")
    if activation != "relu":
        fail(f"encoder.activation {activation!r} is not supported (only relu)")
    conv_mask = ecfg.get("conv_mask", True)
    if conv_mask is not True:
        fail("encoder.conv_mask false is not supported (NeMo CTC models use masked convs)")
    if ecfg.get("normalization_mode", "batch") != "batch":
        fail(f"encoder.normalization_mode {ecfg.get('normalization_mode')!r} is not supported "
             f"(only batch)")
    if ecfg.get("frame_splicing", 1) != 1:
        fail("encoder.frame_splicing != 1 is not supported")
    if ecfg.get("quantize", False):
        fail("encoder.quantize is not supported")
    enc_residual_mode = ecfg.get("residual_mode", "add")
    blocks = ecfg.get("jasper")
    if not isinstance(blocks, list) or not blocks:
        fail("encoder.jasper must be a non-empty list of blocks")

    out_blocks = []
    in_ch = feat_in
    dense_panes = []
    dense_run_ended = False
    prev_dense = False
    for b, blk in enumerate(blocks):
        where = f"encoder.jasper[{b}]"
        if not isinstance(blk, dict):
            fail(f"{where} is not a mapping")
        for key in ("filters", "repeat", "kernel", "stride", "dilation", "dropout", "residual"):
            if key not in blk:
                fail(f"{where} lacks '{key}'")
        filters, repeat = blk["filters"], blk["repeat"]
        if not _is_int(filters) or filters <= 0 or not _is_int(repeat) or repeat <= 0:
            fail(f"{where}: filters and repeat must be positive ints")
        kernel = _one(blk["kernel"], "kernel", where)
        stride = _one(blk["stride"], "stride", where)
        dilation = _one(blk["dilation"], "dilation", where)
        if kernel[0] % 2 == 0:
            fail(f"{where}: even kernel {kernel[0]} is not supported ('same' padding needs odd)")
        if stride[0] > 1 and dilation[0] > 1:
            fail(f"{where}: stride > 1 with dilation > 1 (NeMo refuses this too)")
        residual = blk["residual"]
        if not isinstance(residual, bool):
            fail(f"{where}.residual must be a boolean")
        separable = blk.get("separable", False)
        residual_dense = blk.get("residual_dense", False)
        residual_mode = blk.get("residual_mode", enc_residual_mode)
        se = blk.get("se", False)
        groups = blk.get("groups", 1)
        if se:
            fail(f"{where}: squeeze-excite (se: true, Citrinet) is not supported")
        if groups != 1:
            fail(f"{where}: grouped convolutions (groups={groups}) are not supported")
        if blk.get("heads", -1) != -1:
            fail(f"{where}: heads are not supported")
        if blk.get("stride_last", False):
            fail(f"{where}: stride_last is not supported")
        if blk.get("future_context", -1) >= 0:
            fail(f"{where}: future_context (asymmetric padding) is not supported")
        if float(blk.get("kernel_size_factor", 1.0)) != 1.0:
            fail(f"{where}: kernel_size_factor != 1 is not supported")
        if residual and residual_mode not in ("add", "stride_add"):
            fail(f"{where}: residual_mode {residual_mode!r} is not supported (only add)")
        if residual and stride[0] != 1:
            fail(f"{where}: a residual block with stride {stride[0]} is not supported")
        if not isinstance(separable, bool) or not isinstance(residual_dense, bool):
            fail(f"{where}: separable and residual_dense must be booleans")

        panes = []
        if residual_dense:
            if not residual:
                fail(f"{where}: residual_dense without residual is not supported")
            if dense_run_ended:
                fail(f"{where}: residual_dense blocks must be consecutive")
            dense_panes.append(in_ch)
            panes = list(dense_panes)
        elif prev_dense:
            dense_run_ended = True
        prev_dense = residual_dense
        if residual and not panes:
            panes = [in_ch]

        out = collections.OrderedDict()
        for key, val in blk.items():  # NeMo's keys, copied in NeMo's order
            out[key] = val
        out["kernel"], out["stride"], out["dilation"] = kernel, stride, dilation
        out["separable"] = separable
        out["residual_dense"] = residual_dense
        out["residual_mode"] = residual_mode
        out["se"] = se
        out["groups"] = groups
        out_blocks.append((out, in_ch, panes))
        in_ch = filters

    enc = collections.OrderedDict([
        ("feat_in", feat_in),
        ("activation", activation),
        ("conv_mask", conv_mask),
        ("jasper", [b[0] for b in out_blocks]),
    ])
    return enc, out_blocks, in_ch


def expected_tensor_shapes(out_blocks, win_length, features, n_fft, enc_out, num_outputs):
    shapes = collections.OrderedDict()
    shapes["preprocessor.featurizer.window"] = [win_length]
    shapes["preprocessor.featurizer.fb"] = [1, features, n_fft // 2 + 1]

    def bn(prefix, ch):
        for p in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{prefix}.{p}"] = [ch]

    for b, (blk, in_ch, panes) in enumerate(out_blocks):
        pre = f"encoder.encoder.{b}"
        planes, k, idx = blk["filters"], blk["kernel"][0], 0
        for r in range(blk["repeat"]):
            c = in_ch if r == 0 else planes
            if blk["separable"]:
                shapes[f"{pre}.mconv.{idx}.conv.weight"] = [c, 1, k]
                shapes[f"{pre}.mconv.{idx + 1}.conv.weight"] = [planes, c, 1]
                bn(f"{pre}.mconv.{idx + 2}", planes)
                idx += 3
            else:
                shapes[f"{pre}.mconv.{idx}.conv.weight"] = [planes, c, k]
                bn(f"{pre}.mconv.{idx + 1}", planes)
                idx += 2
            if r < blk["repeat"] - 1:
                idx += 2  # activation, dropout
        for p, pane in enumerate(panes):
            shapes[f"{pre}.res.{p}.0.conv.weight"] = [planes, pane, 1]
            bn(f"{pre}.res.{p}.1", planes)
    shapes["decoder.decoder_layers.0.weight"] = [num_outputs, enc_out, 1]
    shapes["decoder.decoder_layers.0.bias"] = [num_outputs]
    return shapes


def decide_stft_mode(requested, cfg):
    version = cfg.get("nemo_version")
    parsed = parse_version(version) if version is not None else None
    if requested != "auto":
        note = f"--stft-mode {requested}"
        if parsed is not None and (parsed >= (2, 5)) != (requested == "nemo25"):
            note += f" (overrides the config's nemo_version {version})"
        return requested, note
    if parsed is not None and parsed >= (2, 5):
        return "nemo25", f"auto: config nemo_version {version} >= 2.5"
    if parsed is not None:
        return "legacy", f"auto: config nemo_version {version} < 2.5"
    return "legacy", "auto: config has no nemo_version (model predates NeMo 1.x's version key)"


def convert(nemo_path, out_dir, name=None, stft_mode="auto", force=False, log=print):
    cfg_bytes, ckpt_bytes, _ = read_nemo_archive(nemo_path)
    try:
        cfg = yaml.load(cfg_bytes.decode("utf-8"), Loader=_YamlLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        fail(f"model_config.yaml is not valid YAML: {e}")
    if not isinstance(cfg, dict):
        fail("model_config.yaml does not hold a mapping")
    if "encoder" not in cfg and isinstance(cfg.get("model"), dict):
        cfg = cfg["model"]

    target = str(cfg.get("target", ""))
    if "tokenizer" in cfg or "BPE" in target:
        fail("subword (BPE/WPE) tokenizer models are not supported; only character vocabularies")
    if target and target.rsplit(".", 1)[-1] not in ("EncDecCTCModel",):
        fail(f"model class '{target}' is not supported (only EncDecCTCModel)")
    for section in ("preprocessor", "encoder", "decoder", "labels", "sample_rate"):
        if section in cfg:
            _check_no_interpolation(cfg[section], section)

    sample_rate = cfg.get("sample_rate", cfg.get("preprocessor", {}).get("sample_rate", 16000)
                          if isinstance(cfg.get("preprocessor"), dict) else 16000)
    if not _is_int(sample_rate) or sample_rate <= 0:
        fail(f"sample_rate must be a positive int, got {sample_rate!r}")

    dcfg = cfg.get("decoder")
    if not isinstance(dcfg, dict):
        fail("model_config.yaml: 'decoder' section missing")
    if _target_name(dcfg) != "ConvASRDecoder":
        fail(f"decoder '{dcfg.get('_target_')}' is not supported (only ConvASRDecoder)")
    if dcfg.get("add_blank", True) is not True:
        fail("decoder.add_blank false is not supported")
    labels = cfg.get("labels")
    vocab = dcfg.get("vocabulary")
    if labels is None:
        labels = vocab
    if not isinstance(labels, list) or not labels or not all(
            isinstance(s, str) and s for s in labels):
        fail("model_config.yaml: 'labels' (or decoder.vocabulary) must be a non-empty list of "
             "non-empty strings")
    if vocab is not None and list(vocab) != labels:
        fail("decoder.vocabulary differs from labels")
    if len(set(labels)) != len(labels):
        fail("labels contain duplicates")
    num_classes = dcfg.get("num_classes", -1)
    if num_classes is None or (_is_int(num_classes) and num_classes <= 0):
        num_classes = len(labels)
    if not _is_int(num_classes) or num_classes != len(labels):
        fail(f"decoder.num_classes {num_classes!r} != number of labels {len(labels)}")

    decoding = cfg.get("decoding")
    if isinstance(decoding, dict) and decoding.get("temperature", 1.0) not in (1, 1.0, None):
        print(f"warning: decoding.temperature={decoding['temperature']} is not recorded in "
              f"model.json (it scales NeMo's log-probs; greedy argmax is unaffected)",
              file=sys.stderr)
    mode, mode_note = decide_stft_mode(stft_mode, cfg)
    pre, win_length = build_preprocessor(cfg.get("preprocessor"), sample_rate, mode)
    enc, out_blocks, enc_out = build_encoder(cfg.get("encoder"))
    if enc["feat_in"] != pre["features"]:
        fail(f"encoder.feat_in {enc['feat_in']} != preprocessor.features {pre['features']}")
    dec_feat_in = dcfg.get("feat_in")
    if dec_feat_in != enc_out:
        fail(f"decoder.feat_in {dec_feat_in!r} != last encoder block's filters {enc_out}")

    state = load_torch_state_dict(ckpt_bytes)
    expected = expected_tensor_shapes(out_blocks, win_length, pre["features"], pre["n_fft"],
                                      enc_out, len(labels) + 1)
    tensors = {}
    unexpected = []
    for key, t in state.items():
        if key.endswith(".num_batches_tracked"):
            continue
        if key not in expected:
            unexpected.append(key)
            continue
        arr = t.array
        if arr.dtype.kind != "f" and t.storage_name != "BFloat16Storage":
            fail(f"tensor {key} has non-float storage {t.storage_name}")
        if t.storage_name == "BFloat16Storage":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if list(arr.shape) != expected[key]:
            fail(f"tensor {key} has shape {list(arr.shape)}, the config implies {expected[key]}")
        if not np.all(np.isfinite(arr)):
            fail(f"tensor {key} holds NaN or Inf")
        tensors[key] = arr
    if unexpected:
        fail(f"checkpoint has {len(unexpected)} tensor(s) the config does not explain "
             f"(adapters? a different architecture?): {', '.join(sorted(unexpected)[:10])}")
    missing = [k for k in expected if k not in tensors]
    if missing:
        fail(f"checkpoint lacks {len(missing)} tensor(s) the config needs: "
             f"{', '.join(missing[:10])}")

    if name is None:
        name = os.path.splitext(os.path.basename(nemo_path))[0]
    model_json = collections.OrderedDict([
        ("format_version", FORMAT_VERSION),
        ("name", name),
        ("sample_rate", sample_rate),
        ("labels", labels),
        ("preprocessor", pre),
        ("encoder", enc),
        ("decoder", collections.OrderedDict([("feat_in", enc_out),
                                             ("num_classes", len(labels))])),
    ])

    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        fail(f"{out_dir} exists and is not a directory")
    os.makedirs(out_dir, exist_ok=True)
    for f in ("model.json", "model.safetensors"):
        if os.path.exists(os.path.join(out_dir, f)) and not force:
            fail(f"{os.path.join(out_dir, f)} exists (use --force to overwrite)")
    metadata = {"format": "pt", "producer": "jasper-serve tools/nemo_to_model.py",
                "source": os.path.basename(nemo_path), "stft_mode": mode}
    if cfg.get("nemo_version") is not None:
        metadata["nemo_version"] = str(cfg["nemo_version"])
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, metadata)
    _atomic_write(os.path.join(out_dir, "model.json"),
                  (json.dumps(model_json, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    log(f"{nemo_path} -> {out_dir}: {len(tensors)} tensors, {len(labels)} labels, "
        f"{len(out_blocks)} blocks, stft_mode={mode} ({mode_note})")
    return model_json, tensors


# --------------------------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------------------------

_ST_DTYPES = {np.dtype("<f4"): "F32", np.dtype("<i4"): "I32", np.dtype("<i8"): "I64",
              np.dtype("<f2"): "F16"}


def safetensors_bytes(tensors, metadata=None):
    """Serializes {name: np.ndarray} (F32/I32/I64/F16) into safetensors bytes, names sorted."""
    header = collections.OrderedDict()
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    blobs, offset = [], 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        dt = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
        if dt not in _ST_DTYPES:
            raise ValueError(f"{name}: dtype {arr.dtype} not supported for safetensors")
        data = np.ascontiguousarray(arr, dtype=dt).tobytes()
        header[name] = {"dtype": _ST_DTYPES[dt], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-(8 + len(hjson))) % 8)  # pad so the data section is 8-byte aligned
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs)


def write_safetensors(path, tensors, metadata=None):
    _atomic_write(path, safetensors_bytes(tensors, metadata))


def read_safetensors(path):
    """Returns ({name: np.ndarray}, metadata) from a safetensors file (used by the tests)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} past end of file")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    names = {"F32": "<f4", "I32": "<i4", "I64": "<i8", "F16": "<f2"}
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        arr = np.frombuffer(data[b:end], dtype=np.dtype(names[e["dtype"]]))
        out[name] = arr.reshape(e["shape"])
    return out, meta


def _atomic_write(path, data):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Convert a NeMo .nemo CTC char model (Jasper/QuartzNet) into a jasper-serve "
                    "model folder (model.json + model.safetensors).")
    ap.add_argument("nemo", help="input .nemo file (tar or tar.gz)")
    ap.add_argument("out_dir", help="output model folder (created if missing)")
    ap.add_argument("--name", help="model name for model.json (default: the .nemo file stem)")
    ap.add_argument("--stft-mode", choices=("auto", "legacy", "nemo25"), default="auto",
                    help="NeMo featurizer behaviour to record: legacy = NeMo <= 2.4 (reflect pad, "
                         "L//hop+1 frames), nemo25 = NeMo >= 2.5 (zero pad, L//hop); auto = "
                         "nemo25 iff the config's nemo_version is >= 2.5 (default)")
    ap.add_argument("--force", action="store_true", help="overwrite existing output files")
    args = ap.parse_args(argv)
    try:
        convert(args.nemo, args.out_dir, name=args.name, stft_mode=args.stft_mode,
                force=args.force, log=lambda m: print(m, file=sys.stderr))
    except ConversionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
        # A value of an unexpected type somewhere in model_config.yaml.
        print(f"error: {args.nemo}: malformed model config ({type(e).__name__}: {e})",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
