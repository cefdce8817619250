"""The self-check of `python -m torch_dnn`: every public op against PyTorch on small random inputs, forward
and backward, on each available device, printed as a pass/fail table."""
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from torch_dnn.reference import (BIAS_ACT_TORCH, add_layer_norm_reference, add_rms_norm_reference, avg_pool1d_reference,
                                 avg_pool2d_reference, avg_pool3d_reference, bias_act_reference, linear_act_reference,
                                 local_response_norm_reference)
from torch_dnn.testing import check_against_torch, random_like_case


def _checks():
    """(family, op, callable(device, dtype) -> list of Verdicts)"""
    out = []
    acts = {
        "relu": (F.relu, TF.relu), "relu6": (F.relu6, TF.relu6), "hardtanh": (F.hardtanh, TF.hardtanh),
        "leaky_relu": (F.leaky_relu, TF.leaky_relu), "elu": (F.elu, TF.elu), "gelu": (F.gelu, TF.gelu),
        "silu": (F.silu, TF.silu), "sigmoid": (F.sigmoid, torch.sigmoid), "tanh": (F.tanh, torch.tanh),
        "softplus": (F.softplus, TF.softplus), "mish": (F.mish, TF.mish), "hardswish": (F.hardswish, TF.hardswish),
        "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid),
    }
    for name, (ours, theirs) in acts.items():
        out.append(("activation", name, lambda d, t, o=ours, p=theirs, n=name: check_against_torch(
            o, p, [random_like_case((33, 65), t, d)], name=n)))
    for act in BIAS_ACT_TORCH:
        out.append(("activation", f"bias_act[{act}]", lambda d, t, a=act: check_against_torch(
            lambda x, b: F.bias_act(x, b, 1, a), lambda x, b: bias_act_reference(x, b, 1, a),
            [random_like_case((4, 24, 5), t, d), random_like_case((24,), t, d)], name=f"bias_act {a}")))
    for name, ours, theirs in (("softmax", F.softmax, TF.softmax), ("log_softmax", F.log_softmax, TF.log_softmax)):
        for shape, dim in (((33, 100), -1), ((4, 3000), -1), ((6, 7, 5), 1)):
            out.append(("softmax", f"{name}{list(shape)} dim={dim}", lambda d, t, o=ours, p=theirs, s=shape, dm=dim:
                        check_against_torch(lambda x: o(x, dm), lambda x: p(x, dm), [random_like_case(s, t, d)],
                                            name=name)))
    norms = {
        "layer_norm": (lambda x, r, w, b, n: F.layer_norm(x, [n], w, b), lambda x, r, w, b, n: TF.layer_norm(x, [n], w, b)),
        "rms_norm": (lambda x, r, w, b, n: F.rms_norm(x, [n], w), lambda x, r, w, b, n: TF.rms_norm(x, [n], w)),
        "add_layer_norm": (lambda x, r, w, b, n: F.add_layer_norm(x, r, [n], w, b)[1],
                           lambda x, r, w, b, n: add_layer_norm_reference(x, r, [n], w, b)[1]),
        "add_rms_norm": (lambda x, r, w, b, n: F.add_rms_norm(x, r, [n], w)[1],
                         lambda x, r, w, b, n: add_rms_norm_reference(x, r, [n], w)[1]),
    }
    for name, (ours, theirs) in norms.items():
        for shape in ((33, 100), (4, 3000)):
            n = shape[-1]
            out.append(("norm", f"{name}{list(shape)}", lambda d, t, o=ours, p=theirs, s=shape, n=n: check_against_torch(
                lambda x, r, w, b: o(x, r, w, b, n), lambda x, r, w, b: p(x, r, w, b, n),
                [random_like_case(s, t, d), random_like_case(s, t, d), random_like_case((n,), t, d, low=0.5, high=1.5),
                 random_like_case((n,), t, d)], name=name)))
    pools = {
        "max_pool2d 3x3/2 pad 1": (2, lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: TF.max_pool2d(x, 3, 2, 1)),
        "avg_pool2d 3x3/2 pad 1": (2, lambda x: F.avg_pool2d(x, 3, 2, 1), lambda x: avg_pool2d_reference(x, 3, 2, 1)),
        "adaptive_avg_pool2d(3)": (2, lambda x: F.adaptive_avg_pool2d(x, 3), lambda x: TF.adaptive_avg_pool2d(x, 3)),
        "adaptive_max_pool2d(3)": (2, lambda x: F.adaptive_max_pool2d(x, 3), lambda x: TF.adaptive_max_pool2d(x, 3)),
        "lp_pool2d(2) 3x3/2": (2, lambda x: F.lp_pool2d(x, 2, 3, 2), lambda x: TF.lp_pool2d(x, 2, 3, 2)),
        "max_pool1d 3/2 pad 1": (1, lambda x: F.max_pool1d(x, 3, 2, 1), lambda x: TF.max_pool1d(x, 3, 2, 1)),
        "avg_pool1d 3/2 pad 1": (1, lambda x: F.avg_pool1d(x, 3, 2, 1), lambda x: avg_pool1d_reference(x, 3, 2, 1)),
        "max_pool3d 3x3x3/2 pad 1": (3, lambda x: F.max_pool3d(x, 3, 2, 1), lambda x: TF.max_pool3d(x, 3, 2, 1)),
        "avg_pool3d 3x3x3/2 pad 1": (3, lambda x: F.avg_pool3d(x, 3, 2, 1), lambda x: avg_pool3d_reference(x, 3, 2, 1)),
        "adaptive_avg_pool3d(1)": (3, lambda x: F.adaptive_avg_pool3d(x, 1), lambda x: TF.adaptive_avg_pool3d(x, 1)),
    }
    for name, (rank, ours, theirs) in pools.items():
        for cl in (False, True):
            def make(d, t, cl=cl, rank=rank):
                x = random_like_case((2, 16) + (7, 13, 11)[3 - rank:], t, d)
                if not cl:
                    return x
                if rank == 1:
                    return x.transpose(1, 2).contiguous().transpose(1, 2)
                return x.contiguous(memory_format=torch.channels_last if rank == 2 else torch.channels_last_3d)
            out.append(("pool", f"{name}{' C-last' if cl else ''}", lambda d, t, o=ours, p=theirs, m=make:
                        check_against_torch(o, p, [m(d, t)], name="pool")))
    for cl in (False, True):
        def make_bn(d, t, cl=cl):
            x = random_like_case((4, 16, 13, 11), t, d)
            x = x.contiguous(memory_format=torch.channels_last) if cl else x
            return [x, random_like_case((16,), t, d, low=0.5, high=1.5), random_like_case((16,), t, d),
                    random_like_case((4, 16, 13, 11), t, d)]
        out.append(("batch_norm", f"batch_norm train{' NHWC' if cl else ''}", lambda d, t, m=make_bn: check_against_torch(
            lambda x, w, b, r: F.batch_norm(x, None, None, w, b, True), lambda x, w, b, r: TF.batch_norm(x, None, None, w, b, True),
            m(d, t), name="batch_norm")))
        out.append(("batch_norm", f"batch_norm_add_act(relu) train{' NHWC' if cl else ''}", lambda d, t, m=make_bn:
                    check_against_torch(lambda x, w, b, r: F.batch_norm_add_act(x, None, None, w, b, r, "relu", True),
                                        lambda x, w, b, r: torch.relu(TF.batch_norm(x, None, None, w, b, True) + r),
                                        m(d, t), name="batch_norm_add_act")))
    group_norms = {
        "group_norm(4)": (lambda x, w, b: F.group_norm(x, 4, w, b), lambda x, w, b: TF.group_norm(x, 4, w, b)),
        "instance_norm": (lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                          lambda x, w, b: TF.instance_norm(x, weight=w, bias=b)),
    }
    for name, (ours, theirs) in group_norms.items():
        for cl in (False, True):
            def make_gn(d, t, cl=cl):
                x = random_like_case((2, 16, 13, 11), t, d)
                x = x.contiguous(memory_format=torch.channels_last) if cl else x
                return [x, random_like_case((16,), t, d, low=0.5, high=1.5), random_like_case((16,), t, d)]
            out.append(("group_norm", f"{name}{' NHWC' if cl else ''}", lambda d, t, o=ours, p=theirs, m=make_gn:
                        check_against_torch(o, p, m(d, t), name="group_norm")))
    for cl in (False, True):
        def make_lrn(d, t, cl=cl):
            x = random_like_case((2, 16, 13, 11), t, d)
            return [x.contiguous(memory_format=torch.channels_last) if cl else x]
        out.append(("lrn", f"local_response_norm(5){' NHWC' if cl else ''}", lambda d, t, m=make_lrn:
                    check_against_torch(lambda x: F.local_response_norm(x, 5, 1e-3, 0.75, 1.0),
                                        lambda x: local_response_norm_reference(x, 5, 1e-3, 0.75, 1.0), m(d, t), name="lrn")))
    mats = {
        "mm 97x65 @ 65x33": (F.mm, torch.mm, ((97, 65), (65, 33))),
        "matmul 2x1x9x65 @ 3x65x33": (F.matmul, torch.matmul, ((2, 1, 9, 65), (3, 65, 33))),
        "bmm 4x9x65 @ 4x65x33": (F.bmm, torch.bmm, ((4, 9, 65), (4, 65, 33))),
        "linear 3x9x65 -> 33": (F.linear, torch.nn.functional.linear, ((3, 9, 65), (33, 65), (33,))),
    }
    for name, (ours, theirs, shapes) in mats.items():
        out.append(("matmul", name, lambda d, t, o=ours, p=theirs, ss=shapes: check_against_torch(
            o, p, [random_like_case(s, t, d, low=-2, high=2) for s in ss], name=name)))
    for act in ("gelu", "silu", "relu"):
        out.append(("matmul", f"linear_act[{act}] + residual", lambda d, t, a=act: check_against_torch(
            lambda x, w, b, r: F.linear_act(x, w, b, a, r), lambda x, w, b, r: linear_act_reference(x, w, b, a, r),
            [random_like_case((37, 65), t, d, low=-2, high=2), random_like_case((33, 65), t, d, low=-1, high=1),
             random_like_case((33,), t, d), random_like_case((37, 33), t, d)], name=f"linear_act {a}")))
    return out


def run_selfcheck(devices) -> int:
    dtypes = [torch.float32, torch.bfloat16]
    header = f"{'family':<11} {'op':<34} " + " ".join(f"{d + ' ' + str(t).split('.')[-1]:>17}" for d in devices for t in dtypes)
    print(header)
    print("-" * len(header))
    failures = 0
    for family, op, fn in _checks():
        cells = []
        for d in devices:
            for t in dtypes:
                try:
                    verdicts = fn(d, t)
                    ok = all(verdicts)
                    worst = max((max(v.ours) if v.ours else 0.0) for v in verdicts)
                    cells.append(f"{'pass' if ok else 'FAIL'} {worst:9.1e}")
                    if not ok:
                        failures += 1
                        print("   ", "; ".join(v.message for v in verdicts if not v))
                except Exception as e:  # an exception is a failed check, reported, not a crash
                    failures += 1
                    cells.append("ERROR")
                    print(f"    {op} on {d} {t}: {type(e).__name__}: {e}")
        print(f"{family:<11} {op:<34} " + " ".join(f"{c:>17}" for c in cells))
    print(f"(cells: result and the worst error of ours against float64, max-norm; {failures} failed)")
    return failures
