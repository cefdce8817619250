"""Per-kernel GPU times of one step, from torch.profiler:
`python scripts/profile_kernels.py batch_norm|norm|skinny|linear_fwd|linear_bwd`.
Prints each kernel's name, calls and mean microseconds per step, for torch_dnn and the eager peer, and the
GPU's span per step (kernels plus the idle gaps between them, back-to-back steps)."""
import sys

import torch
import torch.nn.functional as TF
from torch.profiler import ProfilerActivity, profile

import torch_dnn.functional as F


def bn_tensors(shape, layout):
    """bf16 input (requires grad) in `layout`, float32 weight and bias (require grad), running stats, a gradient."""
    x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    if layout == "NHWC":
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    c = shape[1]
    w = torch.rand(c, device="cuda").requires_grad_()
    b = torch.randn(c, device="cuda").requires_grad_()
    rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
    return x, w, b, rm, rv, torch.randn_like(x)


def bn_steps(layout):
    x, w, b, rm, rv, g = bn_tensors((64, 256, 56, 56), layout)

    def step(fn):
        def run():
            y = fn(x, rm, rv, w, b, True, 0.1, 1e-5)
            torch.autograd.grad(y, [x, w, b], g)
        return run
    return {f"torch_dnn {layout}": step(F.batch_norm), f"eager {layout}": step(TF.batch_norm)}


def norm_steps():
    """layer_norm / rms_norm backward (and forward) per kernel, new kernels and the earlier ones (env knobs)."""
    import os
    ops = torch.ops.torch_dnn
    out = {}
    for rows, n in [(32768, 4096), (8192, 16384)]:
        for dtype in (torch.bfloat16, torch.float32):
            x = torch.empty(rows, n, device="cuda", dtype=dtype).uniform_(-4, 4)
            w = torch.rand(n, device="cuda", dtype=dtype) + 0.5
            b = torch.randn(n, device="cuda", dtype=dtype)
            g = torch.randn_like(x)
            _, mean, rstd = ops.layer_norm(x, [n], w, b, 1e-5)
            tag = f"{rows}x{n} {str(dtype)[6:]}"
            for variant, env in [("new", {}), ("old", {"TORCH_DNN_NORM_FWD_STATS": "twopass",
                                                      "TORCH_DNN_NORM_FWD_GRID": "waves"})]:
                def step(env=env, x=x, w=w, b=b, g=g, mean=mean, rstd=rstd, n=n):
                    saved = dict(os.environ)
                    os.environ.update(env)
                    try:
                        ops.layer_norm(x, [n], w, b, 1e-5)
                        ops.layer_norm_backward(g, x, mean, rstd, w, [n], [True, True, True])
                        ops.rms_norm_backward(g, x, rstd, w, [n], [True, True])
                    finally:
                        os.environ.clear()
                        os.environ.update(saved)
                out[f"norm {tag} {variant}"] = step
    return out


def skinny_steps():
    """Skinny F.linear (x @ W.T) per kernel: the default choice, the Hopper skinny kernels (swap-AB 64-wide and
    narrow 128x64) with forced K splits, the 128x128 stream-K kernel, and cuBLAS; the weight cycles over copies
    that together exceed the L2."""
    import os
    out = {}
    for m, kn in [(16, 4096), (256, 4096), (256, 16384)]:
        ws = [torch.empty(kn, kn, device="cuda", dtype=torch.bfloat16).uniform_(-0.05, 0.05)
              for _ in range(max(2, -(-160 * 2**20 // (kn * kn * 2))))]
        x = torch.empty(m, kn, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
        hop = {"TORCH_DNN_GEMM_SKINNY": "0"}
        variants = [("default", {})] + [
            (f"{k} splits={sp}", {**hop, "TORCH_DNN_SM90_SKINNY_KERNEL": k, "TORCH_DNN_SM90_SKINNY_SPLITS": sp})
            for k in ("swap64", "narrow") for sp in ("1", "2")] + [("stream-K", {**hop, "TORCH_DNN_SM90_SKINNY": "0"})]
        for variant, env in variants:
            def step(env=env, x=x, ws=ws):
                saved = dict(os.environ)
                os.environ.update(env)
                try:
                    for w in ws:
                        F.linear(x, w)
                finally:
                    os.environ.clear()
                    os.environ.update(saved)
            out[f"linear M={m} K=N={kn} x{len(ws)} {variant}"] = step
        out[f"linear M={m} K=N={kn} x{len(ws)} cuBLAS"] = lambda x=x, ws=ws: [TF.linear(x, w) for w in ws]
    return out


def linear_bwd_steps():
    """linear_act backward (gelu, bias) at 16384x4096 -> 16384 bf16 per kernel, ours against eager's
    gelu_backward + 2 mm + sum (the harness's case): which GEMM layout costs what."""
    ops = torch.ops.torch_dnn
    m, k, n = 16384, 4096, 16384
    x = torch.empty(m, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    w = torch.empty(n, k, device="cuda", dtype=torch.bfloat16).uniform_(-0.05, 0.05)
    b = torch.empty(n, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    pre = ops.linear_act(x, w, b, "none")[0]
    g = torch.empty(m, n, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)

    def eager():
        d = torch.ops.aten.gelu_backward(g, pre)
        return d @ w, d.t() @ x, d.sum(0)
    return {"linear_act bwd torch_dnn": lambda: ops.linear_act_backward(g, x, w, pre, "gelu", None, None, None,
                                                                         [True, True, True]),
            "linear_act bwd eager": eager}


def linear_fwd_steps():
    """linear + bias + gelu forward at 16384x4096 -> 16384 bf16 per kernel: our fused kernel and our plain linear
    (what the epilogue costs), eager's addmm + gelu, torch.compile's kernels."""
    m, k, n = 16384, 4096, 16384
    x = torch.empty(m, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    w = torch.empty(n, k, device="cuda", dtype=torch.bfloat16).uniform_(-0.05, 0.05)
    b = torch.empty(n, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)

    def eager():
        return TF.gelu(TF.linear(x, w, b))
    compiled = torch.compile(eager, dynamic=False)
    return {"linear+gelu fwd torch_dnn": lambda: F.linear_act(x, w, b, "gelu"),
            "linear fwd torch_dnn (no activation)": lambda: F.linear(x, w, b),
            "linear+gelu fwd eager": eager, "linear+gelu fwd compile": compiled}


def report(name, fn, steps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0 and e.count >= steps:
            rows.append((t / steps, e.count // steps, e.key))
    rows.sort(reverse=True)
    # the GPU's span of the steps (first start to last end): kernel time plus the gaps between GPU operations
    spans = [(e.time_range.start, e.time_range.end) for e in prof.events()
             if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA")]
    span = (max(b for _, b in spans) - min(a for a, _ in spans)) / steps if spans else 0.0
    print(f"== {name}: {sum(r[0] for r in rows):.1f} us of kernels per step; GPU span {span:.1f} us per step")
    for t, n, k in rows[:14]:
        print(f"  {t:8.1f} us  x{n}  {k[:110]}")


if __name__ == "__main__":
    fams = {"batch_norm": lambda: {**bn_steps("NHWC"), **bn_steps("NCHW")}, "norm": norm_steps, "skinny": skinny_steps,
            "linear_fwd": linear_fwd_steps, "linear_bwd": linear_bwd_steps}
    for fam in sys.argv[1:] or list(fams):
        for name, fn in fams[fam]().items():
            report(name, fn)
