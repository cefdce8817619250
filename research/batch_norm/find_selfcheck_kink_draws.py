"""The draws of `python -m torch_dnn`'s batch_norm_add_act(relu) self-check rows (torch_dnn/ops/batch_norm.py) in
which a relu mask differs from float64's: ours, PyTorch's, or both round a pre-activation within ~1e-8 of the kink to
its other side. A draw where only ours flips fails the row without its kink guard (issue 35's intermittent CPU
failure); tests/test_batch_norm.py::test_selfcheck_row_survives_a_kink_flip keeps one.

    python research/batch_norm/find_selfcheck_kink_draws.py [END [START]]   # seeds START..END-1, CPU, 2 threads
"""
import sys

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from torch_dnn.testing import random_like_case


def main():
    end = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    start = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    torch.set_num_threads(2)
    found = 0
    for seed in range(start, end):
        torch.manual_seed(seed)
        for channels_last in (False, True):  # the rows' draws in their order: NCHW, then NHWC
            x = random_like_case((4, 16, 13, 11), torch.float32, "cpu")
            x = x.contiguous(memory_format=torch.channels_last) if channels_last else x
            w = random_like_case((16,), torch.float32, "cpu", low=0.5, high=1.5)
            b = random_like_case((16,), torch.float32, "cpu")
            r = random_like_case((4, 16, 13, 11), torch.float32, "cpu")
            ours = F.batch_norm_add_act(x, None, None, w, b, r, "relu", True)
            peer = torch.relu(TF.batch_norm(x, None, None, w, b, True) + r)
            z = TF.batch_norm(x.double(), None, None, w.double(), b.double(), True) + r.double()
            flips_ours, flips_peer = int(((ours > 0) != (z > 0)).sum()), int(((peer > 0) != (z > 0)).sum())
            if flips_ours or flips_peer:
                found += 1
                print(f"seed {seed} channels_last={channels_last}: ours flips {flips_ours}, PyTorch {flips_peer}, "
                      f"min |z| {z.abs().min().item():.2e}", flush=True)
    print(f"seeds {start}..{end - 1}: {found} draws with a flipped mask")


if __name__ == "__main__":
    main()
