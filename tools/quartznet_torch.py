"""Pure-PyTorch QuartzNet (NeMo ConvASREncoder/ConvASRDecoder layout) and NeMo's featurizer.

Shared by tools/train_quartznet.py, tools/export_model.py and the fixture writer. No NeMo needed.

* `Featurizer` reproduces NeMo's AudioToMelSpectrogramPreprocessor (FilterbankFeatures) in its
  NeMo >= 2.5 behaviour ("stft_mode": "nemo25"): pre-emphasis 0.97 with samples past the length
  zeroed, torch.stft(n_fft 512, hop 160, win 320 symmetric Hann, center=True, zero padding),
  |X|^2, Slaney mel (64 bands, Slaney area norm, librosa's formula), log(x + 2^-24), per-feature
  normalization over the valid frames (unbiased std + 1e-5), frames >= seq_len zeroed, time
  padded to a multiple of 16. seq_len = L // 160.
* `QuartzNet` reproduces JasperBlock/MaskedConv1d: every conv's input is zeroed at t >= length,
  lengths shrink through strided convs as floor((L + 2p - d(K-1) - 1)/s) + 1, separable
  sub-blocks are depthwise -> pointwise -> BN(eps 1e-3) -> ReLU -> Dropout, the last sub-block
  has no activation, the 1x1 conv+BN residual is added before the block's final ReLU.
  Parameter names equal NeMo's state-dict names (encoder.encoder.{b}.mconv.{i}...).
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LABELS = [" "] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["'"]
BLANK = len(LABELS)  # 28

PREPROCESSOR = {
    "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
    "sample_rate": 16000,
    "window_size": 0.02,
    "window_stride": 0.01,
    "n_fft": 512,
    "features": 64,
    "window": "hann",
    "preemph": 0.97,
    "lowfreq": 0,
    "highfreq": None,
    "log": True,
    "log_zero_guard_type": "add",
    "log_zero_guard_value": 2 ** -24,
    "mag_power": 2.0,
    "normalize": "per_feature",
    "pad_to": 16,
    "pad_value": 0.0,
    "mel_norm": "slaney",
    "dither": 1e-05,
    "frame_splicing": 1,
    "exact_pad": False,
    "stft_mode": "nemo25",
}

# The shipped architecture (a small "QuartzNet 5x2": C 128/192, K 33..87): NeMo encoder.jasper block dicts.
def default_blocks():
  def blk(filters, repeat, k, stride=1, dil=1, residual=True, separable=True):
    return {"filters": filters, "repeat": repeat, "kernel": [k], "stride": [stride],
            "dilation": [dil], "dropout": 0.0, "residual": residual, "separable": separable,
            "residual_dense": False}
  return [
      blk(128, 1, 33, stride=2, residual=False),  # C1
      blk(128, 2, 33),                           # B1
      blk(128, 2, 39),                           # B2
      blk(128, 2, 51),                           # B3
      blk(192, 2, 63),                           # B4
      blk(192, 2, 75),                           # B5
      blk(192, 1, 87, dil=2, residual=False),    # C2
      blk(256, 1, 1, residual=False, separable=False),  # C3
  ]


# ----------------------------------------------------------------------------- featurizer
def slaney_mel_fb(sr=16000, n_fft=512, n_mels=64, fmin=0.0, fmax=None):
  """librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=False, norm='slaney'), float64."""
  fmax = sr / 2 if fmax is None else fmax
  f_sp = 200.0 / 3
  min_log_hz = 1000.0
  min_log_mel = min_log_hz / f_sp
  logstep = math.log(6.4) / 27.0

  def hz_to_mel(f):
    f = np.asanyarray(f, dtype=np.float64)
    m = f / f_sp
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz)
                    / logstep, m)

  def mel_to_hz(m):
    m = np.asanyarray(m, dtype=np.float64)
    f = f_sp * m
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f)

  fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
  mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
  fdiff = np.diff(mel_f)
  ramps = np.subtract.outer(mel_f, fftfreqs)
  weights = np.zeros((n_mels, 1 + n_fft // 2))
  for i in range(n_mels):
    lower = -ramps[i] / fdiff[i]
    upper = ramps[i + 2] / fdiff[i + 1]
    weights[i] = np.maximum(0, np.minimum(lower, upper))
  enorm = 2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels])
  weights *= enorm[:, np.newaxis]
  return weights.astype(np.float32)  # librosa's default dtype


class Featurizer(nn.Module):
  """NeMo FilterbankFeatures, "nemo25" behaviour. Input [B, L] float32 in [-1, 1], lengths [B]."""

  def __init__(self, dither=1e-5):
    super().__init__()
    self.hop, self.win, self.n_fft = 160, 320, 512
    self.dither = dither
    self.register_buffer("window", torch.hann_window(self.win, periodic=False), persistent=False)
    self.register_buffer("fb", torch.from_numpy(slaney_mel_fb()), persistent=False)

  @torch.no_grad()
  def forward(self, audio, lengths, warp=None):
    """warp: optional [B] vocal-tract-length factors (VTLP, training only): the power spectrum
    of utterance b is read at frequency bin f * warp[b] (linear interpolation, clamped).
    Returns features [B, 64, T padded to 16] and seq_len [B]."""
    mel, seq_len = self.log_mel(audio, lengths, warp)
    return normalize_per_feature(mel, seq_len), seq_len

  @torch.no_grad()
  def log_mel(self, audio, lengths, warp=None):
    """The features before normalization: log(mel power + 2^-24) [B, 64, T], seq_len [B]."""
    seq_len = torch.div(lengths, self.hop, rounding_mode="floor")
    x = audio
    if self.training and self.dither > 0:
      x = x + self.dither * torch.randn_like(x)
    x = torch.cat([x[:, :1], x[:, 1:] - 0.97 * x[:, :-1]], dim=1)
    t = torch.arange(x.shape[1], device=x.device)
    x = x.masked_fill(t[None, :] >= lengths[:, None], 0.0)
    spec = torch.stft(x, n_fft=self.n_fft, hop_length=self.hop, win_length=self.win,
                      window=self.window, center=True, pad_mode="constant", return_complex=True)
    spec = torch.view_as_real(spec)
    mag = torch.sqrt(spec.pow(2).sum(-1)).pow(2.0)
    if warp is not None:
      nf = mag.shape[1]
      src = (torch.arange(nf, device=x.device)[None, :] * warp[:, None]).clamp(max=nf - 1)
      lo = src.floor().long()
      hi = (lo + 1).clamp(max=nf - 1)
      w = (src - lo)[:, :, None]
      T = mag.shape[2]
      mag = (torch.gather(mag, 1, lo[:, :, None].expand(-1, -1, T)) * (1 - w) +
             torch.gather(mag, 1, hi[:, :, None].expand(-1, -1, T)) * w)
    mel = torch.matmul(self.fb, mag)
    return torch.log(mel + 2 ** -24), seq_len


def normalize_per_feature(mel, seq_len):
  """NeMo's per-feature normalization over the valid frames (unbiased std + 1e-5), frames >=
  seq_len zeroed, time padded to a multiple of 16. mel [B, 64, T] log-mel, seq_len [B]."""
  T = mel.shape[-1]
  valid = (torch.arange(T, device=mel.device)[None, :] < seq_len[:, None])  # [B, T]
  vm = valid[:, None, :].to(mel.dtype)
  n = seq_len.to(mel.dtype)[:, None]
  mean = (mel * vm).sum(-1) / n
  var = (((mel - mean[..., None]) * vm) ** 2).sum(-1) / (n - 1)
  std = torch.sqrt(var) + 1e-5
  mel = (mel - mean[..., None]) / std[..., None]
  mel = mel.masked_fill(~valid[:, None, :], 0.0)
  pad = (-T) % 16
  if pad:
    mel = F.pad(mel, (0, pad), value=0.0)
  return mel


# ----------------------------------------------------------------------------- model
class MaskedConv1d(nn.Module):
  def __init__(self, cin, cout, k, stride=1, dilation=1, groups=1, bias=False):
    super().__init__()
    if stride > 1 and dilation > 1:
      raise ValueError("stride and dilation together")
    self.pad = dilation * (k - 1) // 2
    self.conv = nn.Conv1d(cin, cout, k, stride=stride, padding=self.pad, dilation=dilation,
                          groups=groups, bias=bias)

  def forward(self, x, lens):
    T = x.shape[-1]
    mask = torch.arange(T, device=x.device)[None, :] < lens[:, None]
    x = x * mask[:, None, :].to(x.dtype)
    c = self.conv
    k, s, d = c.kernel_size[0], c.stride[0], c.dilation[0]
    if not (s == 1 and 2 * self.pad == d * (k - 1)):
      lens = torch.div(lens + 2 * self.pad - d * (k - 1) - 1, s, rounding_mode="floor") + 1
    return c(x), lens


def bn(c):
  return nn.BatchNorm1d(c, eps=1e-3, momentum=0.1)


class JasperBlock(nn.Module):
  def __init__(self, cin, cfg):
    super().__init__()
    cout, R = cfg["filters"], cfg["repeat"]
    k, s, d = cfg["kernel"][0], cfg["stride"][0], cfg["dilation"][0]
    layers = []
    c = cin
    for j in range(R):
      if cfg["separable"]:
        layers += [MaskedConv1d(c, c, k, s, d, groups=c), MaskedConv1d(c, cout, 1), bn(cout)]
      else:
        layers += [MaskedConv1d(c, cout, k, s, d), bn(cout)]
      if j < R - 1:
        layers += [nn.ReLU(), nn.Dropout(cfg.get("dropout", 0.0))]
      c = cout
    self.mconv = nn.ModuleList(layers)
    if cfg["residual"]:
      self.res = nn.ModuleList([nn.ModuleList([MaskedConv1d(cin, cout, 1), bn(cout)])])
    else:
      self.res = None
    self.mout = nn.Sequential(nn.ReLU(), nn.Dropout(cfg.get("dropout", 0.0)))

  def forward(self, x, lens):
    out, l = x, lens
    for layer in self.mconv:
      if isinstance(layer, MaskedConv1d):
        out, l = layer(out, l)
      else:
        out = layer(out)
    if self.res is not None:
      r = x
      for layer in self.res[0]:
        if isinstance(layer, MaskedConv1d):
          r, _ = layer(r, lens)
        else:
          r = layer(r)
      out = out + r
    return self.mout(out), l


class Encoder(nn.Module):
  def __init__(self, feat_in, blocks):
    super().__init__()
    mods, c = [], feat_in
    for cfg in blocks:
      mods.append(JasperBlock(c, cfg))
      c = cfg["filters"]
    self.encoder = nn.Sequential(*mods)
    self.out_channels = c

  def forward(self, x, lens):
    for b in self.encoder:
      x, lens = b(x, lens)
    return x, lens


class Decoder(nn.Module):
  def __init__(self, feat_in, num_classes):
    super().__init__()
    self.decoder_layers = nn.Sequential(nn.Conv1d(feat_in, num_classes + 1, 1, bias=True))

  def forward(self, x):
    return F.log_softmax(self.decoder_layers(x).transpose(1, 2), dim=-1)


class QuartzNet(nn.Module):
  def __init__(self, blocks=None, feat_in=64, num_labels=len(LABELS)):
    super().__init__()
    self.blocks = blocks or default_blocks()
    self.encoder = Encoder(feat_in, self.blocks)
    self.decoder = Decoder(self.encoder.out_channels, num_labels)
    for m in self.modules():  # NeMo init_mode xavier_uniform
      if isinstance(m, nn.Conv1d):
        nn.init.xavier_uniform_(m.weight)
        if m.bias is not None:
          nn.init.zeros_(m.bias)

  def forward(self, feats, lens):
    """feats [B, 64, T] (NeMo layout), lens [B] -> log-probs [B, T', 29], lens [B]."""
    x, l = self.encoder(feats, lens)
    return self.decoder(x), l


def greedy_decode(logprobs, lens):
  """NeMo's greedy CTC merge. logprobs [B, T, 29]."""
  ids = logprobs.argmax(-1).cpu().numpy()
  out = []
  for b in range(ids.shape[0]):
    prev, s = BLANK, []
    for p in ids[b, :int(lens[b])]:
      if p != BLANK and (p != prev or prev == BLANK):
        s.append(LABELS[p])
      prev = p
    out.append("".join(s))
  return out


def edit_distance(a, b):
  prev = list(range(len(b) + 1))
  for i in range(1, len(a) + 1):
    cur = [i] + [0] * len(b)
    for j in range(1, len(b) + 1):
      cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
    prev = cur
  return prev[-1]


def wer_cer(refs, hyps):
  we = sum(edit_distance(r.split(), h.split()) for r, h in zip(refs, hyps))
  wn = sum(len(r.split()) for r in refs)
  ce = sum(edit_distance(list(r), list(h)) for r, h in zip(refs, hyps))
  cn = sum(len(r) for r in refs)
  return we / max(wn, 1), ce / max(cn, 1)
