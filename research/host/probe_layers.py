"""Host cost of one call layer by layer (docs/host-overhead.md): relu, layer_norm and linear, each variant calling
the layer below directly (nn module -> functional wrapper -> _registry fn -> OpOverload._op below / at the Autograd key),
timed in round-robin turns (median of turns) on one intra-op thread, against PyTorch module, functional and binding.
Run from the repository root: python research/host/probe_layers.py"""
import statistics
import sys
import time

sys.path.insert(0, ".")
import torch, torch.nn.functional as TF
import torch_dnn.functional as F, torch_dnn.nn as N
from torch_dnn.ops._registry import ops as fops
torch.set_num_threads(1)
below = torch._C._AutoDispatchBelowAutograd

def group(title, items, n=1000, turns=15):
    fs = [(name, f) for name, f in items]
    for _, f in fs:
        for _ in range(200): f()
    res = {name: [] for name, _ in fs}
    for r in range(turns):
        order = fs if r % 2 == 0 else fs[::-1]
        for name, f in order:
            s = time.perf_counter()
            for _ in range(n): f()
            res[name].append((time.perf_counter() - s) / n * 1e6)
    print(f"\n## {title}")
    for name, _ in fs:
        print(f"  {name:<64} {statistics.median(res[name]):7.2f} us")

x = torch.randn(4, 64); xg = torch.randn(4, 64, requires_grad=True); g = torch.randn(4, 64)
relu = torch.ops.torch_dnn.relu.default._op
m_o, m_t = N.ReLU(), torch.nn.ReLU()
def relu_below():
    with below():
        return relu(x)
group("relu (4,64), no input requires grad", [
    ("torch: nn.ReLU module", lambda: m_t(x)),
    ("torch: F.relu", lambda: TF.relu(x)),
    ("torch: torch.relu", lambda: torch.relu(x)),
    ("ours: nn.ReLU module", lambda: m_o(x)),
    ("ours: F.relu (torch_dnn.ops.activation.relu)", lambda: F.relu(x)),
    ("ours: _registry fn (ops.relu)", lambda: fops.relu(x)),
    ("ours: OpOverload._op in `with _AutoDispatchBelowAutograd()`", relu_below),
    ("ours: OpOverload._op at the Autograd key (C++ kernel)", lambda: relu(x)),
])
group("relu (4,64), input requires grad: forward + backward", [
    ("torch: nn.ReLU fwd", lambda: m_t(xg)),
    ("ours: nn.ReLU fwd", lambda: m_o(xg)),
    ("ours: OpOverload._op fwd", lambda: relu(xg)),
    ("torch: nn.ReLU fwd+bwd", lambda: m_t(xg).backward(g)),
    ("ours: nn.ReLU fwd+bwd", lambda: m_o(xg).backward(g)),
    ("ours: OpOverload._op fwd+bwd", lambda: relu(xg).backward(g)),
])
ln_t = torch.nn.LayerNorm(64); ln_o = N.LayerNorm(64); w, b = ln_t.weight, ln_t.bias
ln = torch.ops.torch_dnn.layer_norm.default._op
group("layer_norm (4,64), weight and bias require grad: forward", [
    ("torch: nn.LayerNorm module", lambda: ln_t(x)),
    ("torch: F.layer_norm", lambda: TF.layer_norm(x, (64,), w, b, 1e-5)),
    ("torch: torch.native_layer_norm", lambda: torch.native_layer_norm(x, (64,), w, b, 1e-5)),
    ("ours: nn.LayerNorm module", lambda: ln_o(x)),
    ("ours: F.layer_norm", lambda: F.layer_norm(x, (64,), w, b, 1e-5)),
    ("ours: _registry fn (ops.layer_norm)", lambda: fops.layer_norm(x, [64], w, b, 1e-5)),
    ("ours: OpOverload._op (C++ autograd kernel)", lambda: ln(x, [64], w, b, 1e-5)),
])
def ln_below():
    with below():
        return ln(x, [64], w, b, 1e-5)
with torch.no_grad():
    group("layer_norm (4,64) under no_grad (no graph)", [
        ("torch: nn.LayerNorm module", lambda: ln_t(x)),
        ("torch: torch.native_layer_norm", lambda: torch.native_layer_norm(x, (64,), w, b, 1e-5)),
        ("ours: nn.LayerNorm module", lambda: ln_o(x)),
        ("ours: _registry fn", lambda: fops.layer_norm(x, [64], w, b, 1e-5)),
        ("ours: OpOverload._op in `with _AutoDispatchBelowAutograd()`", ln_below),
        ("ours: OpOverload._op at the Autograd key", lambda: ln(x, [64], w, b, 1e-5)),
    ])
group("layer_norm forward + backward", [
    ("torch: module fwd+bwd", lambda: ln_t(x).backward(g)),
    ("ours: module fwd+bwd", lambda: ln_o(x).backward(g)),
    ("ours: OpOverload._op fwd+bwd", lambda: ln(x, [64], w, b, 1e-5)[0].backward(g)),
])
lin_t = torch.nn.Linear(64, 64); lin_o = N.Linear(64, 64); W, B = lin_t.weight, lin_t.bias
lin = torch.ops.torch_dnn.linear.default._op
group("linear (4,64)->64, weight and bias require grad", [
    ("torch: nn.Linear fwd", lambda: lin_t(x)),
    ("torch: F.linear fwd", lambda: TF.linear(x, W, B)),
    ("ours: nn.Linear fwd", lambda: lin_o(x)),
    ("ours: F.linear fwd", lambda: F.linear(x, W, B)),
    ("ours: _registry fn fwd", lambda: fops.linear(x, W, B, allow_tf32=False)),
    ("ours: OpOverload._op fwd (C++ autograd kernel)", lambda: lin(x, W, B, allow_tf32=False)),
    ("torch: nn.Linear fwd+bwd", lambda: lin_t(x).backward(g)),
    ("ours: nn.Linear fwd+bwd", lambda: lin_o(x).backward(g)),
    ("ours: OpOverload._op fwd+bwd", lambda: lin(x, W, B, allow_tf32=False).backward(g)),
])
with torch.no_grad():
    group("linear under no_grad", [
        ("torch: nn.Linear", lambda: lin_t(x)),
        ("ours: nn.Linear", lambda: lin_o(x)),
        ("ours: _registry fn", lambda: fops.linear(x, W, B, allow_tf32=False)),
        ("ours: OpOverload._op at the Autograd key", lambda: lin(x, W, B, allow_tf32=False)),
    ])
