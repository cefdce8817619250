"""Benchmark cases of the matmul family (TFLOP/s; skinny cases also GB/s, since they stream the weight):
  - bf16 / fp16 GEMM 8192^3 and 16384 x 16384 x 4096 (M x N x K) against torch.mm (cuBLAS);
  - linear + bias + gelu 16384 x 4096 -> 16384 forward (linear_act against eager F.linear + F.gelu and its
    torch.compile) and backward (linear_act_backward against eager gelu_backward + two mm + bias sum, and its
    compile);
  - skinny F.linear, M in {16, 64, 256}, K = N in {4096, 16384}, bf16 (split-K territory) against F.linear;
  - fp32 8192^3 with TF32 on (both sides) against torch.mm;
  - fp32 with TF32 off (both sides; PyTorch's default), 4096^3, 8192^3 and a linear layer 8192 x 4096 -> 4096:
    "torch_dnn" (the SIMT FFMA kernel, the default) and "torch_dnn 3xtf32" (TORCH_DNN_GEMM_FP32=3xtf32) against cuBLAS.
Where the build and device have the Hopper path, "torch_dnn" is the default choice (auto) and
"torch_dnn sm80" forces the portable mma.sync path (TORCH_DNN_GEMM_PATH=sm80) for comparison."""

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import Case, dtype_tag, rand_cuda, with_env
from torch_dnn.ops.matmul import gemm_paths

ops = torch.ops.torch_dnn
aten = torch.ops.aten


def _rand(shape, dtype, lo=-1.0, hi=1.0):
    return rand_cuda(shape, dtype, "NCHW", lo, hi)



def _with_tf32(fn, on=True):
    def run(*args):
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = on
        try:
            return fn(*args)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
    return run


def _ours(fn):
    """{"torch_dnn": fn} plus the forced portable path where a Hopper path exists."""
    impls = {"torch_dnn": fn}
    if "sm90" in gemm_paths():
        impls["torch_dnn sm80"] = with_env(fn, TORCH_DNN_GEMM_PATH="sm80")
    return impls


# The big GEMMs run at the H100's power cap, where the SM clock follows what ran just before: the impls take
# turns (4 rounds, the odd ones in reverse order, each turn after 150 ms of its own calls) instead of one after
# another (harness.Case.rounds). With 3 rounds in one order, each impl always followed the same one: the
# linear+gelu backward's torch_dnn turn followed compile's, eager's the slow portable-path impl's, and the row
# read 0.95x where alternating probes and the per-kernel profile gave 1.02-1.04x (docs/benchmarking.md).
_TAKE_TURNS = {"rounds": 4, "warmup_ms": 150.0}


def _gemm_case(m, n, k, dtype, group, tf32=False):
    mm = (lambda a, b: ops.mm(a, b, allow_tf32=True)) if tf32 else (lambda a, b: ops.mm(a, b))
    impls = _ours(mm)
    impls["cuBLAS (torch.mm)"] = _with_tf32(torch.mm) if tf32 else torch.mm
    es = torch.empty((), dtype=dtype).element_size()
    return Case("matmul", f"mm {m}x{n}x{k} {dtype_tag(dtype)}{' tf32' if tf32 else ''}",
                lambda: (_rand((m, k), dtype), _rand((k, n), dtype)), impls,
                bytes=(m * k + k * n + m * n) * es, flops=2 * m * n * k, group=group,
                target=">= cuBLAS" if not tf32 else ">= 0.9 cuBLAS", **_TAKE_TURNS)


def _fp32_case(m, n, k, group, linear=False):
    """float32 with TF32 off on both sides: ours on the SIMT FFMA kernel (the default) and on 3xTF32, against cuBLAS
    (its float32 SGEMM). linear: x [m, k] @ w.T, w [n, k] (both operands K-major); else torch.mm's
    A [m, k] @ B [k, n]."""
    if linear:
        ours, peer, name = F.linear, TF.linear, f"linear {m}x{k}->{n} fp32"
        inputs = lambda: (_rand((m, k), torch.float32), _rand((n, k), torch.float32))  # noqa: E731
    else:
        ours, peer, name = ops.mm, torch.mm, f"mm {m}x{n}x{k} fp32"
        inputs = lambda: (_rand((m, k), torch.float32), _rand((k, n), torch.float32))  # noqa: E731
    ours = _with_tf32(ours, on=False)
    impls = {"torch_dnn": ours, "torch_dnn 3xtf32": with_env(ours, TORCH_DNN_GEMM_FP32="3xtf32"),
             f"cuBLAS ({'F.linear' if linear else 'torch.mm'})": _with_tf32(peer, on=False)}
    return Case("matmul", f"{name} (TF32 off)", inputs, impls, bytes=(m * k + k * n + m * n) * 4, flops=2 * m * n * k,
                group=group, target=">= cuBLAS", **_TAKE_TURNS)


def _linear_gelu_cases(m, k, n, dtype, group):
    es = torch.empty((), dtype=dtype).element_size()

    def eager(x, w, b):
        return TF.gelu(TF.linear(x, w, b))

    fwd = _ours(lambda x, w, b: F.linear_act(x, w, b, "gelu"))
    fwd.update({"eager (cuBLAS + gelu)": eager, "compile": torch.compile(eager, dynamic=False)})
    out = [Case("matmul", f"linear+bias+gelu fwd {m}x{k}->{n} {dtype_tag(dtype)}",
                lambda: (_rand((m, k), dtype), _rand((n, k), dtype, -0.05, 0.05), _rand((n,), dtype)), fwd,
                bytes=(m * k + n * k + n + m * n) * es, flops=2 * m * n * k, group=group, target=">= compile",
                **_TAKE_TURNS)]

    def bwd_inputs():
        x, w, b = _rand((m, k), dtype), _rand((n, k), dtype, -0.05, 0.05), _rand((n,), dtype)
        pre = ops.linear_act(x, w, b, "none")[0]
        return _rand((m, n), dtype), x, w, pre

    def eager_bwd(g, x, w, pre):
        d = aten.gelu_backward(g, pre)
        return d @ w, d.t() @ x, d.sum(0)

    bwd = _ours(lambda g, x, w, pre: ops.linear_act_backward(g, x, w, pre, "gelu", None, None, None, [True, True, True]))
    bwd.update({"eager (gelu_backward + 2 mm + sum)": eager_bwd, "compile": torch.compile(eager_bwd, dynamic=False)})
    # read g, pre, x, w; write d_pre (and read it twice), dx, dw, db
    out.append(Case("matmul", f"linear+bias+gelu bwd {m}x{k}->{n} {dtype_tag(dtype)}", bwd_inputs, bwd,
                    bytes=(2 * m * n + m * k + n * k + m * n * 3 + m * k + n * k + n) * es,
                    flops=4 * m * n * k, group=group, target=">= compile", **_TAKE_TURNS))
    return out


def _skinny_case(m, kn, dtype, group):
    es = torch.empty((), dtype=dtype).element_size()
    fn = lambda x, w: F.linear(x, w)  # noqa: E731
    # the alternatives: the mma.sync skinny kernel (M <= 64), the Hopper skinny kernels (swap-AB or narrow tiles,
    # M <= 256), the Hopper 128x128 stream-K kernel (what M > 64 took before)
    impls = {"torch_dnn": fn}
    if m <= 64:
        impls["torch_dnn mma.sync skinny"] = with_env(fn, TORCH_DNN_GEMM_SKINNY="1")
    impls["torch_dnn Hopper skinny"] = with_env(fn, TORCH_DNN_GEMM_SKINNY="0")
    impls["torch_dnn stream-K"] = with_env(fn, TORCH_DNN_GEMM_SKINNY="0", TORCH_DNN_SM90_SKINNY="0")
    impls["cuBLAS (F.linear)"] = TF.linear
    return Case("matmul", f"linear skinny M={m} K=N={kn} {dtype_tag(dtype)}",
                lambda: (_rand((m, kn), dtype), _rand((kn, kn), dtype, -0.05, 0.05)), impls,
                bytes=(m * kn + kn * kn + m * kn) * es, flops=2 * m * kn * kn, group=group,
                target=">= cuBLAS")


def _weight_grad_case(tokens, n_out, n_in, dtype, group):
    """A linear layer's weight gradient dW = dY.T @ X over many tokens (K) with a small weight (few output tiles):
    the projections of the 4k-context LLaMA (8192 tokens, 512 wide) and of a ViT-B / BERT-base batch (3152, 768)."""
    es = torch.empty((), dtype=dtype).element_size()
    return Case("matmul", f"weight grad {n_out}x{n_in} over {tokens} tokens {dtype_tag(dtype)}",
                lambda: (_rand((tokens, n_out), dtype), _rand((tokens, n_in), dtype)),
                {**_ours(lambda g, x: ops.mm(g.t(), x)), "cuBLAS (torch.mm)": lambda g, x: torch.mm(g.t(), x)},
                bytes=(tokens * (n_out + n_in) + n_out * n_in) * es, flops=2 * tokens * n_out * n_in, group=group,
                target=">= cuBLAS")


def cases(quick: bool = False):
    out = []
    gemm_shapes = [(8192, 8192, 8192)] + ([] if quick else [(16384, 16384, 4096)])
    for dtype in (torch.bfloat16, torch.float16):
        for m, n, k in gemm_shapes:
            out.append(_gemm_case(m, n, k, dtype, f"GEMM {dtype_tag(dtype)}"))
    out += _linear_gelu_cases(16384, 4096, 16384, torch.bfloat16, "linear + bias + gelu bf16")
    for m in ((64,) if quick else (16, 64, 256)):
        for kn in ((4096,) if quick else (4096, 16384)):
            out.append(_skinny_case(m, kn, torch.bfloat16, "skinny linear bf16"))
    wgrad_shapes = [(8192, 512, 512)] if quick else [(8192, 128, 512), (8192, 512, 512), (8192, 1536, 512),
                                                     (8192, 512, 1536), (3152, 768, 768), (3152, 3072, 768)]
    for tokens, n_out, n_in in wgrad_shapes:
        out.append(_weight_grad_case(tokens, n_out, n_in, torch.bfloat16, "weight gradient bf16 (few tiles, long K)"))
    out.append(_gemm_case(8192, 8192, 8192, torch.float32, "fp32 (TF32 on)", tf32=True))
    for m, n, k in [(8192, 8192, 8192)] + ([] if quick else [(4096, 4096, 4096)]):
        out.append(_fp32_case(m, n, k, "fp32 (TF32 off)"))
    if not quick:
        out.append(_fp32_case(8192, 4096, 4096, "fp32 (TF32 off)", linear=True))
    return out
