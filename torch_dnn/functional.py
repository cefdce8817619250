"""The torch.nn.functional-like surface of torch_dnn: same names, arguments, defaults and in-place flags.

The names are those of each family's FUNCTIONAL list (torch_dnn/ops/<family>.py), for every family of
torch_dnn/family_table.py, bound here at import: `from torch_dnn.functional import relu` and
`torch_dnn.functional.relu` are the family's own wrapper (torch_dnn.ops.activation.relu).
"""
from torch_dnn.family_table import bind_exports as _bind_exports

__all__ = _bind_exports(globals(), "torch_dnn.functional", lambda f: f.ops_module, lambda m: m.FUNCTIONAL)
