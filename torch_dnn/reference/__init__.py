"""Pure-PyTorch references of torch_dnn's fused ops, shared by the tests and the benchmarks."""
from torch_dnn.reference.activation import (BIAS_ACT_TORCH, bias_act_reference, hardsigmoid_reference,  # noqa: F401
                                            hardswish_reference)
from torch_dnn.reference.conv import conv_act_reference  # noqa: F401
from torch_dnn.reference.lrn import local_response_norm_reference  # noqa: F401
from torch_dnn.reference.norm import add_layer_norm_reference, add_rms_norm_reference  # noqa: F401
from torch_dnn.reference.pool import (  # noqa: F401
    avg_pool1d_reference, avg_pool2d_reference, avg_pool3d_reference, lp_pool3d_reference, max_pool1d_reference,
    max_pool2d_reference, max_pool3d_reference,
)
from torch_dnn.reference.matmul import linear_act_reference  # noqa: F401
