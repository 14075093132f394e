"""The peer models of the benchmarks: QuartzNet 15x5 and its sub-blocks as plain torch.nn modules
(eager PyTorch, and ONNX Runtime through their export), with random weights scaled like
jasper_bench's. Shared by tools/bench_peers.py (CPU) and tools/bench_cuda_torch.py (GPU).
"""
import math

import torch
import torch.nn as nn

NUM_OUTPUTS = 29  # 28 characters + blank
FEATURES = 64

def _init_uniform(weight, fan_in, scale=1.0):
    bound = scale * math.sqrt(3.0 / fan_in)  # variance-preserving, as in jasper_bench
    with torch.no_grad():
        weight.uniform_(-bound, bound)


def _init_bn(bn, gen):
    c = bn.num_features
    with torch.no_grad():
        bn.weight.copy_(0.8 + 0.4 * torch.rand(c, generator=gen))
        bn.bias.copy_(0.2 * torch.rand(c, generator=gen) - 0.1)
        bn.running_mean.copy_(0.2 * torch.rand(c, generator=gen) - 0.1)
        bn.running_var.copy_(0.8 + 0.4 * torch.rand(c, generator=gen))


class SubBlock(nn.Module):
    """conv (separable: depthwise K + pointwise 1x1; else dense K) -> BN -> optional ReLU."""

    def __init__(self, c_in, c_out, kernel, stride=1, dilation=1, relu=True, separable=True):
        super().__init__()
        pad = dilation * (kernel - 1) // 2
        if separable:
            self.dw = nn.Conv1d(c_in, c_in, kernel, stride=stride, dilation=dilation, padding=pad,
                                groups=c_in, bias=False)
            self.pw = nn.Conv1d(c_in, c_out, 1, bias=False)
            _init_uniform(self.dw.weight, kernel)
            _init_uniform(self.pw.weight, c_in)
        else:
            self.dw = None
            self.pw = nn.Conv1d(c_in, c_out, kernel, stride=stride, dilation=dilation,
                                padding=pad, bias=False)
            _init_uniform(self.pw.weight, c_in * kernel)
        self.bn = nn.BatchNorm1d(c_out, eps=1e-3)
        self.relu = relu

    def forward(self, x):
        if self.dw is not None:
            x = self.dw(x)
        x = self.bn(self.pw(x))
        return torch.relu(x) if self.relu else x


class Block(nn.Module):
    """JasperBlock: `repeat` sub-blocks, the last without ReLU; residual added, then ReLU."""

    def __init__(self, c_in, c_out, kernel, repeat, stride=1, dilation=1, residual=False,
                 separable=True):
        super().__init__()
        subs = []
        for i in range(repeat):
            last = i == repeat - 1
            subs.append(SubBlock(c_in if i == 0 else c_out, c_out, kernel, stride, dilation,
                                 relu=not (last and residual), separable=separable))
        self.subs = nn.Sequential(*subs)
        self.res = None
        if residual:
            conv = nn.Conv1d(c_in, c_out, 1, bias=False)
            _init_uniform(conv.weight, c_in, 0.5)
            self.res = nn.Sequential(conv, nn.BatchNorm1d(c_out, eps=1e-3))

    def forward(self, x):
        y = self.subs(x)
        if self.res is not None:
            y = torch.relu(y + self.res(x))
        return y


class QuartzNet15x5(nn.Module):
    def __init__(self):
        super().__init__()
        blocks = [Block(FEATURES, 256, 33, 1, stride=2)]  # C1
        c = 256
        for filters, kernel in [(256, 33), (256, 39), (512, 51), (512, 63), (512, 75)]:
            for _ in range(3):
                blocks.append(Block(c, filters, kernel, 5, residual=True))
                c = filters
        blocks.append(Block(512, 512, 87, 1, dilation=2))  # C2
        blocks.append(Block(512, 1024, 1, 1, separable=False))  # C3
        self.encoder = nn.Sequential(*blocks)
        self.decoder = nn.Conv1d(1024, NUM_OUTPUTS, 1, bias=True)
        _init_uniform(self.decoder.weight, 1024)

    def forward(self, x):  # [B, 64, T] -> [B, 29, T/2] log-probs
        return torch.log_softmax(self.decoder(self.encoder(x)), dim=1)


def randomize_bn(module, seed):
    gen = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm1d):
            _init_bn(m, gen)
    return module.eval()
