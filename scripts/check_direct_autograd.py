"""Does the functional wrappers' direct autograd path (torch_dnn.ops._registry._direct_autograd) give the same
gradients as the dispatcher's (torch.library's autograd kernel)? Bitwise comparison over random draws, and the
error-ratio rule's verdict for each path: `python scripts/check_direct_autograd.py [device] [draws]`."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

import torch

import torch_dnn.functional as F
from torch_dnn.reference import linear_act_reference
from torch_dnn.testing import check_against_torch


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    draws = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    op = torch.ops.torch_dnn.linear_act
    fails = {"direct": 0, "dispatcher": 0}
    same = 0
    for i in range(draws):
        # test_matmul's draws: x in [-2, 2), w and b in [-1, 1)
        x = (torch.rand(300, 1000, device=device) * 4 - 2).half().requires_grad_()
        w = (torch.rand(520, 1000, device=device) * 2 - 1).half().requires_grad_()
        b = (torch.rand(520, device=device) * 2 - 1).half().requires_grad_()
        g = torch.randn(300, 520, device=device, dtype=torch.float16)
        d1 = torch.autograd.grad(F.linear_act(x, w, b, "hardswish"), (x, w, b), g)
        d2 = torch.autograd.grad(op(x, w, b, "hardswish", save_preact=True)[0], (x, w, b), g)
        same += all(torch.equal(p, q) for p, q in zip(d1, d2))
        paths = {"direct": lambda x, w, b: F.linear_act(x, w, b, "hardswish"),
                 "dispatcher": lambda x, w, b: op(x, w, b, "hardswish", save_preact=True)[0]}
        for name, fn in paths.items():
            for v in check_against_torch(fn, lambda x, w, b: linear_act_reference(x, w, b, "hardswish"), [x, w, b],
                                         name=name):
                if not v:
                    fails[name] += 1
                    print(v.message)
    print(f"{draws} draws: gradients bitwise equal in {same}; rule failures {fails}")


if __name__ == "__main__":
    main()
