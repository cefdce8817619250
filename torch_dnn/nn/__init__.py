"""Drop-in modules: subclasses of the torch.nn modules (same constructor, extra_repr, parameters and
state_dict keys) whose forward runs torch_dnn ops, and torch_dnn's own modules (BiasAct, AddLayerNorm, ...).

The names are those of each family's nn module's __all__ (torch_dnn/nn/<module>.py), for every family of
torch_dnn/family_table.py that has one, bound here at import. Importing the nn modules also fills
torch_dnn.convert's swap map: each drop-in declares the torch.nn type it replaces with @register_swap.
"""
from torch_dnn.family_table import bind_exports as _bind_exports

__all__ = _bind_exports(globals(), "torch_dnn.nn", lambda f: f.nn_module, lambda m: m.__all__)
