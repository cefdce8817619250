"""Does cuDNN's TF32 convolution round its fp32 operands to nearest, or truncate them (what wgmma does with raw
fp32 in shared memory)? cuDNN's error against float64 for each pass (forward, input gradient, weight gradient),
beside the error of the same convolution on operands cut to TF32 by truncation or by round-to-nearest (cvt.rna)
and computed in float64. Pure PyTorch: needs a GPU, not the extension."""
import torch
import torch.nn.functional as F

torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = False


def to_tf32(x, rnd):
    i = x.contiguous().view(torch.int32)
    if rnd:  # round half away from zero on the 13 dropped bits
        i = i + (1 << 12)
    return (i & ~((1 << 13) - 1)).view(torch.float32).view_as(x)


def err(a, ref):
    d = (a.double() - ref)
    return (d.norm() / ref.norm()).item(), (d.abs().max() / ref.abs().max()).item()


def passes(x, w, g, pad, stride):
    """forward, input gradient, weight gradient of conv2d, in x's dtype"""
    y = F.conv2d(x, w, None, stride, pad)
    dx, dw, _ = torch.ops.aten.convolution_backward(g, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1,
                                                    [True, True, False])
    return y, dx, dw


cases = [("3x3 64->64 @56", 8, 64, 64, 56, 3, 1, 1), ("3x3 256->256 @14", 16, 256, 256, 14, 3, 1, 1),
         ("1x1 256->64 @56", 4, 256, 64, 56, 1, 0, 1), ("7x7/2 3->64 @224", 4, 3, 64, 224, 7, 3, 2)]
torch.manual_seed(0)
for name, n, c, k, hw, r, pad, stride in cases:
    for fmt in (torch.channels_last, torch.contiguous_format):
        x = torch.randn(n, c, hw, hw, device="cuda").to(memory_format=fmt)
        w = (torch.randn(k, c, r, r, device="cuda") / (c * r * r) ** 0.5).to(memory_format=fmt)
        ho = (hw + 2 * pad - r) // stride + 1
        g = torch.randn(n, k, ho, ho, device="cuda").to(memory_format=fmt)
        ref = passes(x.double(), w.double(), g.double(), pad, stride)
        got = passes(x, w, g, pad, stride)
        # the emulations: each pass's two operands cut to TF32, computed in float64
        emu = {}
        for tag, rnd in (("trunc", False), ("round", True)):
            xt, wt, gt = (to_tf32(t, rnd).double() for t in (x, w, g))
            y = F.conv2d(xt, wt, None, stride, pad)
            dx, _, _ = torch.ops.aten.convolution_backward(gt, x.double(), wt, None, [stride] * 2, [pad] * 2, [1, 1],
                                                           False, [0, 0], 1, [True, False, False])
            _, dw, _ = torch.ops.aten.convolution_backward(gt, xt, w.double(), None, [stride] * 2, [pad] * 2, [1, 1],
                                                           False, [0, 0], 1, [False, True, False])
            emu[tag] = (y, dx, dw)
        for i, p in enumerate(("fwd", "dgrad", "wgrad")):
            e_c = err(got[i], ref[i])
            e_t = err(emu["trunc"][i], ref[i])
            e_r = err(emu["round"][i], ref[i])
            print(f"{name:18s} {'NHWC' if fmt is torch.channels_last else 'NCHW'} {p:5s} cudnn l2 {e_c[0]:.2e} "
                  f"max {e_c[1]:.2e} | trunc l2 {e_t[0]:.2e} max {e_t[1]:.2e} | round l2 {e_r[0]:.2e} "
                  f"max {e_r[1]:.2e} | cudnn/round l2 {e_c[0] / e_r[0]:.2f} cudnn/trunc {e_c[0] / e_t[0]:.2f}",
                  flush=True)
# matmul (cuBLAS, known to round) as a control
torch.backends.cuda.matmul.allow_tf32 = True
a = torch.randn(1024, 4096, device="cuda"); b = torch.randn(4096, 1024, device="cuda")
ref = a.double() @ b.double()
print("cuBLAS mm control: l2", err(a @ b, ref)[0], "trunc", err(to_tf32(a, False).double() @ to_tf32(b, False).double(), ref)[0],
      "round", err(to_tf32(a, True).double() @ to_tf32(b, True).double(), ref)[0])
# cuDNN's kernels for each pass (their names say the instruction family), benchmark mode on
torch.backends.cudnn.benchmark = True
x = torch.randn(64, 64, 56, 56, device="cuda").to(memory_format=torch.channels_last).requires_grad_()
w = torch.randn(64, 64, 3, 3, device="cuda").to(memory_format=torch.channels_last).requires_grad_()
for _ in range(3):
    F.conv2d(x, w, None, 1, 1).sum().backward()
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    F.conv2d(x, w, None, 1, 1).sum().backward()
    torch.cuda.synchronize()
for ev in prof.key_averages():
    if ev.device_type == torch.autograd.DeviceType.CUDA:
        print(f"{ev.device_time_total:9.1f} us  {ev.key[:160]}")
