// The convolution family's fused forward ops, written once over a backend (conv_ops.h's: CpuBackend, CudaBackend):
//
//   conv_bias_act(input, weight, bias, ...)               = act(convolution(input, weight, bias))
//   conv_bias_add_act(input, weight, bias, residual, ...) = act(convolution(input, weight, bias) + residual)
//
// Both are one fprop pass with conv_kernels.h's epilogue (bias, residual, activation in the accumulation type, one
// rounding), so the pre-activation never reaches memory. The activation is bias_act's (its names, Act enum and
// default parameters); act_a / act_b override the parameters as linear_act's do (leaky_relu: negative_slope; elu:
// alpha; softplus: beta, threshold). Not transposed; the result's layout is convolution's (conv_ops.h), and the
// residual is read in that layout (a copy first where it is laid out otherwise, so the tensor-core paths take it).
// conv_fused.cpp declares the schemas; each backend file calls register_conv_fused_impls<Backend>(m).
#pragma once
#include <string>
#include <utility>

#include "activation/activation_ops.h"
#include "conv/conv_ops.h"

namespace torch_dnn {
namespace conv {

// The ops' C++ signatures, for typed dispatcher handles (conv_fused.cpp's autocast, conv_fused_autograd.cpp).
using BiasActSig = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                              c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, int64_t, c10::string_view,
                              std::optional<double>, std::optional<double>);
using BiasAddActSig = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                 const at::Tensor&, c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, int64_t,
                                 c10::string_view, std::optional<double>, std::optional<double>);

// The activation of the fused ops: bias_act's names, act_a / act_b overriding its default parameters.
inline std::pair<Act, ActParams> fused_act_kind(const char* op, c10::string_view name, std::optional<double> a,
                                                std::optional<double> b) {
  std::pair<Act, ActParams> kp;
  try {
    kp = activation::bias_act_kind(name);
  } catch (const c10::Error&) {
    TORCH_CHECK(false, op, ": unknown activation '", std::string(name),
                "' (expected one of bias_act's: none, relu, relu6, leaky_relu, elu, gelu, gelu_tanh, silu, sigmoid, "
                "tanh, softplus, mish, hardswish, hardsigmoid)");
  }
  if (a.has_value()) kp.second.a = *a;
  if (b.has_value()) kp.second.b = *b;
  return kp;
}

template <class B>
Tensor conv_fused_forward(const char* op, const Tensor& input, const Tensor& weight,
                          const std::optional<Tensor>& bias_opt, const Tensor* residual, IntArrayRef stride,
                          IntArrayRef padding, IntArrayRef dilation, int64_t groups, c10::string_view activation,
                          std::optional<double> act_a, std::optional<double> act_b) {
  check_operands(op, input, "input", weight, "weight");
  const bool has_bias = check_bias(op, input, bias_opt);
  const auto [k, ap] = fused_act_kind(op, activation, act_a, act_b);
  const Params p = check_params(op, input.dim() - 2, stride, padding, dilation, false, {0}, groups);
  const std::vector<int64_t> out_sizes = check_shapes(op, input.sizes(), weight.sizes(), p, "input");
  if (has_bias) {
    TORCH_CHECK(bias_opt->dim() == 1 && bias_opt->size(0) == weight.size(0), op, ": expected bias to be 1-D with ",
                weight.size(0), " elements, but got bias of size ", bias_opt->sizes());
  }
  if (residual != nullptr) {
    check_floating(*residual, op, "residual");
    check_like(op, input, *residual, "input", "residual");
    TORCH_CHECK(residual->sizes() == IntArrayRef(out_sizes), op, ": expected residual to have the shape of the output ",
                IntArrayRef(out_sizes), ", but got residual of size ", residual->sizes());
  }
  const bool cl = conv_channels_last(input, weight, p);
  Tensor out = empty_in(out_sizes, input.options(), cl);
  if (out.numel() == 0) return out;  // a non-empty output has a non-empty input (not transposed)
  const Tensor xd = in_layout(input, cl), wd = in_layout(weight, cl);
  const Tensor bias = has_bias ? bias_opt->contiguous() : Tensor();
  const Tensor res = residual != nullptr ? in_layout(*residual, cl) : Tensor();
  ConvArgs a = make_args(xd, wd, out, p);
  a.bias = has_bias ? bias.const_data_ptr() : nullptr;
  if (res.defined()) a.residual = operand(res);
  a.act = k;
  a.act_params = ap;
  B::run(Pass::Fprop, a, input, weight);
  return out;
}

template <class B>
Tensor conv_bias_act(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias, IntArrayRef stride,
                     IntArrayRef padding, IntArrayRef dilation, int64_t groups, c10::string_view activation,
                     std::optional<double> act_a, std::optional<double> act_b) {
  return conv_fused_forward<B>("torch_dnn.conv_bias_act", input, weight, bias, nullptr, stride, padding, dilation,
                               groups, activation, act_a, act_b);
}

template <class B>
Tensor conv_bias_add_act(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                         const Tensor& residual, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                         int64_t groups, c10::string_view activation, std::optional<double> act_a,
                         std::optional<double> act_b) {
  return conv_fused_forward<B>("torch_dnn.conv_bias_add_act", input, weight, bias, &residual, stride, padding,
                               dilation, groups, activation, act_a, act_b);
}

template <class B>
void register_conv_fused_impls(torch::Library& m) {
  m.impl("conv_bias_act", &conv_bias_act<B>);
  m.impl("conv_bias_add_act", &conv_bias_add_act<B>);
}

}  // namespace conv
}  // namespace torch_dnn
