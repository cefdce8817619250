"""Host time per call of small-tensor CUDA ops (the GPU work is microseconds, so a launch loop measures the
host path): `python research/host/probe_host.py [bn]`. Prints microseconds per call for torch_dnn and PyTorch, and
the CPU-side operators of one torch_dnn step (torch.profiler), to see where the host time goes.
`python research/host/probe_host.py autograd`: forward + backward of small ops that record autograd.
`python research/host/probe_host.py conv`: convolutions on small tensors by route (Hopper implicit GEMM NHWC, staged
NCHW, depthwise NHWC), forward and forward + backward against F.conv2d (cuDNN), and the CPU operators of ours.
`python research/host/probe_host.py convlayers`: the layers of one small convolution's forward (wrapper, autograd, the
op, its route, PyTorch's backend query) against cuDNN.
`python research/host/probe_host.py linear`: the layers of a decode-sized linear call (Python wrapper, the op below
autograd, the launcher with one kernel or a split-K pair) against F.linear (cuBLAS), on small shapes whose GPU
time is under the host time."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from scripts.profile_kernels import bn_tensors


def per_call_us(fn, n=300):
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def bn_steps():
    x, w, b, rm, rv, g = bn_tensors((4, 64, 4, 4), "NHWC")

    def fwd(fn):
        return lambda: fn(x.detach(), rm, rv, w.detach(), b.detach(), True, 0.1, 1e-5)

    def fb(fn):
        return lambda: torch.autograd.grad(fn(x, rm, rv, w, b, True, 0.1, 1e-5), [x, w, b], g)

    return {"bn fwd torch_dnn": fwd(F.batch_norm), "bn fwd torch": fwd(TF.batch_norm),
            "bn fwd+bwd torch_dnn": fb(F.batch_norm), "bn fwd+bwd torch": fb(TF.batch_norm)}


def linear_layers():
    """Host time of each layer of torch_dnn's linear, for skinny shapes (Hopper skinny kernels) and one big-path
    shape; the GPU work of each is a few microseconds, so the loop measures the host."""
    ops = torch.ops.torch_dnn
    la = ops.linear_act.default
    for m, k, n in [(16, 256, 1024), (16, 1024, 1024), (64, 1024, 4096), (256, 512, 512)]:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)

        def below():
            with torch._C._AutoDispatchBelowAutograd():
                return la(x, w, b, "none", None, None, None, allow_tf32=False)

        def below_linear():
            with torch._C._AutoDispatchBelowAutograd():
                return ops.linear.default(x, w, b)

        rows = {"F.linear (cuBLAS)": lambda: TF.linear(x, w, b),
                "torch.mm (cuBLAS)": lambda: torch.mm(x, w.t()),
                "torch_dnn F.linear": lambda: F.linear(x, w, b),
                "op at Autograd key": lambda: la(x, w, b, "none", None, None, None, allow_tf32=False),
                "op below autograd": below,
                "linear op below autograd": below_linear,
                "torch_dnn mm": lambda: F.mm(x, w.t()),
                "empty(out) only": lambda: torch.empty(m, n, device="cuda", dtype=torch.bfloat16)}
        for env in [{}, {"TORCH_DNN_SM90_SKINNY_SPLITS": "1"}, {"TORCH_DNN_SM90_SKINNY": "0"},
                    {"TORCH_DNN_GEMM_PATH": "sm80"}]:
            os.environ.update(env)
            tag = ",".join(f"{k[10:]}={v}" for k, v in env.items()) or "default"
            for name, fn in rows.items():
                if env and not name.startswith("torch_dnn F.linear"):
                    continue
                print(f"M={m:<4d} K={k:<5d} N={n:<5d} {tag:22s} {name:22s} {per_call_us(fn, 2000):7.1f} us/call")
            for key in env:
                del os.environ[key]


def autograd_steps():
    """Forward + backward host time of small ops that record autograd: torch's, torch_dnn's functional wrappers
    (the registered formula applied as a Function from Python) and the op called through the dispatcher
    (torch.library's autograd kernel), on tiny tensors."""
    x = torch.randn(64, 64, device="cuda", requires_grad=True)
    w = torch.randn(64, 64, device="cuda", requires_grad=True)
    b = torch.randn(64, device="cuda", requires_grad=True)
    g = torch.randn(64, 64, device="cuda")
    ops = torch.ops.torch_dnn
    rows = {
        "relu fwd+bwd torch": lambda: torch.autograd.grad(TF.relu(x), x, g),
        "relu fwd+bwd torch_dnn": lambda: torch.autograd.grad(F.relu(x), x, g),
        "relu fwd+bwd dispatcher": lambda: torch.autograd.grad(ops.relu(x), x, g),
        "linear fwd+bwd torch": lambda: torch.autograd.grad(TF.linear(x, w, b), (x, w, b), g),
        "linear fwd+bwd torch_dnn": lambda: torch.autograd.grad(F.linear(x, w, b), (x, w, b), g),
        "linear fwd+bwd dispatcher": lambda: torch.autograd.grad(ops.linear(x, w, b), (x, w, b), g),
        "linear fwd torch": lambda: TF.linear(x, w, b),
        "linear fwd torch_dnn": lambda: F.linear(x, w, b),
        "linear fwd dispatcher": lambda: ops.linear(x, w, b),
    }
    for name, fn in rows.items():
        print(f"{name:28s} {per_call_us(fn, 2000):8.1f} us/call")


def conv_steps():
    """Small convolutions whose GPU time is a few microseconds: the loop measures each route's host path."""
    def tensors(c, k, groups, layout):
        mf = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        x = torch.randn(2, c, 8, 8, device="cuda", dtype=torch.bfloat16).to(memory_format=mf).requires_grad_()
        w = torch.randn(k, c // groups, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=mf)
        return x, w.requires_grad_()

    rows = {}
    for label, c, groups, layout in (("3x3 NHWC", 64, 1, "NHWC"), ("3x3 NCHW staged", 64, 1, "NCHW"),
                                     ("depthwise NHWC", 64, 64, "NHWC")):
        x, w = tensors(c, c, groups, layout)
        g = torch.randn_like(x)
        for impl, fn in (("torch_dnn", F.conv2d), ("torch", TF.conv2d)):
            conv = (lambda fn=fn, x=x, w=w, groups=groups: fn(x, w, None, 1, 1, 1, groups))
            rows[f"conv {label} fwd {impl}"] = conv
            rows[f"conv {label} fwd+bwd {impl}"] = (lambda conv=conv, x=x, w=w, g=g: torch.autograd.grad(conv(), [x, w], g))
    return rows


def conv_layers():
    """The layers of one small convolution's forward (GPU work of a few microseconds, so the loop measures the host):
    the functional wrapper with and without autograd, the op below autograd on the Hopper route and on the portable
    one (TORCH_DNN_CONV_SM90=0), PyTorch's backend query that the op asks for the result's layout, and cuDNN's
    forward; an empty_strided and a small relu op as the floor of any op."""
    ops = torch.ops.torch_dnn
    x = torch.randn(2, 64, 8, 8, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    one, zero = [1, 1], [0, 0]

    def below():
        with torch._C._AutoDispatchBelowAutograd():
            return ops.convolution.default(x, w, None, one, one, one, False, zero, 1)

    def no_grad(fn):
        def run():
            with torch.no_grad():
                return fn()
        return run

    rows = {"F.conv2d torch_dnn, autograd": lambda: F.conv2d(xg, wg, None, 1, 1),
            "F.conv2d torch_dnn, no_grad": no_grad(lambda: F.conv2d(x, w, None, 1, 1)),
            "op below autograd": below,
            "F.conv2d cuDNN, autograd": lambda: TF.conv2d(xg, wg, None, 1, 1),
            "F.conv2d cuDNN, no_grad": no_grad(lambda: TF.conv2d(x, w, None, 1, 1)),
            "select_conv_backend": lambda: torch._C._select_conv_backend(x, w, None, one, one, one, False, zero, 1),
            "empty_strided(out)": lambda: torch.empty_strided((2, 64, 8, 8), (4096, 1, 512, 64), device="cuda",
                                                              dtype=torch.bfloat16),
            "relu op below autograd": no_grad(lambda: ops.relu.default(x))}
    for env in [{}, {"TORCH_DNN_CONV_SM90": "0"}]:
        os.environ.update(env)
        tag = ",".join(f"{k}={v}" for k, v in env.items()) or "default"
        for name, fn in rows.items():
            if env and "torch_dnn" not in name and not name.startswith("op "):
                continue
            print(f"{tag:22s} {name:32s} {per_call_us(fn, 2000):7.1f} us/call")
        for key in env:
            del os.environ[key]
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(50):
            below()
        torch.cuda.synchronize()
    print("== op below autograd, 50 calls")
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    if sys.argv[1:] == ["convlayers"]:
        conv_layers()
        sys.exit(0)
    if sys.argv[1:] == ["conv"]:
        steps = conv_steps()
        for name, fn in steps.items():
            print(f"{name:40s} {per_call_us(fn):8.1f} us/call")
        from torch.profiler import ProfilerActivity, profile
        for name in [n for n in steps if n.endswith("fwd+bwd torch_dnn")]:
            with profile(activities=[ProfilerActivity.CPU]) as p:
                for _ in range(20):
                    steps[name]()
                torch.cuda.synchronize()
            print(f"== {name}, 20 steps")
            print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
        sys.exit(0)
    if sys.argv[1:] == ["autograd"]:
        autograd_steps()
        sys.exit(0)
    if sys.argv[1:] == ["linear"]:
        linear_layers()
        sys.exit(0)
    steps = bn_steps()
    for name, fn in steps.items():
        print(f"{name:28s} {per_call_us(fn):8.1f} us/call")
    os.environ["TORCH_DNN_BN_PERSIST"] = "0"
    print(f"{'bn fwd+bwd td separate':28s} {per_call_us(steps['bn fwd+bwd torch_dnn']):8.1f} us/call")
    del os.environ["TORCH_DNN_BN_PERSIST"]
    # a step at a time (synchronized): the latency of one step, where the pipelined loop above may be GPU-bound
    # (a full launch queue then blocks whichever launch comes next, and its op is charged the wait)
    for name in ("bn fwd+bwd torch_dnn", "bn fwd+bwd torch"):
        fn = steps[name]
        print(f"{name + ' synced':28s} {per_call_us(lambda: (fn(), torch.cuda.synchronize()), 200):8.1f} us/call")
    from torch.profiler import ProfilerActivity, profile
    for name in ("bn fwd+bwd torch_dnn", "bn fwd+bwd torch"):
        fn = steps[name]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
        print(f"== {name}, 20 steps")
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))
        print(p.key_averages().table(sort_by="self_device_time_total", row_limit=8))
