"""The portable path's float32 tensor-core GEMM (csrc/matmul/kernels/gemm_mma.cuh) runs on the CPU through
tests/emulation/cuda_host_shim.h, with cp.async / ldmatrix / mma.sync m16n8k8 TF32 computed by mma_emulation.h
(tests/emulation/gemm_mma_emulation.cpp): 3xTF32, float32 without TF32, against float64 with the error rule (a
float32 FFMA dot product as the peer) for every operand layout, odd M / N / K, a batch with a bias, split-K and
element loads, under two models of the tensor cores' accumulation (float rounding to nearest, and truncation); plain
TF32 fails the rule on the same problems; and one chained accumulator would lose float32 accuracy under truncation
where the kernel's per-stage order does not. This checks the kernel's fragment, split and epilogue arithmetic without
a GPU, not its speed. Opt in with TORCH_DNN_EMULATE=1 (the quick cases, seconds) or full (every case, about a
minute)."""
import os
import subprocess

from tests.utils import build_emulation_program, requires_emulation

pytestmark = requires_emulation
FULL = os.environ.get("TORCH_DNN_EMULATE") == "full"


def test_3xtf32_kernel_emulated(tmp_path):
    exe = build_emulation_program(tmp_path, "gemm_mma_emulation")
    r = subprocess.run([exe] + ([] if FULL else ["--quick"]), capture_output=True, text=True, timeout=1200)
    lines = r.stdout.splitlines()
    assert sum(line.startswith("ok ") for line in lines) >= (19 if FULL else 5), r.stdout  # the cases ran
    assert sum("plain TF32" in line and "(fails the rule)" in line for line in lines) == 2, r.stdout
    assert r.returncode == 0 and lines[-1] == "ALL OK", r.stdout
