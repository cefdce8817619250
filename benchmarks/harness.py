"""One benchmark harness for every family (docs/benchmarking.md).

A Case names the bytes and FLOPs it must move/do at minimum, builds its inputs (random, never zeros) and
maps implementation names ("torch_dnn", "eager", "compile", ...) to callables taking those inputs. Every
implementation of a case runs in this one process on the same inputs; each is timed with CUDA events around
single calls after warm-up, rotating through enough input sets to defeat the L2 cache, and the median is
reported with p10/p90. Cases with Case.rounds > 1 time their impls in turns (each turn after warmup_ms of its
own calls; odd rounds in reverse order) and take the median over all turns: at the power cap, an impl's clock
depends on what ran before it.
Cases with Case.graph time CUDA-graph replays instead (GPU time only, for kernels shorter than a call's host
time); cases with Case.wall time the wall clock over WALL_CALLS back-to-back calls, queue drained before and after
(a training step, where the host can be the bound). Rows print ms, GB/s or TFLOP/s, % of the ceiling measured in the same run, and torch_dnn's speed over
each peer's.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

L2_FLUSH_BYTES = 2 * 60 * 1024 * 1024  # rotate input sets until this much has been touched between reuses


@dataclass
class Case:
    family: str
    name: str
    make_inputs: Callable[[], tuple]
    impls: dict  # impl name -> callable(*inputs)
    bytes: int = 0
    flops: int = 0
    target: str = ""  # e.g. ">=0.9 copy", ">=2x eager": printed beside the row
    group: str = ""  # rows of one group form one table in the results file
    extra: dict = field(default_factory=dict)
    # > 1: the impls take turns, `rounds` times (odd rounds in reverse order), each turn after `warmup_ms` of
    # calls. For compute-bound cases at the H100's power cap the SM clock depends on what ran just before: timed
    # one after another, an impl that follows a slow, cool kernel runs at a higher clock than one that follows a
    # hot one (docs/benchmarking.md).
    rounds: int = 1
    warmup_ms: float = 0.0
    # True: time GPU work only, by replaying a CUDA graph of GRAPH_CALLS calls (for cases whose kernels are
    # shorter than an eager call's host time, where the events would time the host)
    graph: bool = False
    # True: time the host instead (HOST_CALLS calls per sample with time.perf_counter, CPU tensors or small CUDA
    # ones): the per-call cost of the Python and dispatcher layers, which CUDA events cannot isolate
    host: bool = False
    # True: time the wall clock per call over WALL_CALLS calls in a row, the queue drained before and after (what a
    # training loop sees). Events around one call of a host-bound step time whatever the queue held when they ran:
    # the GPU's work when the host is ahead, the host's when it is behind, so their spread is the queue's state.
    # Within a round the impls take turns sample by sample (time_wall_turns), so that the host's drift, which moves
    # a batch-16 train step by +-15-30% over seconds, falls on every impl alike.
    wall: bool = False


def dtype_tag(dtype) -> str:
    """The short dtype name the case names use (bf16, fp16, fp32, fp64)."""
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}[dtype]


def rand_cuda(shape, dtype, layout: str = "NCHW", lo: float = -4.0, hi: float = 4.0) -> torch.Tensor:
    """A fresh uniform random CUDA tensor (never zeros); layout "NHWC" gives channels_last memory."""
    x = torch.empty(shape, dtype=dtype, device="cuda").uniform_(lo, hi)
    return x.contiguous(memory_format=torch.channels_last) if layout == "NHWC" else x


def row_grid(shapes, dtypes, quick: bool):
    """(dtype, element size in bytes, shape, case tag "RxC dtype") over the 2-D row shapes (the first alone when
    quick) for each dtype, dtype outermost: the row families' case grid."""
    for dtype in dtypes:
        es = torch.empty((), dtype=dtype).element_size()
        for shape in shapes[:1] if quick else shapes:
            yield dtype, es, shape, f"{shape[0]}x{shape[1]} {dtype_tag(dtype)}"


def with_env(fn, **env):
    """fn run with the environment variables env set (restored after each call). The CUDA launchers read
    their variant knobs (TORCH_DNN_*) at every call, so one benchmark process times every variant on the same
    inputs."""
    def run(*args):
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return fn(*args)
        finally:
            for k, v in old.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v
    return run


def emit(text: str, path: str | None = None) -> None:
    """A probe's table: printed, and written to path when one is given."""
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")


def _warm_up(fn, input_sets, warmup: int, warmup_ms: float, sync) -> None:
    """`warmup` calls, then calls for warmup_ms (the GPU kept busy with this impl until its clock has settled),
    draining the queue every 4 calls and at the end."""
    for i in range(warmup):
        fn(*input_sets[i % len(input_sets)])
    sync()
    if warmup_ms > 0:
        t = time.perf_counter()
        i = 0
        while (time.perf_counter() - t) * 1e3 < warmup_ms:
            fn(*input_sets[i % len(input_sets)])
            i += 1
            if i % 4 == 0:
                sync()
        sync()


def time_calls(fn, input_sets, warmup: int, reps: int, warmup_ms: float = 0.0) -> list[float]:
    _warm_up(fn, input_sets, warmup, warmup_ms, torch.cuda.synchronize)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        inp = input_sets[i % len(input_sets)]
        starts[i].record()
        fn(*inp)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


WALL_CALLS = 4


def time_wall_calls(fn, input_sets, warmup: int, reps: int, warmup_ms: float = 0.0) -> list[float]:
    """Per-call wall time (ms): `reps` samples, each WALL_CALLS calls in a row (rotating the input sets) between
    two drains of the queue, divided by WALL_CALLS. Without CUDA the drains are no-ops."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    n = len(input_sets)
    _warm_up(fn, input_sets, warmup, warmup_ms, sync)
    times = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        for i in range(WALL_CALLS):
            fn(*input_sets[i % n])
        sync()
        times.append((time.perf_counter() - t) * 1e3 / WALL_CALLS)
    return times


def time_wall_turns(fns: dict, input_sets, warmup: int, samples: int, warmup_ms: float, reverse: bool) -> dict:
    """time_wall_calls for several impls at once: each warmed up, then `samples` samples each, the impls taking turns
    sample by sample (every other turn in reverse order). {name: per-call ms samples, or the exception it raised}."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    out = {}
    for name, fn in fns.items():
        try:
            _warm_up(fn, input_sets, warmup, warmup_ms, sync)
            out[name] = []
        except Exception as e:  # noqa: BLE001 (reported by the caller)
            out[name] = e
    names = [n for n in fns if isinstance(out[n], list)]
    for s in range(samples):
        for name in (names if (s % 2 == 0) != reverse else names[::-1]):
            if not isinstance(out[name], list):
                continue
            try:
                out[name] += time_wall_calls(fns[name], input_sets, 0, 1)
            except Exception as e:  # noqa: BLE001
                out[name] = e
    return out


GRAPH_CALLS = 20


def time_graph_calls(fn, input_sets, warmup: int, reps: int) -> list[float]:
    """Per-call GPU time: GRAPH_CALLS calls (rotating the input sets) captured into one CUDA graph, each replay
    timed with events and divided by GRAPH_CALLS."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as capture requires
        for i in range(max(warmup, 3)):
            fn(*input_sets[i % len(input_sets)])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(GRAPH_CALLS):
            fn(*input_sets[i % len(input_sets)])
    graph.replay()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        graph.replay()
        ends[i].record()
    torch.cuda.synchronize()
    del graph
    return [s.elapsed_time(e) / GRAPH_CALLS for s, e in zip(starts, ends)]


HOST_CALLS = 50


def time_host_calls(fn, input_sets, warmup: int, reps: int) -> list[float]:
    """Per-call host time (ms): reps samples of HOST_CALLS calls each (rotating the input sets), each sample's
    wall time over HOST_CALLS. On CUDA the queue is drained before and after each sample, which the many calls
    amortise. On the CPU the calls run on one intra-op thread: a tiny tensor's kernel gains nothing from more, and
    on a loaded machine a kernel that forks its thread pool (some backward and BLAS kernels do, whatever the size)
    waits for descheduled threads, milliseconds that are not host overhead."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    threads = torch.get_num_threads()
    if not cuda:
        torch.set_num_threads(1)
    try:
        for i in range(max(warmup, 20)):
            fn(*input_sets[i % len(input_sets)])
        n = len(input_sets)
        times = []
        for _ in range(reps):
            if cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            for i in range(HOST_CALLS):
                fn(*input_sets[i % n])
            if cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3 / HOST_CALLS)
    finally:
        torch.set_num_threads(threads)
    return times


def measure_copy_ceiling(nbytes: int = 2 * 1024**3) -> float:
    """Device-to-device copy bandwidth, counting bytes read plus written (GB/s)."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    times = time_calls(lambda: dst.copy_(src), [()], 3, 20)
    return 2 * src.numel() / (statistics.median(times) * 1e-3) / 1e9


def run_case(case: Case, ceiling_gbps: float, warmup: int = 5, reps: int = 30) -> list[dict]:
    first = case.make_inputs()
    set_bytes = sum(t.numel() * t.element_size() for t in first if isinstance(t, torch.Tensor))
    n_sets = 4 if case.host else max(1, min(8, -(-L2_FLUSH_BYTES // max(set_bytes, 1))))
    input_sets = [first] + [case.make_inputs() for _ in range(n_sets - 1)]
    times_of, errors = {impl: [] for impl in case.impls}, {}
    round_ms = {impl: [] for impl in case.impls}  # each turn's median: the paired ratios below
    names = list(case.impls)
    for r in range(max(1, case.rounds)):
        if case.wall:
            live = {n: case.impls[n] for n in names if n not in errors}
            got = time_wall_turns(live, input_sets, warmup, max(1, reps // WALL_CALLS), case.warmup_ms, r % 2 == 1)
            for impl, t in got.items():
                if isinstance(t, Exception):
                    errors[impl] = f"{type(t).__name__}: {str(t).splitlines()[0][:200]}"
                else:
                    times_of[impl] += t
                    round_ms[impl].append(statistics.median(t))
            continue
        # odd rounds in reverse order: each impl follows each of its neighbours, not always the same one
        for impl in names if r % 2 == 0 else names[::-1]:
            fn = case.impls[impl]
            if impl in errors:
                continue
            try:
                start = len(times_of[impl])
                if case.host:
                    times_of[impl] += time_host_calls(fn, input_sets, warmup, reps)
                elif case.graph:
                    times_of[impl] += time_graph_calls(fn, input_sets, warmup, reps)
                else:
                    times_of[impl] += time_calls(fn, input_sets, warmup, reps, case.warmup_ms)
                round_ms[impl].append(statistics.median(times_of[impl][start:]))
            except Exception as e:  # a peer that cannot run this case (e.g. compile failure) is reported, not fatal
                errors[impl] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    rows = []
    for impl, times in times_of.items():
        if impl in errors:
            rows.append({"family": case.family, "group": case.group, "case": case.name, "impl": impl,
                         "error": errors[impl]})
            continue
        ms = statistics.median(times)
        q = statistics.quantiles(times, n=10)
        row = {"family": case.family, "group": case.group, "case": case.name, "impl": impl, "ms": ms,
               "p10_ms": q[0], "p90_ms": q[-1], "target": case.target}
        if case.bytes:
            row["gbps"] = case.bytes / (ms * 1e-3) / 1e9
            row["pct_copy"] = 100.0 * row["gbps"] / ceiling_gbps
        if case.flops:
            row["tflops"] = case.flops / (ms * 1e-3) / 1e12
        rows.append(row)
    ours = next((r for r in rows if r["impl"] == "torch_dnn" and "ms" in r), None)
    for r in rows:
        if ours and "ms" in r and r is not ours:
            r["ours_speedup"] = r["ms"] / ours["ms"]
            # the speedup turn by turn (a peer's turn against ours in the same round): its range says how far the
            # machine's drift moves the ratio, which the p10-p90 of single samples overstates
            paired = [p / o for p, o in zip(round_ms[r["impl"]], round_ms["torch_dnn"])]
            if len(paired) > 1:
                r["speedup_range"] = [min(paired), max(paired)]
    del input_sets, first
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rows


def environment() -> dict:
    here = os.path.dirname(__file__)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=here).stdout.strip()
        # the device's copy of the working tree can carry a stale HEAD: say when the files differ from it
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=here).stdout.strip()
        if commit and dirty:
            commit += " + uncommitted changes"
    except OSError:
        commit = ""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": os.environ.get("TORCH_DNN_COMMIT", commit) or "unknown",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
        "python": platform.python_version(),
    }


def _by_round(row: dict) -> str:
    return " ({:.2f}-{:.2f} by round)".format(*row["speedup_range"]) if "speedup_range" in row else ""


def format_table(rows: list[dict]) -> str:
    out = ["| case | impl | ms (p10-p90) | GB/s | % copy | TFLOP/s | torch_dnn speedup | target |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | {r['impl']} | failed: {r['error']} | | | | | |")
            continue
        spd = f"{r['ours_speedup']:.2f}x{_by_round(r)}" if "ours_speedup" in r else ""
        tflops = f"{r['tflops']:.1f}" if "tflops" in r else ""
        out.append(
            f"| {r['case']} | {r['impl']} | {r['ms']:.4f} ({r['p10_ms']:.4f}-{r['p90_ms']:.4f}) | "
            f"{r.get('gbps', 0):.0f} | {r.get('pct_copy', 0):.1f} | {tflops} | {spd} | "
            f"{r.get('target', '') if r['impl'] == 'torch_dnn' else ''} |"
        )
    return "\n".join(out)


def run(cases: list[Case], out_dir: str | None = None, md_path: str | None = None, title: str = "") -> list[dict]:
    # host-time cases run on the CPU where there is no CUDA device; every other case needs one
    assert torch.cuda.is_available() or all(c.host for c in cases), "benchmarks need a CUDA device"
    env = environment()
    ceiling = measure_copy_ceiling() if torch.cuda.is_available() else 0.0
    print(f"# {title or 'torch_dnn benchmarks'}\n{json.dumps(env)}\ncopy ceiling: {ceiling:.0f} GB/s", flush=True)
    rows = []
    for case in cases:
        case_rows = run_case(case, ceiling)
        rows += case_rows
        if out_dir:  # written as we go: a run cut short still leaves its rows
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "bench.json"), "w") as f:
                json.dump({"env": env, "copy_ceiling_gbps": ceiling, "rows": rows}, f, indent=1)
        for r in case_rows:
            if "error" in r:
                print(f"{r['case']:<48} {r['impl']:<10} FAILED {r['error']}", flush=True)
            else:
                spd = f"x{r['ours_speedup']:.2f}{_by_round(r)}" if "ours_speedup" in r else ""
                tflops = f"{r['tflops']:7.1f} TFLOP/s " if "tflops" in r else ""
                print(f"{r['case']:<48} {r['impl']:<10} {r['ms']:8.4f} ms {r.get('gbps', 0):7.0f} GB/s "
                      f"{r.get('pct_copy', 0):5.1f}% {tflops}{spd}", flush=True)
    text = markdown(env, ceiling, rows, title)
    if md_path:
        with open(md_path, "w") as f:
            f.write(text)
    return rows


def markdown(env: dict, ceiling: float, rows: list[dict], title: str = "") -> str:
    md = [f"# {title or 'torch_dnn benchmarks'}", "",
          f"date {env['date']}, commit {env['commit']}, torch {env['torch']} (CUDA {env['cuda']}), device {env['device']}",
          f"copy ceiling measured in this run: {ceiling:.0f} GB/s (bytes read + written). "
          "Bytes are the minimum traffic; speedup is the peer's time over torch_dnn's.", ""]
    groups = []
    for r in rows:
        if r["group"] not in groups:
            groups.append(r["group"])
    for g in groups:
        md += [f"## {g}", "", format_table([r for r in rows if r["group"] == g]), ""]
    return "\n".join(md)


def markdown_from_json(json_path: str, md_path: str, title: str = "") -> None:
    """Re-render a results table from bench.json (e.g. of a run that was cut short)."""
    with open(json_path) as f:
        d = json.load(f)
    with open(md_path, "w") as f:
        f.write(markdown(d["env"], d["copy_ceiling_gbps"], d["rows"], title))
