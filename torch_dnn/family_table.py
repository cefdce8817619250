"""The op families, declared once. Every list of families is generated from TABLE:

- torch_dnn.ops imports each family's ops module (which registers its fake kernels, autograd and autocast);
- torch_dnn.functional re-exports the names in each ops module's FUNCTIONAL;
- torch_dnn.nn re-exports the names in each nn module's __all__ (whose @register_swap declarations fill
  torch_dnn.convert's swap map);
- torch_dnn.selfcheck (python -m torch_dnn) runs each ops module's selfcheck_cases();
- benchmarks/run.py runs each family's benchmark cases module.

A row names a family; its files follow from the name (docs/adding-a-family.md):

    csrc/<name>/                      schemas, CPU kernels, CUDA launcher, kernels, autograd (compiled by glob)
    torch_dnn/ops/<name>.py           fake kernels, Python autograd formulas, autocast, functional wrappers,
                                      FUNCTIONAL, selfcheck_cases()
    torch_dnn/nn/<nn>.py              drop-in modules and __all__ (nn defaults to the name)
    tests/test_<name>.py              the family's tests
    docs/<name>.md                    what the family's code does and why
    benchmarks/cases_<name>.py        cases(quick) -> list of benchmarks.harness.Case (unless benchmarks=False)

The order of TABLE is the order of python -m torch_dnn's rows and of a benchmark run over every family. A family
may import an earlier one's ops module (lrn uses group_norm's), never a later one's.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    nn: str | None = ""  # torch_dnn/nn/<nn>.py; "" means the family's name, None a family without modules
    benchmarks: bool = True  # whether benchmarks/cases_<name>.py exists

    @property
    def ops_module(self) -> str:
        return f"torch_dnn.ops.{self.name}"

    @property
    def nn_module(self) -> str | None:
        return None if self.nn is None else f"torch_dnn.nn.{self.nn or self.name}"

    @property
    def benchmark_module(self) -> str | None:
        return f"benchmarks.cases_{self.name}" if self.benchmarks else None

    @property
    def csrc_dir(self) -> str:
        return f"csrc/{self.name}"

    @property
    def test_file(self) -> str:
        return f"tests/test_{self.name}.py"

    @property
    def doc(self) -> str:
        return f"docs/{self.name}.md"


TABLE = (
    Family("activation"),
    Family("softmax"),
    Family("norm"),
    Family("pool"),
    Family("batch_norm"),
    Family("group_norm"),
    Family("lrn"),
    Family("matmul", nn="linear"),
    Family("conv"),
    Family("attention"),
)


def bind_exports(namespace: dict, where: str, module_of, names_of) -> list:
    """Binds into `namespace` (a package's globals()) the names each family's module exports, in TABLE's order, and
    returns them for its __all__: torch_dnn.functional's and torch_dnn.nn's surface. module_of(family) is the
    module's import path (None: the family has none), names_of(module) the names it exports; a name already bound
    (another family's, or the package's own) is an ImportError naming `where`."""
    import importlib

    names = []
    for family in TABLE:
        path = module_of(family)
        if path is None:
            continue
        module = importlib.import_module(path)
        for name in names_of(module):
            if name in namespace:
                raise ImportError(f"{where}: {name!r} of family {family.name!r} is already defined")
            namespace[name] = getattr(module, name)
            names.append(name)
    return names
