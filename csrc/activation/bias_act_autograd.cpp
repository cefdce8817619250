// Activation family: autograd of bias_act in C++ (the Autograd dispatch key), as torch_dnn/ops/activation.py's
// formula (kept for torch.func's transforms): the backward recomputes input + bias inside bias_act_backward rather
// than saving the pre-activation (one tensor saved instead of two; the recompute is free in a memory-bound kernel).
// With grad mode on (create_graph=True) the gradients are ATen ops instead, so that they can be differentiated again.
#include "activation/activation_create_graph.h"
#include "activation/activation_ops.h"
#include "common/autograd_kernel.h"
#include "common/create_graph.h"

namespace torch_dnn {
namespace activation {
namespace {

using namespace torch_dnn::autograd_kernel;

// create_graph: d pre = grad * act'(x + bias) as ATen ops (in float for 16-bit inputs); dx = d pre, dbias its sum
// over every dim but `dim`, into out[0], out[1].
void create_graph_grads(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& bias, int64_t dim,
                        const std::string& act, std::array<bool, 2> mask, variable_list& out) {
  using namespace create_graph;
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  std::vector<int64_t> per_channel(x.dim(), 1);
  per_channel[d] = x.size(d);
  const at::Tensor pre = bias.defined() ? opmath(x) + opmath(bias).view(per_channel) : x;
  const auto [k, p] = bias_act_kind(act);
  const at::Tensor d_pre = act_backward_differentiable_at_input(opmath(grad), pre, k, p);
  if (mask[0]) out[0] = d_pre.to(x.scalar_type());
  if (mask[1]) out[1] = sum_over(d_pre, dims_but(x.dim(), d)).to(bias.scalar_type());
}

struct BiasActFn : torch::autograd::Function<BiasActFn> {
  static at::Tensor below(const at::Tensor& x, const OptionalTensor& bias, int64_t dim, c10::string_view act) {
    using Sig = at::Tensor(const at::Tensor&, const OptionalTensor&, int64_t, c10::string_view);
    static const auto op = op_handle<Sig>("torch_dnn::bias_act");
    return call_below(op, x, bias, dim, act);
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const OptionalTensor& bias, int64_t dim,
                               c10::string_view act) {
    const at::Tensor y = below(x, bias, dim, act);
    ctx->save_for_backward({x, or_undefined(bias)});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["act"] = std::string(act);
    return {y};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(4);  // input, bias, dim, act
    if (!grads[0].defined()) return out;
    static const auto op = op_handle<std::tuple<at::Tensor, at::Tensor>(
        const at::Tensor&, const at::Tensor&, const OptionalTensor&, int64_t, c10::string_view, bool)>(
        "torch_dnn::bias_act_backward");
    const variable_list s = ctx->get_saved_variables();  // input, bias
    const bool want_bias = s[1].defined() && needs_grad(ctx, 1);
    if (at::GradMode::is_enabled()) {
      create_graph_grads(grads[0], s[0], s[1], ctx->saved_data["dim"].toInt(), ctx->saved_data["act"].toStringRef(),
                         {needs_grad(ctx, 0), want_bias}, out);
      return out;
    }
    const auto [dx, dbias] = op.call(grads[0], s[0], or_none(s[1]), ctx->saved_data["dim"].toInt(),
                                     ctx->saved_data["act"].toStringRef(), want_bias);
    out[0] = if_wanted(needs_grad(ctx, 0), dx);
    out[1] = if_wanted(want_bias, dbias);
    return out;
  }
};

}  // namespace
}  // namespace activation
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  m.impl("bias_act", [](const at::Tensor& x, const torch_dnn::autograd_kernel::OptionalTensor& bias, int64_t dim,
                        c10::string_view act) {
    using namespace torch_dnn::autograd_kernel;
    check_no_tangent("torch_dnn.bias_act", x, bias);
    if (!records_grad(x, bias)) return torch_dnn::activation::BiasActFn::below(x, bias, dim, act);
    return torch_dnn::activation::BiasActFn::apply(x, bias, dim, act)[0];
  });
}
