"""batch_norm_add_act relu backward, float32 (4096, 40), separate passes: over many random trials, the elements
whose grad differs from PyTorch's, with the float64 pre-activation bn(x) + r there (is it the relu kink?)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ["TORCH_DNN_BN_PERSIST"] = "0"
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F

trials = int(sys.argv[1]) if len(sys.argv) > 1 else 300
bad = 0
for t in range(trials):
    x = torch.empty((4096, 40), device="cuda").uniform_(-4, 4).requires_grad_()
    r = torch.empty((4096, 40), device="cuda").uniform_(-2, 2).requires_grad_()
    w = (torch.rand(40, device="cuda") + 0.5).requires_grad_()
    b = torch.randn(40, device="cuda").requires_grad_()
    g = torch.randn(4096, 40, device="cuda")
    ours = torch.autograd.grad(F.batch_norm_add_act(x, None, None, w, b, r, "relu", True), [x], g)[0]
    peer = torch.autograd.grad(torch.relu(TF.batch_norm(x, None, None, w, b, True) + r), [x], g)[0]
    with torch.no_grad():
        z = TF.batch_norm(x.double(), None, None, w.double(), b.double(), True) + r.double()
        z32 = TF.batch_norm(x, None, None, w, b, True) + r
    diff = (ours - peer).abs()
    scale = peer.abs().max()
    idx = (diff > 1e-3 * scale).nonzero()
    if len(idx):
        bad += 1
        for i, j in idx[:4].tolist():
            print(f"trial {t}: ({i},{j}) ours {ours[i, j].item():.4g} peer {peer[i, j].item():.4g} "
                  f"z64 {z[i, j].item():.3e} z32(peer) {z32[i, j].item():.3e}", flush=True)
print(f"{bad} of {trials} trials with a differing element")
