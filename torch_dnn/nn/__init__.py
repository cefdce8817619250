"""Drop-in modules: subclasses of the torch.nn modules (same constructor, extra_repr, parameters and
state_dict keys) whose forward runs torch_dnn ops."""
from torch_dnn.nn.activation import (  # noqa: F401
    ELU, GELU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, Mish, ReLU, ReLU6, Sigmoid, SiLU, Softplus, Tanh,
    BiasAct,
)
from torch_dnn.nn.softmax import LogSoftmax, Softmax  # noqa: F401
from torch_dnn.nn.norm import AddLayerNorm, AddRMSNorm, LayerNorm, RMSNorm  # noqa: F401
from torch_dnn.nn.pool import (  # noqa: F401
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d,
    AvgPool1d, AvgPool2d, AvgPool3d, LPPool1d, LPPool2d, MaxPool1d, MaxPool2d, MaxPool3d,
)
from torch_dnn.nn.batch_norm import BatchNorm1d, BatchNorm2d, BatchNorm3d, BatchNormAddAct, SyncBatchNorm  # noqa: F401
from torch_dnn.nn.group_norm import GroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d  # noqa: F401
from torch_dnn.nn.lrn import LocalResponseNorm  # noqa: F401
from torch_dnn.nn.linear import FusedAway, Linear, LinearAct  # noqa: F401

from torch_dnn.nn import pool as _pool  # noqa: E402

if hasattr(_pool, "LPPool3d"):
    LPPool3d = _pool.LPPool3d
