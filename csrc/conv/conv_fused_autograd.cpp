// Autograd of the fused forward ops conv_bias_act and conv_bias_add_act (the Autograd dispatch key), so that an eager
// training step runs no Python; torch_dnn/ops/conv.py keeps the same formula for torch.func's transforms.
//
// With pre = convolution(x, w, b) + residual and y = act(pre):
//   d_pre = the activation's backward op (torch_dnn::relu_backward, gelu_backward, ...: bias_act's activations with
//           their parameters) at the value it reads,
//   dx = conv_backward_input(d_pre), dw = conv_backward_weight(d_pre), db = conv_backward_bias(d_pre), dres = d_pre,
// the backward ops given d_pre laid out exactly as the forward's result (conv_ops.h's rule) so that their gradients
// take that layout, and dres d_pre as the activation's backward returns it (PyTorch's add passes it on as is).
// The kernels do not write the pre-activation (it never reaches memory), so the backward reads the derivative
// from the result where it determines it exactly (identity, relu, relu6: 0 < y < 6 iff 0 < pre < 6; sigmoid and
// tanh, whose backward ops read the result as PyTorch's). For the other activations a forward that records a
// graph computes pre (the op with activation "none": bias and residual still in the epilogue), saves it and applies
// the activation with its own op (one elementwise pass instead of a second convolution in the backward; the result
// then has pre's rounding before the activation, as the unfused composition). torch.func's twin
// (torch_dnn/ops/conv.py), whose forward is the op itself, recomputes pre in its backward. With grad mode on
// (create_graph), pre is recomputed through convolution (differentiable), the activation's derivative taken as ATen
// ops, and the gradients come from the backward ops at the Autograd key, so they can be differentiated again.
#include "activation/activation_create_graph.h"
#include "common/autograd_kernel.h"
#include "common/create_graph.h"
#include "conv/conv_fused_ops.h"
#include "conv/conv_op_handles.h"

#include <algorithm>
#include <cstddef>

namespace torch_dnn {
namespace conv {
namespace {

using namespace torch_dnn::autograd_kernel;
using OptTensor = OptionalTensor;
using OptDouble = std::optional<double>;
using Ints = std::vector<int64_t>;

// Whether the activation's derivative is determined exactly by its result, read by its backward op in place of the
// input (see the header).
bool derivative_from_result(Act k) {
  return k == Act::Identity || k == Act::Relu || k == Act::Relu6 || k == Act::Sigmoid || k == Act::Tanh;
}

// An op's name as a template argument.
template <size_t N>
struct OpName {
  char s[N];
  constexpr OpName(const char (&v)[N]) { std::copy_n(v, N, s); }
};

// The handle of the op `Name`, looked up at its first use (a function-local static: no lock after that):
// act_backward and act_forward run on every training step, where a dispatcher lookup by name would be host time.
template <class Sig, OpName Name>
const c10::TypedOperatorHandle<Sig>& handle() {
  static const auto op = op_handle<Sig>(Name.s);
  return op;
}

// g * act'(at s), s the value the activation's backward op reads (the input, or the result where
// derivative_from_result), through the activation family's backward ops.
at::Tensor act_backward(const at::Tensor& g, const at::Tensor& s, Act k, ActParams p) {
  using Sig2 = at::Tensor(const at::Tensor&, const at::Tensor&);
  using Sig3 = at::Tensor(const at::Tensor&, const at::Tensor&, double);
  using Sig4 = at::Tensor(const at::Tensor&, const at::Tensor&, double, double);
  using GeluSig = at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view);
  switch (k) {
    case Act::Identity: return g;
    case Act::Relu: return handle<Sig2, "torch_dnn::relu_backward">().call(g, s);
    case Act::Relu6: return handle<Sig2, "torch_dnn::relu6_backward">().call(g, s);
    case Act::Silu: return handle<Sig2, "torch_dnn::silu_backward">().call(g, s);
    case Act::Sigmoid: return handle<Sig2, "torch_dnn::sigmoid_backward">().call(g, s);
    case Act::Tanh: return handle<Sig2, "torch_dnn::tanh_backward">().call(g, s);
    case Act::Mish: return handle<Sig2, "torch_dnn::mish_backward">().call(g, s);
    case Act::Hardswish: return handle<Sig2, "torch_dnn::hardswish_backward">().call(g, s);
    case Act::Hardsigmoid: return handle<Sig2, "torch_dnn::hardsigmoid_backward">().call(g, s);
    case Act::LeakyRelu: return handle<Sig3, "torch_dnn::leaky_relu_backward">().call(g, s, p.a);
    case Act::Elu: return handle<Sig3, "torch_dnn::elu_backward">().call(g, s, p.a);
    case Act::Hardtanh: return handle<Sig4, "torch_dnn::hardtanh_backward">().call(g, s, p.a, p.b);
    case Act::Softplus: return handle<Sig4, "torch_dnn::softplus_backward">().call(g, s, p.a, p.b);
    case Act::Gelu: return handle<GeluSig, "torch_dnn::gelu_backward">().call(g, s, "none");
    case Act::GeluTanh: return handle<GeluSig, "torch_dnn::gelu_backward">().call(g, s, "tanh");
  }
  TORCH_CHECK(false, "torch_dnn.conv_bias_act: no backward for this activation");
}

// act(pre) through the activation family's forward ops (the activations that derivative_from_result leaves out).
at::Tensor act_forward(const at::Tensor& pre, Act k, ActParams p) {
  using Sig1 = at::Tensor(const at::Tensor&);
  using Sig2 = at::Tensor(const at::Tensor&, double);
  using Sig3 = at::Tensor(const at::Tensor&, double, double);
  using GeluSig = at::Tensor(const at::Tensor&, c10::string_view);
  switch (k) {
    case Act::Silu: return handle<Sig1, "torch_dnn::silu">().call(pre);
    case Act::Mish: return handle<Sig1, "torch_dnn::mish">().call(pre);
    case Act::Hardswish: return handle<Sig1, "torch_dnn::hardswish">().call(pre);
    case Act::Hardsigmoid: return handle<Sig1, "torch_dnn::hardsigmoid">().call(pre);
    case Act::LeakyRelu: return handle<Sig2, "torch_dnn::leaky_relu">().call(pre, p.a);
    case Act::Elu: return handle<Sig2, "torch_dnn::elu">().call(pre, p.a);
    case Act::Hardtanh: return handle<Sig3, "torch_dnn::hardtanh">().call(pre, p.a, p.b);
    case Act::Softplus: return handle<Sig3, "torch_dnn::softplus">().call(pre, p.a, p.b);
    case Act::Gelu: return handle<GeluSig, "torch_dnn::gelu">().call(pre, "none");
    case Act::GeluTanh: return handle<GeluSig, "torch_dnn::gelu">().call(pre, "tanh");
    default: TORCH_CHECK(false, "torch_dnn.conv_bias_act: act_forward takes only activations read from their input");
  }
}

// conv_bias_add_act where there is a residual, else conv_bias_act (through the dispatcher from where it is called).
at::Tensor call_fused_op(const at::Tensor& x, const at::Tensor& w, const OptTensor& b, const at::Tensor& res,
                         IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups,
                         c10::string_view act, OptDouble act_a, OptDouble act_b) {
  if (res.defined()) {
    static const auto op = op_handle<BiasAddActSig>("torch_dnn::conv_bias_add_act");
    return op.call(x, w, b, res, stride, padding, dilation, groups, act, act_a, act_b);
  }
  static const auto op = op_handle<BiasActSig>("torch_dnn::conv_bias_act");
  return op.call(x, w, b, stride, padding, dilation, groups, act, act_a, act_b);
}

// The fused op's arguments a node keeps (geometry, activation) and the ops its backward calls.
struct FusedCall {
  ConvCallGeometry geo;  // not transposed
  std::string act;
  OptDouble act_a, act_b;

  void save(AutogradContext* ctx) const {
    geo.save(ctx);
    ctx->saved_data["act"] = act;
    ctx->saved_data["act_a"] = act_a;
    ctx->saved_data["act_b"] = act_b;
  }
  static FusedCall load(AutogradContext* ctx) {
    return {ConvCallGeometry::load(ctx), ctx->saved_data["act"].toStringRef(),
            ctx->saved_data["act_a"].toOptional<double>(), ctx->saved_data["act_b"].toOptional<double>()};
  }
  // the op itself with activation `act` (conv_bias_add_act where there is a residual)
  at::Tensor fused(const at::Tensor& x, const at::Tensor& w, const OptTensor& b, const at::Tensor& res,
                   c10::string_view a, OptDouble pa, OptDouble pb) const {
    return call_fused_op(x, w, b, res, geo.stride, geo.padding, geo.dilation, geo.groups, a, pa, pb);
  }
};

struct ConvFusedFn : torch::autograd::Function<ConvFusedFn> {
  // res: none for conv_bias_act. Entered only by calls that record a graph (otherwise the Autograd kernels at the
  // end of this file call fused_below).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const OptTensor& b,
                               const OptTensor& res_opt, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                               int64_t groups, c10::string_view act, OptDouble act_a, OptDouble act_b) {
    const at::Tensor res = or_undefined(res_opt);
    const FusedCall call{ConvCallGeometry::of(stride, padding, dilation, false, Ints{0}, groups), std::string(act),
                         act_a, act_b};
    const char* op = res.defined() ? "torch_dnn.conv_bias_add_act" : "torch_dnn.conv_bias_act";
    const auto [k, ap] = fused_act_kind(op, act, act_a, act_b);
    const bool save_pre = !derivative_from_result(k);
    at::Tensor y, pre;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      if (save_pre) {
        pre = call.fused(x, w, b, res, "none", c10::nullopt, c10::nullopt);
        y = act_forward(pre, k, ap);
      } else {
        y = call.fused(x, w, b, res, act, act_a, act_b);
      }
    }
    ctx->saved_data["channels_last"] = strides_channels_last(save_pre ? pre : y);
    ctx->saved_data["bias_size"] = is_given(b) ? b->size(0) : int64_t(-1);
    ctx->saved_data["has_res"] = res.defined();
    call.save(ctx);
    // the value the activation's backward op reads: the result, the pre-activation, or none (recomputed)
    ctx->save_for_backward({x, w, or_undefined(b), res, save_pre ? pre : derivative_from_result(k) ? y : at::Tensor()});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // input, weight, bias, residual, stride, padding, dilation, groups, activation, act_a, act_b
    variable_list out(11);
    if (!grads[0].defined()) return out;
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &x = s[0], &w = s[1], &bias = s[2], &res = s[3], &saved = s[4];
    const FusedCall call = FusedCall::load(ctx);
    const auto [k, ap] = fused_act_kind("torch_dnn.conv_bias_act", call.act, call.act_a, call.act_b);
    const bool cl = ctx->saved_data["channels_last"].toBool(), has_res = ctx->saved_data["has_res"].toBool();
    const int64_t bias_size = ctx->saved_data["bias_size"].toInt();
    // edges are numbered over the given tensors: x 0, w 1, then bias (if given), then residual (if given)
    const int res_edge = 2 + (bias_size >= 0);
    at::Tensor d_act;  // the gradient at the pre-activation, as the activation's backward returns it
    if (at::GradMode::is_enabled()) {  // create_graph: every step differentiable
      d_act = grads[0];
      if (k != Act::Identity) {
        at::Tensor pre = call.geo.conv(x, w, or_none(bias));
        if (has_res) pre = pre + res;
        d_act = activation::act_backward_differentiable_at_input(create_graph::opmath(grads[0]), pre, k, ap)
                    .to(x.scalar_type());
      }
    } else {
      at::AutoDispatchBelowADInplaceOrView below;
      at::Tensor at_value = saved;
      if (!at_value.defined()) at_value = call.fused(x, w, or_none(bias), res, "none", c10::nullopt, c10::nullopt);
      d_act = act_backward(grads[0], at_value, k, ap);
    }
    const at::Tensor d_pre = exactly_in_layout(d_act, cl);
    std::optional<at::AutoDispatchBelowADInplaceOrView> below;
    if (!at::GradMode::is_enabled()) below.emplace();
    if (needs_grad(ctx, 0)) out[0] = call.geo.backward_input(d_pre, w, x.sizes());
    if (needs_grad(ctx, 1)) out[1] = call.geo.backward_weight(d_pre, x, w.sizes());
    if (bias_size >= 0 && needs_grad(ctx, 2)) {
      // a result without channels (an input without them) leaves the bias without a gradient: zeros
      out[2] = d_pre.size(1) == bias_size ? backward_bias_op().call(d_pre) : at::zeros({bias_size}, d_pre.options());
    }
    if (has_res && needs_grad(ctx, res_edge)) out[3] = d_act;
    return out;
  }
};

// The fused op below the Autograd key, for a call that records no graph (no node, so no copies of its arguments).
at::Tensor fused_below(const at::Tensor& x, const at::Tensor& w, const OptTensor& b, const at::Tensor& r,
                       IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups,
                       c10::string_view act, OptDouble act_a, OptDouble act_b) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return call_fused_op(x, w, b, r, stride, padding, dilation, groups, act, act_a, act_b);
}

}  // namespace
}  // namespace conv
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::conv;
  m.impl("conv_bias_act", [](const at::Tensor& x, const at::Tensor& w, const OptTensor& b, IntArrayRef stride,
                             IntArrayRef padding, IntArrayRef dilation, int64_t groups, c10::string_view act,
                             OptDouble act_a, OptDouble act_b) {
    check_no_tangent("torch_dnn.conv_bias_act", x, w, b);
    if (!records_grad(x, w, b))
      return fused_below(x, w, b, at::Tensor(), stride, padding, dilation, groups, act, act_a, act_b);
    return ConvFusedFn::apply(x, w, b, OptTensor(), stride, padding, dilation, groups, act, act_a, act_b)[0];
  });
  m.impl("conv_bias_add_act", [](const at::Tensor& x, const at::Tensor& w, const OptTensor& b, const at::Tensor& r,
                                 IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups,
                                 c10::string_view act, OptDouble act_a, OptDouble act_b) {
    check_no_tangent("torch_dnn.conv_bias_add_act", x, w, b, r);
    if (!records_grad(x, w, b, r)) return fused_below(x, w, b, r, stride, padding, dilation, groups, act, act_a, act_b);
    return ConvFusedFn::apply(x, w, b, OptTensor(r), stride, padding, dilation, groups, act, act_a, act_b)[0];
  });
}
