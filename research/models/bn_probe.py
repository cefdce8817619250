"""One BatchNorm2d of a converted network under the microscope: the gradient it receives, the sums it returns.

For the named module (ours and native, same input and grad_output), compares the incoming gradient dy (a hook on
the module's output), the bias gradient against sum(dy) in float64, and the output after the forward.

    python research/models/bn_probe.py resnet50 layer4.2.bn3 --batch 8
"""
import argparse
import copy

import torch

from grad_bisect import build, swap


def probe(model, name, x, g):
    mod = dict(model.named_modules())[name]
    cap = {}

    def fh(m, inp, out):
        cap["x"] = inp[0].detach().clone()
        cap["y"] = out.detach().clone()
        cap["y_ref"] = out
        out.register_hook(lambda d: cap.__setitem__("dy", d.detach().clone()))
    mod.register_forward_hook(fh)
    y = model(x)
    cap["y_after_fwd"] = cap["y_ref"].detach().clone()
    (y * g).sum().backward()
    cap["db"] = mod.bias.grad.detach().clone()
    cap["dw"] = mod.weight.grad.detach().clone()
    return cap


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("module")
    p.add_argument("--batch", type=int, default=8)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    base = build(a.model).cuda().train()
    x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    with torch.no_grad():
        g = torch.randn_like(copy.deepcopy(base)(x))
    nat = probe(copy.deepcopy(base), a.module, x, g)
    ours = probe(swap(copy.deepcopy(base), ["BatchNorm2d"]), a.module, x, g)
    d = lambda u, v: float((u.double() - v.double()).abs().max() / v.double().abs().max().clamp(min=1e-30))
    print(f"x (input) ours vs native: {d(ours['x'], nat['x']):.3e}")
    print(f"y at forward ours vs native: {d(ours['y'], nat['y']):.3e}; after forward (in-place ops) "
          f"{d(ours['y_after_fwd'], nat['y_after_fwd']):.3e}")
    print(f"dy ours vs native: {d(ours['dy'], nat['dy']):.3e}  (shape {tuple(ours['dy'].shape)}, "
          f"strides ours {ours['dy'].stride()} native {nat['dy'].stride()})")
    diff = (ours["dy"].double() - nat["dy"].double()).abs()
    big = diff > 1e-3 * nat["dy"].abs().max()
    print(f"dy elements that differ by more than 1e-3 of max|dy|: {int(big.sum())} of {diff.numel()}")
    for k, c in (("ours", ours), ("native", nat)):
        s = c["dy"].double().sum((0, 2, 3))
        print(f"{k}: db vs sum(dy) in float64: {d(c['db'], s):.3e}")
    print(f"db ours vs native: {d(ours['db'], nat['db']):.3e}; dw ours vs native: {d(ours['dw'], nat['dw']):.3e}")


if __name__ == "__main__":
    main()
