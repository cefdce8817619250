"""Benchmark cases of whole models: one training step (zero_grad, forward under bf16 autocast, cross-entropy loss
in float32, backward) of a torch_dnn.convert-ed model against the same native model, timed in turns in this one
process (Case.rounds) on the same inputs, by the wall clock over a few steps in a row (Case.wall: at small
batches a step is host-bound, and CUDA events around one step would time the queue's state). The speedup column of the "native" row is native's ms over ours.

Models: the project's own definitions (torch_dnn.reference.models: ResNet-50, MobileNetV3-Large, a 4 x 512
pre-norm transformer encoder, a 4 x 512 LLaMA-style decoder), the CNNs in NCHW and channels_last; and, when
importable, timm's resnet50, mobilenetv3_large_100, efficientnet_b0, convnext_tiny, vit_base_patch16_224 and
transformers' BERT and LLaMA (4 layers, hidden 512), built from a config with random weights (nothing is
downloaded). Each model pair is built at its case's first call, so a -k filter builds only what it runs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as TF

import torch_dnn
from benchmarks.harness import Case
from torch_dnn.reference import models

BATCH = 16
IMAGE = 224
ROUNDS = 5
WARMUP_MS = 300.0
VOCAB = 32000
DEVICE = "cuda"  # the harness times CUDA; another value only to try the steps out


# The CNN cases also time the model converted with its convolutions swapped too ("torch_dnn with conv"), the
# transformer cases with attention's sdpa routing too ("torch_dnn with attention"): both are convert's opt-in
# include, beside the default conversion (convolutions and models' own sdpa calls native; attention's modules
# swapped).
CONVS = torch_dnn.nn.CONVOLUTIONS
OPT_IN = {"torch_dnn with conv": CONVS, "torch_dnn with attention": torch_dnn.nn.ATTENTION}


class ModelPair:
    """A native model and its converted copies (same weights), built on first use: the default conversion and the
    opt-in ones named in `extra` (keys of OPT_IN)."""

    def __init__(self, label, build, channels_last, extra=()):
        self.label, self.build, self.channels_last, self.extra = label, build, channels_last, extra
        self.models = None

    def get(self):
        if self.models is None:
            torch.manual_seed(0)
            native = self.build().to(DEVICE).train()
            if self.channels_last:
                native = native.to(memory_format=torch.channels_last)
            ours, report = torch_dnn.convert(native)
            print(f"[models] {self.label}: {str(report).splitlines()[0]}", flush=True)
            self.models = {"torch_dnn": ours, "native": native}
            for name in self.extra:
                self.models[name] = torch_dnn.convert(native, include=OPT_IN[name])[0]
        return self.models


def _logits(out):
    """The logits of a model's output (transformers return a ModelOutput)."""
    if isinstance(out, torch.Tensor):
        return out
    if getattr(out, "logits", None) is not None:
        return out.logits
    return out.last_hidden_state


def _step(pair, which):
    def run(x, target):
        model = pair.get()[which]
        model.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, torch.bfloat16):
            y = _logits(model(x))
        loss = TF.cross_entropy(y.float().flatten(0, -2), target.flatten())
        loss.backward()
    return run


def _case(label, build, make_inputs, fmt, group, batch, conv=False, attention=False):
    extra = (("torch_dnn with conv",) if conv else ()) + (("torch_dnn with attention",) if attention else ())
    pair = ModelPair(f"{label} {fmt}", build, fmt == "channels_last", extra)
    impls = {"torch_dnn": _step(pair, "torch_dnn"), "native": _step(pair, "native")}
    for name in extra:
        impls[name] = _step(pair, name)
    return Case("models", f"{label} train step b{batch} {fmt} bf16", make_inputs, impls,
                target=">=1.0x native", group=group, rounds=ROUNDS, warmup_ms=WARMUP_MS, wall=True)


def _image_inputs(batch, fmt, classes=1000):
    def make():
        x = torch.randn(batch, 3, IMAGE, IMAGE, device=DEVICE)
        if fmt == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.randint(0, classes, (batch,), device=DEVICE)
    return make


def _feature_inputs(batch, tokens, features, classes=1000):
    return lambda: (torch.randn(batch, tokens, features, device=DEVICE),
                    torch.randint(0, classes, (batch,), device=DEVICE))


def _token_inputs(batch, tokens, vocab=VOCAB, target_vocab=None):
    # target_vocab: the width of the model's last dimension (a BERT encoder's hidden size, not its vocabulary)
    return lambda: (torch.randint(0, vocab, (batch, tokens), device=DEVICE),
                    torch.randint(0, target_vocab or vocab, (batch, tokens), device=DEVICE))


def _cnn_cases(label, build, batches, group, attention=False):
    return [_case(label, build, _image_inputs(b, fmt), fmt, f"{group} {fmt}", b, conv=True, attention=attention)
            for fmt in ("NCHW", "channels_last") for b in batches]


def _timm_cases(quick):
    try:
        import timm
    except ImportError:
        return []
    names = ["resnet50", "mobilenetv3_large_100"] if quick else [
        "resnet50", "mobilenetv3_large_100", "efficientnet_b0", "convnext_tiny", "vit_base_patch16_224"]
    out = []
    for name in names:
        build = (lambda n=name: timm.create_model(n, pretrained=False))
        out += _cnn_cases(f"timm {name}", build, [BATCH], "timm", attention=name.startswith("vit"))
    return out


def _transformers_cases():
    try:
        import transformers
    except ImportError:
        return []
    dim, layers, heads = 512, 4, 8
    bert = transformers.BertConfig(vocab_size=VOCAB, hidden_size=dim, num_hidden_layers=layers,
                                   num_attention_heads=heads, intermediate_size=4 * dim)
    llama = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=dim, num_hidden_layers=layers,
                                     num_attention_heads=heads, num_key_value_heads=2, intermediate_size=1536)
    return [
        _case("transformers BERT 4x512", lambda: transformers.AutoModel.from_config(bert),
              _token_inputs(BATCH, 256, target_vocab=dim), "contiguous", "transformers", BATCH, attention=True),
        _case("transformers LLaMA 4x512", lambda: transformers.AutoModelForCausalLM.from_config(llama),
              _token_inputs(BATCH, 256), "contiguous", "transformers", BATCH, attention=True),
    ]


def cases(quick: bool = False):
    out = _cnn_cases("resnet50", models.resnet50, [BATCH] if quick else [BATCH, 64], "reference CNN")
    out += _cnn_cases("mobilenetv3_large", models.mobilenet_v3_large, [BATCH], "reference CNN")
    out += [
        _case("encoder 4x512", lambda: models.TransformerEncoder(512, 512, depth=4, heads=8),
              _feature_inputs(BATCH, 197, 512), "contiguous", "reference transformers", BATCH, attention=True),
        _case("llama 4x512", lambda: models.LlamaDecoder(VOCAB, 512, depth=4, heads=8, kv_heads=2, max_len=256),
              _token_inputs(BATCH, 256), "contiguous", "reference transformers", BATCH, attention=True),
        # 4k context, where attention is a large share of the step (issue 37's model target)
        _case("llama 4x512 s4096", lambda: models.LlamaDecoder(VOCAB, 512, depth=4, heads=8, kv_heads=2,
                                                               max_len=4096),
              _token_inputs(2, 4096), "contiguous", "reference transformers", 2, attention=True),
    ]
    out += _timm_cases(quick)
    if not quick:
        out += _transformers_cases()
    return out
