"""The attention kernels run on the CPU through tests/emulation/cuda_host_shim.h (and mma_emulation.h for the
tensor-core wrappers): the reference kernels (csrc/attention/attention_reference.cu) against a float64 evaluation of
the kernel contract's formulas (attention_reference_emulation.cpp: strides, GQA, masks and their broadcast, causal
and window in both alignments, softcap, ALiBi, dropout, variable lengths with empty sequences, fully masked rows,
wide heads; float64, float32, bfloat16, float16), then the flash kernels against the reference kernels
(attention_flash_emulation.cpp: head dims 32-256, both CTA shapes, causal in both alignments, windows, GQA, softcap,
ALiBi, dropout, variable lengths; forward and backward), and flash_decode's kernels against float64
(attention_decode_emulation.cpp). This checks the kernels' index and fragment arithmetic
without a GPU, not their speed. Opt in with TORCH_DNN_EMULATE=1 (a few minutes)."""
import os
import subprocess

import pytest

from tests.utils import build_emulation_program, requires_emulation

pytestmark = requires_emulation
# TORCH_DNN_EMULATE=1 (CI) builds the emulations (their kernels compile for the host) but runs them only with
# TORCH_DNN_EMULATE=full: a run takes up to 20 minutes on the 2-core CI machine.
FULL = os.environ.get("TORCH_DNN_EMULATE") == "full"


def _build_and_run(tmp_path, name):
    exe = build_emulation_program(tmp_path, name)
    if not FULL:
        pytest.skip("built; its cases run with TORCH_DNN_EMULATE=full")
    r = subprocess.run([exe], capture_output=True, text=True, timeout=1200)
    return r, r.stdout.splitlines()


def test_reference_kernels_emulated(tmp_path):
    r, lines = _build_and_run(tmp_path, "attention_reference_emulation")
    assert sum(line.startswith("ok ") for line in lines) >= 40, r.stdout  # the cases ran
    assert r.returncode == 0 and lines[-1] == "ALL OK", r.stdout


def test_flash_kernels_emulated(tmp_path):
    r, lines = _build_and_run(tmp_path, "attention_flash_emulation")
    assert sum(line.startswith("ok ") for line in lines) >= 20, r.stdout
    assert r.returncode == 0 and lines[-1] == "ALL OK", r.stdout


def test_hopper_kernels_emulated(tmp_path):
    """The Hopper route (flash_forward_sm90.cu and flash_backward_sm90.cu under each of their schedules, the
    backward's bitwise against each other: wgmma, cp.async rings or the copy engine's tensor copies guarded by
    mbarriers) against the reference kernels,
    attention_flash_emulation.cpp built with TORCH_DNN_EMULATE_MBARRIER: the MMAs read
    their shared operands through the descriptors and the 128-byte swizzle (tests/emulation/wgmma_emulation.h), so
    a tile placed off a swizzle atom or a wrong descriptor fails here as on the GPU. Under TORCH_DNN_EMULATE=1 its
    multi-tile cases run (about a minute), under full every case it takes in both dtypes."""
    exe = build_emulation_program(tmp_path, "attention_flash_emulation", "TORCH_DNN_EMULATE_MBARRIER",
                                  exe_name="attention_sm90_emulation")
    r = subprocess.run([exe] + ([] if FULL else ["--smoke"]), capture_output=True, text=True, timeout=1200)
    lines = r.stdout.splitlines()
    assert sum(line.startswith("ok ") for line in lines) >= (15 if FULL else 5), r.stdout  # the cases ran
    assert r.returncode == 0 and lines[-1] == "ALL OK", r.stdout


def test_decode_kernels_emulated(tmp_path):
    """flash_decode's CUDA kernels (csrc/attention/flash_decode.cu) against float64 (attention_decode_emulation.cpp):
    contiguous and paged caches, the append, ragged lengths, causal, GQA, head dims 64-256, every dtype. Under
    TORCH_DNN_EMULATE=1 its first two cases run (seconds), under full every case (about a minute)."""
    exe = build_emulation_program(tmp_path, "attention_decode_emulation")
    r = subprocess.run([exe] + ([] if FULL else ["--quick"]), capture_output=True, text=True, timeout=1200)
    lines = r.stdout.splitlines()
    assert sum(line.startswith("ok ") for line in lines) >= (40 if FULL else 8), r.stdout  # the cases ran
    assert r.returncode == 0 and lines[-1] == "ALL OK", r.stdout
