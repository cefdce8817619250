"""The torch.nn.functional-like surface of torch_dnn: same names, arguments, defaults and in-place flags."""
from torch_dnn.ops import activation as _activation
from torch_dnn.ops import batch_norm as _batch_norm
from torch_dnn.ops import group_norm as _group_norm
from torch_dnn.ops import lrn as _lrn
from torch_dnn.ops import matmul as _matmul
from torch_dnn.ops import norm as _norm
from torch_dnn.ops import pool as _pool
from torch_dnn.ops import softmax as _softmax

relu = _activation.relu
relu6 = _activation.relu6
hardtanh = _activation.hardtanh
leaky_relu = _activation.leaky_relu
elu = _activation.elu
gelu = _activation.gelu
silu = _activation.silu
sigmoid = _activation.sigmoid
tanh = _activation.tanh
softplus = _activation.softplus
mish = _activation.mish
hardswish = _activation.hardswish
hardsigmoid = _activation.hardsigmoid
bias_act = _activation.bias_act

softmax = _softmax.softmax
log_softmax = _softmax.log_softmax

layer_norm = _norm.layer_norm
rms_norm = _norm.rms_norm
add_layer_norm = _norm.add_layer_norm
add_rms_norm = _norm.add_rms_norm

from torch_dnn.ops.pool import (  # noqa: E402
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d,
    adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d,
    adaptive_max_pool1d_with_indices, adaptive_max_pool2d_with_indices, adaptive_max_pool3d_with_indices,
    avg_pool1d, avg_pool2d, avg_pool3d,
    lp_pool1d, lp_pool2d, lp_pool3d,
    max_pool1d, max_pool2d, max_pool3d,
    max_pool1d_with_indices, max_pool2d_with_indices, max_pool3d_with_indices,
)

batch_norm = _batch_norm.batch_norm
batch_norm_add_act = _batch_norm.batch_norm_add_act
group_norm = _group_norm.group_norm
instance_norm = _group_norm.instance_norm
local_response_norm = _lrn.local_response_norm
matmul = _matmul.matmul
mm = _matmul.mm
bmm = _matmul.bmm
linear = _matmul.linear
linear_act = _matmul.linear_act

__all__ = (_activation.FUNCTIONAL + _softmax.FUNCTIONAL + _norm.FUNCTIONAL + _pool.FUNCTIONAL + _group_norm.FUNCTIONAL
           + _lrn.FUNCTIONAL + _matmul.FUNCTIONAL + _batch_norm.FUNCTIONAL)
