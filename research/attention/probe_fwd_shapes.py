"""The forward (F.scaled_dot_product_attention, bf16) against cuDNN's SDPA at shapes beyond the bench's three: short
sequences, causal head dim 64, 8k contexts. CUDA events, median of 20, both in this one process; run it under
TORCH_DNN_ATTENTION_SM90_FWD=ws or cp.async to time the other Hopper schedules.

    python research/attention/probe_fwd_shapes.py
"""
import torch
import torch.nn.functional as TF
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_dnn.functional as F
from benchmarks.harness import time_calls

SHAPES = [(8, 16, 1024, 128, False), (8, 16, 1024, 128, True), (16, 16, 512, 128, False), (8, 16, 2048, 64, True),
          (2, 16, 8192, 64, False), (2, 16, 8192, 128, False), (4, 16, 4096, 64, True)]


def median_ms(f, reps=20):
    times = sorted(time_calls(f, [()], warmup=3, reps=reps))
    return times[reps // 2]


def main():
    for B, H, S, D, causal in SHAPES:
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ours = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            cudnn = median_ms(lambda: TF.scaled_dot_product_attention(q, k, v, is_causal=causal))
        flops = 4 * B * H * S * S * D / (2 if causal else 1)
        print(f"B{B} H{H} S{S} D{D}{' causal' if causal else ''}: ours {ours:.4f} ms {flops / ours / 1e9:.0f} "
              f"TFLOP/s, cuDNN {cudnn:.4f} ms {flops / cudnn / 1e9:.0f}, ours/cuDNN time {ours / cudnn:.3f}", flush=True)


if __name__ == "__main__":
    main()
