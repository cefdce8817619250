"""The torch.nn.functional-like surface of torch_dnn: same names, arguments, defaults and in-place flags.

The names are those of each family's FUNCTIONAL list (torch_dnn/ops/<family>.py), for every family of
torch_dnn/family_table.py, bound here at import: `from torch_dnn.functional import relu` and
`torch_dnn.functional.relu` are the family's own wrapper (torch_dnn.ops.activation.relu).
"""
import importlib as _importlib

from torch_dnn.family_table import TABLE as _TABLE

__all__ = []
for _family in _TABLE:
    _module = _importlib.import_module(_family.ops_module)
    for _name in _module.FUNCTIONAL:
        if _name in globals():
            raise ImportError(f"torch_dnn.functional: {_name!r} of family {_family.name!r} is already defined")
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
del _family, _module, _name
