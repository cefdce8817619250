"""Phase timings of batch_norm's persistent training kernels on 64x256x56x56 bf16 channels-last, and the
GPU time per fwd+bwd step in a back-to-back loop (direct ops and through autograd), with the host time per
step: `python research/batch_norm/probe_bn_trace.py [--no-trace]` (knobs such as TORCH_DNN_BN_L2_MB from the environment). The traces come from TORCH_DNN_BN_TRACE=1 (csrc/batch_norm/
batch_norm_kernels.cu): each phase's end, min..max over the blocks, in microseconds from the first start:
[1] pass 1 done, [2] after the first grid barrier, [3] after the merge and second barrier, [4] pass 2 done."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch

import torch_dnn.functional as F

ops = torch.ops.torch_dnn


def main():
    x = torch.empty((64, 256, 56, 56), device="cuda", dtype=torch.bfloat16).uniform_(-3, 3)
    x = x.contiguous(memory_format=torch.channels_last)
    w, b = torch.rand(256, device="cuda") + 0.5, torch.randn(256, device="cuda")
    _, mean, invstd = ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
    g = torch.randn_like(x)
    torch.cuda.synchronize()
    if "--no-trace" not in sys.argv:
        os.environ["TORCH_DNN_BN_TRACE"] = "1"
        for _ in range(2):
            ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
        for _ in range(2):
            ops.batch_norm_backward(g, x, w, None, None, mean, invstd, True, 1e-5, [True, True, True])
        torch.cuda.synchronize()
        del os.environ["TORCH_DNN_BN_TRACE"]
    xg, wg, bg = (t.detach().requires_grad_() for t in (x, w, b))
    rm, rv = torch.zeros(256, device="cuda"), torch.ones(256, device="cuda")

    def direct():
        _, m, i = ops.batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        ops.batch_norm_backward(g, x, w, None, None, m, i, True, 1e-5, [True, True, True])

    def autograd():
        torch.autograd.grad(F.batch_norm(xg, rm, rv, wg, bg, True, 0.1, 1e-5), [xg, wg, bg], g)

    for name, fn in (("direct ops", direct), ("autograd", autograd)):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t = time.perf_counter()
        e0.record()
        for _ in range(30):
            fn()
        e1.record()
        host = (time.perf_counter() - t) / 30 * 1e6
        torch.cuda.synchronize()
        print(f"{name}: {e0.elapsed_time(e1) / 30 * 1e3:.1f} us/step (GPU-bound loop), host {host:.1f} us/step")


if __name__ == "__main__":
    main()
