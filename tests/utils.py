"""Helpers every family's tests use: devices and dtypes, the layouts that break kernels, comparison against
PyTorch with the error-ratio rule (torch_dnn.testing), opcheck over samples, float64 gradcheck."""
from __future__ import annotations

import copy
import os
import subprocess

import pytest
import torch

from torch_dnn.testing import KINKS, check_against_torch, compare, grad_off_kinks, random_like_case  # noqa: F401

CUDA = torch.cuda.is_available()


def devices():
    """cpu always; cuda as a marked param (skipped cleanly without a GPU)."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def dtypes(device: str):
    return [torch.float32, torch.float64, torch.float16, torch.bfloat16]


ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def make_input(shape, dtype, device, layout="contiguous", low=-4.0, high=4.0) -> torch.Tensor:
    """A fresh random tensor of `shape` (the logical shape) in the given memory layout:
    contiguous | transposed (non-contiguous, dense) | strided (every other element) | offset (a view that
    does not start at the allocation) | channels_last (4-D) | channels_last_3d (5-D) | expanded (stride 0 in
    dim 0)."""
    if layout == "contiguous":
        return random_like_case(shape, dtype, device, low=low, high=high)
    if layout == "transposed":
        if len(shape) < 2:
            return make_input(shape, dtype, device, "strided", low, high)
        base = random_like_case(tuple(shape[:-2]) + (shape[-1], shape[-2]), dtype, device, low=low, high=high)
        return base.transpose(-1, -2)
    if layout == "strided":
        big = random_like_case(tuple(shape[:-1]) + (shape[-1] * 2,), dtype, device, low=low, high=high)
        return big[..., ::2]
    if layout == "offset":
        n = 1
        for s in shape:
            n *= s
        flat = random_like_case((n + 3,), dtype, device, low=low, high=high)
        return flat[3:].view(shape)
    if layout == "channels_last":
        assert len(shape) == 4
        return random_like_case(shape, dtype, device, low=low, high=high).contiguous(memory_format=torch.channels_last)
    if layout == "channels_last_3d":
        assert len(shape) == 5
        return random_like_case(shape, dtype, device, low=low, high=high).contiguous(
            memory_format=torch.channels_last_3d)
    if layout == "expanded":
        row = random_like_case((1,) + tuple(shape[1:]), dtype, device, low=low, high=high)
        return row.expand(shape)
    raise ValueError(layout)


LAYOUTS = ["contiguous", "transposed", "strided", "offset", "channels_last", "expanded"]


def in_layout(t, layout):
    """t's values in one of the convolution tests' memory layouts: contiguous, channels_last (4-D or 5-D), nlc
    ((N, C, L) stored as (N, L, C)), transposed (the last two dims swapped in memory), strided (every other element
    of a wider tensor)."""
    if layout == "contiguous":
        return t.contiguous()
    if layout == "channels_last":
        return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    if layout == "nlc":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    if layout == "transposed":
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "strided":
        wide = torch.cat([t, t], dim=-1)
        return wide[..., ::2].copy_(t)
    raise ValueError(layout)


def random_in_layout(shape, dtype, device, layout="contiguous", low=-1.0, high=1.0):
    return in_layout(make_input(shape, dtype, device, "contiguous", low, high), layout)


# A Hopper GPU (cc 9.0, the sm_90a kernels' target) and whether this build has the CUTLASS Hopper kernels (the GEMM
# and the convolutions built with it: TORCH_DNN_WITH_SM90_GEMM).
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def sm90_gemm_built() -> bool:
    try:
        from torch_dnn.ops.matmul import gemm_paths
        return "sm90" in gemm_paths()
    except Exception:
        return False


def case_shapes():
    """(shape, layout) pairs: odd sizes, size 0, every layout."""
    return [
        ((7,), "contiguous"),
        ((1025 * 8 + 3,), "contiguous"),
        ((1025 * 8 + 3,), "offset"),
        ((97, 33), "contiguous"),
        ((33, 97), "transposed"),
        ((17, 40), "strided"),
        ((2, 6, 5, 7), "channels_last"),
        ((4, 9, 8), "expanded"),
        ((0, 5), "contiguous"),
    ]


def assert_matches_torch(ours_fn, torch_fn, inputs: list, *, grad: bool = True, name: str = "", grad_inputs=None,
                         ref_fn=None, grad_output=None, compute_dtype=None):
    """torch_dnn.testing.check_against_torch, asserting every comparison."""
    for v in check_against_torch(ours_fn, torch_fn, inputs, grad=grad, name=name, grad_inputs=grad_inputs,
                                 ref_fn=ref_fn, grad_output=grad_output, compute_dtype=compute_dtype):
        assert v, v.message


def round_tf32(t):
    """float32 values rounded to TF32 (10 fraction bits, to nearest, ties away from zero: cvt.rna), as float32."""
    i = t.detach().float().contiguous().view(torch.int32)
    return ((i + 0x1000) & -0x2000).view(torch.float32).view(t.shape)


def tf32_verdict(ours, peer, ideal, ref, name, grad=False):
    """A TF32 result within the rule's factor of PyTorch's TF32 error (cuDNN rounds its forward and input-gradient
    operands to nearest), or of exact arithmetic on TF32-rounded operands (`ideal`, float64) where cuDNN picked a
    kernel that is not TF32 for the shape."""
    v = compare(ours, peer, ref, name=f"{name} (against cuDNN)", grad=grad)
    return v if v else compare(ours, ideal.float(), ref, name=f"{name} (against rounded operands)", grad=grad)


def assert_close_to_reference(ours, ref64, *, grad: bool = False, name: str = ""):
    """The error rule where PyTorch's op cannot be run on the same problem (too large for its kernels or the
    memory, or a result it does not return): ours against the float64 reference with, as the peer, that reference
    correctly rounded to ours' dtype; ours may then be off by the rule's factor times that rounding's error, or
    the dtype's floor."""
    v = compare(ours, ref64.to(ours.dtype), ref64, grad=grad, name=name)
    assert v, v.message


def opcheck_samples(op, samples):
    """torch.library.opcheck (all checks) over a list of (args, kwargs)."""
    for args, kwargs in samples:
        torch.library.opcheck(op, args, kwargs)


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0]


def raised_first_line(fn, exc=RuntimeError) -> str:
    """The first line of the message of the `exc` that fn() must raise: what the error snapshots compare."""
    with pytest.raises(exc) as info:
        fn()
    return first_line(info.value)


# (input layout, grad_output layout) pairs with grad_output laid out otherwise than the input (channels_last vs
# NCHW, strided, neither): the backward must read grad_output as given and still match PyTorch's gradients
MIXED_GRAD_LAYOUTS = (("contiguous", "channels_last"), ("channels_last", "contiguous"), ("channels_last", "strided"),
                      ("transposed", "channels_last"))


def assert_cuda_graph_replays(step, refill):
    """Capture step() in a CUDA graph (after two warm-up runs on a side stream), call refill() to put fresh
    values into the step's input tensors in place, replay, and check the graph's outputs against an eager
    step() on the new inputs."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    with torch.no_grad():
        refill()
    g.replay()
    torch.cuda.synchronize()
    for a, r in zip(out, step()):
        torch.testing.assert_close(a, r)


def assert_models_agree(model, converted, x, *, name: str, loss=lambda y: y.square().sum()):
    """A native model and its torch_dnn.convert-ed copy on the same input: outputs, the input's gradient and
    every parameter's gradient agree by the error-ratio rule (native as both peer and reference: float64
    inputs, so only rounding may differ)."""
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = model(xa), converted(xb)
    v = compare(yb, ya, ya, name=name)
    assert v, v.message
    loss(ya).backward()
    loss(yb).backward()
    v = compare(xb.grad, xa.grad, xa.grad, grad=True, name="input grad")
    assert v, v.message
    for (n, pa), (_, pb) in zip(model.named_parameters(), converted.named_parameters()):
        v = compare(pb.grad, pa.grad, pa.grad, grad=True, name=n)
        assert v, v.message


def assert_model_matches_native(ours, native, x, *, name: str):
    """ours (a torch_dnn.convert-ed copy of native, or that copy compiled) against native on x in x's dtype: the
    output, x's gradient and every parameter's gradient by the error rule against a float64 copy of native."""
    native64 = copy.deepcopy(native).double()
    xs = [x.detach().clone().requires_grad_() for _ in range(2)] + [x.detach().double().requires_grad_()]
    ys = [m(t) for m, t in zip((ours, native, native64), xs)]
    v = compare(*ys, name=f"{name} output")
    assert v, v.message
    g = random_like_case(ys[1].shape, ys[1].dtype, ys[1].device, low=-1, high=1)
    named = list(native.named_parameters())
    grads = [torch.autograd.grad(y, [t, *m.parameters()], g.to(y.dtype), allow_unused=True)
             for y, t, m in zip(ys, xs, (ours, native, native64))]
    for what, a, b, r in zip(["input", *(n for n, _ in named)], *grads):
        if a is None and b is not None:  # no gradient is a zero one
            a = torch.zeros_like(b)
        v = compare(a, b, r, grad=True, name=f"{name} grad of {what}")
        assert v, v.message


# The pooling family's variant knobs ("NAME=value[,NAME=value]"): each forces a kernel or path that the default plan
# takes only for other shapes (or past 2^31 elements), so that test_pool.py on the GPU and test_pool_emulation.py on
# the CPU run every one of them at the tests' small shapes (csrc/pool, docs/pool.md).
POOL_VARIANTS = ["TORCH_DNN_POOL_NC=item", "TORCH_DNN_POOL_NC_BWD=gather", "TORCH_DNN_POOL_CL_BWD=item",
                 "TORCH_DNN_POOL_CL_FWD=item", "TORCH_DNN_POOL_NC_BWD=owner", "TORCH_DNN_POOL_PAD_PAIR=0",
                 "TORCH_DNN_POOL_PAD_KB=4", "TORCH_DNN_POOL_CL_BAND=0", "TORCH_DNN_POOL_CL_BAND=1",
                 "TORCH_DNN_POOL_CL_BAND=1,TORCH_DNN_POOL_BAND_KB=16",
                 "TORCH_DNN_POOL_CL_BAND=1,TORCH_DNN_POOL_BAND_SEGMENTS=3",
                 "TORCH_DNN_POOL_CL_BAND=1,TORCH_DNN_POOL_BAND_SLOTS=1",
                 "TORCH_DNN_POOL_CL_BAND=1,TORCH_DNN_POOL_BAND_THREADS=256", "TORCH_DNN_POOL_PAD_STRIP=0",
                 "TORCH_DNN_POOL_CL_BWD_STRIP=1", "TORCH_DNN_POOL_CL_BWD_STRIP=3", "TORCH_DNN_POOL_CL2D=wide",
                 "TORCH_DNN_POOL_GLOBAL_CL=col", "TORCH_DNN_POOL_GLOBAL_CL=lanes"]


def set_variant(monkeypatch, variant: str):
    """Sets the environment variables of one POOL_VARIANTS entry for the test."""
    for setting in variant.split(","):
        name, value = setting.split("=")
        monkeypatch.setenv(name, value)


# The CUDA-kernel emulation (tests/emulation: kernel sources compiled by g++ under cuda_host_shim.h, the
# TORCH_DNN_EMULATE_CUDA build) runs where TORCH_DNN_EMULATE is 1 (CI: the quick cases) or full (every case).
EMULATION = os.environ.get("TORCH_DNN_EMULATE") in ("1", "full")
requires_emulation = pytest.mark.skipif(
    not EMULATION, reason="set TORCH_DNN_EMULATE=1 (or full) to build and run the CUDA-kernel emulation")
_TESTS = os.path.dirname(os.path.abspath(__file__))
_EMULATION_FLAGS = ["-DTORCH_DNN_EMULATE_CUDA", "-DTORCH_DNN_WITH_CUDA", "-O1", "-std=c++20", "-Wno-attributes"]


def cuda_include() -> str:
    """The CUDA headers' folder (the emulation includes cuda_bf16.h and cuda_fp16.h); skips the test without them."""
    from torch.utils import cpp_extension

    for home in (cpp_extension.CUDA_HOME, os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "include", "cuda_bf16.h")):
            return os.path.join(home, "include")
    pytest.skip("the CUDA headers (cuda_bf16.h) are not installed")


def _emulation_includes() -> list[str]:
    return [os.path.join(os.path.dirname(_TESTS), "csrc"), os.path.join(_TESTS, "emulation"), cuda_include()]


def load_kernel_emulation(name: str, source: str):
    """Builds tests/emulation/<source> as the torch extension `name`, which registers its ops; skips the test where
    the CUDA headers are missing."""
    from torch.utils import cpp_extension

    cpp_extension.load(name=name, sources=[os.path.join(_TESTS, "emulation", source)],
                       extra_include_paths=_emulation_includes(), extra_cflags=_EMULATION_FLAGS,
                       is_python_module=False, verbose=False)


def build_emulation_program(tmp_path, name: str, *defines: str, exe_name: str | None = None) -> str:
    """Builds tests/emulation/<name>.cpp, a program that runs its own cases, with g++ (or $CXX) into tmp_path and
    returns the executable's path; defines: extra macros. Skips the test where the CUDA headers are missing."""
    exe = str(tmp_path / (exe_name or name))
    subprocess.run([os.environ.get("CXX", "g++"), *_EMULATION_FLAGS, *[f"-D{d}" for d in defines],
                    *[f"-I{d}" for d in _emulation_includes()], os.path.join(_TESTS, "emulation", name + ".cpp"),
                    "-o", exe, "-pthread"], check=True)
    return exe
