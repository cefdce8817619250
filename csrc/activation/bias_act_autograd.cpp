// Activation family: autograd of bias_act in C++ (the Autograd dispatch key), as torch_dnn/ops/activation.py's
// formula (kept for torch.func's transforms): the backward recomputes input + bias inside bias_act_backward rather
// than saving the pre-activation (one tensor saved instead of two; the recompute is free in a memory-bound kernel).
#include "common/autograd_kernel.h"

namespace torch_dnn {
namespace activation {
namespace {

using namespace torch_dnn::autograd_kernel;

struct BiasActFn : torch::autograd::Function<BiasActFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const OptionalTensor& bias, int64_t dim,
                               c10::string_view act) {
    using Sig = at::Tensor(const at::Tensor&, const OptionalTensor&, int64_t, c10::string_view);
    static const auto op = op_handle<Sig>("torch_dnn::bias_act");
    at::Tensor y;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      y = op.call(x, bias, dim, act);
    }
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
    return torch_dnn::activation::BiasActFn::apply(x, bias, dim, act)[0];
  });
}
