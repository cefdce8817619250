"""The family table (torch_dnn/family_table.py) against the tree: each row's pieces exist and declare themselves
consistently, every registered op belongs to one family, and the generated lists (torch_dnn.functional,
torch_dnn.nn, convert's swap map, the self-check's rows, the benchmark runner's families) are exactly what the
families declare."""
import importlib
import os

import pytest
import torch

import torch_dnn
import torch_dnn.functional as F
import torch_dnn.nn as tnn
from torch_dnn.convert import SWAPS
from torch_dnn.family_table import TABLE
from torch_dnn.ops._registry import FAMILIES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = [f.name for f in TABLE]


def _public_modules(module):
    """The torch.nn.Module subclasses that `module` defines under a public name."""
    return sorted(n for n, o in vars(module).items() if not n.startswith("_") and isinstance(o, type)
                  and issubclass(o, torch.nn.Module) and o.__module__ == module.__name__)


def test_table_names_are_unique_and_each_ops_module_registers_its_family():
    assert len(NAMES) == len(set(NAMES)) >= 8
    assert list(FAMILIES) == NAMES  # add_family(<name>, ...) in each ops module, imported in the table's order
    assert torch_dnn.families() == FAMILIES


def _takes_or_gives_tensors(op_name):
    packet = getattr(torch.ops.torch_dnn, op_name)
    schemas = [getattr(packet, overload)._schema for overload in packet.overloads()]
    return any("Tensor" in str(a.type) for s in schemas for a in (*s.arguments, *s.returns))


def test_every_registered_op_belongs_to_one_family():
    """Every op with tensors is in one family's add_family list (ops without tensors, such as gemm_paths, which
    reports the build's GEMM paths, are queries, not computations)."""
    registered = sorted(name for name in (n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names()
                                          if n.startswith("torch_dnn::")) if _takes_or_gives_tensors(name))
    declared = [op for ops in FAMILIES.values() for op in ops]
    assert len(declared) == len(set(declared))
    assert registered == sorted(declared)


@pytest.mark.parametrize("family", TABLE, ids=NAMES)
def test_family_pieces_exist(family):
    assert os.path.isfile(os.path.join(ROOT, family.csrc_dir, f"{family.name}.cpp"))
    assert os.path.isfile(os.path.join(ROOT, family.test_file))
    assert os.path.isfile(os.path.join(ROOT, family.doc))
    ops_module = importlib.import_module(family.ops_module)
    assert getattr(torch_dnn.ops, family.name) is ops_module
    assert ops_module.FUNCTIONAL and ops_module.selfcheck_cases()
    if family.nn_module is not None:
        nn_module = importlib.import_module(family.nn_module)
        # every public module exported; the other exports are convert's include selectors (CONVOLUTIONS,
        # ATTENTION) and attention's routing mode
        exported = [n for n in nn_module.__all__ if isinstance(getattr(nn_module, n), type)
                    and issubclass(getattr(nn_module, n), torch.nn.Module)]
        assert sorted(exported) == _public_modules(nn_module)
    if family.benchmark_module is not None:
        assert os.path.isfile(os.path.join(ROOT, *family.benchmark_module.split(".")) + ".py")


def test_every_case_file_and_ops_file_has_a_row():
    """A family's files without a row would be silently left out of every generated list."""
    ops_files = {f[:-3] for f in os.listdir(os.path.join(ROOT, "torch_dnn", "ops"))
                 if f.endswith(".py") and not f.startswith("_")}
    assert ops_files == set(NAMES)
    nn_files = {f[:-3] for f in os.listdir(os.path.join(ROOT, "torch_dnn", "nn"))
                if f.endswith(".py") and not f.startswith("_")}
    assert nn_files == {f.nn_module.rsplit(".", 1)[1] for f in TABLE if f.nn_module}


def test_generated_lists_are_the_families_declarations():
    functional = [n for f in TABLE for n in importlib.import_module(f.ops_module).FUNCTIONAL]
    assert F.__all__ == functional and len(set(functional)) == len(functional)
    for f in TABLE:
        ops_module = importlib.import_module(f.ops_module)
        assert all(getattr(F, n) is getattr(ops_module, n) for n in ops_module.FUNCTIONAL)
    modules = [n for f in TABLE if f.nn_module for n in importlib.import_module(f.nn_module).__all__]
    assert tnn.__all__ == modules and len(set(modules)) == len(modules)
    # convert's map: each drop-in declared (@register_swap) in a family's nn module, exported by torch_dnn.nn
    assert SWAPS and all(getattr(tnn, ours.__name__) is ours for ours in SWAPS.values())
    assert all(issubclass(ours, theirs) for theirs, ours in SWAPS.items())

    from torch_dnn.selfcheck import _checks

    assert sorted({family for family, _, _ in _checks()}) == sorted(NAMES)


def test_benchmark_runner_lists_each_case_file():
    """The runner's families: the table's families with benchmarks, in its order, then the benchmark-only entries
    (whole models); every benchmarks/cases_<name>.py is one of them."""
    from benchmarks.run import FAMILIES as BENCH

    with_cases = [f.name for f in TABLE if f.benchmarks]
    assert list(BENCH)[:len(with_cases)] == with_cases
    assert not set(list(BENCH)[len(with_cases):]) & set(NAMES)
    case_files = {f[len("cases_"):-len(".py")] for f in os.listdir(os.path.join(ROOT, "benchmarks"))
                  if f.startswith("cases_") and f.endswith(".py")}
    assert case_files == set(BENCH)
    assert all(BENCH[n].__name__ == f"benchmarks.cases_{n}" and callable(BENCH[n].cases) for n in BENCH)


def _knobs_read_by_the_code():
    """The TORCH_DNN_* environment variables the product reads (quoted names in csrc/ and torch_dnn/; the build's
    macros are never quoted)."""
    import re

    found = set()
    for top in ("csrc", "torch_dnn"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".cu", ".cuh", ".h", ".cpp", ".py")):
                    with open(os.path.join(folder, f), errors="ignore") as fh:
                        found |= set(re.findall(r'"(TORCH_DNN_[A-Z0-9_]+)', fh.read()))
    return found


def test_every_knob_has_a_row_in_a_knob_table():
    """Each run-time knob is documented where its family's knobs are: a row of a docs/*.md (or README) table that
    starts with its name."""
    import glob
    import re

    rows = set()
    for path in glob.glob(os.path.join(ROOT, "docs", "*.md")) + [os.path.join(ROOT, "README.md")]:
        with open(path) as fh:
            for line in fh:
                if line.startswith("|"):
                    rows |= set(re.findall(r"TORCH_DNN_[A-Z0-9_]+", line.split("|")[1]))
    knobs = _knobs_read_by_the_code()
    assert len(knobs) > 30, f"found only {sorted(knobs)}: the scan is broken"
    assert not knobs - rows, f"knobs without a table row: {sorted(knobs - rows)}"
