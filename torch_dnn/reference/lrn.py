"""PyTorch's local_response_norm as the reference, where PyTorch can run it: its CPU avg_pool3d has no float16 /
bfloat16 kernel, so CPU 16-bit inputs of rank >= 4 run PyTorch's op in float32 and round the result once."""
import torch
import torch.nn.functional as F


def local_response_norm_reference(x, size, alpha=1e-4, beta=0.75, k=1.0):
    if x.device.type == "cpu" and x.dim() >= 4 and x.dtype in (torch.float16, torch.bfloat16):
        return F.local_response_norm(x.float(), size, alpha, beta, k).to(x.dtype)
    return F.local_response_norm(x, size, alpha, beta, k)
