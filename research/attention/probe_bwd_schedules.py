"""The Hopper backward's schedules (TORCH_DNN_ATTENTION_SM90_BWD: cp.async, ws) one at a time, each in its own
process under a time limit, so that a schedule that hangs on the GPU (a barrier phase never completing, a setmaxnreg
increase the register pool never satisfies) costs its limit and not the session: the backward kernels it runs
(profiler names), its gradients against the cp.async schedule's (bitwise equal: the same MMAs in the same order) on
small and multi-tile problems (causal, GQA, packed batches), then the backward's time at issue 37's shapes (CUDA
events around torch.autograd.grad, median of 20).

    python research/attention/probe_bwd_schedules.py [--limit SECONDS] [--no-time]
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEDULES = ("cp.async", "ws")

CHILD = r'''
import sys, torch
sys.path.insert(0, ROOT)
import torch_dnn.functional as F
ops = torch.ops.torch_dnn

torch.manual_seed(0)
def rand(*s, grad=False):
    return torch.empty(*s, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1).requires_grad_(grad)

def grads(q, k, v, g, causal, gqa):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    return torch.autograd.grad(o, (q, k, v), g)

outs = {}
if torch.cuda.is_available():  # which backward kernels this schedule runs (a map the encoder refuses: cp.async's)
    from torch.profiler import ProfilerActivity, profile
    q = rand(1, 2, 256, 128, grad=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        grads(q, q, q, rand(1, 2, 256, 128), False, False)
        torch.cuda.synchronize()
    print("kernels:", sorted({e.name for e in prof.events() if "flash_bwd" in e.name}), flush=True)
for name, (B, Hq, Hkv, Sq, Sk, D, causal) in {
        "small D64": (1, 2, 2, 130, 130, 64, False), "D128 B2 300x260": (2, 2, 2, 300, 260, 128, False),
        "D64 causal GQA 2:1 330": (1, 4, 2, 330, 330, 64, True), "D128 causal 200x520": (1, 2, 2, 200, 520, 128, True),
        "D128 GQA 4:1 1100x900": (1, 8, 2, 1100, 900, 128, False)}.items():
    q, k, v = rand(B, Hq, Sq, D, grad=True), rand(B, Hkv, Sk, D, grad=True), rand(B, Hkv, Sk, D, grad=True)
    outs[name] = grads(q, k, v, rand(B, Hq, Sq, D), causal, Hq != Hkv)
# a packed batch: three sequences (one empty) as [1, H, total, D]
lens_q, lens_k = [210, 0, 90], [140, 30, 260]
cq = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
ck = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
q, k, v = rand(1, 2, sum(lens_q), 128), rand(1, 1, sum(lens_k), 128), rand(1, 1, sum(lens_k), 128)
kw = dict(cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k))
o, lse, rng = ops.attention_forward(q, k, v, **kw)
outs["varlen D128 GQA 2:1"] = ops.attention_backward(rand(1, 2, sum(lens_q), 128), q, k, v, o, lse, rng, None, 0.0,
                                                     False, None, False, -1, -1, 0.0, None, cq, ck, max(lens_q),
                                                     max(lens_k), False, False)[:3]
torch.cuda.synchronize()
torch.save({n: [t.cpu() for t in gs] for n, gs in outs.items()}, OUT)
print("gradients saved", flush=True)
if TIME:
    for B, H, S, D, causal in ((4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (8, 16, 2048, 64, False)):
        q, k, v = (rand(B, H, S, D, grad=True) for _ in range(3))
        g = rand(B, H, S, D)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        f = lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True)
        for _ in range(5):
            f()
        ts = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); f(); b.record(); b.synchronize()
            ts.append(a.elapsed_time(b))
        ms = sorted(ts)[len(ts) // 2]
        flops = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)
        print(f"time bwd B{B} H{H} S{S} D{D}{' causal' if causal else ''}: {ms:.4f} ms "
              f"{flops / ms / 1e9:.1f} TFLOP/s", flush=True)
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=float, default=90.0, help="seconds a schedule's process may take")
    ap.add_argument("--no-time", action="store_true")
    args = ap.parse_args()
    import torch

    results = {}
    for s in SCHEDULES:
        out = f"/tmp/probe_bwd_{s}.pt"
        env = dict(os.environ, TORCH_DNN_ATTENTION_SM90_BWD=s, TORCH_DNN_ATTENTION_PATH="flash")
        code = f"ROOT = {ROOT!r}; OUT = {out!r}; TIME = {not args.no_time}\n" + CHILD
        try:
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               timeout=args.limit)
            print(f"== {s}: exit {r.returncode}\n{r.stdout}{r.stderr[-2000:] if r.returncode else ''}", flush=True)
            if r.returncode == 0:
                results[s] = torch.load(out)
        except subprocess.TimeoutExpired:
            print(f"== {s}: DID NOT FINISH in {args.limit:.0f} s (a hang)", flush=True)
    base = results.get("cp.async")
    for s, outs in results.items():
        if s == "cp.async" or base is None:
            continue
        for name, gs in outs.items():
            for what, x, y in zip(("dq", "dk", "dv"), gs, base[name]):
                same = torch.equal(x, y)
                err = (x.float() - y.float()).abs().max().item()
                print(f"{s} {name} {what}: {'bitwise equal' if same else f'DIFFERS (max {err:.3g})'} to cp.async")


if __name__ == "__main__":
    main()
