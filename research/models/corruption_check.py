"""Does anything write into a tensor that autograd did not see change? (issue: converted models' gradients)

Every module output is recorded (a reference, a clone and its version counter). At every later forward hook
and every gradient hook, each recorded tensor whose version is unchanged must still equal its clone: a
difference means a kernel wrote memory it does not own. The first hook that sees one names the window.

    python research/models/corruption_check.py resnet50 --batch 8 --only BatchNorm2d
"""
import argparse

import torch

from grad_bisect import build, swap  # noqa: E402  (same folder)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--no-check", action="store_true", help="run the step only (for compute-sanitizer)")
    a = p.parse_args()
    torch.manual_seed(0)
    mf = torch.channels_last if a.channels_last else torch.contiguous_format
    model = swap(build(a.model).to(a.device).train().to(memory_format=mf), a.only)
    x = torch.randn(a.batch, 3, a.size, a.size, device=a.device).contiguous(memory_format=mf)
    seen = []  # (name, ref, clone, version)
    state = {"reported": False}

    def check(where):
        if a.no_check or state["reported"]:
            return
        for name, ref, cl, ver in seen:
            if ref._version == ver and not torch.equal(ref, cl):
                bad = (ref != cl).sum().item()
                print(f"CORRUPTED: output of {name} ({bad} of {ref.numel()} elements, version {ver} unchanged), "
                      f"first seen at {where}")
                state["reported"] = True
                return

    def fwd_hook(name):
        def fn(mod, inp, out):
            check(f"forward of {name}")
            if isinstance(out, torch.Tensor) and out.device.type == a.device:
                seen.append((name, out, out.detach().clone(), out._version))
                if out.requires_grad:
                    out.register_hook(lambda g: check(f"backward, gradient at the output of {name}"))
        return fn

    for name, m in model.named_modules():
        if name:
            m.register_forward_hook(fwd_hook(name))
    y = model(x)
    check("end of forward")
    y.float().sum().backward()
    if a.device == "cuda":
        torch.cuda.synchronize()
    check("end of backward")
    if not state["reported"]:
        print("no corruption seen" if not a.no_check else "step done")


if __name__ == "__main__":
    main()
