"""Benchmark cases of the pooling family: max_pool2d 3x3/2 pad 1 and avg_pool2d 3x3/2 on 64x64x112x112 bf16
(NHWC and NCHW, forward and backward), adaptive_avg_pool2d(1) on 256x2048x7x7 (NHWC; NCHW too unless quick) and 64x256x56x56 NHWC,
max_pool3d 3x3x3/2 pad 1 on 8x64x32x56x56 NDHWC (forward and backward) and avg_pool1d 3/2 pad 1 on
32x512x8192 NCL, against eager and torch.compile. Bytes are the minimum traffic: each input read once, each
output written once (max pooling's int64 indices included)."""
import math

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import Case, rand_cuda, with_env

ops = torch.ops.torch_dnn
aten = torch.ops.aten

SHAPE = (64, 64, 112, 112)


def _variant(impls, name, value, label):
    """Adds a `label` row: torch_dnn's callable under name=value."""
    impls[label] = with_env(impls["torch_dnn"], **{name: value})
    return impls
K, S, P = (3, 3), (2, 2), (1, 1)


def _pool_cases(dtype, layout):
    es = torch.empty((), dtype=dtype).element_size()
    n_in = math.prod(SHAPE)
    oh = (SHAPE[2] + 2 * P[0] - K[0]) // S[0] + 1
    n_out = SHAPE[0] * SHAPE[1] * oh * oh
    tag = f"{'x'.join(map(str, SHAPE))} {layout} bf16"
    group = f"pool {layout}"
    out = []
    # A/B rows (the other paths on the same inputs): NCHW, the per-element kernels (TORCH_DNN_POOL_NC=item) beside
    # the plane tiles; NHWC, the row bands beside the per-item kernels
    if layout == "NCHW":
        # forward: also the padded tiles without column strips (TORCH_DNN_POOL_PAD_STRIP=0: avg's pairs, max's one
        # output a thread)
        var = lambda d: _variant(_variant(  # noqa: E731
            d, "TORCH_DNN_POOL_NC", "item", "torch_dnn item"), "TORCH_DNN_POOL_PAD_STRIP", "0", "torch_dnn nostrip")
        # backward: also the per-input tile gather (TORCH_DNN_POOL_NC_BWD=gather) beside the owner blocks
        var_bwd = lambda d: _variant(_variant(_variant(d, "TORCH_DNN_POOL_NC", "item", "torch_dnn item"),  # noqa: E731
                                              "TORCH_DNN_POOL_NC_BWD", "gather", "torch_dnn gather"),
                                     "TORCH_DNN_POOL_NC_BWD", "owner", "torch_dnn owner")
    else:
        # NHWC: the row bands (pool_band.cuh) against the per-item kernels (the defaults: pool_fwd_cl2d32 for the
        # forwards, pool_bwd_cl_k3_strip for the backwards; TORCH_DNN_POOL_CL_BAND=1 forces the bands), also with 256
        # threads a block instead of 512
        def var(d):
            d = _variant(d, "TORCH_DNN_POOL_CL_BAND", "1", "torch_dnn band")
            d["torch_dnn band256"] = with_env(d["torch_dnn"], TORCH_DNN_POOL_CL_BAND="1", TORCH_DNN_POOL_BAND_THREADS="256")
            return d
        var_bwd = var

    # max_pool2d: forward writes values and int64 indices; backward reads grad and indices, writes grad_input
    def max_inputs(d=dtype, lay=layout):
        return (rand_cuda(SHAPE, d, lay),)

    def max_bwd_inputs(d=dtype, lay=layout):
        x = rand_cuda(SHAPE, d, lay)
        y, i = ops.max_pool2d(x, K, S, P, (1, 1), False)
        return torch.randn_like(y), x, i

    eager_max = lambda x: aten.max_pool2d_with_indices(x, K, S, P)  # noqa: E731
    max_fwd_var = var({
        "torch_dnn": lambda x: ops.max_pool2d(x, K, S, P, (1, 1), False),
        "eager": eager_max,
        "compile": torch.compile(eager_max, dynamic=False),
    })
    # NHWC: also the taps kernel with 64-bit offsets (TORCH_DNN_POOL_CL2D=wide)
    wide = (lambda d: _variant(d, "TORCH_DNN_POOL_CL2D", "wide", "torch_dnn wide")) if layout == "NHWC" \
        else (lambda d: d)
    max_fwd_var = wide(max_fwd_var)
    out.append(Case("pool", f"max_pool2d 3x3/2 fwd {tag}", max_inputs, max_fwd_var,
                    bytes=n_in * es + n_out * (es + 8), target=">=90% copy", group=group))
    eager_max_bwd = lambda g, x, i: aten.max_pool2d_with_indices_backward(g, x, K, S, P, (1, 1), False, i)  # noqa: E731
    # NHWC backward: also the fixed covering by one owner an item (TORCH_DNN_POOL_CL_BWD_STRIP=1) or by strips of
    # other lengths (default: max 2, avg 4)
    def strips(d):
        if layout != "NHWC":
            return d
        for rows in ("1", "2", "4", "8"):
            d = _variant(d, "TORCH_DNN_POOL_CL_BWD_STRIP", rows, f"torch_dnn strip{rows}")
        return d
    out.append(Case("pool", f"max_pool2d 3x3/2 bwd {tag}", max_bwd_inputs, strips(var_bwd({
        "torch_dnn": lambda g, x, i: ops.max_pool2d_backward(g, x, i, K, S, P, (1, 1), False),
        "eager": eager_max_bwd,
        "compile": torch.compile(eager_max_bwd, dynamic=False),
    })), bytes=n_out * (es + 8) + n_in * es, target=">=90% copy", group=group))

    # avg_pool2d 3x3/2 (no padding: the common "avg 3x3/2" of the design table)
    oh_a = (SHAPE[2] - K[0]) // S[0] + 1
    n_out_a = SHAPE[0] * SHAPE[1] * oh_a * oh_a
    eager_avg = lambda x: TF.avg_pool2d(x, K, S)  # noqa: E731
    avg_fwd_impls = {
        "torch_dnn": lambda x: F.avg_pool2d(x, K, S),
        "eager": eager_avg,
        "compile": torch.compile(eager_avg, dynamic=False),
    }
    avg_fwd_var = var(avg_fwd_impls)
    out.append(Case("pool", f"avg_pool2d 3x3/2 fwd {tag}", max_inputs, avg_fwd_var, bytes=(n_in + n_out_a) * es,
                    target=">=90% copy", group=group))
    # the same as GPU time (CUDA-graph replay): per call, the ~0.05 ms kernel is within reach of a call's host time
    # (F.avg_pool2d's wrapper and the custom op's dispatch), and the rows above spread by up to 1.6x (p10-p90)
    avg_fwd_graph = {
        "torch_dnn": lambda x: ops.avg_pool2d(x, K, S, (0, 0), False, True, None),
        "eager": eager_avg,
        "compile": torch.compile(eager_avg, dynamic=False),
    }
    if layout == "NHWC":  # also the bands
        ours = avg_fwd_graph["torch_dnn"]
        avg_fwd_graph["torch_dnn band"] = with_env(ours, TORCH_DNN_POOL_CL_BAND="1")
    else:
        avg_fwd_graph = _variant(avg_fwd_graph, "TORCH_DNN_POOL_PAD_STRIP", "0", "torch_dnn nostrip")
    out.append(Case("pool", f"avg_pool2d 3x3/2 fwd {tag} graph", max_inputs, avg_fwd_graph,
                    bytes=(n_in + n_out_a) * es, target=">=90% copy", group=group, graph=True))

    def avg_bwd_inputs(d=dtype, lay=layout):
        x = rand_cuda(SHAPE, d, lay)
        return torch.randn_like(TF.avg_pool2d(x, K, S)), x

    eager_avg_bwd = lambda g, x: aten.avg_pool2d_backward(g, x, K, S, (0, 0), False, True, None)  # noqa: E731
    avg_bwd_var = strips(var_bwd({
        "torch_dnn": lambda g, x: ops.avg_pool2d_backward(g, x, K, S, (0, 0), False, True, None),
        "eager": eager_avg_bwd,
        "compile": torch.compile(eager_avg_bwd, dynamic=False),
    }))
    out.append(Case("pool", f"avg_pool2d 3x3/2 bwd {tag}", avg_bwd_inputs, avg_bwd_var, bytes=(n_in + n_out_a) * es,
                    target=">=90% copy", group=group))
    return out


def _adaptive_cases(dtype, layout="NHWC", shape=(256, 2048, 7, 7), graphs=(False, True)):
    """Global average pooling, timed per call (events around each call: on the device's host our op's host time
    exceeds the 17 us kernel of 256x2048x7x7) and as GPU time (CUDA-graph replay), where the A/B rows run too."""
    es = torch.empty((), dtype=dtype).element_size()
    n_in, n_out = math.prod(shape), shape[0] * shape[1]
    tag = f"{'x'.join(map(str, shape))} {layout} bf16"
    eager = lambda x: TF.adaptive_avg_pool2d(x, 1)  # noqa: E731

    def bwd_inputs():
        x = rand_cuda(shape, dtype, layout)
        return torch.randn_like(TF.adaptive_avg_pool2d(x, 1)), x

    eager_bwd = lambda g, x: aten._adaptive_avg_pool2d_backward(g, x)  # noqa: E731
    out = []
    for graph in graphs:
        how = " graph" if graph else ""
        # graph rows: also the A/B rows. NHWC: row lanes instead of a thread a column
        def ab(d):
            if graph and layout == "NHWC":
                d = _variant(d, "TORCH_DNN_POOL_GLOBAL_CL", "lanes", "torch_dnn lanes")
            return d

        ab_fwd = ab_bwd = ab
        out.append(Case("pool", f"adaptive_avg_pool2d(1) fwd {tag}{how}", lambda: (rand_cuda(shape, dtype, layout),), ab_fwd({
            "torch_dnn": lambda x: F.adaptive_avg_pool2d(x, 1),
            "eager": eager,
            "compile": torch.compile(eager, dynamic=False),
        }), bytes=(n_in + n_out) * es, target=">=90% copy", group="pool adaptive", graph=graph))
        out.append(Case("pool", f"adaptive_avg_pool2d(1) bwd {tag}{how}", bwd_inputs, ab_bwd({
            "torch_dnn": lambda g, x: ops.adaptive_avg_pool2d_backward(g, x),
            "eager": eager_bwd,
            "compile": torch.compile(eager_bwd, dynamic=False),
        }), bytes=(n_in + n_out) * es, target=">=90% copy", group="pool adaptive", graph=graph))
    return out


def _rank_cases(dtype):
    """One 3-D case (max_pool3d, NDHWC, forward and backward) and one 1-D case (avg_pool1d, NCL, forward)."""
    es = torch.empty((), dtype=dtype).element_size()
    shape3, k3, s3, p3 = (8, 64, 32, 56, 56), (3, 3, 3), (2, 2, 2), (1, 1, 1)
    out3 = (8, 64) + tuple((n + 2 * p - k) // st + 1 for n, k, st, p in zip(shape3[2:], k3, s3, p3))
    n_in, n_out = math.prod(shape3), math.prod(out3)

    def x3():
        return torch.empty(shape3, dtype=dtype, device="cuda").uniform_(-4, 4).contiguous(
            memory_format=torch.channels_last_3d)

    def bwd3_inputs():
        x = x3()
        y, i = ops.max_pool3d(x, k3, s3, p3, (1, 1, 1), False)
        return torch.randn_like(y), x, i

    tag3 = f"{'x'.join(map(str, shape3))} NDHWC bf16"
    eager3 = lambda x: aten.max_pool3d_with_indices(x, k3, s3, p3)  # noqa: E731
    eager3_bwd = lambda g, x, i: aten.max_pool3d_with_indices_backward(g, x, k3, s3, p3, (1, 1, 1), False, i)  # noqa: E731
    out = [
        Case("pool", f"max_pool3d 3x3x3/2 fwd {tag3}", lambda: (x3(),), {
            "torch_dnn": lambda x: ops.max_pool3d(x, k3, s3, p3, (1, 1, 1), False),
            "eager": eager3,
            "compile": torch.compile(eager3, dynamic=False),
        }, bytes=n_in * es + n_out * (es + 8), target=">=90% copy", group="pool 3-D / 1-D"),
        Case("pool", f"max_pool3d 3x3x3/2 bwd {tag3}", bwd3_inputs, {
            "torch_dnn": lambda g, x, i: ops.max_pool3d_backward(g, x, i, k3, s3, p3, (1, 1, 1), False),
            "eager": eager3_bwd,
            "compile": torch.compile(eager3_bwd, dynamic=False),
        }, bytes=n_out * (es + 8) + n_in * es, target=">=90% copy", group="pool 3-D / 1-D"),
    ]
    shape1 = (32, 512, 8192)
    n_in1, n_out1 = math.prod(shape1), shape1[0] * shape1[1] * ((shape1[2] + 2 - 3) // 2 + 1)
    eager1 = lambda x: TF.avg_pool1d(x, 3, 2, 1)  # noqa: E731
    out.append(Case("pool", "avg_pool1d 3/2 pad 1 fwd 32x512x8192 NCL bf16",
                    lambda: (torch.empty(shape1, dtype=dtype, device="cuda").uniform_(-4, 4),), _variant({
                        "torch_dnn": lambda x: F.avg_pool1d(x, 3, 2, 1),
                        "eager": eager1,
                        "compile": torch.compile(eager1, dynamic=False),
                    }, "TORCH_DNN_POOL_NC", "item", "torch_dnn item"), bytes=(n_in1 + n_out1) * es, target=">=90% copy", group="pool 3-D / 1-D"))
    return out


def cases(quick: bool = False):
    layouts = ["NHWC"] if quick else ["NHWC", "NCHW"]
    out = [c for lay in layouts for c in _pool_cases(torch.bfloat16, lay)]
    out += [c for lay in layouts for c in _adaptive_cases(torch.bfloat16, lay)]
    # a squeeze-excite or head pooling on a large map (issue 35's case): memory-bound, its host time hidden
    out += _adaptive_cases(torch.bfloat16, "NHWC", (64, 256, 56, 56), graphs=(False,))
    out += _rank_cases(torch.bfloat16)
    # the impls take turns (3 rounds): timed one after another, the first of a case ran slower than the same kernel
    # later in the case (avg_pool2d NHWC fwd: torch_dnn 0.0710 ms, its "item" row, the same kernel, 0.0635)
    for c in out:
        c.rounds = 3
    return out
