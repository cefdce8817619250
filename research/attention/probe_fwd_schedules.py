"""The Hopper forward's schedules (TORCH_DNN_ATTENTION_SM90_FWD: cp.async, ws, pingpong) one at a time, each in
its own process under a time limit, so that a schedule that hangs on the GPU costs its limit and not the session:
the forward kernel it runs (profiler name), its output against the cp.async schedule's (bitwise where the tiles are
the same: the same MMAs and softmax in the same order; ping-pong's 176-key tiles at head dim 128 without causality
sum in another order) on small and multi-tile problems (causal, GQA, packed batches), then its time at issue 37's
shapes (CUDA events, median of 20).

    python research/attention/probe_fwd_schedules.py [--limit SECONDS] [--no-time]
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEDULES = ("cp.async", "ws", "pingpong")

CHILD = r'''
import sys, torch
sys.path.insert(0, ROOT)
import torch_dnn.functional as F
ops = torch.ops.torch_dnn

torch.manual_seed(0)
def rand(*s):
    return torch.empty(*s, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)

outs = {}
if torch.cuda.is_available():  # which forward kernel this schedule runs (a map the encoder refuses: cp.async's)
    from torch.profiler import ProfilerActivity, profile
    q = rand(1, 2, 256, 128)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q, q, q)
        torch.cuda.synchronize()
    print("kernels:", sorted({e.name for e in prof.events() if "flash_forward" in e.name}), flush=True)
for name, (B, Hq, Hkv, Sq, Sk, D, causal) in {
        "small D64": (1, 2, 2, 130, 130, 64, False), "D128 B2 300x260": (2, 2, 2, 300, 260, 128, False),
        "D64 causal GQA 2:1 330": (1, 4, 2, 330, 330, 64, True), "D128 causal 200x520": (1, 2, 2, 200, 520, 128, True)}.items():
    q, k, v = rand(B, Hq, Sq, D), rand(B, Hkv, Sk, D), rand(B, Hkv, Sk, D)
    outs[name] = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)
# a packed batch: three sequences (one empty) as [1, H, total, D]
lens_q, lens_k = [210, 0, 90], [140, 30, 260]
cq = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
ck = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
q, k, v = rand(1, 2, sum(lens_q), 128), rand(1, 1, sum(lens_k), 128), rand(1, 1, sum(lens_k), 128)
outs["varlen D128 GQA 2:1"] = ops.attention_forward(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck,
                                                   max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k))[0]
torch.cuda.synchronize()
torch.save({n: o.cpu() for n, o in outs.items()}, OUT)
print("outputs saved", flush=True)
if TIME:
    for B, H, S, D, causal in ((4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (8, 16, 2048, 64, False)):
        q, k, v = rand(B, H, S, D), rand(B, H, S, D), rand(B, H, S, D)
        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        for _ in range(5):
            f()
        ts = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); f(); b.record(); b.synchronize()
            ts.append(a.elapsed_time(b))
        ms = sorted(ts)[len(ts) // 2]
        flops = 4 * B * H * S * S * D / (2 if causal else 1)
        print(f"time B{B} H{H} S{S} D{D}{' causal' if causal else ''}: {ms:.4f} ms {flops / ms / 1e9:.1f} TFLOP/s",
              flush=True)
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=float, default=60.0, help="seconds a schedule's process may take")
    ap.add_argument("--no-time", action="store_true")
    args = ap.parse_args()
    import torch

    results = {}
    for s in SCHEDULES:
        out = f"/tmp/probe_fwd_{s}.pt"
        env = dict(os.environ, TORCH_DNN_ATTENTION_SM90_FWD=s, TORCH_DNN_ATTENTION_PATH="flash")
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
        for name, o in outs.items():
            same = torch.equal(o, base[name])
            err = (o.float() - base[name].float()).abs().max().item()
            print(f"{s} {name}: {'bitwise equal' if same else f'DIFFERS (max {err:.3g})'} to cp.async")


if __name__ == "__main__":
    main()
