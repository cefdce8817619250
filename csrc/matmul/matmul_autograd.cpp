// Matmul family: autograd of mm, bmm, linear and linear_act in C++ (the Autograd dispatch key), so that an eager
// training step runs no Python. The same formulas as torch_dnn/ops/matmul.py's, which stay for torch.func's
// transforms: mm / bmm's gradients are mm / bmm with the other operand transposed (read in place); linear and
// linear_act's are linear_act_backward (the activation's derivative fused into the gradient GEMMs), with the
// pre-activation saved by the forward (save_preact) or recomputed here. With grad mode on (create_graph=True),
// linear and linear_act's gradients are mm's and a sum (after the activation's derivative as ATen ops), so that they
// can be differentiated again.
#include "activation/activation_create_graph.h"
#include "common/autograd_kernel.h"
#include "common/autograd_register.h"
#include "common/create_graph.h"
#include "matmul/matmul_ops.h"

namespace torch_dnn {
namespace matmul {
namespace {

using namespace torch_dnn::autograd_kernel;
using OptTensor = OptionalTensor;
using OptDouble = std::optional<double>;
using Tensor2 = std::tuple<at::Tensor, at::Tensor>;
using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using MmSig = at::Tensor(const at::Tensor&, const at::Tensor&, bool);
using LinearActSig = Tensor2(const at::Tensor&, const at::Tensor&, const OptTensor&, c10::string_view,
                             const OptTensor&, OptDouble, OptDouble, bool, bool);
using LinearActBackwardSig = Tensor3(const at::Tensor&, const at::Tensor&, const at::Tensor&, const OptTensor&,
                                     c10::string_view, OptDouble, OptDouble, const OptTensor&, std::array<bool, 3>,
                                     bool);

// the activation's name as bias_act reads it (the forward has checked it)
bool needs_preact(c10::string_view act) { return activation::bias_act_kind(act).first != activation::Act::Identity; }

const c10::TypedOperatorHandle<LinearActBackwardSig>& linear_act_backward_op() {
  static const auto op = op_handle<LinearActBackwardSig>("torch_dnn::linear_act_backward");
  return op;
}

// PyTorch's test for returning a matrix's gradient column-major (mm_mat1_backward / mm_mat2_backward)
bool column_major(const at::Tensor& m) { return m.stride(0) == 1 && m.stride(1) == m.size(0); }

// mm (batched = false) and bmm (true)
struct MmFn : torch::autograd::Function<MmFn> {
  static const c10::TypedOperatorHandle<MmSig>& op(bool batched) {
    static const auto mm = op_handle<MmSig>("torch_dnn::mm");
    static const auto bmm = op_handle<MmSig>("torch_dnn::bmm");
    return batched ? bmm : mm;
  }
  static at::Tensor below(const at::Tensor& a, const at::Tensor& b, bool tf32, bool batched) {
    return call_below(op(batched), a, b, tf32);
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, bool tf32,
                               bool batched) {
    const at::Tensor c = below(a, b, tf32, batched);
    ctx->save_for_backward({a, b});
    ctx->saved_data["tf32"] = tf32;
    ctx->saved_data["batched"] = batched;
    return {c};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(4);  // a, b, allow_tf32, batched
    if (!grads[0].defined()) return out;
    const variable_list s = ctx->get_saved_variables();
    const bool tf32 = ctx->saved_data["tf32"].toBool(), batched = ctx->saved_data["batched"].toBool();
    const auto& mm = op(batched);
    const at::Tensor& g = grads[0];
    // as PyTorch's mm backward, a column-major operand's gradient is column-major (the transposed product); bmm's
    // gradients are contiguous
    if (needs_grad(ctx, 0)) {
      out[0] = !batched && column_major(s[0]) ? mm.call(s[1], g.t(), tf32).t()
                                              : mm.call(g, s[1].transpose(-2, -1), tf32);
    }
    if (needs_grad(ctx, 1)) {
      out[1] = !batched && column_major(s[1]) ? mm.call(g.t(), s[0], tf32).t()
                                              : mm.call(s[0].transpose(-2, -1), g, tf32);
    }
    return out;
  }
};

// create_graph: linear's gradients from g (the gradient at x @ w.T + b) as mm's (differentiable: mm's gradient is mm)
// and a sum, into out[0..2]; linear_act_backward has no derivative.
void linear_create_graph(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& w, bool tf32,
                         std::array<bool, 3> mask, variable_list& out) {
  const int64_t rows = c10::multiply_integers(x.sizes().slice(0, x.dim() - 1));
  const at::Tensor g = grad.reshape({rows, w.size(0)});
  const auto& mm = MmFn::op(false);
  // the layouts of PyTorch's gradients, as linear_act_backward's (matmul_ops.h)
  const at::Tensor x2 = x.reshape({rows, x.size(-1)});
  if (mask[0])
    out[0] = x.dim() == 2 && column_major(x) ? mm.call(w.t(), g.t(), tf32).t() : mm.call(g, w, tf32).view(x.sizes());
  if (mask[1]) out[1] = column_major(w.t()) ? mm.call(g.t(), x2, tf32) : mm.call(x2.t(), g, tf32).t();
  if (mask[2]) out[2] = g.sum(0);
}

struct LinearFn : torch::autograd::Function<LinearFn> {
  static at::Tensor below(const at::Tensor& x, const at::Tensor& w, const OptTensor& b, bool tf32) {
    static const auto op =
        op_handle<at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&, bool)>("torch_dnn::linear");
    return call_below(op, x, w, b, tf32);
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const OptTensor& b,
                               bool tf32) {
    const at::Tensor y = below(x, w, b, tf32);
    ctx->save_for_backward({x, w});
    ctx->saved_data["tf32"] = tf32;
    ctx->saved_data["has_bias"] = is_given(b);
    return {y};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(4);  // x, weight, bias, allow_tf32
    if (!grads[0].defined()) return out;
    const variable_list s = ctx->get_saved_variables();
    const std::array<bool, 3> mask = {needs_grad(ctx, 0), needs_grad(ctx, 1),
                                      ctx->saved_data["has_bias"].toBool() && needs_grad(ctx, 2)};
    if (at::GradMode::is_enabled()) {  // create_graph (a gradient penalty through Linear)
      linear_create_graph(grads[0], s[0], s[1], ctx->saved_data["tf32"].toBool(), mask, out);
      return out;
    }
    const auto [dx, dw, db] = linear_act_backward_op().call(grads[0], s[0], s[1], c10::nullopt, "none", c10::nullopt,
                                                            c10::nullopt, c10::nullopt, mask,
                                                            ctx->saved_data["tf32"].toBool());
    out[0] = if_wanted(mask[0], dx);
    out[1] = if_wanted(mask[1], dw);
    out[2] = if_wanted(mask[2], db);
    return out;
  }
};

struct LinearActFn : torch::autograd::Function<LinearActFn> {
  static Tensor2 below(const at::Tensor& x, const at::Tensor& w, const OptTensor& b, c10::string_view act,
                       const OptTensor& res, OptDouble act_a, OptDouble act_b, bool tf32, bool save_preact) {
    static const auto op = op_handle<LinearActSig>("torch_dnn::linear_act");
    return call_below(op, x, w, b, act, res, act_a, act_b, tf32, save_preact);
  }
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const OptTensor& b,
                               c10::string_view act, const OptTensor& res, OptDouble act_a, OptDouble act_b,
                               bool tf32, bool save_preact) {
    const auto [y, pre] = below(x, w, b, act, res, act_a, act_b, tf32, save_preact);
    const bool saved_preact = save_preact && needs_preact(act);
    ctx->save_for_backward({x, w, or_undefined(b), saved_preact ? pre : at::Tensor()});
    ctx->saved_data["act"] = std::string(act);
    ctx->saved_data["act_a"] = act_a;
    ctx->saved_data["act_b"] = act_b;
    ctx->saved_data["tf32"] = tf32;
    ctx->saved_data["has_res"] = is_given(res);
    ctx->set_materialize_grads(false);
    return {y, pre};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(9);  // x, weight, bias, activation, residual, act_a, act_b, allow_tf32, save_preact
    const variable_list s = ctx->get_saved_variables();  // x, weight, bias, preact
    const at::Tensor &x = s[0], &w = s[1], &bias = s[2];
    at::Tensor pre = s[3];
    const bool has_bias = bias.defined(), tf32 = ctx->saved_data["tf32"].toBool();
    const std::string act = ctx->saved_data["act"].toStringRef();
    const std::array<bool, 3> mask = {needs_grad(ctx, 0), needs_grad(ctx, 1), has_bias && needs_grad(ctx, 2)};
    at::Tensor grad = grads[0];
    if (!grad.defined()) {
      auto shape = x.sizes().vec();
      shape.back() = w.size(0);
      grad = at::zeros(shape, x.options());
    }
    if (ctx->saved_data["has_res"].toBool() && needs_grad(ctx, 2 + has_bias)) out[4] = grad;
    if (!(mask[0] || mask[1] || mask[2])) return out;
    const bool saved_preact = pre.defined();
    if (at::GradMode::is_enabled()) {
      // create_graph: the pre-activation again through linear (differentiable), the activation's derivative as ATen
      // ops, then linear's create_graph gradients
      const auto [k, p] = linear_act_kind(act, ctx->saved_data["act_a"].toOptional<double>(),
                                          ctx->saved_data["act_b"].toOptional<double>());
      at::Tensor d_pre = grad;
      if (k != activation::Act::Identity) {
        const at::Tensor pre_d = LinearFn::apply(x, w, or_none(bias), tf32)[0];
        d_pre = activation::act_backward_differentiable_at_input(create_graph::opmath(grad), pre_d, k, p);
      }
      if (saved_preact && grads[1].defined()) d_pre = d_pre + grads[1];
      linear_create_graph(d_pre.to(x.scalar_type()), x, w, tf32, mask, out);
      return out;
    }
    if (needs_preact(act) && !saved_preact) {
      // saved without the pre-activation (the op was called with save_preact=False): recompute it
      static const auto op = op_handle<LinearActSig>("torch_dnn::linear_act");
      pre = std::get<0>(op.call(x, w, or_none(bias), "none", c10::nullopt, c10::nullopt, c10::nullopt, tf32, false));
    }
    const OptTensor grad_preact = saved_preact ? or_none(grads[1]) : c10::nullopt;
    const auto [dx, dw, db] = linear_act_backward_op().call(
        grad, x, w, or_none(pre), act, ctx->saved_data["act_a"].toOptional<double>(),
        ctx->saved_data["act_b"].toOptional<double>(), grad_preact, mask, tf32);
    out[0] = if_wanted(mask[0], dx);
    out[1] = if_wanted(mask[1], dw);
    out[2] = if_wanted(mask[2], db);
    return out;
  }
};

}  // namespace
}  // namespace matmul
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::matmul;
  // mm / bmm's gradients are mm / bmm, which differentiate again; linear_act_backward has no derivative
  torch_dnn::autograd_kernel::register_first_order_backward(m, {"linear_act_backward"});
  m.impl("mm", [](const at::Tensor& a, const at::Tensor& b, bool tf32) {
    check_no_tangent("torch_dnn.mm", a, b);
    if (!records_grad(a, b)) return MmFn::below(a, b, tf32, false);
    return MmFn::apply(a, b, tf32, false)[0];
  });
  m.impl("bmm", [](const at::Tensor& a, const at::Tensor& b, bool tf32) {
    check_no_tangent("torch_dnn.bmm", a, b);
    if (!records_grad(a, b)) return MmFn::below(a, b, tf32, true);
    return MmFn::apply(a, b, tf32, true)[0];
  });
  m.impl("linear", [](const at::Tensor& x, const at::Tensor& w, const OptTensor& b, bool tf32) {
    check_no_tangent("torch_dnn.linear", x, w, b);
    if (!records_grad(x, w, b)) return LinearFn::below(x, w, b, tf32);
    return LinearFn::apply(x, w, b, tf32)[0];
  });
  m.impl("linear_act", [](const at::Tensor& x, const at::Tensor& w, const OptTensor& b, c10::string_view act,
                          const OptTensor& res, OptDouble act_a, OptDouble act_b, bool tf32, bool save_preact) {
    check_no_tangent("torch_dnn.linear_act", x, w, b, res);
    if (!records_grad(x, w, b, res)) return LinearActFn::below(x, w, b, act, res, act_a, act_b, tf32, save_preact);
    const auto v = LinearActFn::apply(x, w, b, act, res, act_a, act_b, tf32, save_preact);
    return Tensor2{v[0], v[1]};
  });
}
