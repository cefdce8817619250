"""Drop-in modules: subclasses of the torch.nn modules (same constructor, extra_repr, parameters and
state_dict keys) whose forward runs torch_dnn ops."""
from torch_dnn.nn.activation import (  # noqa: F401
    ELU, GELU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, Mish, ReLU, ReLU6, Sigmoid, SiLU, Softplus, Tanh,
    BiasAct,
)
from torch_dnn.nn.softmax import LogSoftmax, Softmax  # noqa: F401
from torch_dnn.nn.norm import AddLayerNorm, AddRMSNorm, LayerNorm, RMSNorm  # noqa: F401
from torch_dnn.nn.pool import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d  # noqa: F401
from torch_dnn.nn.batch_norm import BatchNorm1d, BatchNorm2d, BatchNorm3d, BatchNormAddAct, SyncBatchNorm  # noqa: F401
