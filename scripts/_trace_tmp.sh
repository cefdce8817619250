python3 - <<'PY'
import os, torch
import torch_dnn
ops = torch.ops.torch_dnn
x = torch.empty((64, 256, 56, 56), device="cuda", dtype=torch.bfloat16).uniform_(-3, 3).contiguous(memory_format=torch.channels_last)
w = torch.rand(256, device="cuda") + 0.5; b = torch.randn(256, device="cuda")
_, mean, invstd = ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
g = torch.randn_like(x)
torch.cuda.synchronize()
os.environ["TORCH_DNN_BN_TRACE"] = "1"
for env in ({}, {"TORCH_DNN_BN_CACHE_KB": "0"}, {"TORCH_DNN_BN_L2_MB": "0"}):
    os.environ.update(env)
    print("env", env, flush=True)
    for _ in range(3):
        ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
    for _ in range(3):
        ops.batch_norm_backward(g, x, w, None, None, mean, invstd, True, 1e-5, [True, True, True])
    torch.cuda.synchronize()
    for k in env: del os.environ[k]
PY
