"""Benchmark cases of the group_norm family: group_norm(32) forward and backward on 64x256x56x56 bf16, NCHW
and NHWC, against eager and torch.compile of the same function, and torch_dnn's other plans ("torch_dnn smem":
the per-(n, group) kernels, TORCH_DNN_GN_PLAN=smem; "torch_dnn kN": the cluster plan with clusters of at most N
CTAs, TORCH_DNN_GN_CLUSTER_MAX=N, tiles as large as that needs; "torch_dnn cluster": the cluster plan also where
the default takes the per-(n, group) kernels, TORCH_DNN_GN_PLAN=cluster); instance_norm (2-D) forward, whose
results table (group "instance_norm / lrn") also holds local_response_norm's case from cases_lrn.py. Bytes are the
minimum traffic: each input read once, each output written once (parameters and statistics included, small)."""
import math

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import Case, rand_cuda, with_env

ops = torch.ops.torch_dnn

SHAPE = (64, 256, 56, 56)
G = 32


def _plans(fn, ks, cluster=False, tiles=()):
    """torch_dnn's default plan, the per-(n, group) kernels (smem plan), the cluster plan forced (where the default does
    not take it), the cluster plan capped at k CTAs a cluster for each k, and the cluster plan with smaller CTA
    tiles (TORCH_DNN_GN_TILE_KB=kb: more CTAs an SM, larger clusters) for each kb."""
    out = {"torch_dnn": fn, "torch_dnn smem": with_env(fn, TORCH_DNN_GN_PLAN="smem")}
    if cluster:
        out["torch_dnn cluster"] = with_env(fn, TORCH_DNN_GN_PLAN="cluster")
    for k in ks:
        out[f"torch_dnn k{k}"] = with_env(fn, TORCH_DNN_GN_PLAN="cluster", TORCH_DNN_GN_CLUSTER_MAX=str(k))
    for kb in tiles:
        out[f"torch_dnn t{kb}"] = with_env(fn, TORCH_DNN_GN_PLAN="cluster", TORCH_DNN_GN_TILE_KB=str(kb))
    return out


def _gn_cases(dtype, layout):
    es = torch.empty((), dtype=dtype).element_size()
    N, C, H, W = SHAPE
    numel = math.prod(SHAPE)
    tag = f"{'x'.join(map(str, SHAPE))} {layout} bf16"
    group = f"group_norm {layout}"
    stats = N * G * 4 * 2

    def gn(x, w, b):
        return TF.group_norm(x, G, w, b)

    def fwd_inputs(d=dtype, lay=layout):
        return rand_cuda(SHAPE, d, lay), rand_cuda((C,), d, "NCHW", 0.5, 1.5), rand_cuda((C,), d, "NCHW")

    fwd = Case("group_norm", f"group_norm({G}) fwd {tag}", fwd_inputs,
               {**_plans(lambda x, w, b: F.group_norm(x, G, w, b), [4] if layout == "NHWC" else [], layout == "NCHW",
                         [25] if layout == "NCHW" else []),
                "eager": gn,
                "compile": torch.compile(gn, dynamic=False)},
               bytes=2 * numel * es + 2 * C * es, target=">=3x eager (>=2.4 TB/s)", group=group)

    compiled_gn = torch.compile(gn, dynamic=False)

    def bwd_inputs(d=dtype, lay=layout):
        x, w, b = fwd_inputs(d, lay)
        _, mean, rstd = ops.group_norm(x, G, w, b, 1e-5)
        xg, wg, bg = (t.detach().requires_grad_() for t in (x, w, b))
        # the peers' backward through autograd (aten's backward op takes no channels_last input): the graphs of
        # eager and compiled forwards, built here, are replayed by each timed call
        return rand_cuda(SHAPE, d, lay, -1, 1), x, mean, rstd, w, (xg, wg, bg, gn(xg, wg, bg)), \
            (xg, wg, bg, compiled_gn(xg, wg, bg))

    def peer_bwd(which):
        def run(g, x, mean, rstd, w, eager_graph, compiled_graph):
            xg, wg, bg, y = eager_graph if which == "eager" else compiled_graph
            return torch.autograd.grad(y, [xg, wg, bg], g, retain_graph=True)
        return run

    def bwd_fn(g, x, mean, rstd, w, eg, cg):
        return ops.group_norm_backward(g, x, mean, rstd, w, G, False, [True, True, True])

    # NCHW: "torch_dnn bulk2" = the bulk-copy backward's persistent, double-buffered form (TORCH_DNN_GN_BULK_BUFS=2)
    bulk2 = {"torch_dnn bulk2": with_env(bwd_fn, TORCH_DNN_GN_BULK_BUFS="2")} if layout == "NCHW" else {}
    bwd = Case("group_norm", f"group_norm({G}) bwd {tag}", bwd_inputs,
               {**_plans(bwd_fn, [8] if layout == "NHWC" else [1], tiles=[25, 12]), **bulk2,
                "eager": peer_bwd("eager"), "compile": peer_bwd("compile")},
               bytes=3 * numel * es + 3 * C * es + stats, target=">=3x eager (>=2.4 TB/s)", group=group)
    return [fwd, bwd]


def _instance_norm_case(dtype):
    shape = (32, 128, 64, 64)
    es = torch.empty((), dtype=dtype).element_size()
    c = shape[1]

    def inorm(x, w, b):
        return TF.instance_norm(x, weight=w, bias=b)

    return Case("group_norm", "instance_norm2d fwd 32x128x64x64 NCHW bf16",
                lambda: (rand_cuda(shape, dtype, "NCHW"), rand_cuda((c,), dtype, "NCHW", 0.5, 1.5), rand_cuda((c,), dtype, "NCHW")),
                {**_plans(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), [], True), "eager": inorm,
                 "compile": torch.compile(inorm, dynamic=False)},
                bytes=2 * math.prod(shape) * es + 2 * c * es, target=">=90% copy",
                group="instance_norm / lrn")  # one table with cases_lrn.py's case


def cases(quick: bool = False):
    layouts = ["NCHW"] if quick else ["NCHW", "NHWC"]
    out = [c for lay in layouts for c in _gn_cases(torch.bfloat16, lay)]
    return out + [_instance_norm_case(torch.bfloat16)]
