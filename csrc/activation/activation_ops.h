// The activation family's ops, written once over a backend (CPU or CUDA) that computes on dense memory.
// activation.cpp declares the schemas; each backend file calls register_activation_impls<Backend>(m) for its
// dispatch key. A backend provides:
//   static void forward(const Tensor& x, Tensor& y, Act, ActParams);               // y may be x
//   static void backward(const Tensor& g, const Tensor& saved, Tensor& dx, Act, ActParams);
//   static void bias_act_forward(const Tensor& x, const Tensor& bias /*undefined: none*/, Tensor& y,
//                                BiasActShape, Act, ActParams);
//   static void bias_act_backward(const Tensor& g, const Tensor& x, const Tensor& bias, Tensor& dx,
//                                 Tensor& dbias /*undefined: not wanted*/, BiasActShape, Act, ActParams);
// All tensors handed to a backend are dense, share one layout, and are non-empty.
#pragma once
#include <torch/library.h>

#include <string>

#include "activation/activation_math.h"
#include "common/memory_format.h"
#include "common/tensor_utils.h"

namespace torch_dnn {
namespace activation {

inline Act gelu_act(c10::string_view approximate, const char* op) {
  if (approximate == "none") return Act::Gelu;
  if (approximate == "tanh") return Act::GeluTanh;
  TORCH_CHECK(false, op, ": approximate argument must be either 'none' or 'tanh', but got '", std::string(approximate), "'");
}

// The activations bias_act accepts, with their default parameters.
inline std::pair<Act, ActParams> bias_act_kind(c10::string_view name) {
  const std::string s(name);
  if (s == "none" || s == "identity") return {Act::Identity, {}};
  if (s == "relu") return {Act::Relu, {}};
  if (s == "relu6") return {Act::Relu6, {}};
  if (s == "leaky_relu") return {Act::LeakyRelu, {0.01, 0}};
  if (s == "elu") return {Act::Elu, {1.0, 0}};
  if (s == "gelu") return {Act::Gelu, {}};
  if (s == "gelu_tanh") return {Act::GeluTanh, {}};
  if (s == "silu") return {Act::Silu, {}};
  if (s == "sigmoid") return {Act::Sigmoid, {}};
  if (s == "tanh") return {Act::Tanh, {}};
  if (s == "softplus") return {Act::Softplus, {1.0, 20.0}};
  if (s == "mish") return {Act::Mish, {}};
  if (s == "hardswish") return {Act::Hardswish, {}};
  if (s == "hardsigmoid") return {Act::Hardsigmoid, {}};
  TORCH_CHECK(false, "torch_dnn.bias_act: unknown act '", s,
              "' (expected one of none, relu, relu6, leaky_relu, elu, gelu, gelu_tanh, silu, sigmoid, tanh, softplus, "
              "mish, hardswish, hardsigmoid)");
}

// The result of an elementwise op over `a` (and `b`), laid out as PyTorch's TensorIterator lays it out when the op
// hands it a, then b (common/memory_format.h); a and b are made dense in that layout (the backends walk every
// tensor of a call as one flat array).
inline at::Tensor iter_result(at::Tensor& a, at::Tensor* b = nullptr) {
  const std::vector<int64_t> strides = b != nullptr ? iter_strides({a, *b}) : iter_strides({a});
  a = with_strides(a, strides);
  if (b != nullptr) *b = with_strides(*b, strides);
  return at::empty_strided(a.sizes(), strides, a.options());
}

template <class B>
at::Tensor act_forward(const char* op, const at::Tensor& x, Act k, ActParams p) {
  check_floating(x, op, "input");
  at::Tensor xd = x;
  at::Tensor y = x.is_non_overlapping_and_dense() ? at::empty_like(x) : iter_result(xd);
  if (y.numel() > 0) B::forward(xd, y, k, p);
  return y;
}

template <class B>
void act_forward_(const char* op, at::Tensor& x, Act k, ActParams p) {
  check_floating(x, op, "input");
  if (x.numel() == 0) return;
  if (x.is_non_overlapping_and_dense()) {
    B::forward(x, x, k, p);
  } else {
    at::Tensor tmp = dense_like(x);
    B::forward(tmp, tmp, k, p);
    x.copy_(tmp);
  }
}

// Whether PyTorch's backward op of the activation hands grad_output to its TensorIterator before self (or the
// result), so that the gradient takes grad_output's layout where the two differ: all but threshold_backward
// (relu) and leaky_relu_backward, which take self's.
constexpr bool grad_leads(Act k) { return k != Act::Relu && k != Act::LeakyRelu; }

template <class B>
at::Tensor act_backward(const char* op, const at::Tensor& g, const at::Tensor& saved, Act k, ActParams p) {
  check_floating(saved, op, backward_uses_result(k) ? "result" : "self");
  check_matching(saved, g, op, "self", "grad_output");
  at::Tensor sd = saved, gd = g;
  at::Tensor dx = grad_leads(k) ? iter_result(gd, &sd) : iter_result(sd, &gd);
  if (dx.numel() > 0) B::backward(gd, sd, dx, k, p);
  return dx;
}

inline void check_bias(const at::Tensor& x, const c10::optional<at::Tensor>& bias, int64_t dim, const char* op) {
  if (!bias.has_value() || !bias->defined()) return;
  TORCH_CHECK(bias->dim() == 1 && bias->size(0) == x.size(dim), op, ": expected bias of shape [", x.size(dim),
              "] (the size of input dim ", dim, "), but got ", bias->sizes());
  check_same_dtype(x, *bias, op, "input", "bias");
  check_same_device(x, *bias, op, "input", "bias");
}

inline BiasActShape bias_act_shape(const at::Tensor& dense, int64_t dim) {
  const DimSplit s = split_at_dim(dense, dim);
  return {s.outer, s.size, s.inner};
}

template <class B>
at::Tensor bias_act(const at::Tensor& x, const c10::optional<at::Tensor>& bias, int64_t dim, c10::string_view act) {
  const char* op = "torch_dnn.bias_act";
  check_floating(x, op, "input");
  TORCH_CHECK(x.dim() >= 1, op, ": expected input with at least 1 dimension, but got a 0-dim tensor");
  dim = wrap_dim(dim, x.dim(), op);
  check_bias(x, bias, dim, op);
  const auto [k, p] = bias_act_kind(act);
  at::Tensor xd = x;  // x + bias takes x's layout (the broadcast bias orders no dims)
  at::Tensor y = x.is_non_overlapping_and_dense() ? at::empty_like(x) : iter_result(xd);
  if (y.numel() == 0) return y;
  at::Tensor b = bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();
  B::bias_act_forward(xd, b, y, bias_act_shape(xd, dim), k, p);
  return y;
}

template <class B>
std::tuple<at::Tensor, at::Tensor> bias_act_backward(const at::Tensor& g, const at::Tensor& x,
                                                     const c10::optional<at::Tensor>& bias, int64_t dim,
                                                     c10::string_view act, bool bias_grad) {
  const char* op = "torch_dnn.bias_act_backward";
  check_floating(x, op, "input");
  check_matching(x, g, op, "input", "grad_output");
  TORCH_CHECK(x.dim() >= 1, op, ": expected input with at least 1 dimension");
  dim = wrap_dim(dim, x.dim(), op);
  check_bias(x, bias, dim, op);
  const bool has_bias = bias.has_value() && bias->defined();
  TORCH_CHECK(!bias_grad || has_bias, op, ": bias_grad=True needs a bias");
  const auto [k, p] = bias_act_kind(act);
  // PyTorch's composite: the activation's backward over (grad, x + bias), whose layout is x's
  at::Tensor xd = x, gd = g;
  at::Tensor dx = grad_leads(k) ? iter_result(gd, &xd) : iter_result(xd, &gd);
  at::Tensor dbias = bias_grad ? at::empty({x.size(dim)}, x.options()) : at::empty({0}, x.options());
  if (dx.numel() == 0) {
    if (bias_grad) dbias.zero_();
    return {dx, dbias};
  }
  at::Tensor b = has_bias ? bias->contiguous() : at::Tensor();
  at::Tensor db = bias_grad ? dbias : at::Tensor();
  B::bias_act_backward(gd, xd, b, dx, db, bias_act_shape(xd, dim), k, p);
  return {dx, dbias};
}

// One line per op: the public name, and how its arguments become (Act, ActParams).
template <class B>
void register_activation_impls(torch::Library& m) {
  using T = at::Tensor;
  using sv = c10::string_view;
  // forward
  m.impl("relu", [](const T& x) { return act_forward<B>("torch_dnn.relu", x, Act::Relu, {}); });
  m.impl("relu6", [](const T& x) { return act_forward<B>("torch_dnn.relu6", x, Act::Relu6, {}); });
  m.impl("hardtanh", [](const T& x, double lo, double hi) {
    TORCH_CHECK(lo <= hi, "torch_dnn.hardtanh: min_val (", lo, ") cannot be greater than max_val (", hi, ")");
    return act_forward<B>("torch_dnn.hardtanh", x, Act::Hardtanh, {lo, hi});
  });
  m.impl("leaky_relu", [](const T& x, double s) { return act_forward<B>("torch_dnn.leaky_relu", x, Act::LeakyRelu, {s, 0}); });
  m.impl("elu", [](const T& x, double a) { return act_forward<B>("torch_dnn.elu", x, Act::Elu, {a, 0}); });
  m.impl("gelu", [](const T& x, sv ap) { return act_forward<B>("torch_dnn.gelu", x, gelu_act(ap, "torch_dnn.gelu"), {}); });
  m.impl("silu", [](const T& x) { return act_forward<B>("torch_dnn.silu", x, Act::Silu, {}); });
  m.impl("sigmoid", [](const T& x) { return act_forward<B>("torch_dnn.sigmoid", x, Act::Sigmoid, {}); });
  m.impl("tanh", [](const T& x) { return act_forward<B>("torch_dnn.tanh", x, Act::Tanh, {}); });
  m.impl("softplus", [](const T& x, double beta, double th) {
    return act_forward<B>("torch_dnn.softplus", x, Act::Softplus, {beta, th});
  });
  m.impl("mish", [](const T& x) { return act_forward<B>("torch_dnn.mish", x, Act::Mish, {}); });
  m.impl("hardswish", [](const T& x) { return act_forward<B>("torch_dnn.hardswish", x, Act::Hardswish, {}); });
  m.impl("hardsigmoid", [](const T& x) { return act_forward<B>("torch_dnn.hardsigmoid", x, Act::Hardsigmoid, {}); });
  // in place
  m.impl("relu_", [](T& x) { act_forward_<B>("torch_dnn.relu_", x, Act::Relu, {}); });
  m.impl("relu6_", [](T& x) { act_forward_<B>("torch_dnn.relu6_", x, Act::Relu6, {}); });
  m.impl("hardtanh_", [](T& x, double lo, double hi) {
    TORCH_CHECK(lo <= hi, "torch_dnn.hardtanh_: min_val (", lo, ") cannot be greater than max_val (", hi, ")");
    act_forward_<B>("torch_dnn.hardtanh_", x, Act::Hardtanh, {lo, hi});
  });
  m.impl("leaky_relu_", [](T& x, double s) { act_forward_<B>("torch_dnn.leaky_relu_", x, Act::LeakyRelu, {s, 0}); });
  m.impl("elu_", [](T& x, double a) { act_forward_<B>("torch_dnn.elu_", x, Act::Elu, {a, 0}); });
  m.impl("silu_", [](T& x) { act_forward_<B>("torch_dnn.silu_", x, Act::Silu, {}); });
  m.impl("mish_", [](T& x) { act_forward_<B>("torch_dnn.mish_", x, Act::Mish, {}); });
  m.impl("hardswish_", [](T& x) { act_forward_<B>("torch_dnn.hardswish_", x, Act::Hardswish, {}); });
  m.impl("hardsigmoid_", [](T& x) { act_forward_<B>("torch_dnn.hardsigmoid_", x, Act::Hardsigmoid, {}); });
  // backward
  m.impl("relu_backward", [](const T& g, const T& s) { return act_backward<B>("torch_dnn.relu_backward", g, s, Act::Relu, {}); });
  m.impl("relu6_backward", [](const T& g, const T& s) { return act_backward<B>("torch_dnn.relu6_backward", g, s, Act::Relu6, {}); });
  m.impl("hardtanh_backward", [](const T& g, const T& s, double lo, double hi) {
    return act_backward<B>("torch_dnn.hardtanh_backward", g, s, Act::Hardtanh, {lo, hi});
  });
  m.impl("leaky_relu_backward", [](const T& g, const T& s, double sl) {
    return act_backward<B>("torch_dnn.leaky_relu_backward", g, s, Act::LeakyRelu, {sl, 0});
  });
  m.impl("elu_backward", [](const T& g, const T& s, double a) { return act_backward<B>("torch_dnn.elu_backward", g, s, Act::Elu, {a, 0}); });
  m.impl("gelu_backward", [](const T& g, const T& s, sv ap) {
    return act_backward<B>("torch_dnn.gelu_backward", g, s, gelu_act(ap, "torch_dnn.gelu_backward"), {});
  });
  m.impl("silu_backward", [](const T& g, const T& s) { return act_backward<B>("torch_dnn.silu_backward", g, s, Act::Silu, {}); });
  m.impl("sigmoid_backward", [](const T& g, const T& y) { return act_backward<B>("torch_dnn.sigmoid_backward", g, y, Act::Sigmoid, {}); });
  m.impl("tanh_backward", [](const T& g, const T& y) { return act_backward<B>("torch_dnn.tanh_backward", g, y, Act::Tanh, {}); });
  m.impl("softplus_backward", [](const T& g, const T& s, double beta, double th) {
    return act_backward<B>("torch_dnn.softplus_backward", g, s, Act::Softplus, {beta, th});
  });
  m.impl("mish_backward", [](const T& g, const T& s) { return act_backward<B>("torch_dnn.mish_backward", g, s, Act::Mish, {}); });
  m.impl("hardswish_backward", [](const T& g, const T& s) {
    return act_backward<B>("torch_dnn.hardswish_backward", g, s, Act::Hardswish, {});
  });
  m.impl("hardsigmoid_backward", [](const T& g, const T& s) {
    return act_backward<B>("torch_dnn.hardsigmoid_backward", g, s, Act::Hardsigmoid, {});
  });
  // fused bias + activation
  m.impl("bias_act", &bias_act<B>);
  m.impl("bias_act_backward", &bias_act_backward<B>);
}

}  // namespace activation
}  // namespace torch_dnn
