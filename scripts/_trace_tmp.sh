python3 - <<'PY'
import os, time, torch
import torch_dnn
import torch_dnn.functional as F
ops = torch.ops.torch_dnn
x = torch.empty((64, 256, 56, 56), device="cuda", dtype=torch.bfloat16).uniform_(-3, 3).contiguous(memory_format=torch.channels_last)
w = torch.rand(256, device="cuda") + 0.5; b = torch.randn(256, device="cuda")
_, mean, invstd = ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
g = torch.randn_like(x)
torch.cuda.synchronize()
os.environ["TORCH_DNN_BN_TRACE"] = "1"
for _ in range(2):
    ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
for _ in range(2):
    ops.batch_norm_backward(g, x, w, None, None, mean, invstd, True, 1e-5, [True, True, True])
torch.cuda.synchronize()
del os.environ["TORCH_DNN_BN_TRACE"]
xg = x.detach().requires_grad_(); wg = w.detach().requires_grad_(); bg = b.detach().requires_grad_()
rm, rv = torch.zeros(256, device="cuda"), torch.ones(256, device="cuda")
def direct():
    y, m, i = ops.batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
    ops.batch_norm_backward(g, x, w, None, None, m, i, True, 1e-5, [True, True, True])
def autograd():
    y = F.batch_norm(xg, rm, rv, wg, bg, True, 0.1, 1e-5)
    torch.autograd.grad(y, [xg, wg, bg], g)
for name, fn in (("direct ops", direct), ("autograd", autograd)):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.perf_counter(); e0.record()
    for _ in range(30): fn()
    e1.record(); h = (time.perf_counter() - t) / 30 * 1e6; torch.cuda.synchronize()
    print(f"{name}: {e0.elapsed_time(e1) / 30 * 1e3:.1f} us/step GPU-bound loop, host {h:.1f} us/step", flush=True)
PY
