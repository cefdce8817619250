"""The tester base every family's tests subclass (tests/test_<family>.py: `class TestSoftmax(FamilyTester)`).

A family declares what it has; the base runs the checks every family owes, on every device (CPU always, CUDA as a
`cuda`-marked case) unless a check is CUDA-only:

  against_torch(device, dtype, variant)  yields Against: the error rule of torch_dnn/testing.py against PyTorch's op
                                          (a generator: code after a `yield` runs once the base has checked that case)
  opcheck_samples(device)                -> [(op, args, kwargs)]: torch.library.opcheck with all of its checks
  gradcheck_cases(device)                -> [GradCase]: torch.autograd.gradcheck in float64
  gradgradcheck_cases(device)            -> [GradCase]: torch.autograd.gradgradcheck in float64
  compile_cases(device)                  yields Against or ModelCase: torch.compile(ours, fullgraph=True) against
                                          native PyTorch by the error rule (forward and gradients, a model's
                                          parameters' too), never against our own eager run
  bad_inputs()                           -> [BadInput]: the first line of the error names the op and the argument
  cuda_graph_step()                      -> (step, refill): captured in a CUDA graph, replayed on new inputs (CUDA)
  past_2_31_cases()                      -> {id: check}: one case per kernel path past 2^31 elements (CUDA)

Class attributes: `dtypes` (the dtypes against_torch runs, one test case each), `variants` (a further parameter of
against_torch, e.g. the op's name, one test case each), `known_bugs` ({(device, dtype, variant): the bug}: that
case of against_torch is a strict xfail, so it fails once the bug is fixed), `compile_backend` (on the CPU; CUDA
always compiles with inductor).

Every check fails when a family declares no case for it: a test that checks nothing must not pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import pytest
import torch

from tests.utils import (ALL_DTYPES, assert_cuda_graph_replays, assert_matches_torch, assert_model_matches_native,
                         devices, first_line)


@dataclass
class Against:
    """One comparison by the error rule: ours(*inputs) against theirs(*inputs) in the inputs' dtype, both against
    ref_fn (theirs unless given) on float64 copies; gradients too unless grad=False (torch_dnn.testing
    .check_against_torch)."""
    name: str
    ours: Callable
    theirs: Callable
    inputs: list
    grad: bool = True
    grad_inputs: Sequence[int] | None = None
    ref_fn: Callable | None = None
    grad_output: torch.Tensor | None = None

    def check(self, ours=None):
        assert_matches_torch(self.ours if ours is None else ours, self.theirs, self.inputs, grad=self.grad,
                             name=self.name, grad_inputs=self.grad_inputs, ref_fn=self.ref_fn,
                             grad_output=self.grad_output)


@dataclass
class ModelCase:
    """A torch_dnn.convert-ed model against the native one it was made from, on x: the output, x's gradient and every
    parameter's gradient by the error rule against a float64 copy of the native model."""
    name: str
    ours: torch.nn.Module
    native: torch.nn.Module
    x: torch.Tensor

    def check(self, ours=None):
        assert_model_matches_native(self.ours if ours is None else ours, self.native, self.x, name=self.name)


@dataclass
class GradCase:
    """fn(*inputs) differentiated in float64 (inputs that require grad are the ones checked)."""
    name: str
    fn: Callable
    inputs: tuple


@dataclass
class BadInput:
    """call() must raise exc whose message's first line starts with `op:` (None: PyTorch's own message, which a
    functional wrapper repeats) and contains `words` (the argument, or what is wrong with it)."""
    call: Callable[[], object]
    op: str | None
    words: str
    exc: type = RuntimeError


def _count(cases: Iterable, run: Callable, what: str, owner) -> None:
    n = 0
    for case in cases:
        run(case)
        n += 1
    assert n > 0, f"{type(owner).__name__} declares no {what} case: the test would check nothing"


class FamilyTester:
    dtypes: Sequence[torch.dtype] = ALL_DTYPES
    variants: Sequence = (None,)
    compile_backend: str = "aot_eager"
    known_bugs: dict = {}  # (device, dtype, variant) -> the bug that fails that case of against_torch

    # ---- what a family declares ----

    def against_torch(self, device, dtype, variant) -> Iterable[Against]:
        raise NotImplementedError

    def opcheck_samples(self, device) -> list:
        raise NotImplementedError

    def gradcheck_cases(self, device) -> list[GradCase]:
        raise NotImplementedError

    def gradgradcheck_cases(self, device) -> list[GradCase]:
        raise NotImplementedError

    def compile_cases(self, device) -> Iterable[Against]:
        raise NotImplementedError

    def bad_inputs(self) -> list[BadInput]:
        raise NotImplementedError

    def cuda_graph_step(self):
        raise NotImplementedError

    def past_2_31_cases(self) -> dict[str, Callable[[], None]]:
        raise NotImplementedError

    # ---- parameters from the declarations ----

    def pytest_generate_tests(self, metafunc):
        name = metafunc.function.__name__
        if name == "test_against_torch":
            metafunc.parametrize("dtype", list(self.dtypes), ids=str)
            metafunc.parametrize("variant", list(self.variants), ids=self.variant_id)
        elif name == "test_past_2_31_elements":
            cases = list(self.past_2_31_cases())
            assert cases, f"{type(self).__name__} declares no case past 2^31 elements"
            metafunc.parametrize("big_case", cases)

    @staticmethod
    def variant_id(v) -> str:
        return "all" if v is None else str(v)

    # ---- the checks ----

    @pytest.mark.parametrize("device", devices())
    def test_against_torch(self, device, dtype, variant, request):
        if (device, dtype, variant) in self.known_bugs:
            request.applymarker(pytest.mark.xfail(strict=True, reason=self.known_bugs[(device, dtype, variant)]))
        _count(self.against_torch(device, dtype, variant), lambda c: c.check(), "against_torch", self)

    @pytest.mark.parametrize("device", devices())
    def test_opcheck(self, device):
        _count(self.opcheck_samples(device), lambda s: torch.library.opcheck(*s), "opcheck", self)

    @pytest.mark.parametrize("device", devices())
    def test_gradcheck(self, device):
        def run(c):
            assert torch.autograd.gradcheck(c.fn, c.inputs), c.name
        _count(self.gradcheck_cases(device), run, "gradcheck", self)

    @pytest.mark.parametrize("device", devices())
    def test_gradgradcheck(self, device):
        def run(c):
            assert torch.autograd.gradgradcheck(c.fn, c.inputs), c.name
        _count(self.gradgradcheck_cases(device), run, "gradgradcheck", self)

    @pytest.mark.parametrize("device", devices())
    def test_compile_against_torch(self, device):
        backend = "inductor" if device == "cuda" else self.compile_backend

        def run(c):
            torch._dynamo.reset()
            c.check(torch.compile(c.ours, fullgraph=True, backend=backend))
        _count(self.compile_cases(device), run, "compile", self)

    def test_bad_inputs(self):
        def run(c):
            with pytest.raises(c.exc) as e:
                c.call()
            msg = first_line(e.value)
            if c.op is not None:
                assert msg.startswith(f"{c.op}:"), f"the message does not name {c.op}: {msg}"
            assert c.words in msg, f"the message does not name {c.words!r}: {msg}"
        _count(self.bad_inputs(), run, "bad input", self)

    @pytest.mark.cuda
    def test_cuda_graph_capture(self):
        assert_cuda_graph_replays(*self.cuda_graph_step())

    @pytest.mark.cuda
    def test_past_2_31_elements(self, big_case):
        self.past_2_31_cases()[big_case]()
