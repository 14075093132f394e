"""The one training loop shared by the GPU job (tools/gpu_train_job.py) and the CPU run that
spans sessions (tools/cpu_train.py): architectures, learning-rate schedule, the CTC step,
SpecAugment, a weight EMA, the greedy probe and the resumable training state.

Callers bring the data (features [B, 64, T] in NeMo's normalized layout, lengths [B] in frames,
transcripts in the 28-label alphabet); everything from features to the optimizer step is here,
so both entry points train the same way.

Thread-safety: none; one trainer per process, driven by one thread.
"""
import io
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_random_model import blk  # noqa: E402  (a block config in NeMo's keys)

# NeMo's QuartzNet 5x5 (C1 256, B1-B2 256, B3-B5 512, C2 512, C3 1024: 6.7 M parameters) with
# the 512-channel blocks at 480 and C3 at 896, so that the F32 model.safetensors stays under
# 25 MB: 6,026,365 parameters, 6,053,053 stored values, 24.2 MB.
ARCHS = {
    "qn5x5_480": [blk(256, 1, 33, stride=2, residual=False), blk(256, 5, 33), blk(256, 5, 39),
                  blk(480, 5, 51), blk(480, 5, 63), blk(480, 5, 75),
                  blk(480, 1, 87, dil=2, residual=False),
                  blk(896, 1, 1, residual=False, separable=False)],
    "tiny": [blk(32, 1, 11, stride=2, residual=False), blk(32, 2, 13), blk(48, 1, 15, dil=2,
             residual=False), blk(64, 1, 1, residual=False, separable=False)],
}


class Log:
  """Prints and appends to a file, each line stamped with seconds since construction."""

  def __init__(self, path):
    self.f = open(path, "a")
    self.t0 = time.time()

  def __call__(self, msg):
    line = f"[{time.time() - self.t0:7.1f}s] {msg}"
    print(line, flush=True)
    self.f.write(line + "\n")
    self.f.flush()


def lr_at(step, progress, peak, warmup, floor=0.01):
  """Linear warm-up over `warmup` steps, then cosine decay over progress in [0, 1] (the share
  of the planned run done: wall-clock for the GPU job, audio seen for the CPU run), never
  below floor * peak."""
  warm = min(1.0, (step + 1) / max(1, warmup))
  return peak * warm * max(floor, 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def spec_augment(torch, feats, flens, g):
  """Vectorized: 2 frequency masks <= 12 bins, 2 + T/200 time masks <= 20 frames (about a
  quarter of the valid cells masked on average). feats [B, F, T], flens [B] frames."""
  B, F, T = feats.shape
  dev = feats.device
  fa = torch.arange(F, device=dev)[None, None, :]
  f0 = torch.randint(0, F, (B, 2, 1), device=dev, generator=g)
  fw = torch.randint(0, 13, (B, 2, 1), device=dev, generator=g)
  fmask = ((fa >= f0) & (fa < f0 + fw)).any(1)
  M = 2 + T // 200
  ta = torch.arange(T, device=dev)[None, None, :]
  t0 = (torch.rand(B, M, 1, device=dev, generator=g) * flens[:, None, None]).long()
  tw = torch.randint(0, 21, (B, M, 1), device=dev, generator=g)
  tmask = ((ta >= t0) & (ta < t0 + tw)).any(1)
  return feats.masked_fill(fmask[:, :, None] | tmask[:, None, :], 0.0)


def cpu_has_bf16():
  """True when this x86 CPU computes BF16 natively (AMX tiles or AVX-512 BF16): autocast to
  BF16 then runs faster than FP32 through oneDNN; elsewhere it would be emulated and slower."""
  try:
    flags = open("/proc/cpuinfo").read()
  except OSError:
    return False
  return " amx_bf16" in flags or " avx512_bf16" in flags


class Trainer:
  """Model + AdamW + weight EMA + step counters for one run.

  state: step, audio_s (source audio seen), train_s (seconds spent in steps), plus whatever the
  caller adds (JSON-serializable). Ownership: holds the model and the optimizer.
  """

  def __init__(self, torch, blocks, dev, lr, wd, warmup, amp_dtype, ema_decay=0.999,
               fused=False):
    from quartznet_torch import QuartzNet
    self.torch, self.blocks, self.dev = torch, blocks, dev
    self.model = QuartzNet(blocks).to(dev)
    self.peak_lr, self.warmup, self.amp_dtype = lr, warmup, amp_dtype
    self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=wd,
                                 betas=(0.9, 0.98), **({"fused": True} if fused else {}))
    self.ema_decay = ema_decay
    self.reset_ema()
    self.state = {"step": 0, "audio_s": 0.0, "train_s": 0.0}
    self.nparams = sum(p.numel() for p in self.model.parameters())

  def step(self, feats, flens, texts, progress, audio_s):
    """One optimizer step on a batch: feats [B, 64, T] normalized and augmented, flens [B],
    texts (28-label alphabet). Returns (loss, grad norm, lr)."""
    torch = self.torch
    import torch.nn.functional as F
    from quartznet_torch import BLANK, LABELS
    char = {c: i for i, c in enumerate(LABELS)}
    t0 = time.time()
    lr = lr_at(self.state["step"], progress, self.peak_lr, self.warmup)
    for grp in self.opt.param_groups:
      grp["lr"] = lr
    targets = torch.tensor([char[c] for t in texts for c in t], device=self.dev)
    tlens = torch.tensor([len(t) for t in texts], device=self.dev)
    self.model.train()
    with torch.autocast(self.dev.type, dtype=self.amp_dtype,
                        enabled=self.amp_dtype != torch.float32):
      lp, ol = self.model(feats, flens)
    loss = F.ctc_loss(lp.float().transpose(0, 1), targets, ol, tlens, blank=BLANK,
                      reduction="mean", zero_infinity=True)
    self.opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 5.0)
    self.opt.step()
    self.update_ema()
    self.state["step"] += 1
    self.state["audio_s"] += audio_s
    self.state["train_s"] += time.time() - t0
    return loss.item(), float(gn), lr

  @property
  def step_count(self):
    return self.state["step"]

  def reset_ema(self):
    """The EMA restarts from the model's current values (FP32)."""
    self.ema = {k: v.detach().clone().float() for k, v in self.model.state_dict().items()
                if v.is_floating_point()}

  def update_ema(self):
    # Early steps weigh more (the usual min(decay, (1 + n) / (10 + n)) warm-up of the decay).
    n = self.state["step"]
    d = min(self.ema_decay, (1 + n) / (10 + n))
    with self.torch.no_grad():
      for k, v in self.model.state_dict().items():
        if k in self.ema:
          self.ema[k].mul_(d).add_(v.detach().float(), alpha=1 - d)

  def ema_state_dict(self):
    """The model's state dict with EMA values for every floating tensor (FP32, on the CPU)."""
    return {k: (self.ema[k].cpu() if k in self.ema else v.cpu())
            for k, v in self.model.state_dict().items()}

  # --------------------------------------------------------------------------- state file
  def save(self, path, extra):
    """Resumable state, compact: weights and BN statistics in FP32, EMA and both AdamW moments
    in BF16 (about 10 bytes per parameter: 60 MB for qn5x5_480), counters, and `extra` (the
    caller's schedule and sampler state). Written to path + '.tmp' then renamed."""
    torch = self.torch
    bf = torch.bfloat16
    opt_sd = self.opt.state_dict()
    moments = {}
    for pid, st in opt_sd["state"].items():
      moments[pid] = {"step": float(st["step"]), "exp_avg": st["exp_avg"].to(bf).cpu(),
                      "exp_avg_sq": st["exp_avg_sq"].to(bf).cpu()}
    blob = {"format": "jasper-train-state-1", "blocks": self.blocks,
            "model": {k: v.cpu() for k, v in self.model.state_dict().items()},
            "ema": {k: v.to(bf).cpu() for k, v in self.ema.items()},
            "opt": {"state": moments, "param_groups": opt_sd["param_groups"]},
            "state": dict(self.state), "extra": extra}
    buf = io.BytesIO()
    torch.save(blob, buf)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "wb") as f:
      f.write(buf.getvalue())
      f.flush()
      os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    return len(buf.getvalue())

  def load(self, path):
    """Restores what save() wrote; returns its `extra`. The architecture must match."""
    torch = self.torch
    blob = torch.load(path, map_location="cpu", weights_only=False)
    if blob.get("format") != "jasper-train-state-1":
      raise ValueError(f"{path}: not a training state file (format {blob.get('format')!r})")
    if blob["blocks"] != self.blocks:
      raise ValueError(f"{path}: its architecture differs from this run's")
    self.model.load_state_dict(blob["model"])
    for k, v in blob["ema"].items():
      self.ema[k] = v.float().to(self.dev)
    sd = self.opt.state_dict()
    params = {pid for g in sd["param_groups"] for pid in g["params"]}
    st = {}
    for pid, m in blob["opt"]["state"].items():
      if pid not in params:
        raise ValueError(f"{path}: optimizer state for an unknown parameter {pid}")
      st[pid] = {"step": torch.tensor(m["step"]), "exp_avg": m["exp_avg"].float(),
                 "exp_avg_sq": m["exp_avg_sq"].float()}
    self.opt.load_state_dict({"state": st, "param_groups": blob["opt"]["param_groups"]})
    self.state.update(blob["state"])
    return blob.get("extra") or {}


def greedy_wer(torch, model, batches, dev, amp_dtype):
  """batches: iterable of (feats [B, 64, T], flens [B], refs, sources). Returns
  {source: {"utts", "wer", "cer", "example"}} with greedy CTC decoding, model in eval mode."""
  from quartznet_torch import greedy_decode, wer_cer
  by_src = {}
  was_training = model.training
  model.eval()
  with torch.no_grad():
    for feats, flens, refs, srcs in batches:
      with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype != torch.float32):
        lp, ol = model(feats.to(dev), flens.to(dev))
      for r, h, s in zip(refs, greedy_decode(lp.float(), ol), srcs):
        by_src.setdefault(s, ([], []))
        by_src[s][0].append(r)
        by_src[s][1].append(h)
  model.train(was_training)
  out = {}
  for s, (refs, hyps) in sorted(by_src.items()):
    w, c = wer_cer(refs, hyps)
    out[s] = {"utts": len(refs), "wer": round(w, 4), "cer": round(c, 4),
              "example": f"'{refs[0]}' -> '{hyps[0]}'"}
  return out
