"""SyncBatchNorm (issue 3): its ops batch_norm_elemt, batch_norm_backward_reduce and batch_norm_backward_elemt
against float64 formulas (error-ratio rule) and opcheck; float64 gradcheck through the autograd.Function in a
one-process gloo group; 2 gloo processes on CPU (equal, unequal and empty local batches) against one process
over the concatenated batch, step by step; the module's fallback, convert() and convert_sync_batchnorm."""
import datetime
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_dnn
from tests.utils import ALL_DTYPES, devices, first_line, make_input, opcheck_samples
from torch_dnn.ops.batch_norm import sync_batch_norm
from torch_dnn.testing import compare

ops = torch.ops.torch_dnn
SHAPES = [((8, 3), "contiguous"), ((4, 3, 5), "contiguous"), ((2, 3, 4, 5), "channels_last"),
          ((2, 3, 4, 5), "strided"), ((2, 3, 2, 3, 4), "contiguous"), ((0, 3, 4, 4), "contiguous")]


def _sd(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check(ours, peer, ref64, name, grad=False):
    v = compare(ours, peer, ref64, grad=grad, name=name)
    assert v, v.message


def _chan(t, x):  # a per-channel tensor broadcast against x (N, C, *)
    return t.view((1, -1) + (1,) * (x.dim() - 2))


def _dims(x):
    return [0] + list(range(2, x.dim()))


def _stats(c, dtype, device):
    sd = _sd(dtype)
    mean = torch.randn(c, dtype=torch.float64).to(device, sd)
    invstd = (torch.rand(c, dtype=torch.float64) + 0.5).to(device, sd)
    return mean, invstd


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_elemt_against_formula(device, dtype, affine):
    for shape, layout in SHAPES:
        x = make_input(shape, dtype, device, layout)
        mean, invstd = _stats(3, dtype, device)
        w = torch.rand(3, dtype=dtype, device=device) + 0.5 if affine else None
        b = torch.randn(3, dtype=dtype, device=device) if affine else None
        y = ops.batch_norm_elemt(x, mean, invstd, w, b)

        def formula(x, m, s, w, b):
            y = (x - _chan(m, x)) * _chan(s, x)
            return y * _chan(w, x) + _chan(b, x) if w is not None else y

        sd = _sd(dtype)
        up = (lambda t: None if t is None else t.to(sd))
        peer = formula(x.to(sd), mean, invstd, up(w), up(b)).to(dtype)
        d = (lambda t: None if t is None else t.double())
        _check(y, peer, formula(x.double(), d(mean), d(invstd), d(w), d(b)), f"elemt {shape} {layout}")
        assert y.dtype == dtype and y.shape == x.shape
        if layout == "channels_last":
            assert y.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_backward_reduce_against_formula(device, dtype):
    for shape, layout in SHAPES:
        x, dy = make_input(shape, dtype, device, layout), make_input(shape, dtype, device, "contiguous")
        mean, invstd = _stats(3, dtype, device)
        s1, s2 = ops.batch_norm_backward_reduce(dy, x, mean, invstd)
        sd = _sd(dtype)
        assert s1.dtype == sd and s2.dtype == sd and s1.shape == (3,)

        def formula(dy, x, m):
            return dy.sum(_dims(x)), (dy * (x - _chan(m, x))).sum(_dims(x))

        p1, p2 = formula(dy.to(sd), x.to(sd), mean)
        r1, r2 = formula(dy.double(), x.double(), mean.double())
        _check(s1, p1, r1, f"sum_dy {shape} {layout}", grad=True)
        _check(s2, p2, r2, f"sum_dy_xmu {shape} {layout}", grad=True)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_backward_elemt_against_formula(device, dtype, affine):
    for shape, layout in SHAPES:
        x, dy = make_input(shape, dtype, device, layout), make_input(shape, dtype, device, "channels_last"
                                                                    if layout == "channels_last" else "strided")
        sd = _sd(dtype)
        mean, invstd = _stats(3, dtype, device)
        w = torch.rand(3, dtype=dtype, device=device) + 0.5 if affine else None
        s1, s2 = torch.randn(3, dtype=sd, device=device) * 10, torch.randn(3, dtype=sd, device=device) * 10
        count = 2 * max(x.numel() // 3, 1)  # as if another process held as many elements again
        dx = ops.batch_norm_backward_elemt(dy, x, mean, invstd, w, s1, s2, count)
        assert dx.dtype == dtype and dx.shape == x.shape

        def formula(dy, x, m, s, w, s1, s2):
            k = s * w if w is not None else s
            return _chan(k, x) * (dy - _chan(s1 / count, x) - (x - _chan(m, x)) * _chan(s2 * s * s / count, x))

        up = (lambda t: None if t is None else t.to(sd))
        peer = formula(dy.to(sd), x.to(sd), mean, invstd, up(w), s1, s2).to(dtype)
        d = (lambda t: None if t is None else t.double())
        ref = formula(dy.double(), x.double(), d(mean), d(invstd), d(w), d(s1), d(s2))
        _check(dx, peer, ref, f"backward_elemt {shape} {layout}", grad=True)


def test_pieces_compose_to_batch_norm_backward():
    # one process: reduce + elemt with the local count is batch_norm's own training backward
    x = torch.randn(4, 3, 5, 6, dtype=torch.float64)
    dy, w = torch.randn_like(x), torch.rand(3, dtype=torch.float64) + 0.5
    _, mean, invstd = ops.batch_norm(x, w, None, None, None, True, 0.1, 1e-5)
    s1, s2 = ops.batch_norm_backward_reduce(dy, x, mean, invstd)
    dx = ops.batch_norm_backward_elemt(dy, x, mean, invstd, w, s1, s2, x.numel() // 3)
    rdx, rdw, rdb = ops.batch_norm_backward(dy, x, w, None, None, mean, invstd, True, 1e-5, [True, True, True])
    torch.testing.assert_close(dx, rdx)
    torch.testing.assert_close(s2 * invstd, rdw)
    torch.testing.assert_close(s1, rdb)
    torch.testing.assert_close(ops.batch_norm_elemt(x, mean, invstd, w, None),
                               ops.batch_norm(x, w, None, None, None, True, 0.1, 1e-5)[0])


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    x = torch.randn(3, 4, 5, 2, device=device)
    w, b = torch.rand(4, device=device), torch.randn(4, device=device)
    m, i = torch.randn(4, device=device), torch.rand(4, device=device) + 0.5
    xc = x.to(memory_format=torch.channels_last)
    opcheck_samples(ops.batch_norm_elemt, [((x, m, i, w, b), {}), ((xc, m, i, None, None), {})])
    opcheck_samples(ops.batch_norm_backward_reduce, [((torch.randn_like(x), x, m, i), {}),
                                                     ((torch.randn_like(xc), xc, m, i), {})])
    s1, s2 = torch.randn(4, device=device), torch.randn(4, device=device)
    opcheck_samples(ops.batch_norm_backward_elemt, [((torch.randn_like(x), x, m, i, w, s1, s2, 60), {}),
                                                    ((torch.randn_like(xc), xc, m, i, None, s1, s2, 30), {})])


def test_bad_arguments():
    x, m, i = torch.randn(4, 3, 2), torch.zeros(3), torch.ones(3)
    with pytest.raises(RuntimeError) as e:
        ops.batch_norm_elemt(x, torch.zeros(4), i, None, None)
    assert first_line(e.value) == ("torch_dnn.batch_norm_elemt: expected mean of shape [3] (the input's channel "
                                   "count, dim 1), but got [4]")
    with pytest.raises(RuntimeError) as e:
        ops.batch_norm_backward_reduce(torch.randn(4, 3, 3), x, m, i)
    assert first_line(e.value) == ("torch_dnn.batch_norm_backward_reduce: expected grad_out to have the shape of "
                                   "input [4, 3, 2], but got [4, 3, 3]")
    with pytest.raises(RuntimeError) as e:
        ops.batch_norm_backward_elemt(x, x, m, i, None, m, torch.zeros(2), 24)
    assert first_line(e.value) == ("torch_dnn.batch_norm_backward_elemt: expected sum_dy_xmu of shape [3] (the "
                                   "input's channel count, dim 1), but got [2]")
    with pytest.raises(RuntimeError) as e:
        ops.batch_norm_backward_elemt(x, x, m, i, None, m, m, 0)
    assert first_line(e.value) == ("torch_dnn.batch_norm_backward_elemt: expected count (the number of elements per "
                                   "channel over all processes) > 0, but got 0")
    with pytest.raises(RuntimeError) as e:
        ops.batch_norm_elemt(torch.randn(3), torch.zeros(1), torch.ones(1), None, None)
    assert "torch_dnn.batch_norm_elemt: expected input of shape (N, C, *) with at least 2 dimensions" in str(e.value)


# ---- one-process group: gradcheck through the autograd.Function, running stats ----

@pytest.fixture
def one_process_group(tmp_path):
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("momentum", [0.1, None])
def test_function_gradcheck_and_running_stats(one_process_group, momentum):
    x = torch.randn(3, 4, 3, 2, dtype=torch.float64, requires_grad=True)
    w = torch.rand(4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda x, w, b: sync_batch_norm(x, None, None, w, b, 0.1, 1e-5, one_process_group, 1),
                             (x, w, b))
    torch.autograd.gradcheck(lambda x: sync_batch_norm(x, None, None, None, None, 0.1, 1e-5, one_process_group, 1),
                             (x,))
    # the module in a 1-process group falls back to batch_norm; the Function itself matches it
    ref = torch.nn.BatchNorm2d(4, momentum=momentum).double()
    rm, rv = ref.running_mean.clone(), ref.running_var.clone()
    for step in range(1, 4):
        xs = torch.randn(5, 4, 3, 3, dtype=torch.float64) * step + step
        eaf = 1.0 / step if momentum is None else momentum
        y = sync_batch_norm(xs, rm, rv, ref.weight, ref.bias, eaf, 1e-5, one_process_group, 1)
        torch.testing.assert_close(y, ref(xs))
        torch.testing.assert_close(rm, ref.running_mean)
        torch.testing.assert_close(rv, ref.running_var)
    m = torch_dnn.nn.SyncBatchNorm(4).double()
    m.load_state_dict(ref.state_dict())
    torch.testing.assert_close(m(xs), ref(xs))


# ---- two gloo processes against one process over the concatenated batch ----

# sizes: each rank's local batch; shape: (C, *) after the batch dim
SCENARIOS = {
    "equal": dict(sizes=(4, 4), shape=(3, 5, 5), dtype=torch.float32, momentum=0.1, affine=True, track=True,
                  layout="contiguous"),
    "unequal": dict(sizes=(5, 2), shape=(3, 4, 3), dtype=torch.float64, momentum=None, affine=True, track=True,
                    layout="channels_last"),
    "empty_rank": dict(sizes=(3, 0), shape=(2, 7), dtype=torch.float32, momentum=0.1, affine=True, track=True,
                       layout="contiguous"),
    "no_affine_no_stats": dict(sizes=(2, 3), shape=(4,), dtype=torch.float64, momentum=0.1, affine=False,
                               track=False, layout="contiguous"),
    "bf16_3d": dict(sizes=(3, 2), shape=(2, 3, 2, 2), dtype=torch.bfloat16, momentum=0.1, affine=True, track=True,
                    layout="contiguous"),
}
STEPS = 3
LR = 0.5


def _data(sc, step):
    g = torch.Generator().manual_seed(1000 + step)
    shape = (sum(sc["sizes"]),) + sc["shape"]
    x = torch.randn(shape, generator=g, dtype=torch.float64) * (step + 1) + step
    gy = torch.randn(shape, generator=g, dtype=torch.float64)
    return x.to(sc["dtype"]), gy.to(sc["dtype"])


def _init_module(m, sc):
    c = sc["shape"][0]
    if sc["affine"]:
        with torch.no_grad():
            m.weight.copy_(torch.linspace(0.5, 1.5, c))
            m.bias.copy_(torch.linspace(-1, 1, c))
    return m.to(sc["dtype"])


def _grad(p):
    return torch.zeros_like(p) if p.grad is None else p.grad.clone()


def _sgd(m):
    with torch.no_grad():
        for p in (m.weight, m.bias):
            p -= LR * p.grad
            p.grad = None


def _layout(t, sc):
    return t.contiguous(memory_format=torch.channels_last) if sc["layout"] == "channels_last" else t.contiguous()


def _worker(rank, world, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    out = {}
    for name, sc in SCENARIOS.items():
        m = _init_module(torch_dnn.nn.SyncBatchNorm(sc["shape"][0], momentum=sc["momentum"], affine=sc["affine"],
                                                    track_running_stats=sc["track"]), sc)
        lo = sum(sc["sizes"][:rank])
        recs = []
        for step in range(STEPS):
            x, gy = _data(sc, step)
            xl = _layout(x[lo:lo + sc["sizes"][rank]], sc).requires_grad_()
            y = m(xl)
            y.backward(gy[lo:lo + sc["sizes"][rank]])
            r = {"y": y.detach().clone(), "dx": _grad(xl)}
            if sc["affine"]:
                r["dw"], r["db"] = _grad(m.weight), _grad(m.bias)
                m.weight.grad, m.bias.grad = r["dw"].clone(), r["db"].clone()
                for p in (m.weight, m.bias):  # what DDP does with parameter gradients (here: the sum)
                    dist.all_reduce(p.grad)
                r["dw_sum"], r["db_sum"] = m.weight.grad.clone(), m.bias.grad.clone()
                _sgd(m)
            if sc["track"]:
                r["rm"], r["rv"] = m.running_mean.clone(), m.running_var.clone()
                r["nbt"] = int(m.num_batches_tracked)
            recs.append(r)
        if sc["track"]:
            m.eval()
            x, _ = _data(sc, STEPS)
            recs.append({"eval": m(x[lo:lo + sc["sizes"][rank]]).detach()})
        out[name] = recs
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def _reference(sc, make, dtype):
    """The same steps, one process, the whole batch: per step y, dx, dw, db, running stats."""
    m = _init_module(make(sc["shape"][0], momentum=sc["momentum"], affine=sc["affine"],
                          track_running_stats=sc["track"]), sc).to(dtype)
    recs = []
    for step in range(STEPS):
        x, gy = _data(sc, step)
        x = _layout(x, sc).to(dtype).requires_grad_()
        y = m(x)
        y.backward(gy.to(dtype))
        r = {"y": y.detach(), "dx": x.grad}
        if sc["affine"]:
            r["dw_sum"], r["db_sum"] = m.weight.grad.clone(), m.bias.grad.clone()
            _sgd(m)
        if sc["track"]:
            r["rm"], r["rv"], r["nbt"] = m.running_mean.clone(), m.running_var.clone(), int(m.num_batches_tracked)
        recs.append(r)
    if sc["track"]:
        m.eval()
        recs.append({"eval": m(_data(sc, STEPS)[0].to(dtype)).detach()})
    return recs


def _bn_types(sc):
    if len(sc["shape"]) == 4:
        return torch.nn.BatchNorm3d, torch_dnn.nn.BatchNorm3d
    if len(sc["shape"]) == 3:
        return torch.nn.BatchNorm2d, torch_dnn.nn.BatchNorm2d
    return torch.nn.BatchNorm1d, torch_dnn.nn.BatchNorm1d


def test_two_gloo_processes(tmp_path):
    mp.spawn(_worker, args=(2, str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for name, sc in SCENARIOS.items():
        torch_type, ours_type = _bn_types(sc)
        dtype = sc["dtype"]
        ref_torch, ref64 = _reference(sc, torch_type, dtype), _reference(sc, torch_type, torch.float64)
        ref_ours = _reference(sc, ours_type, dtype)
        for step, (r0, r1) in enumerate(zip(*[g[name] for g in got])):
            where = f"{name} step {step}"
            for key in ("y", "dx", "eval"):
                if key not in r0:
                    continue
                ours = torch.cat([r0[key], r1[key]])
                assert ours.dtype == dtype
                if key != "eval" and sc["layout"] == "channels_last" and r0[key].numel():
                    assert r0[key].is_contiguous(memory_format=torch.channels_last), where
                _check(ours, ref_torch[step][key], ref64[step][key], f"{where} {key}", grad=key == "dx")
                torch.testing.assert_close(ours, ref_ours[step][key], msg=lambda s: f"{where} {key}: {s}")
            for key in ("dw_sum", "db_sum", "rm", "rv"):
                if key not in r0:
                    continue
                torch.testing.assert_close(r0[key], r1[key], rtol=0, atol=0)  # every process agrees exactly
                _check(r0[key], ref_torch[step][key], ref64[step][key], f"{where} {key}", grad=True)
                torch.testing.assert_close(r0[key], ref_ours[step][key], msg=lambda s: f"{where} {key}: {s}")
            if "dw" in r0:
                # local parameter gradients, as torch.nn.SyncBatchNorm gives them; their sum is the whole batch's
                torch.testing.assert_close(r0["dw"] + r1["dw"], r0["dw_sum"], rtol=0, atol=0)
                torch.testing.assert_close(r0["db"] + r1["db"], r0["db_sum"], rtol=0, atol=0)
                if sc["sizes"][1] == 0:
                    assert not r1["dw"].any() and not r1["db"].any()
            if "nbt" in r0:
                assert r0["nbt"] == r1["nbt"] == ref_torch[step]["nbt"] == step + 1


# ---- the module outside a process group, convert ----

def test_module_fallback_matches_torch():
    ref = torch.nn.SyncBatchNorm(3, momentum=None)
    ours = torch_dnn.nn.SyncBatchNorm(3, momentum=None)
    for step in range(3):
        x = torch.randn(4, 3, 5, 5) + step
        torch.testing.assert_close(ours(x), ref(x))
        torch.testing.assert_close(ours.running_var, ref.running_var)
    ref.eval(), ours.eval()
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(ours(x), ref(x))
    for bad in (torch.randn(3), torch.randn(2, 0, 4)):
        with pytest.raises(ValueError) as e_ref:
            ref(bad)
        with pytest.raises(ValueError) as e_ours:
            ours(bad)
        assert str(e_ours.value) == str(e_ref.value)


def test_convert_and_state_dict():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.SyncBatchNorm(4, momentum=0.2))
    ours, report = torch_dnn.convert(model)
    assert type(ours[1]) is torch_dnn.nn.SyncBatchNorm
    assert any(t == "SyncBatchNorm" for _, t, _ in report.swapped), str(report)
    assert ours.state_dict().keys() == model.state_dict().keys()
    assert torch_dnn.nn.SyncBatchNorm(5).state_dict().keys() == torch.nn.SyncBatchNorm(5).state_dict().keys()
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(ours(x), model(x))

    bn = torch.nn.Sequential(torch.nn.BatchNorm2d(4), torch.nn.Sequential(torch.nn.BatchNorm1d(2, affine=False)))
    conv = torch_dnn.nn.SyncBatchNorm.convert_sync_batchnorm(bn, process_group=None)
    assert type(conv[0]) is torch_dnn.nn.SyncBatchNorm and type(conv[1][0]) is torch_dnn.nn.SyncBatchNorm
    assert conv[0].weight is bn[0].weight and conv[1][0].weight is None
    assert conv.state_dict().keys() == bn.state_dict().keys()


def test_compile_fallback():
    m, ref = torch_dnn.nn.SyncBatchNorm(3), torch.nn.BatchNorm2d(3)
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(torch.compile(m, fullgraph=True)(x), ref(x))
    torch.testing.assert_close(m.running_var, ref.running_var)
