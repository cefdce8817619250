"""Whole networks in plain torch.nn modules, shared by tests/test_models.py and benchmarks/cases_models.py.

Each is built only from the module types torch_dnn.convert swaps (BatchNorm2d, ReLU, Hardswish, Hardsigmoid,
MaxPool2d, AdaptiveAvgPool2d, LayerNorm, RMSNorm, GELU, SiLU, Linear) plus what torch_dnn leaves native
(Conv2d, depthwise convs included; MultiheadAttention; Embedding; F.scaled_dot_product_attention), written the
way real model code writes them: in-place activations, `out += shortcut` on a norm's output, zero-initialised
last norms of residual blocks. Every constructor takes sizes, so the tests build small ones and the benchmark
the real ones (resnet50(), mobilenet_v3_large(), ...).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------- ResNet (torchvision's v1.5 bottleneck)

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += shortcut  # in place on the norm's output, as torchvision and timm write it
        return self.relu(out)


class ResNet(nn.Module):
    """ResNet with bottleneck blocks; layers=(3, 4, 6, 3), width=64 is ResNet-50."""

    def __init__(self, layers=(3, 4, 6, 3), width: int = 64, num_classes: int = 1000, in_chans: int = 3,
                 zero_init_last: bool = True):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(in_chans, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(width, layers[0], 1)
        self.layer2 = self._make_layer(width * 2, layers[1], 2)
        self.layer3 = self._make_layer(width * 4, layers[2], 2)
        self.layer4 = self._make_layer(width * 8, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width * 8 * Bottleneck.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_last:
            # each residual branch starts as zero (Goyal et al.): the default of torchvision's recipes and timm
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.zeros_(m.bn3.weight)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * Bottleneck.expansion))
        mods = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        mods += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(num_classes: int = 1000) -> ResNet:
    return ResNet((3, 4, 6, 3), 64, num_classes)


# ---------------------------------------------------------------- MobileNetV3 (torchvision's layout)

def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.gate = nn.Hardsigmoid(inplace=True)

    def forward(self, x):
        return x * self.gate(self.fc2(self.relu(self.fc1(self.avgpool(x)))))


def _conv_bn_act(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type | None = nn.Hardswish):
    mods = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        mods.append(act(inplace=True))
    return nn.Sequential(*mods)


class InvertedResidual(nn.Module):
    """1x1 expand, kxk depthwise, optional squeeze-excite, 1x1 project; `out += x` when shapes allow."""

    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, act: str, stride: int):
        super().__init__()
        act_t = nn.Hardswish if act == "HS" else nn.ReLU
        layers = []
        if exp != cin:
            layers.append(_conv_bn_act(cin, exp, 1, act=act_t))
        layers.append(_conv_bn_act(exp, exp, k, stride, groups=exp, act=act_t))
        if se:
            layers.append(SqueezeExcite(exp, _make_divisible(exp // 4)))
        layers.append(_conv_bn_act(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x):
        out = self.block(x)
        if self.use_res:
            out += x
        return out


# (kernel, expanded channels, out channels, squeeze-excite, activation, stride)
MOBILENET_V3_LARGE = (
    (3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
    (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
    (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
    (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1), (5, 960, 160, True, "HS", 1),
)
# every kind of block once or twice (expand or not, 3x3 and 5x5, SE or not, ReLU and Hardswish, residual or not)
MOBILENET_V3_SMALL_TEST = (
    (3, 16, 16, False, "RE", 1), (3, 48, 24, False, "RE", 2), (5, 72, 24, True, "RE", 1),
    (3, 96, 40, False, "HS", 2), (5, 120, 40, True, "HS", 1),
)


class MobileNetV3(nn.Module):
    def __init__(self, config=MOBILENET_V3_LARGE, stem: int = 16, last: int = 960, head: int = 1280,
                 num_classes: int = 1000, in_chans: int = 3):
        super().__init__()
        blocks = [_conv_bn_act(in_chans, stem, 3, 2)]
        cin = stem
        for k, exp, cout, se, act, stride in config:
            blocks.append(InvertedResidual(cin, k, exp, cout, se, act, stride))
            cin = cout
        blocks.append(_conv_bn_act(cin, last, 1))
        self.features = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(last, head), nn.Hardswish(inplace=True), nn.Linear(head, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v3_large(num_classes: int = 1000) -> MobileNetV3:
    return MobileNetV3(MOBILENET_V3_LARGE, 16, 960, 1280, num_classes)


# ---------------------------------------------------------------- pre-norm transformer encoder

class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TransformerEncoder(nn.Module):
    """(batch, tokens, in_features) features -> Linear embedding -> pre-norm layers -> LayerNorm -> Linear head
    on the mean token."""

    def __init__(self, in_features: int = 512, dim: int = 512, depth: int = 4, heads: int = 8,
                 num_classes: int = 1000):
        super().__init__()
        self.embed = nn.Linear(in_features, dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x).mean(1))


# ---------------------------------------------------------------- LLaMA-style decoder

def rotary_tables(head_dim: int, max_len: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)
    return freqs.cos().float(), freqs.sin().float()


def apply_rotary(x, cos, sin):
    """x (batch, heads, tokens, head_dim), rotate-half form (as transformers' LLaMA)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class GQAttention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        assert heads % kv_heads == 0
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x, rope=None):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q, k = apply_rotary(q, cos[:t], sin[:t]), apply_rotary(k, cos[:t], sin[:t])
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class GatedMLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)  # gate
        self.w3 = nn.Linear(dim, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, dim, bias=False)  # down
        self.act = nn.SiLU()

    def forward(self, x):
        return self.w2(self.act(self.w1(x)) * self.w3(x))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int, eps: float):
        super().__init__()
        self.attn_norm = nn.RMSNorm(dim, eps=eps)
        self.attn = GQAttention(dim, heads, kv_heads)
        self.mlp_norm = nn.RMSNorm(dim, eps=eps)
        self.mlp = GatedMLP(dim, hidden)

    def forward(self, x, rope=None):
        x = x + self.attn(self.attn_norm(x), rope)
        return x + self.mlp(self.mlp_norm(x))


class LlamaDecoder(nn.Module):
    """Token ids (batch, tokens) -> logits (batch, tokens, vocab)."""

    def __init__(self, vocab: int = 32000, dim: int = 512, depth: int = 4, heads: int = 8, kv_heads: int = 2,
                 hidden: int | None = None, max_len: int = 2048, rotary: bool = True, eps: float = 1e-6):
        super().__init__()
        hidden = hidden or 256 * math.ceil(8 * dim / 3 / 256)
        self.tok = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, kv_heads, hidden, eps) for _ in range(depth))
        self.norm = nn.RMSNorm(dim, eps=eps)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.rotary = rotary
        if rotary:
            cos, sin = rotary_tables(dim // heads, max_len)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids):
        x = self.tok(ids)
        rope = (self.cos, self.sin) if self.rotary else None
        for layer in self.layers:
            x = layer(x, rope)
        return self.lm_head(self.norm(x))
