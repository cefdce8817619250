// group_norm family: autograd of group_norm and group_norm_with_stats in C++ (the Autograd dispatch key), so that an
// eager training step runs no Python. The same formulas as torch_dnn/ops/group_norm.py's, which stay for torch.func's
// transforms: group_norm_backward on the saved input and statistics; parameter grads cast to the parameter's dtype;
// given statistics (instance_norm's running ones) are constants that get no gradient. With grad mode on
// (create_graph=True) the gradients are ATen ops instead (create_graph_grads), so that they can be differentiated
// again.
#include "common/autograd_kernel.h"
#include "common/autograd_register.h"
#include "common/create_graph.h"
#include "group_norm/group_norm_ops.h"

namespace torch_dnn {
namespace group_norm {
namespace {

using namespace torch_dnn::autograd_kernel;
using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using BackwardSig = Tensor3(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const OptTensor&, int64_t, bool, std::array<bool, 3>);

void save(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
          const OptTensor& w, const OptTensor& b, int64_t groups, double eps) {
  ctx->save_for_backward({x, mean, rstd, or_undefined(w)});
  ctx->saved_data["groups"] = groups;
  ctx->saved_data["eps"] = eps;
  ctx->saved_data["w_dtype"] = dtype_of(w);
  ctx->saved_data["b_dtype"] = dtype_of(b);
}

// (dx, dw, db) as ATen ops (common/create_graph.h) from the saved x, mean, rstd, weight: the statistics recomputed
// from x over each (n, group), or the given ones as constants; dw, db in float for 16-bit inputs (param_grad casts).
Tensor3 create_graph_grads(AutogradContext* ctx, const at::Tensor& grad, const variable_list& s, bool stats_given,
                           std::array<bool, 3> mask) {
  using namespace create_graph;
  const at::Tensor &x = s[0], &w = s[3];
  const int64_t N = x.size(0), groups = ctx->saved_data["groups"].toInt();
  const at::Tensor g = opmath(grad), xg = opmath(x).reshape({N, groups, -1});
  const Normalized n = stats_given  // constants (instance_norm's running statistics)
                           ? normalize_with(xg, s[1].view({N, groups, 1}), s[2].view({N, groups, 1}))
                           : normalize(xg, {2}, true, ctx->saved_data["eps"].toDouble());
  std::vector<int64_t> per_channel(x.dim(), 1);  // the weight's shape against x
  per_channel[1] = x.size(1);
  at::Tensor dx, dw, db;
  if (mask[0]) {
    const at::Tensor gx = (w.defined() ? g * opmath(w).view(per_channel) : g).reshape({N, groups, -1});
    dx = (stats_given ? gx * n.rstd : normalized_dx(gx, n, {2}, true)).view(x.sizes()).to(x.scalar_type());
  }
  const std::vector<int64_t> dims = dims_but(x.dim(), 1);
  if (mask[1]) dw = sum_over(g * n.xhat.view(x.sizes()), dims);
  if (mask[2]) db = sum_over(g, dims);
  return {dx, dw, db};
}

// dx, dw, db into the backward's outputs at x_at, w_at, w_at + 1; the weight's edge is first_param_edge.
void backward_into(AutogradContext* ctx, const at::Tensor& grad, bool stats_given, int first_param_edge,
                   variable_list& out, int w_at) {
  static const auto op = op_handle<BackwardSig>("torch_dnn::group_norm_backward");
  const variable_list s = ctx->get_saved_variables();  // x, mean, rstd, weight
  const bool has_w = s[3].defined();
  const std::array<bool, 3> mask = {
      needs_grad(ctx, 0), has_w && needs_grad(ctx, first_param_edge),
      given_param(ctx, "b_dtype") && needs_grad(ctx, first_param_edge + has_w)};
  const auto [dx, dw, db] =
      at::GradMode::is_enabled()
          ? create_graph_grads(ctx, grad, s, stats_given, mask)
          : op.call(grad, s[0], s[1], s[2], or_none(s[3]), ctx->saved_data["groups"].toInt(), stats_given, mask);
  out[0] = if_wanted(mask[0], dx);
  out[w_at] = param_grad(mask[1], dw, ctx->saved_data["w_dtype"].toInt());
  out[w_at + 1] = param_grad(mask[2], db, ctx->saved_data["b_dtype"].toInt());
}

struct GroupNormFn : torch::autograd::Function<GroupNormFn> {
  static Tensor3 below(const at::Tensor& x, int64_t groups, const OptTensor& w, const OptTensor& b, double eps) {
    static const auto op = op_handle<Tensor3(const at::Tensor&, int64_t, const OptTensor&, const OptTensor&,
                                             double)>("torch_dnn::group_norm");
    return call_below(op, x, groups, w, b, eps);
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, int64_t groups, const OptTensor& w,
                               const OptTensor& b, double eps) {
    const auto [y, mean, rstd] = below(x, groups, w, b, eps);
    save(ctx, x, mean, rstd, w, b, groups, eps);
    ctx->mark_non_differentiable({mean, rstd});
    ctx->set_materialize_grads(false);
    return {y, mean, rstd};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(5);  // x, num_groups, weight, bias, eps
    if (grads[0].defined()) backward_into(ctx, grads[0], false, 1, out, 2);
    return out;
  }
};

struct GroupNormWithStatsFn : torch::autograd::Function<GroupNormWithStatsFn> {
  static at::Tensor below(const at::Tensor& x, int64_t groups, const at::Tensor& mean, const at::Tensor& rstd,
                          const OptTensor& w, const OptTensor& b) {
    using Sig = at::Tensor(const at::Tensor&, int64_t, const at::Tensor&, const at::Tensor&, const OptTensor&,
                           const OptTensor&);
    static const auto op = op_handle<Sig>("torch_dnn::group_norm_with_stats");
    return call_below(op, x, groups, mean, rstd, w, b);
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, int64_t groups, const at::Tensor& mean,
                               const at::Tensor& rstd, const OptTensor& w, const OptTensor& b) {
    const at::Tensor y = below(x, groups, mean, rstd, w, b);
    save(ctx, x, mean, rstd, w, b, groups, 0.0);  // eps unused: the statistics are given
    ctx->set_materialize_grads(false);
    return {y};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(6);  // x, num_groups, mean, rstd, weight, bias
    if (grads[0].defined()) backward_into(ctx, grads[0], true, 3, out, 4);  // edges: x, mean, rstd, weight, bias
    return out;
  }
};

}  // namespace
}  // namespace group_norm
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::group_norm;
  torch_dnn::autograd_kernel::register_first_order_backward(m, {"group_norm_backward"});
  m.impl("group_norm", [](const at::Tensor& x, int64_t groups, const OptTensor& w, const OptTensor& b, double eps) {
    check_no_tangent("torch_dnn.group_norm", x, w, b);
    if (!records_grad(x, w, b)) return GroupNormFn::below(x, groups, w, b, eps);
    const auto v = GroupNormFn::apply(x, groups, w, b, eps);
    return Tensor3{v[0], v[1], v[2]};
  });
  m.impl("group_norm_with_stats", [](const at::Tensor& x, int64_t groups, const at::Tensor& mean,
                                     const at::Tensor& rstd, const OptTensor& w, const OptTensor& b) {
    check_no_tangent("torch_dnn.group_norm_with_stats", x, mean, rstd, w, b);
    if (!records_grad(x, mean, rstd, w, b)) return GroupNormWithStatsFn::below(x, groups, mean, rstd, w, b);
    return GroupNormWithStatsFn::apply(x, groups, mean, rstd, w, b)[0];
  });
}
