import torch, torch.nn.functional as TF, traceback
from tests.test_group_norm import GN_CASES, CUDA_GN_CASES, _input, _params, AFFINE
for shape, G, layout in GN_CASES + CUDA_GN_CASES:
    for wt, bs in AFFINE:
        x = _input(shape, torch.float32, "cuda", layout).requires_grad_()
        w, b = _params(shape[1], torch.float32, "cuda", wt, bs)
        ins = [t for t in (x, w, b) if t is not None]
        for t in ins: t.requires_grad_()
        try:
            y = TF.group_norm(x, G, w, b)
            if y.numel(): torch.autograd.grad(y, ins, torch.randn_like(y), allow_unused=True)
        except Exception as e:
            print("PEER FAIL", shape, G, layout, wt, bs, type(e).__name__, str(e)[:100])
x = torch.randn(64, 256, 56, 56, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
w = torch.rand(256, device="cuda", dtype=torch.bfloat16)
b = torch.rand(256, device="cuda", dtype=torch.bfloat16)
y, m, r = torch.ops.aten.native_group_norm(x, w, b, 64, 256, 56*56, 32, 1e-5)
g = torch.randn_like(y)
print("y cl", y.is_contiguous(memory_format=torch.channels_last), "g cl", g.is_contiguous(memory_format=torch.channels_last))
try:
    torch.ops.aten.native_group_norm_backward(g, x, m, r, w, 64, 256, 56*56, 32, [True, True, True]); print("aten bwd ok")
except Exception as e: print("aten bwd fail", str(e)[:200])
