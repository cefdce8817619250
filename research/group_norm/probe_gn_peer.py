"""Which cases make PyTorch's own CUDA group_norm / instance_norm backward raise? (device probe, temporary)"""
import torch
import torch.nn.functional as TF

from tests import test_group_norm as T

for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
    for shape, G, layout in T._gn_cases("cuda"):
        x = T._input(shape, dtype, "cuda", layout)
        for weight, bias in T.AFFINE:
            w, b = T._params(shape[1], dtype, "cuda", weight, bias)
            for name, t in (("x", x), ("x64", x.double())):
                xs = t.detach().clone().requires_grad_()
                ws = w.detach().to(t.dtype).requires_grad_() if w is not None else None
                bs = b.detach().to(t.dtype).requires_grad_() if b is not None else None
                try:
                    y = TF.group_norm(xs, G, ws, bs)
                    g = torch.randn_like(y)
                    torch.autograd.grad(y, [v for v in (xs, ws, bs) if v is not None], g)
                except Exception as e:  # noqa: BLE001
                    print("FAIL", name, dtype, shape, G, layout, weight, bias, type(e).__name__, str(e).splitlines()[0])
print("probe done")
