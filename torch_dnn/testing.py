"""Correctness rule shared by the tests, the self-check (`python -m torch_dnn`) and the benchmarks.

An op is right when its error against a float64 reference is at most `factor` times PyTorch's own error in
the same dtype (2x for outputs, 3x for gradients), with an error floor so that no dtype is held to rounding
noise: 1e-5 for float32; 2^12 epsilon (9.1e-13) for float64; half the dtype's epsilon for float16 (4.9e-4) and
bfloat16 (3.9e-3): the error of the correctly rounded result itself, which PyTorch's own error undercuts only by
luck on small tensors. The error is measured two ways, and both must pass:
  - max-norm: max |out - ref| / max |ref|       (catches a single wrong element)
  - l2:       ||out - ref|| / ||ref||          (catches small widespread bias)
Non-finite values must appear where PyTorch's own output has them (NaN for NaN, the same infinities).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

FLOOR = 1e-5
# float64's floor: 2^12 epsilon (9.1e-13). PyTorch's float64 op is usually the reference itself (its error 0), so
# the floor is what ours is held to: summed in another order, a reduction over n terms differs from the reference
# by up to about n epsilon (Higham's bound for recursive summation; sqrt(n) epsilon typically), and the tests'
# reductions run over up to a few thousand terms. A float64 op that computes anything in float32 is off by 6e-8 or
# more: 1e-5 let that pass, this floor does not.
FLOOR_FLOAT64 = 2.0 ** 12 * torch.finfo(torch.float64).eps
OUTPUT_FACTOR = 2.0
GRAD_FACTOR = 3.0


def error_floor(dtype: torch.dtype) -> float:
    """The smallest error the rule holds an op to in `dtype`: FLOOR_FLOAT64 for float64; FLOOR, or half an ulp
    (relative) of the dtype where that is larger, for the others.
    Example (test_batch_norm on the CPU, float16, 24 elements): the exact gradient -1.21986 lies
    0.14 ulp from one float16 neighbour and 0.86 from the other; PyTorch's composite landed on the near one (error
    1.5e-4 of the tensor's max), ours on the far one (6.9e-4), a 4.5x ratio, where over 600 such random cases our
    error's median ratio to PyTorch's was 0.84-1.00."""
    if dtype == torch.float64:
        return FLOOR_FLOAT64
    if not dtype.is_floating_point:
        return FLOOR
    return max(FLOOR, 0.5 * torch.finfo(dtype).eps)


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    out = out.detach().to(torch.float64)
    ref = ref.detach().to(torch.float64)
    finite = torch.isfinite(ref) & torch.isfinite(out)
    if out.numel() == 0 or not bool(finite.any()):
        return 0.0, 0.0
    d = (out - ref)[finite]
    r = ref[finite]
    scale_max = float(r.abs().max())
    scale_l2 = float(r.norm())
    e_max = float(d.abs().max()) / scale_max if scale_max > 0 else float(d.abs().max())
    e_l2 = float(d.norm()) / scale_l2 if scale_l2 > 0 else float(d.norm())
    return e_max, e_l2


def _same_non_finite(a: torch.Tensor, b: torch.Tensor) -> bool:
    """NaN at the same places, and the same infinities at the same places."""
    if not torch.equal(torch.isnan(a), torch.isnan(b)):
        return False
    inf = torch.isinf(b)
    return torch.equal(torch.isinf(a), inf) and torch.equal(a[inf], b[inf])


@dataclass
class Verdict:
    ok: bool
    ours: tuple
    peer: tuple
    message: str

    def __bool__(self):
        return self.ok


def compare(ours: torch.Tensor, peer: torch.Tensor, ref64: torch.Tensor, *, grad: bool = False, name: str = "",
            compute_dtype: torch.dtype | None = None) -> Verdict:
    """ours and peer (PyTorch's op) in the same dtype, ref64 PyTorch's op in float64 on the same values.
    compute_dtype: the dtype the op computes in where a result is wider (softmax's dtype= argument, a float64
    input's gradient through a float32 softmax): that result is held to the narrower dtype's floor."""
    if ours.shape != ref64.shape:
        return Verdict(False, (), (), f"{name}: shape {tuple(ours.shape)} != expected {tuple(ref64.shape)}")
    if ours.dtype != peer.dtype:
        return Verdict(False, (), (), f"{name}: dtype {ours.dtype} != expected {peer.dtype}")
    # Errors are measured where the tensors live: on a GPU machine with a slow CPU, float64 copies and norms of
    # large outputs on the host took most of a CUDA test's time.
    dev = ours.device
    ours_c, peer_c, ref_c = ours.detach(), peer.detach().to(dev), ref64.detach().to(dev)
    # NaN and inf where PyTorch puts them in this dtype, or where its float64 op does: some of PyTorch's
    # vectorised CPU kernels differ from its own float64 result (AVX-512 float32 gelu: gelu(inf) = nan,
    # gelu(3.4e38) = inf), and the mathematically right answer passes too.
    if not (_same_non_finite(ours_c, peer_c) or _same_non_finite(ours_c, ref_c.to(ours_c.dtype))):
        return Verdict(False, (), (), f"{name}: non-finite values differ from PyTorch's")
    factor = GRAD_FACTOR if grad else OUTPUT_FACTOR
    floor = error_floor(ours.dtype) if compute_dtype is None else max(error_floor(ours.dtype),
                                                                         error_floor(compute_dtype))
    e_ours = _errors(ours_c, ref_c)
    e_peer = _errors(peer_c, ref_c)
    ok = all(eo <= factor * max(ep, floor) for eo, ep in zip(e_ours, e_peer))
    msg = (
        f"{name}: error (max-norm, l2) ours {e_ours[0]:.3g}, {e_ours[1]:.3g} vs PyTorch {e_peer[0]:.3g}, "
        f"{e_peer[1]:.3g} (allowed {factor}x, floor {floor:.3g})"
    )
    return Verdict(ok, e_ours, e_peer, msg)


@contextlib.contextmanager
def no_tf32():
    """float32 matmuls and convolutions without TF32 inside (references and PyTorch's own results are computed
    without it, so the error rule above judges against full float32); the flags as they were after."""
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def random_like_case(shape, dtype, device, *, low=-4.0, high=4.0, generator=None) -> torch.Tensor:
    """Uniform values in [low, high): never zeros, fresh each call."""
    t = torch.rand(shape, dtype=torch.float64, generator=generator) * (high - low) + low
    return t.to(device=device, dtype=dtype)


# Where activations' derivatives jump. A pre-activation whose exact value and its 16-bit rounding (ours or PyTorch's,
# or a backward's recomputation from rounded pieces) lie on different sides of a jump moves a whole row of d_input
# by the jump: which side's rounding met the larger upstream gradient then decides the error ratio. Tests of fused
# epilogues and the self-check give those few outputs a zero upstream gradient (grad_off_kinks).
KINKS = {"relu": (0.0,), "leaky_relu": (0.0,), "relu6": (0.0, 6.0), "hardswish": (-3.0, 3.0),
         "hardsigmoid": (-3.0, 3.0)}


def grad_off_kinks(pre, act, dtype, margin):
    """A random upstream gradient in `dtype` on pre's device, zero where the exact pre-activation `pre` (float64)
    lies within margin(k) of one of act's derivative jumps k (KINKS); None for activations without one."""
    if act not in KINKS:
        return None
    g = random_like_case(pre.shape, dtype, pre.device, low=-1, high=1)
    for k in KINKS[act]:
        g[(pre - k).abs() <= margin(k)] = 0
    return g


def check_against_torch(ours_fn, torch_fn, inputs: list, *, grad: bool = True, name: str = "",
                        grad_inputs=None, ref_fn=None, grad_output=None, compute_dtype=None) -> list[Verdict]:
    """Run ours and PyTorch's on the same inputs (in their dtype) and PyTorch's (or ref_fn) on float64 copies;
    compare the outputs and, when grad, the gradients for one grad_output (random unless given, in the outputs'
    dtype); compute_dtype as in compare. Returns one Verdict per comparison."""
    ref_fn = torch_fn if ref_fn is None else ref_fn
    grad_inputs = range(len(inputs)) if grad_inputs is None else grad_inputs

    def prep(dtype=None):
        out = []
        for i, t in enumerate(inputs):
            if isinstance(t, torch.Tensor):
                t = t.detach().clone() if dtype is None else t.detach().to(dtype)
                if grad and i in grad_inputs:
                    t.requires_grad_(True)
            out.append(t)
        return out

    xs_ours, xs_peer, xs_ref = prep(), prep(), prep(torch.float64)
    y_ours, y_peer, y_ref = ours_fn(*xs_ours), torch_fn(*xs_peer), ref_fn(*xs_ref)
    verdicts = [compare(y_ours, y_peer, y_ref, name=f"{name} forward", compute_dtype=compute_dtype)]
    if not grad or y_ours.numel() == 0 or not verdicts[0]:
        return verdicts
    g = (random_like_case(y_peer.shape, y_peer.dtype, y_peer.device, low=-1, high=1) if grad_output is None
         else grad_output.to(y_peer.dtype))
    idx = [i for i in grad_inputs if isinstance(inputs[i], torch.Tensor)]
    gs_ours = torch.autograd.grad(y_ours, [xs_ours[i] for i in idx], g, allow_unused=True)
    gs_peer = torch.autograd.grad(y_peer, [xs_peer[i] for i in idx], g, allow_unused=True)
    gs_ref = torch.autograd.grad(y_ref, [xs_ref[i] for i in idx], g.to(torch.float64), allow_unused=True)
    for i, a, b, r in zip(idx, gs_ours, gs_peer, gs_ref):
        if a is None and b is not None:  # no gradient is a zero one (ours may leave out what PyTorch's graph carries)
            a = torch.zeros_like(b)
        if b is None:
            verdicts.append(Verdict(a is None or not bool(a.any()), (), (), f"{name} grad of input {i}: expected none"))
            continue
        verdicts.append(compare(a, b, r, grad=True, name=f"{name} grad of input {i}", compute_dtype=compute_dtype))
    return verdicts
