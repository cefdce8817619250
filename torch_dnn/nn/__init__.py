"""Drop-in modules: subclasses of the torch.nn modules (same constructor, extra_repr, parameters and
state_dict keys) whose forward runs torch_dnn ops, and torch_dnn's own modules (BiasAct, AddLayerNorm, ...).

The names are those of each family's nn module's __all__ (torch_dnn/nn/<module>.py), for every family of
torch_dnn/family_table.py that has one, bound here at import. Importing the nn modules also fills
torch_dnn.convert's swap map: each drop-in declares the torch.nn type it replaces with @register_swap.
"""
import importlib as _importlib

from torch_dnn.family_table import TABLE as _TABLE

__all__ = []
for _family in _TABLE:
    if _family.nn_module is None:
        continue
    _module = _importlib.import_module(_family.nn_module)
    for _name in _module.__all__:
        if _name in globals():
            raise ImportError(f"torch_dnn.nn: {_name!r} of family {_family.name!r} is already defined")
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
del _family, _module, _name
