"""conv1d/2d/3d_act as PyTorch composes it: F.conv*d with the bias, the residual add, then the activation."""
import torch.nn.functional as F

from torch_dnn.reference.matmul import _act

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def conv_act_reference(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, activation="relu",
                       residual=None, act_a=None, act_b=None):
    """act(conv(x, weight, bias) + residual), the rank taken from the weight (conv1d/2d/3d)."""
    z = _CONV[weight.dim() - 2](x, weight, bias, stride, padding, dilation, groups)
    return _act(z if residual is None else z + residual, activation, act_a, act_b)
