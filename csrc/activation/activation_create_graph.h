// The activations' gradients as differentiable ATen ops, for backwards that run with grad mode on (create_graph=True;
// common/create_graph.h): used by the activations' autograd, bias_act's and linear_act's.
#pragma once
#include "activation/activation_math.h"
#include "common/autograd_register.h"

namespace torch_dnn {
namespace activation {

// g * d act / dx at s (the input; the result for sigmoid and tanh, as the backward ops read), in g's dtype.
at::Tensor act_backward_differentiable(const at::Tensor& g, const at::Tensor& s, Act k, ActParams p);
// The same from the input x for every activation (bias_act's, linear_act's, batch_norm_add_act's pre-activation).
at::Tensor act_backward_differentiable_at_input(const at::Tensor& g, const at::Tensor& x, Act k, ActParams p);

// The create_graph gradient of the activation op `name` (its arguments as its schema's, after the input).
autograd_kernel::GradientFn activation_create_graph(const std::string& name);

}  // namespace activation
}  // namespace torch_dnn
