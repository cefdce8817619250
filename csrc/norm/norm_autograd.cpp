// Norm family: autograd of layer_norm, rms_norm, add_layer_norm and add_rms_norm in C++ (the Autograd dispatch key),
// so that an eager training step runs no Python. The same formulas as torch_dnn/ops/norm.py's, which stay for
// torch.func's transforms: the family's backward op on the saved input (the sum for the add_ forms) and row
// statistics; parameter grads cast to the parameter's dtype; the add_ forms give input and residual one gradient.
// With grad mode on (create_graph=True) the gradients are ATen ops instead (norm_create_graph), so that they can be
// differentiated again.
// Why: a tiny layer_norm's forward + backward through the Python Function took several times PyTorch's host time
// (research/host/README.md).
#include "common/autograd_kernel.h"
#include "common/autograd_register.h"
#include "common/create_graph.h"
#include "norm/norm_ops.h"

namespace torch_dnn {
namespace norm {
namespace {

using namespace torch_dnn::autograd_kernel;
using Tensor2 = std::tuple<at::Tensor, at::Tensor>;
using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Tensor4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Shape = at::IntArrayRef;

// What every norm's context keeps besides tensors: the normalized shape, eps and the parameters' dtypes.
void save_params(AutogradContext* ctx, Shape shape, const OptTensor& w, const OptTensor& b, double eps) {
  ctx->saved_data["shape"] = shape.vec();
  ctx->saved_data["eps"] = eps;
  ctx->saved_data["w_dtype"] = dtype_of(w);
  ctx->saved_data["b_dtype"] = dtype_of(b);
}

// The statistics are outputs that autograd does not differentiate; grads stay unmaterialized (no zero tensors).
void mark_stats(AutogradContext* ctx, std::initializer_list<at::Tensor> stats) {
  ctx->mark_non_differentiable(variable_list(stats));
  ctx->set_materialize_grads(false);
}

std::vector<int64_t> saved_shape(AutogradContext* ctx) { return ctx->saved_data["shape"].toIntVector(); }
int64_t saved_int(AutogradContext* ctx, const char* key) { return ctx->saved_data[key].toInt(); }
Tensor2 first_two(const Tensor3& t) { return {std::get<0>(t), std::get<1>(t)}; }

// (dx, dw, db) of layer_norm (centered) or rms_norm as ATen ops (common/create_graph.h), for a backward with grad
// mode on: the statistics recomputed from x so that their derivatives are in the graph; dw, db in float for 16-bit
// inputs (param_grad casts them); grad_sum (the add_ forms, undefined if none) added to dx.
Tensor3 norm_create_graph(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& grad_sum,
                          const at::Tensor& x, const at::Tensor& w, bool centered, std::array<bool, 3> mask) {
  using namespace create_graph;
  const int64_t first = x.dim() - int64_t(saved_shape(ctx).size());
  std::vector<int64_t> rows, dims;  // the leading dims, and the normalized ones
  for (int64_t d = 0; d < x.dim(); ++d) (d < first ? rows : dims).push_back(d);
  const at::Tensor g = opmath(grad);
  const Normalized n = normalize(opmath(x), dims, centered, ctx->saved_data["eps"].toDouble());
  at::Tensor dx, dw, db;
  if (mask[0]) {
    dx = normalized_dx(w.defined() ? g * opmath(w) : g, n, dims, centered);
    if (grad_sum.defined()) dx = dx + grad_sum;
    dx = dx.to(x.scalar_type());
  }
  if (mask[1]) dw = sum_over(g * n.xhat, rows);
  if (mask[2]) db = sum_over(g, rows);
  return {dx, dw, db};
}

struct LayerNormFn : torch::autograd::Function<LayerNormFn> {
  static Tensor3 below(const at::Tensor& x, Shape shape, const OptTensor& w, const OptTensor& b, double eps) {
    static const auto op = op_handle<Tensor3(const at::Tensor&, Shape, const OptTensor&, const OptTensor&, double)>(
        "torch_dnn::layer_norm");
    return call_below(op, x, shape, w, b, eps);
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, Shape shape, const OptTensor& w,
                               const OptTensor& b, double eps) {
    const auto [y, mean, rstd] = below(x, shape, w, b, eps);
    ctx->save_for_backward({x, mean, rstd, or_undefined(w)});
    save_params(ctx, shape, w, b, eps);
    mark_stats(ctx, {mean, rstd});
    return {y, mean, rstd};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(5);  // x, normalized_shape, weight, bias, eps
    if (!grads[0].defined()) return out;
    static const auto op = op_handle<Tensor3(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                             const at::Tensor&, const OptTensor&, Shape, std::array<bool, 3>)>(
        "torch_dnn::layer_norm_backward");
    const variable_list s = ctx->get_saved_variables();  // x, mean, rstd, weight
    const bool has_w = s[3].defined();
    const std::array<bool, 3> mask = {needs_grad(ctx, 0), has_w && needs_grad(ctx, 1),
                                      given_param(ctx, "b_dtype") && needs_grad(ctx, 1 + has_w)};
    const auto [dx, dw, db] = at::GradMode::is_enabled()
                                  ? norm_create_graph(ctx, grads[0], at::Tensor(), s[0], s[3], true, mask)
                                  : op.call(grads[0], s[0], s[1], s[2], or_none(s[3]), saved_shape(ctx), mask);
    out[0] = if_wanted(mask[0], dx);
    out[2] = param_grad(mask[1], dw, saved_int(ctx, "w_dtype"));
    out[3] = param_grad(mask[2], db, saved_int(ctx, "b_dtype"));
    return out;
  }
};

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static Tensor2 below(const at::Tensor& x, Shape shape, const OptTensor& w, double eps) {
    static const auto op =
        op_handle<Tensor2(const at::Tensor&, Shape, const OptTensor&, double)>("torch_dnn::rms_norm");
    return call_below(op, x, shape, w, eps);
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, Shape shape, const OptTensor& w,
                               double eps) {
    const auto [y, rstd] = below(x, shape, w, eps);
    ctx->save_for_backward({x, rstd, or_undefined(w)});
    save_params(ctx, shape, w, c10::nullopt, eps);
    mark_stats(ctx, {rstd});
    return {y, rstd};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(4);  // x, normalized_shape, weight, eps
    if (!grads[0].defined()) return out;
    static const auto op = op_handle<Tensor2(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                             const OptTensor&, Shape, std::array<bool, 2>)>(
        "torch_dnn::rms_norm_backward");
    const variable_list s = ctx->get_saved_variables();  // x, rstd, weight
    const std::array<bool, 2> mask = {needs_grad(ctx, 0), s[2].defined() && needs_grad(ctx, 1)};
    const auto [dx, dw] =
        at::GradMode::is_enabled()
            ? first_two(norm_create_graph(ctx, grads[0], at::Tensor(), s[0], s[2], false, {mask[0], mask[1], false}))
            : op.call(grads[0], s[0], s[1], or_none(s[2]), saved_shape(ctx), mask);
    out[0] = if_wanted(mask[0], dx);
    out[2] = param_grad(mask[1], dw, saved_int(ctx, "w_dtype"));
    return out;
  }
};

// add_ forms: grads are (sum, out, statistics...). A step that used only the sum (no gradient reaches the normalized
// output) gives input and residual grad_sum as it is.
bool sum_only(AutogradContext* ctx, const variable_list& grads, variable_list& out) {
  if (grads[1].defined()) return false;
  out[0] = if_wanted(needs_grad(ctx, 0), grads[0]);
  out[1] = if_wanted(needs_grad(ctx, 1), grads[0]);
  return true;
}

struct AddLayerNormFn : torch::autograd::Function<AddLayerNormFn> {
  static Tensor4 below(const at::Tensor& x, const at::Tensor& res, Shape shape, const OptTensor& w, const OptTensor& b,
                       double eps) {
    static const auto op = op_handle<Tensor4(const at::Tensor&, const at::Tensor&, Shape, const OptTensor&,
                                             const OptTensor&, double)>("torch_dnn::add_layer_norm");
    return call_below(op, x, res, shape, w, b, eps);
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& res, Shape shape,
                               const OptTensor& w, const OptTensor& b, double eps) {
    const auto [sum, y, mean, rstd] = below(x, res, shape, w, b, eps);
    ctx->save_for_backward({sum, mean, rstd, or_undefined(w)});
    save_params(ctx, shape, w, b, eps);
    mark_stats(ctx, {mean, rstd});
    return {sum, y, mean, rstd};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(6);  // x, residual, normalized_shape, weight, bias, eps
    if (sum_only(ctx, grads, out)) return out;
    const bool want_x = needs_grad(ctx, 0), want_res = needs_grad(ctx, 1);
    static const auto op = op_handle<Tensor3(const at::Tensor&, const OptTensor&, const at::Tensor&,
                                             const at::Tensor&, const at::Tensor&, const OptTensor&, Shape,
                                             std::array<bool, 3>)>("torch_dnn::add_layer_norm_backward");
    const variable_list s = ctx->get_saved_variables();  // sum, mean, rstd, weight
    const bool has_w = s[3].defined();
    const std::array<bool, 3> mask = {want_x || want_res, has_w && needs_grad(ctx, 2),
                                      given_param(ctx, "b_dtype") && needs_grad(ctx, 2 + has_w)};
    const auto [dx, dw, db] =
        at::GradMode::is_enabled()
            ? norm_create_graph(ctx, grads[1], grads[0], s[0], s[3], true, mask)
            : op.call(grads[1], or_none(grads[0]), s[0], s[1], s[2], or_none(s[3]), saved_shape(ctx), mask);
    out[0] = if_wanted(want_x, dx);
    out[1] = if_wanted(want_res, dx);
    out[3] = param_grad(mask[1], dw, saved_int(ctx, "w_dtype"));
    out[4] = param_grad(mask[2], db, saved_int(ctx, "b_dtype"));
    return out;
  }
};

struct AddRmsNormFn : torch::autograd::Function<AddRmsNormFn> {
  static Tensor3 below(const at::Tensor& x, const at::Tensor& res, Shape shape, const OptTensor& w, double eps) {
    static const auto op = op_handle<Tensor3(const at::Tensor&, const at::Tensor&, Shape, const OptTensor&,
                                             double)>("torch_dnn::add_rms_norm");
    return call_below(op, x, res, shape, w, eps);
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& res, Shape shape,
                               const OptTensor& w, double eps) {
    const auto [sum, y, rstd] = below(x, res, shape, w, eps);
    ctx->save_for_backward({sum, rstd, or_undefined(w)});
    save_params(ctx, shape, w, c10::nullopt, eps);
    mark_stats(ctx, {rstd});
    return {sum, y, rstd};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(5);  // x, residual, normalized_shape, weight, eps
    if (sum_only(ctx, grads, out)) return out;
    const bool want_x = needs_grad(ctx, 0), want_res = needs_grad(ctx, 1);
    static const auto op = op_handle<Tensor2(const at::Tensor&, const OptTensor&, const at::Tensor&,
                                             const at::Tensor&, const OptTensor&, Shape, std::array<bool, 2>)>(
        "torch_dnn::add_rms_norm_backward");
    const variable_list s = ctx->get_saved_variables();  // sum, rstd, weight
    const std::array<bool, 2> mask = {want_x || want_res, s[2].defined() && needs_grad(ctx, 2)};
    const auto [dx, dw] =
        at::GradMode::is_enabled()
            ? first_two(norm_create_graph(ctx, grads[1], grads[0], s[0], s[2], false, {mask[0], mask[1], false}))
            : op.call(grads[1], or_none(grads[0]), s[0], s[1], or_none(s[2]), saved_shape(ctx), mask);
    out[0] = if_wanted(want_x, dx);
    out[1] = if_wanted(want_res, dx);
    out[3] = param_grad(mask[1], dw, saved_int(ctx, "w_dtype"));
    return out;
  }
};

}  // namespace
}  // namespace norm
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::norm;
  torch_dnn::autograd_kernel::register_first_order_backward(
      m, {"layer_norm_backward", "rms_norm_backward", "add_layer_norm_backward", "add_rms_norm_backward"});
  m.impl("layer_norm", [](const at::Tensor& x, Shape shape, const OptTensor& w, const OptTensor& b, double eps) {
    check_no_tangent("torch_dnn.layer_norm", x, w, b);
    if (!records_grad(x, w, b)) return LayerNormFn::below(x, shape, w, b, eps);
    const auto v = LayerNormFn::apply(x, shape, w, b, eps);
    return Tensor3{v[0], v[1], v[2]};
  });
  m.impl("rms_norm", [](const at::Tensor& x, Shape shape, const OptTensor& w, double eps) {
    check_no_tangent("torch_dnn.rms_norm", x, w);
    if (!records_grad(x, w)) return RmsNormFn::below(x, shape, w, eps);
    const auto v = RmsNormFn::apply(x, shape, w, eps);
    return Tensor2{v[0], v[1]};
  });
  m.impl("add_layer_norm", [](const at::Tensor& x, const at::Tensor& res, Shape shape, const OptTensor& w,
                              const OptTensor& b, double eps) {
    check_no_tangent("torch_dnn.add_layer_norm", x, res, w, b);
    if (!records_grad(x, res, w, b)) return AddLayerNormFn::below(x, res, shape, w, b, eps);
    const auto v = AddLayerNormFn::apply(x, res, shape, w, b, eps);
    return Tensor4{v[0], v[1], v[2], v[3]};
  });
  m.impl("add_rms_norm", [](const at::Tensor& x, const at::Tensor& res, Shape shape, const OptTensor& w, double eps) {
    check_no_tangent("torch_dnn.add_rms_norm", x, res, w);
    if (!records_grad(x, res, w)) return AddRmsNormFn::below(x, res, shape, w, eps);
    const auto v = AddRmsNormFn::apply(x, res, shape, w, eps);
    return Tensor3{v[0], v[1], v[2]};
  });
}
