// The activations' derivatives as ATen ops (activation_create_graph.h): the same formulas as activation_math.h's
// act_backward, written on tensors so that autograd differentiates them again. The piecewise-linear ones are masks
// (their second derivative is zero almost everywhere).
#include "activation/activation_create_graph.h"

#include "activation/activation_ops.h"
#include "common/create_graph.h"

namespace torch_dnn {
namespace activation {
namespace {

// d act / dx at s (float or double)
at::Tensor derivative(const at::Tensor& s, Act k, ActParams p) {
  constexpr double kSqrt1_2 = 0.70710678118654752440, kInvSqrt2Pi = 0.39894228040143267794;
  constexpr double kSqrt2OverPi = 0.79788456080286535588, kKappa = 0.044715;
  const auto mask = [&](const at::Tensor& m) { return m.to(s.scalar_type()); };
  switch (k) {
    case Act::Identity: return at::ones_like(s);
    case Act::Relu: return mask(s > 0);
    case Act::Relu6: return mask((s > 0).logical_and(s < 6));
    case Act::Hardtanh: return mask((s > p.a).logical_and(s < p.b));
    case Act::LeakyRelu: return at::where(s > 0, 1.0, at::full_like(s, p.a));
    case Act::Elu: return at::where(s > 0, 1.0, p.a * at::exp(s.clamp_max(0)));
    case Act::Gelu: return 0.5 * (1 + at::erf(s * kSqrt1_2)) + s * at::exp(-0.5 * s.square()) * kInvSqrt2Pi;
    case Act::GeluTanh: {
      const at::Tensor t = at::tanh(kSqrt2OverPi * (s + kKappa * s.pow(3)));
      return 0.5 * (1 + t) + 0.5 * s * (1 - t.square()) * (kSqrt2OverPi * (1 + 3 * kKappa * s.square()));
    }
    case Act::Silu: {
      const at::Tensor sig = at::sigmoid(s);
      return sig * (1 + s * (1 - sig));
    }
    case Act::Sigmoid: return s * (1 - s);
    case Act::Tanh: return 1 - s.square();
    case Act::Softplus: return at::where(s * p.a > p.b, 1.0, at::sigmoid(s * p.a));
    case Act::Mish: {
      const at::Tensor t = at::tanh(at::softplus(s));
      return t + s * at::sigmoid(s) * (1 - t.square());
    }
    case Act::Hardswish: return at::where(s <= -3, 0.0, at::where(s < 3, s / 3 + 0.5, 1.0));
    case Act::Hardsigmoid: return mask((s > -3).logical_and(s < 3)) / 6;
  }
  TORCH_CHECK(false, "torch_dnn: no derivative for activation ", int(k));
}

}  // namespace

at::Tensor act_backward_differentiable(const at::Tensor& g, const at::Tensor& s, Act k, ActParams p) {
  if (k == Act::Identity) return g;
  using create_graph::opmath;
  return (opmath(g) * derivative(opmath(s), k, p)).to(g.scalar_type());
}

at::Tensor act_backward_differentiable_at_input(const at::Tensor& g, const at::Tensor& x, Act k, ActParams p) {
  if (!backward_uses_result(k)) return act_backward_differentiable(g, x, k, p);
  const at::Tensor xf = create_graph::opmath(x);
  return act_backward_differentiable(g, k == Act::Sigmoid ? at::sigmoid(xf) : at::tanh(xf), k, p);
}

autograd_kernel::GradientFn activation_create_graph(const std::string& name) {
  // the schema's arguments after the input: hardtanh(min_val, max_val), leaky_relu(negative_slope), elu(alpha),
  // softplus(beta, threshold), gelu(approximate)
  const Act k = name == "gelu" ? Act::Gelu : name == "hardtanh" ? Act::Hardtanh : bias_act_kind(name).first;
  return [k](const at::Tensor& g, const std::vector<at::Tensor>& saved, c10::ArrayRef<c10::IValue> args) {
    ActParams p;
    Act kind = k;
    if (k == Act::Gelu) kind = gelu_act(args[0].toStringRef(), "torch_dnn.gelu");
    if (k == Act::LeakyRelu || k == Act::Elu) p = {args[0].toDouble(), 0};
    if (k == Act::Hardtanh || k == Act::Softplus) p = {args[0].toDouble(), args[1].toDouble()};
    return act_backward_differentiable(g, saved[0], kind, p);
  };
}

}  // namespace activation
}  // namespace torch_dnn
