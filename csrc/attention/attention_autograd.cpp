// Attention family: autograd of attention_forward in C++ (the Autograd dispatch key), the same formula as
// torch_dnn/ops/attention.py's (which stays for torch.func's transforms): the forward saves q, k, v, out, the
// log-sum-exp and the dropout key; the backward is attention_backward, which recomputes the probabilities. lse and
// the dropout key are not differentiable. attention_backward has no derivative: a second backward through it is
// an error that names it.
#include "attention/attention_ops.h"
#include "common/autograd_kernel.h"
#include "common/autograd_register.h"

namespace torch_dnn {
namespace attention {
namespace {

using namespace torch_dnn::autograd_kernel;
using OptDouble = std::optional<double>;
using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Tensor4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using ForwardSig = Tensor3(const at::Tensor&, const at::Tensor&, const at::Tensor&, const OptTensor&, double, bool,
                           OptDouble, bool, int64_t, int64_t, double, const OptTensor&, const OptTensor&,
                           const OptTensor&, int64_t, int64_t, bool);
using BackwardSig = Tensor4(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, const at::Tensor&, const OptTensor&, double, bool,
                            OptDouble, bool, int64_t, int64_t, double, const OptTensor&, const OptTensor&,
                            const OptTensor&, int64_t, int64_t, bool, bool);

struct AttentionFn : torch::autograd::Function<AttentionFn> {
  static const c10::TypedOperatorHandle<ForwardSig>& op() {
    static const auto handle = op_handle<ForwardSig>("torch_dnn::attention_forward");
    return handle;
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const OptTensor& mask, double p, bool causal, OptDouble scale, bool bottom_right,
                               int64_t wl, int64_t wr, double softcap, const OptTensor& alibi, const OptTensor& cu_q,
                               const OptTensor& cu_k, int64_t max_q, int64_t max_k, bool deterministic) {
    const auto [out, lse, rng] = call_below(op(), q, k, v, mask, p, causal, scale, bottom_right, wl, wr, softcap,
                                            alibi, cu_q, cu_k, max_q, max_k, deterministic);
    ctx->save_for_backward({q, k, v, out, lse, rng, or_undefined(mask), or_undefined(alibi), or_undefined(cu_q),
                            or_undefined(cu_k)});
    ctx->saved_data["p"] = p;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["bottom_right"] = bottom_right;
    ctx->saved_data["wl"] = wl;
    ctx->saved_data["wr"] = wr;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["max_q"] = max_q;
    ctx->saved_data["max_k"] = max_k;
    ctx->saved_data["deterministic"] = deterministic;
    ctx->mark_non_differentiable({lse, rng});
    ctx->set_materialize_grads(false);
    return {out, lse, rng};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(17);  // one per forward argument
    if (!grads[0].defined()) return out;
    static const auto op = op_handle<BackwardSig>("torch_dnn::attention_backward");
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor& mask = s[6];
    // the mask's edge is 3 when given (absent optional tensors have none)
    const bool mask_grad = mask.defined() && mask.is_floating_point() && needs_grad(ctx, 3);
    const auto [dq, dk, dv, dmask] =
        op.call(grads[0], s[0], s[1], s[2], s[3], s[4], s[5], or_none(mask), ctx->saved_data["p"].toDouble(),
                ctx->saved_data["causal"].toBool(), ctx->saved_data["scale"].toOptional<double>(),
                ctx->saved_data["bottom_right"].toBool(), ctx->saved_data["wl"].toInt(),
                ctx->saved_data["wr"].toInt(), ctx->saved_data["softcap"].toDouble(), or_none(s[7]), or_none(s[8]),
                or_none(s[9]), ctx->saved_data["max_q"].toInt(), ctx->saved_data["max_k"].toInt(),
                ctx->saved_data["deterministic"].toBool(), mask_grad);
    out[0] = if_wanted(needs_grad(ctx, 0), dq);
    out[1] = if_wanted(needs_grad(ctx, 1), dk);
    out[2] = if_wanted(needs_grad(ctx, 2), dv);
    out[3] = if_wanted(mask_grad, dmask);
    return out;
  }
};

}  // namespace
}  // namespace attention
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::attention;
  torch_dnn::autograd_kernel::register_first_order_backward(m, {"attention_backward"});
  m.impl("attention_forward",
         [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const OptTensor& mask, double p,
            bool causal, OptDouble scale, bool bottom_right, int64_t wl, int64_t wr, double softcap,
            const OptTensor& alibi, const OptTensor& cu_q, const OptTensor& cu_k, int64_t max_q, int64_t max_k,
            bool deterministic) {
           using namespace torch_dnn::autograd_kernel;
           check_no_tangent("torch_dnn.attention_forward", q, k, v, mask, alibi);
           if (!records_grad(q, k, v, mask, alibi))
             return call_below(AttentionFn::op(), q, k, v, mask, p, causal, scale, bottom_right, wl, wr, softcap,
                               alibi, cu_q, cu_k, max_q, max_k, deterministic);
           const auto r = AttentionFn::apply(q, k, v, mask, p, causal, scale, bottom_right, wl, wr, softcap, alibi,
                                             cu_q, cu_k, max_q, max_k, deterministic);
           return Tensor3{r[0], r[1], r[2]};
         });
}
