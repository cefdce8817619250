"""Where do a converted network's gradients part from native's? (issue: converted models' gradients)

Runs one training forward + backward of three copies of a model on the same input and grad_output: native
float32, converted float32 (all swappable types, or only those named by --only) and native float64 (the
reference). Hooks record every module's output and the gradient at that output; the table lists, in the
order the backward reached them, the modules whose error against float64 is far above native's, then the
worst parameter gradients.

    python research/models/grad_bisect.py resnet50 --batch 8 [--only BatchNorm2d] [--channels-last]
"""
import argparse
import copy

import torch

import torch_dnn
from torch_dnn.convert import SWAPS


def rel_err(a, ref):
    d = (a.double() - ref).abs().max().item()
    s = ref.abs().max().item()
    return d / s if s > 0 else d


def build(name):
    if name.startswith("td_"):
        from torch_dnn.reference import models
        return getattr(models, name[3:])()
    import timm
    return timm.create_model(name, pretrained=False)


def swap(model, only):
    for m in model.modules():
        t = type(m)
        if t in SWAPS and (not only or t.__name__ in only):
            m.__class__ = SWAPS[t]
    return model


def record(model, log):
    """forward hooks: output (cloned, float64) and a tensor hook for its gradient, keyed (name, call)."""
    calls = {}

    def hook(name):
        def fn(mod, inp, out):
            if not isinstance(out, torch.Tensor) or not out.requires_grad:
                return
            k = calls[name] = calls.get(name, -1) + 1
            key = (name, k)
            log["out"][key] = out.detach().double().clone()
            log["order_f"].append(key)

            def gh(g):
                log["grad"][key] = g.detach().double().clone()
                log["order_b"].append(key)
            out.register_hook(gh)
        return fn

    for name, m in model.named_modules():
        if name:
            m.register_forward_hook(hook(name))


def run(model, x, g, hooks=True, sync=False):
    log = {"out": {}, "grad": {}, "order_f": [], "order_b": []}
    if hooks:
        record(model, log)
    if sync:  # the host waits for the device after every module: nothing is queued ahead
        for m in model.modules():
            m.register_forward_hook(lambda *_: torch.cuda.synchronize())
    x = x.clone().requires_grad_(True)
    y = model(x)
    (y * g.to(y.dtype)).sum().backward()
    log["params"] = {n: p.grad.detach().double().clone() for n, p in model.named_parameters() if p.grad is not None}
    log["xgrad"] = x.grad.double()
    return log


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--no-hooks", action="store_true", help="compare parameter gradients only")
    p.add_argument("--sync", action="store_true", help="synchronise after every module's forward")
    p.add_argument("--strides", action="store_true", help="print converted modules' output and gradient strides")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    base = build(a.model).to(a.device).train()
    mf = torch.channels_last if a.channels_last else torch.contiguous_format
    base = base.to(memory_format=mf)
    x = torch.randn(a.batch, 3, a.size, a.size, device=a.device).contiguous(memory_format=mf)
    with torch.no_grad():
        g = torch.randn_like(copy.deepcopy(base)(x))
    h = not a.no_hooks
    nat = run(copy.deepcopy(base), x, g, h, a.sync)
    ours_model = swap(copy.deepcopy(base), a.only)
    if a.strides:
        shown = []
        for name, m in ours_model.named_modules():
            if type(m).__module__.startswith("torch_dnn"):
                def fh(mod, inp, out, name=name):
                    if isinstance(out, torch.Tensor):
                        i = inp[0]
                        msg = (f"  {name}: in {tuple(i.stride())} out {tuple(out.stride())} view={out._base is not None}"
                               f" grad_fn={type(out.grad_fn).__name__}")
                        shown.append(name)
                        st = out.stride()
                        out.register_hook(lambda g, msg=msg, st=st: print(msg, "grad", tuple(g.stride()))
                                          if g.stride() != st or "layer4.2" in msg else None)
                m.register_forward_hook(fh)
    ours = run(ours_model, x, g, h, a.sync)
    ref = run(copy.deepcopy(base).double(), x.double(), g.double(), h, a.sync)
    print(f"# {a.model} batch {a.batch} {'channels_last' if a.channels_last else 'NCHW'} "
          f"converted: {a.only or 'all'}")
    print(f"{'module (backward order)':<40} {'type':<22} {'fwd ours':>9} {'fwd nat':>9} {'grad ours':>9} "
          f"{'grad nat':>9} {'ratio':>7}")
    types = {n: type(m).__name__ for n, m in base.named_modules()}
    shown = 0
    for key in ref["order_b"]:
        if key not in ours["grad"] or key not in nat["grad"]:
            continue
        r = ref["grad"][key]
        eo, en = rel_err(ours["grad"][key], r), rel_err(nat["grad"][key], r)
        fo, fn = rel_err(ours["out"][key], ref["out"][key]), rel_err(nat["out"][key], ref["out"][key])
        ratio = eo / max(en, 1e-9)
        if shown < a.top and (ratio > 5 and eo > 1e-6 or shown < 3):
            print(f"{key[0] + ('#' + str(key[1]) if key[1] else ''):<40} {types.get(key[0], '?'):<22} {fo:9.2e} {fn:9.2e} "
                  f"{eo:9.2e} {en:9.2e} {ratio:7.1f}")
            shown += 1
    if not a.no_hooks:  # sign flips against float64: where a ReLU-like kink downstream would route differently
        flips = []
        for key, r in ref["out"].items():
            if key in ours["out"] and key in nat["out"] and r.shape == ours["out"][key].shape:
                fo = int(((ours["out"][key] > 0) != (r > 0)).sum())
                fn = int(((nat["out"][key] > 0) != (r > 0)).sum())
                flips.append((fo, fn, key))
        print(f"sign flips against float64, all module outputs: ours {sum(f[0] for f in flips)}, "
              f"native {sum(f[1] for f in flips)}")
        for fo, fn, key in sorted(flips, reverse=True)[:8]:
            print(f"  {key[0]:<40} {types.get(key[0], '?'):<22} ours {fo} native {fn}")
    rows = []
    for n, r in ref["params"].items():
        eo, en = rel_err(ours["params"][n], r), rel_err(nat["params"][n], r)
        rows.append((eo / max(en, 1e-9), n, eo, en))
    rows.sort(reverse=True)
    print("worst parameter gradients (ours/native error against float64):")
    for ratio, n, eo, en in rows[:8]:
        print(f"  {n:<40} ours {eo:9.2e} native {en:9.2e} ratio {ratio:8.1f}")
    print(f"input grad: ours {rel_err(ours['xgrad'], ref['xgrad']):.2e} native {rel_err(nat['xgrad'], ref['xgrad']):.2e}")


if __name__ == "__main__":
    main()
