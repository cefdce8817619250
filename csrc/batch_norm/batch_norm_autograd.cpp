// batch_norm family: autograd of batch_norm and batch_norm_add_act in C++ (the Autograd dispatch key), so that an
// eager training step runs no Python on the backward. The Python autograd.Functions (torch_dnn/ops/batch_norm.py)
// stay for torch.compile's tracing and torch.func's transforms; both apply the same formula: the backward op of
// the family (batch_norm_backward / batch_norm_add_act_backward) on the saved input and statistics. With grad mode
// on (create_graph=True) the gradients are ATen ops instead (create_graph_grads), so that they can be differentiated
// again.
// Why in C++: on a device host whose CPU is slow, F.batch_norm's forward + backward through the Python Function
// took far longer than PyTorch's, the ops themselves a small part of it: the Function's forward and, on the
// autograd thread, its Python backward (docs/batch_norm.md).
#include "activation/activation_create_graph.h"
#include "batch_norm/batch_norm_ops.h"
#include "common/autograd_kernel.h"
#include "common/autograd_register.h"
#include "common/create_graph.h"

namespace torch_dnn {
namespace batch_norm {
namespace {

using namespace torch_dnn::autograd_kernel;
using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Tensor4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The running statistics a training call updated in place: their version counters move, as the ADInplaceOrView
// layer (skipped below) would do, so that autograd still sees a saved copy of them go stale.
void bump_running_stats(bool training, const OptTensor& rm, const OptTensor& rv) {
  if (!training) return;
  if (given(rm)) torch::autograd::impl::bump_version(*rm);
  if (given(rv)) torch::autograd::impl::bump_version(*rv);
}

// (dx, dres, dw, db) of act(batch_norm(x) + res) as ATen ops (common/create_graph.h): in training the statistics
// recomputed from x over every dim but the channel's, in evaluation the saved (running) ones as constants; act 0
// (none), 1 (relu) or 2 (silu); dw, db in float for 16-bit inputs.
Tensor4 create_graph_grads(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& res, const at::Tensor& w,
                           const at::Tensor& b, const at::Tensor& mean, const at::Tensor& invstd, bool training,
                           double eps, int64_t act, std::array<bool, 4> mask) {
  using namespace create_graph;
  std::vector<int64_t> per_channel(x.dim(), 1);
  per_channel[1] = x.size(1);
  const std::vector<int64_t> dims = dims_but(x.dim(), 1);
  const at::Tensor xf = opmath(x);
  const Normalized n = training ? normalize(xf, dims, true, eps)
                                : normalize_with(xf, mean.view(per_channel), invstd.view(per_channel));
  const at::Tensor wf = w.defined() ? opmath(w).view(per_channel) : at::Tensor();
  at::Tensor dz = opmath(grad);  // at the activation's input
  if (act != 0) {
    at::Tensor z = wf.defined() ? n.xhat * wf : n.xhat;
    if (b.defined()) z = z + opmath(b).view(per_channel);
    if (res.defined()) z = z + opmath(res);
    const activation::Act k = act == 1 ? activation::Act::Relu : activation::Act::Silu;
    dz = activation::act_backward_differentiable_at_input(dz, z, k, {});
  }
  at::Tensor dx, dres, dw, db;
  if (mask[0]) {
    const at::Tensor gx = wf.defined() ? dz * wf : dz;
    dx = (training ? normalized_dx(gx, n, dims, true) : gx * n.rstd).to(x.scalar_type());
  }
  if (mask[1]) dres = dz.to(x.scalar_type());
  if (mask[2]) dw = sum_over(dz * n.xhat, dims);
  if (mask[3]) db = sum_over(dz, dims);
  return {dx, dres, dw, db};
}

struct BatchNormFn : torch::autograd::Function<BatchNormFn> {
  // the op below the Autograd key, the running statistics' version counters moved
  static Tensor3 below(const at::Tensor& x, const OptTensor& w, const OptTensor& b, const OptTensor& rm,
                       const OptTensor& rv, bool training, double momentum, double eps) {
    static const auto op = op_handle<Tensor3(const at::Tensor&, const OptTensor&, const OptTensor&, const OptTensor&,
                                             const OptTensor&, bool, double, double)>("torch_dnn::batch_norm");
    Tensor3 r = call_below(op, x, w, b, rm, rv, training, momentum, eps);
    bump_running_stats(training, rm, rv);
    return r;
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const OptTensor& w, const OptTensor& b,
                               const OptTensor& rm, const OptTensor& rv, bool training, double momentum, double eps) {
    const auto [y, mean, invstd] = below(x, w, b, rm, rv, training, momentum, eps);
    ctx->save_for_backward({x, or_undefined(w), mean, invstd});
    ctx->saved_data["training"] = training;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["b_dtype"] = dtype_of(b);
    ctx->mark_non_differentiable({mean, invstd});
    ctx->set_materialize_grads(false);  // no zero tensors for the statistics' grads
    return {y, mean, invstd};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(8);
    if (!grads[0].defined()) return out;  // the output took no part in what is differentiated
    static const auto op = op_handle<Tensor3(const at::Tensor&, const at::Tensor&, const OptTensor&, const OptTensor&,
                                             const OptTensor&, const OptTensor&, const OptTensor&, bool, double,
                                             std::array<bool, 3>)>("torch_dnn::batch_norm_backward");
    const variable_list s = ctx->get_saved_variables();  // x, weight, mean, invstd
    const bool has_w = s[1].defined();
    const std::array<bool, 3> mask = {needs_grad(ctx, 0), has_w && needs_grad(ctx, 1),
                                      given_param(ctx, "b_dtype") && needs_grad(ctx, 1 + has_w)};
    const bool training = ctx->saved_data["training"].toBool();
    const double eps = ctx->saved_data["eps"].toDouble();
    at::Tensor dx, dw, db;
    if (at::GradMode::is_enabled()) {
      std::tie(dx, std::ignore, dw, db) =
          create_graph_grads(grads[0], s[0], at::Tensor(), s[1], at::Tensor(), s[2], s[3], training, eps, 0,
                             {mask[0], false, mask[1], mask[2]});
    } else {
      std::tie(dx, dw, db) = op.call(grads[0], s[0], or_none(s[1]), c10::nullopt, c10::nullopt, s[2], s[3], training,
                                     eps, mask);
    }
    out[0] = if_wanted(mask[0], dx);
    out[1] = param_grad(mask[1], dw, dtype_of(or_none(s[1])));
    out[2] = param_grad(mask[2], db, ctx->saved_data["b_dtype"].toInt());
    return out;
  }
};

struct BatchNormAddActFn : torch::autograd::Function<BatchNormAddActFn> {
  // the op below the Autograd key, the running statistics' version counters moved
  static Tensor3 below(const at::Tensor& x, const OptTensor& res, const OptTensor& w, const OptTensor& b,
                       const OptTensor& rm, const OptTensor& rv, bool training, double momentum, double eps,
                       int64_t act) {
    static const auto op =
        op_handle<Tensor3(const at::Tensor&, const OptTensor&, const OptTensor&, const OptTensor&, const OptTensor&,
                          const OptTensor&, bool, double, double, int64_t)>("torch_dnn::batch_norm_add_act");
    Tensor3 r = call_below(op, x, res, w, b, rm, rv, training, momentum, eps, act);
    bump_running_stats(training, rm, rv);
    return r;
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const OptTensor& res, const OptTensor& w,
                               const OptTensor& b, const OptTensor& rm, const OptTensor& rv, bool training,
                               double momentum, double eps, int64_t act) {
    const auto [y, mean, invstd] = below(x, res, w, b, rm, rv, training, momentum, eps, act);
    ctx->save_for_backward({x, or_undefined(res), or_undefined(w), or_undefined(b), mean, invstd});
    ctx->saved_data["training"] = training;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["act"] = act;
    ctx->mark_non_differentiable({mean, invstd});
    ctx->set_materialize_grads(false);
    return {y, mean, invstd};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(10);
    if (!grads[0].defined()) return out;
    static const auto op = op_handle<Tensor4(const at::Tensor&, const at::Tensor&, const OptTensor&, const OptTensor&,
                                             const OptTensor&, const at::Tensor&, const at::Tensor&, bool, int64_t,
                                             std::array<bool, 4>)>("torch_dnn::batch_norm_add_act_backward");
    const variable_list s = ctx->get_saved_variables();  // x, residual, weight, bias, mean, invstd
    const bool has_r = s[1].defined(), has_w = s[2].defined();
    const std::array<bool, 4> mask = {needs_grad(ctx, 0), has_r && needs_grad(ctx, 1),
                                      has_w && needs_grad(ctx, 1 + has_r),
                                      s[3].defined() && needs_grad(ctx, 1 + has_r + has_w)};
    const bool training = ctx->saved_data["training"].toBool();
    const int64_t act = ctx->saved_data["act"].toInt();
    const auto [dx, dr, dw, db] =
        at::GradMode::is_enabled()
            ? create_graph_grads(grads[0], s[0], s[1], s[2], s[3], s[4], s[5], training,
                                 ctx->saved_data["eps"].toDouble(), act, mask)
            : op.call(grads[0], s[0], or_none(s[1]), or_none(s[2]), or_none(s[3]), s[4], s[5], training, act, mask);
    out[0] = if_wanted(mask[0], dx);
    out[1] = if_wanted(mask[1], dr);
    out[2] = param_grad(mask[2], dw, dtype_of(or_none(s[2])));
    out[3] = param_grad(mask[3], db, dtype_of(or_none(s[3])));
    return out;
  }
};

Tensor3 as_tuple(const variable_list& v) { return {v[0], v[1], v[2]}; }

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::batch_norm;
  // and SyncBatchNorm's pieces, which its Python autograd.Function composes (torch_dnn/nn/batch_norm.py)
  torch_dnn::autograd_kernel::register_first_order_backward(
      m, {"batch_norm_backward", "batch_norm_add_act_backward", "batch_norm_stats", "batch_norm_elemt",
          "batch_norm_backward_reduce", "batch_norm_backward_elemt"});
  m.impl("batch_norm", [](const at::Tensor& x, const OptTensor& w, const OptTensor& b, const OptTensor& rm,
                          const OptTensor& rv, bool training, double momentum, double eps) {
    check_no_tangent("torch_dnn.batch_norm", x, w, b, rm, rv);
    if (!records_grad(x, w, b, rm, rv)) return BatchNormFn::below(x, w, b, rm, rv, training, momentum, eps);
    return as_tuple(BatchNormFn::apply(x, w, b, rm, rv, training, momentum, eps));
  });
  m.impl("batch_norm_add_act", [](const at::Tensor& x, const OptTensor& res, const OptTensor& w, const OptTensor& b,
                                  const OptTensor& rm, const OptTensor& rv, bool training, double momentum, double eps,
                                  int64_t act) {
    check_no_tangent("torch_dnn.batch_norm_add_act", x, res, w, b, rm, rv);
    if (!records_grad(x, res, w, b, rm, rv))
      return BatchNormAddActFn::below(x, res, w, b, rm, rv, training, momentum, eps, act);
    return as_tuple(BatchNormAddActFn::apply(x, res, w, b, rm, rv, training, momentum, eps, act));
  });
}
