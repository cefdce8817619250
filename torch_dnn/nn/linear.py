"""Drop-in Linear, and LinearAct: act(x @ W.T + b) in one kernel (what convert(model, fuse=True) builds from an
nn.Sequential's Linear followed by an activation module)."""
import torch

from torch_dnn import functional as F
from torch_dnn.convert import register_swap

__all__ = ["Linear", "LinearAct", "FusedAway"]


@register_swap(torch.nn.Linear)
class Linear(torch.nn.Linear):
    def forward(self, input):
        return F.linear(input, self.weight, self.bias)


class LinearAct(torch.nn.Linear):
    """nn.Linear's parameters (same constructor, state_dict keys and initialisation) followed by an activation,
    computed as one GEMM with the activation in its epilogue.

    activation: bias_act's names ("relu", "gelu", "gelu_tanh", "silu", "leaky_relu", ...); act_a / act_b: the
    parameters of leaky_relu (negative_slope), elu (alpha), softplus (beta, threshold), None for defaults.
    forward(input, residual=None): act(input @ weight.T + bias) + residual.
    """

    def __init__(self, in_features, out_features, bias=True, activation="relu", act_a=None, act_b=None, device=None,
                 dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.activation, self.act_a, self.act_b = activation, act_a, act_b

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, activation, act_a=None, act_b=None):
        """A LinearAct sharing linear's parameters (no copy), keeping its training mode."""
        m = cls.__new__(cls)
        torch.nn.Module.__init__(m)
        m.in_features, m.out_features = linear.in_features, linear.out_features
        m.weight, m.bias = linear.weight, linear.bias
        m.activation, m.act_a, m.act_b = activation, act_a, act_b
        m.train(linear.training)
        return m

    def forward(self, input, residual=None):
        return F.linear_act(input, self.weight, self.bias, self.activation, residual, self.act_a, self.act_b)

    def extra_repr(self):
        params = "".join(f", {k}={v}" for k, v in (("act_a", self.act_a), ("act_b", self.act_b)) if v is not None)
        return f"{super().extra_repr()}, activation={self.activation!r}{params}"


class FusedAway(torch.nn.Identity):
    """Stands where convert(fuse=True) took an activation module out of an nn.Sequential (it now runs inside
    the preceding LinearAct), so that the Sequential's indices and state_dict keys stay as they were."""

    def __init__(self, into: str = "", was: str = ""):
        super().__init__()
        self.into, self.was = into, was

    def extra_repr(self):
        return f"{self.was} fused into {self.into}"
