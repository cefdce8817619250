"""Argument checks, for every op (every name of torch_dnn.ops.FAMILIES):
- the fake kernels (FakeTensorMode, torch.compile's tracing, `meta` tensors) raise what the real CPU kernels raise
  for the same bad arguments (the same exception type and message), and accept what they accept: wrong dtypes,
  shapes and ranks of each tensor argument, and each op's bad scalar arguments (C % G != 0, a pool output of size
  0, an unknown activation, ...);
- a tensor argument on another device than the others raises an error that names the op and the device, as
  PyTorch's ops do, instead of a result of uninitialised memory (a `meta` weight sends a CPU call to the fake kernel;
  on a GPU machine, CPU and CUDA tensors mixed reach the CUDA kernels' checks)."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.op_samples import op_samples, tensor_positions
from tests.utils import devices
from torch_dnn.ops import FAMILIES
from torch_dnn.ops.pool import RANKS

ops = torch.ops.torch_dnn
OP_NAMES = [n for family in FAMILIES.values() for n in family]


def _replace(args, i, value):
    out = list(args)
    out[i] = value
    return tuple(out)


def _tensor_mutations(args):
    """(label, args) with one tensor argument changed: its dtype, its shape, its rank."""
    for i in tensor_positions(args):
        t = args[i]
        yield f"arg{i} int32", _replace(args, i, t.to(torch.int32))
        if t.is_floating_point():
            yield f"arg{i} float32", _replace(args, i, t.to(torch.float32))
        if t.dim() >= 1 and t.shape[-1] > 1:
            yield f"arg{i} last dim shorter", _replace(args, i, t[..., :-1])
        yield f"arg{i} one more dim", _replace(args, i, t.unsqueeze(0))
        if t.dim() >= 1:
            yield f"arg{i} one dim less", _replace(args, i, t[0])


def _pool_scalars(name, args):
    """Bad window arguments of the pooling ops: args[k_at] is kernel_size (then stride, padding, dilation where the
    op has them)."""
    r = int(name.split("_pool")[1][0])
    kind = name.split(f"{r}d")[0]
    base = 1 if name.endswith("_backward") else 0  # the input's position
    base += 1 if kind in ("max_pool", "adaptive_max_pool") and name.endswith("_backward") else 0
    base += 1 if kind == "lp_pool" and name.endswith("_backward") else 0
    x = args[base]
    if kind.startswith("adaptive"):
        if name.endswith("_backward"):
            return []
        return [("output_size too long", _replace(args, 1, [2] * (r + 1))),
                ("output_size negative", _replace(args, 1, [-1] * r))]
    k_at = base + (2 if kind == "lp_pool" else 1)
    cases = [("kernel_size too short", _replace(args, k_at, [3] * (r - 1) or [])),
             ("kernel_size 0", _replace(args, k_at, [0] * r)),
             ("stride 0", _replace(args, k_at + 1, [0] * r))]
    if kind == "lp_pool":
        n_at = base + 1
        cases += [("norm_type 0", _replace(args, n_at, 0.0)), ("norm_type inf", _replace(args, n_at, float("inf"))),
                  ("kernel larger than the input", _replace(args, k_at, [x.shape[-1] + 2] * r))]
        return cases
    cases += [("padding negative", _replace(args, k_at + 2, [-1] * r)),
              ("padding over half the kernel", _replace(args, k_at + 2, [2] * r)),
              ("output of size 0", _replace(_replace(args, k_at, [x.shape[-1] + 4] * r), k_at + 2, [1] * r))]
    if kind == "max_pool":
        cases.append(("dilation 0", _replace(args, k_at + 3, [0] * r)))
    if kind == "avg_pool":
        cases.append(("divisor_override 0", _replace(args, k_at + 5, 0)))
    return cases


def _scalar_mutations(name, args, kwargs):
    """(label, args, kwargs): each op's bad non-tensor arguments (and absent tensors its kernel needs)."""
    a = args
    bare = name.rstrip("_")
    if bare == "hardtanh":
        return [("min_val > max_val", _replace(a, 1, 0.9), kwargs)]
    if name in ("gelu", "gelu_backward"):
        return [("approximate", a, {"approximate": "erf"})]
    if name == "bias_act":
        return [("dim", _replace(a, 2, 2), kwargs), ("act", _replace(a, 3, "swish"), kwargs)]
    if name == "bias_act_backward":
        return [("dim", _replace(a, 3, -3), kwargs), ("act", _replace(a, 4, "swish"), kwargs),
                ("bias_grad without bias", _replace(a, 2, None), kwargs)]
    if name in ("softmax", "log_softmax"):
        return [("dim", _replace(a, 1, 2), kwargs), ("dtype", _replace(a, 2, torch.int32), kwargs)]
    if name in ("softmax_backward", "log_softmax_backward"):
        return [("dim", _replace(a, 2, -3), kwargs), ("input_dtype", _replace(a, 3, torch.int64), kwargs)]
    if name in ("layer_norm", "rms_norm"):
        return [("normalized_shape []", _replace(a, 1, []), kwargs), ("normalized_shape", _replace(a, 1, [5]), kwargs),
                ("normalized_shape 2-D", _replace(a, 1, [3, 4]), kwargs)]
    if name in ("add_layer_norm", "add_rms_norm"):
        return [("normalized_shape", _replace(a, 2, [2, 5]), kwargs)]
    if name in ("layer_norm_backward", "rms_norm_backward"):
        ns_at = 5 if name == "layer_norm_backward" else 4
        return [("normalized_shape", _replace(a, ns_at, [5]), kwargs),
                ("weight gradient without weight", _replace(a, ns_at - 1, None), kwargs)]
    if name in ("add_layer_norm_backward", "add_rms_norm_backward"):
        ns_at = 6 if name == "add_layer_norm_backward" else 5
        return [("normalized_shape", _replace(a, ns_at, [5]), kwargs),
                ("weight gradient without weight", _replace(a, ns_at - 1, None), kwargs)]
    if name in ("group_norm", "group_norm_with_stats"):
        return [(f"num_groups {g}", _replace(a, 1, g), kwargs) for g in (3, 0, -2)]
    if name == "group_norm_backward":
        return [("num_groups", _replace(a, 5, 3), kwargs)]
    if name in ("local_response_norm", "local_response_norm_backward"):
        at = 1 if name == "local_response_norm" else 2
        return [("size 0", _replace(a, at, 0), kwargs)]
    if name in ("batch_norm", "batch_norm_add_act"):
        rm_at = 3 if name == "batch_norm" else 4
        out = [("running_var alone", _replace(a, rm_at, None), kwargs),
               ("evaluation without running stats",
                _replace(_replace(_replace(a, rm_at, None), rm_at + 1, None), rm_at + 2, False), kwargs)]
        if name == "batch_norm_add_act":
            out.append(("act", _replace(a, 9, 3), kwargs))
        return out
    if name == "batch_norm_backward":
        return [("no statistics", _replace(_replace(a, 3, None), 5, None), kwargs)]
    if name == "batch_norm_backward_elemt":
        return [("count 0", _replace(a, 7, 0), kwargs)]
    if name == "linear_act":
        return [("activation", _replace(a, 3, "swish"), kwargs)]
    if name == "linear_act_backward":
        return [("activation", _replace(a, 4, "swish"), kwargs), ("no preact", _replace(a, 3, None), kwargs)]
    if name in ("convolution", "conv_backward_input", "conv_backward_weight"):
        # geometry after the two tensors (and the backward ops' size list): stride, padding, dilation, transposed,
        # output_padding, groups
        at = 2 if name == "convolution" else 3
        out = [("stride 0", _replace(a, at, [0, 0]), kwargs), ("padding negative", _replace(a, at + 1, [-1]), kwargs),
               ("dilation 0", _replace(a, at + 2, [0]), kwargs), ("groups 3", _replace(a, at + 5, 3), kwargs),
               ("kernel larger than the padded input", _replace(_replace(a, at + 1, [0]), at + 2, [3]), kwargs),
               ("output_padding too large", _replace(_replace(a, at + 3, True), at + 4, [2]), kwargs),
               ("stride of 3 values", _replace(a, at, [1, 1, 1]), kwargs)]
        if name != "convolution":
            out.append(("size list", _replace(a, 2, [2, 3, 6, 6] if name == "conv_backward_input" else [4, 3, 2, 2]),
                        kwargs))
        return out
    if name in ("conv_bias_act", "conv_bias_add_act"):
        at = 3 if name == "conv_bias_act" else 4  # stride, padding, dilation, groups, activation
        return [("stride 0", _replace(a, at, [0, 0]), kwargs), ("padding negative", _replace(a, at + 1, [-1]), kwargs),
                ("groups 3", _replace(a, at + 3, 3), kwargs), ("activation", _replace(a, at + 4, "swish"), kwargs),
                ("kernel larger than the padded input", _replace(_replace(a, at + 1, [0]), at + 2, [3]), kwargs)]
    if "_pool" in name and name[-1] != "_":
        return [(label, args_, kwargs) for label, args_ in _pool_scalars(name, args)]
    return []


def _outcome(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 (the outcome is compared, whatever it is)
        return type(e), str(e).split("\n")[0]
    return None


def _fresh(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _real(name, args, kwargs):
    return _outcome(lambda: getattr(ops, name)(*_fresh(args), **kwargs))


def _fake(name, args, kwargs):
    with FakeTensorMode() as mode:
        fake = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
        return _outcome(lambda: getattr(ops, name)(*fake, **kwargs))


@pytest.mark.parametrize("name", OP_NAMES)
def test_fake_kernel_raises_what_the_kernel_raises(name):
    args, kwargs = op_samples(dtype=torch.float64)[name]
    assert _real(name, args, kwargs) is None and _fake(name, args, kwargs) is None, name
    cases = [(label, a, kwargs) for label, a in _tensor_mutations(args)] + _scalar_mutations(name, args, kwargs)
    raised = 0
    for label, a, kw in cases:
        real, fake = _real(name, a, kw), _fake(name, a, kw)
        assert fake == real, f"{name} ({label}): the kernel gives {real}, the fake kernel {fake}"
        raised += real is not None
    assert raised > 0, f"{name}: no bad input raised"


def test_pool_ops_have_scalar_cases():
    for r in RANKS:
        for kind in ("max_pool", "avg_pool", "lp_pool", "adaptive_avg_pool", "adaptive_max_pool"):
            args, kwargs = op_samples()[f"{kind}{r}d"]
            assert _scalar_mutations(f"{kind}{r}d", args, kwargs), (kind, r)


def _device_pairs():
    """(the other arguments' device, the one argument's device)."""
    pairs = [pytest.param("cpu", "meta", id="cpu-meta"), pytest.param("meta", "cpu", id="meta-cpu")]
    return pairs + [pytest.param(a, b, id=f"{a}-{b}", marks=pytest.mark.cuda) for a, b in (("cpu", "cuda"),
                                                                                            ("cuda", "cpu"))]


# Tensor arguments that live on the CPU whatever the device of the others: attention's dropout key (seed, offset),
# as PyTorch's SDPA keeps its philox seed and offset.
HOST_TENSORS = {"attention_backward": {6}}


@pytest.mark.parametrize("home,other", _device_pairs())
@pytest.mark.parametrize("name", OP_NAMES)
def test_a_tensor_on_another_device_is_an_error(name, home, other):
    args, kwargs = op_samples()[name]
    positions = [i for i in tensor_positions(args) if i not in HOST_TENSORS.get(name, ())]
    if len(positions) < 2:
        pytest.skip(f"{name} takes one tensor")
    for i in positions:
        moved = tuple(a.to(other if j == i else home) if isinstance(a, torch.Tensor) and j not in
                      HOST_TENSORS.get(name, ()) else a for j, a in enumerate(args))
        with pytest.raises(RuntimeError) as e:
            getattr(ops, name)(*moved, **kwargs)
        msg = str(e.value).split("\n")[0]
        assert msg.startswith(f"torch_dnn.{name}:") and "device" in msg, f"{name} (argument {i}): {msg}"


@pytest.mark.parametrize("device", devices())
def test_norms_with_a_meta_weight_raise_as_pytorch_does(device):
    """The issue's cases through the functional wrappers: PyTorch raises for each (a RuntimeError), so do we."""
    import torch_dnn.functional as F

    x = torch.randn(4, 6, 5, device=device)
    meta = torch.ones(6, device="meta")
    cases = [
        (lambda f: f.layer_norm(x, (5,), torch.ones(5, device="meta")), "weight"),
        (lambda f: f.group_norm(x, 2, meta), "weight"),
        (lambda f: f.batch_norm(x, meta, meta), "running_mean"),
        (lambda f: f.batch_norm(x, None, None, weight=None, bias=meta, training=True), "bias"),
        (lambda f: f.instance_norm(x, weight=meta), "weight"),
    ]
    for call, arg in cases:
        with pytest.raises(RuntimeError):
            call(torch.nn.functional)
        with pytest.raises(RuntimeError, match=f"torch_dnn[.].*expected {arg} to be on the same device"):
            call(F)
