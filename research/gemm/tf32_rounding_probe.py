"""CPU emulation behind the sm90 TF32 decision (docs/matmul.md): relative error of an fp32 GEMM whose
operands are cut to TF32 by truncation (what wgmma does with raw fp32 in shared memory) or by round-to-nearest
(cvt.rna, as cuBLAS), against float64; and with only one operand rounded."""
import torch
torch.manual_seed(0)
def to_tf32(x, rnd):
    i = x.view(torch.int32)
    if rnd:  # round half away from zero on the 13 dropped bits (cvt.rna.tf32.f32)
        i = i + (1 << 12)
    return (i & ~((1 << 13) - 1)).view(torch.float32)
for (m, n, k) in [(512, 512, 4096), (512, 512, 8192)]:
    for dist in ("uniform", "normal"):
        a = torch.rand(m, k) * 2 - 1 if dist == "uniform" else torch.randn(m, k)
        b = torch.rand(k, n) * 2 - 1 if dist == "uniform" else torch.randn(k, n)
        ref = a.double() @ b.double()
        res = {}
        for name, rnd in (("trunc", False), ("round", True)):
            c = to_tf32(a.clone(), rnd).double() @ to_tf32(b.clone(), rnd).double()
            res[name] = ((c - ref).norm() / ref.norm()).item(), ((c - ref).abs().max() / ref.abs().max()).item()
        print(m, n, k, dist, {k: f"l2 {v[0]:.2e} max {v[1]:.2e}" for k, v in res.items()},
              f"ratio l2 {res['trunc'][0] / res['round'][0]:.2f}")
a = torch.randn(512, 4096); b = torch.randn(4096, 512); ref = a.double() @ b.double()
for ra, rb in ((True, False), (False, True)):
    c = to_tf32(a.clone(), ra).double() @ to_tf32(b.clone(), rb).double()
    print("round A" if ra else "round B", f"l2 {((c - ref).norm() / ref.norm()).item():.2e}")
