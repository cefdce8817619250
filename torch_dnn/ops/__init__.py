"""Per-family Python registrations (fake kernels, autograd, autocast) and functional wrappers.

Each family module (one per row of torch_dnn/family_table.py) registers its ops on import and adds itself to
FAMILIES; importing it also makes it an attribute here (torch_dnn.ops.<family>).
"""
import importlib as _importlib

from torch_dnn.family_table import TABLE as _TABLE
from torch_dnn.ops._registry import FAMILIES

for _family in _TABLE:
    _importlib.import_module(_family.ops_module)

__all__ = ["FAMILIES"] + [_family.name for _family in _TABLE]
del _family
