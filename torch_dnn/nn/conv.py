"""Drop-in Conv1d/2d/3d and ConvTranspose1d/2d/3d: subclasses of torch.nn's (same constructor, parameters,
initialisation and state_dict) whose forward runs torch_dnn's convolution. padding_mode reflect / replicate / circular
pads the input with torch.nn.functional.pad first, as PyTorch's modules do; the transposed modules take forward's
output_size as PyTorch's (its _output_padding).

convert swaps them only when asked (convert(model, include=(torch.nn.Conv2d, ...))): NCHW inputs, grouped
convolutions and a stem with 3 input channels still run on the CUDA-core direct kernels, which would make a
converted CNN much slower than native (docs/conv.md has the numbers)."""
import torch

from torch_dnn.convert import register_swap
from torch_dnn.ops import conv as F

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Conv1dAct",
           "Conv2dAct", "Conv3dAct", "CONVOLUTIONS"]

# What convert's include names to swap every convolution (opt-in: docs/conv.md says which problems still run slower
# than cuDNN).
CONVOLUTIONS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose1d,
                torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)


class _ConvForward:
    """nn.Conv*d's _conv_forward (which forward calls) with torch_dnn's convolution."""

    _conv = None  # torch_dnn.functional.conv1d / 2d / 3d

    def _conv_forward(self, input, weight, bias):
        conv = type(self)._conv
        if self.padding_mode != "zeros":
            padded = torch.nn.functional.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(padded, weight, bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)


@register_swap(torch.nn.Conv1d, opt_in=True)
class Conv1d(_ConvForward, torch.nn.Conv1d):
    _conv = staticmethod(F.conv1d)


@register_swap(torch.nn.Conv2d, opt_in=True)
class Conv2d(_ConvForward, torch.nn.Conv2d):
    _conv = staticmethod(F.conv2d)


@register_swap(torch.nn.Conv3d, opt_in=True)
class Conv3d(_ConvForward, torch.nn.Conv3d):
    _conv = staticmethod(F.conv3d)


class _ConvTransposeForward:
    """nn.ConvTranspose*d's forward with torch_dnn's transposed convolution."""

    _conv = None  # torch_dnn.functional.conv_transpose1d / 2d / 3d
    _rank = 0

    def forward(self, input, output_size=None):
        if self.padding_mode != "zeros":
            raise ValueError(f"Only `zeros` padding mode is supported for {type(self).__name__}")
        output_padding = self._output_padding(input, output_size, self.stride, self.padding, self.kernel_size,
                                              self._rank, self.dilation)
        return type(self)._conv(input, self.weight, self.bias, self.stride, self.padding, output_padding, self.groups,
                                self.dilation)


@register_swap(torch.nn.ConvTranspose1d, opt_in=True)
class ConvTranspose1d(_ConvTransposeForward, torch.nn.ConvTranspose1d):
    _conv = staticmethod(F.conv_transpose1d)
    _rank = 1


@register_swap(torch.nn.ConvTranspose2d, opt_in=True)
class ConvTranspose2d(_ConvTransposeForward, torch.nn.ConvTranspose2d):
    _conv = staticmethod(F.conv_transpose2d)
    _rank = 2


@register_swap(torch.nn.ConvTranspose3d, opt_in=True)
class ConvTranspose3d(_ConvTransposeForward, torch.nn.ConvTranspose3d):
    _conv = staticmethod(F.conv_transpose3d)
    _rank = 3


class _ConvActForward:
    """nn.Conv*d's parameters (same constructor, state_dict keys and initialisation) followed by an activation,
    computed as one convolution with the bias, residual and activation in its epilogue (conv_bias_act /
    conv_bias_add_act): what convert(model, fuse=True) builds from an nn.Sequential's convolution followed by an
    activation module.

    activation: bias_act's names ("relu", "gelu", "gelu_tanh", "silu", "leaky_relu", ...); act_a / act_b: the
    parameters of leaky_relu (negative_slope), elu (alpha), softplus (beta, threshold), None for defaults.
    forward(input, residual=None): act(conv(input) + residual), the residual added before the activation."""

    def __init__(self, *args, activation="relu", act_a=None, act_b=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.activation, self.act_a, self.act_b = activation, act_a, act_b

    @classmethod
    def from_conv(cls, conv, activation, act_a=None, act_b=None):
        """A ConvNdAct sharing conv's parameters (no copy) and attributes, keeping its training mode."""
        m = cls.__new__(cls)
        # geometry, padding_mode, training mode; the module's own dicts copied (the Parameters in them shared)
        m.__dict__.update({k: v.copy() if isinstance(v, dict) else v for k, v in conv.__dict__.items()})
        m.activation, m.act_a, m.act_b = activation, act_a, act_b
        return m

    def forward(self, input, residual=None):
        stride, padding = self.stride, self.padding
        if self.padding_mode != "zeros":
            input = torch.nn.functional.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = 0
        if residual is None:
            return F.conv_bias_act(input, self.weight, self.bias, self.activation, stride, padding, self.dilation,
                                   self.groups, self.act_a, self.act_b)
        return F.conv_bias_add_act(input, self.weight, self.bias, residual, self.activation, stride, padding,
                                   self.dilation, self.groups, self.act_a, self.act_b)

    def extra_repr(self):
        params = "".join(f", {k}={v}" for k, v in (("act_a", self.act_a), ("act_b", self.act_b)) if v is not None)
        return f"{super().extra_repr()}, activation={self.activation!r}{params}"


class Conv1dAct(_ConvActForward, torch.nn.Conv1d):
    pass


class Conv2dAct(_ConvActForward, torch.nn.Conv2d):
    pass


class Conv3dAct(_ConvActForward, torch.nn.Conv3d):
    pass
