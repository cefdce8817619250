// Convolution family: autograd of every op in C++ (the Autograd dispatch key), so that an eager training step runs no
// Python; torch_dnn/ops/conv.py keeps the same formulas for torch.func's transforms.
//
// convolution's gradients are the three backward ops, called with grad_output laid out exactly as the forward's
// result (PyTorch's layout rule, conv_ops.h), so that they return gradients in that layout as PyTorch's backward
// does. Each backward op is linear in each of its tensor arguments, and its derivatives are the family's ops again
// (with grad mode on they record their own graphs, so any order of derivative works):
//   dx = conv_backward_input(g, w):   d/dg = convolution(ggx, w)              d/dw = conv_backward_weight(g, ggx)
//   dw = conv_backward_weight(g, x):  d/dg = convolution(x, ggw)              d/dx = conv_backward_input(g, ggw)
//   db = conv_backward_bias(g):       d/dg = ggb broadcast over g's shape
// (each with the forward's geometry and transposed flag: a transposed convolution and its backward ops are the same
// adjoint pairs).
#include "common/autograd_kernel.h"
#include "conv/conv_op_handles.h"
#include "conv/conv_ops.h"

namespace torch_dnn {
namespace conv {
namespace {

using namespace torch_dnn::autograd_kernel;
using OptTensor = OptionalTensor;
using Ints = std::vector<int64_t>;

struct ConvolutionFn : torch::autograd::Function<ConvolutionFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const OptTensor& b,
                               IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool transposed,
                               IntArrayRef output_padding, int64_t groups) {
    const at::Tensor y =
        call_below(convolution_op(), x, w, b, stride, padding, dilation, transposed, output_padding, groups);
    // the layout of the result: its gradients take it too
    ctx->saved_data["channels_last"] = strides_channels_last(y);
    ctx->saved_data["bias_size"] = is_given(b) ? b->size(0) : int64_t(-1);
    ConvCallGeometry::of(stride, padding, dilation, transposed, output_padding, groups).save(ctx);
    ctx->save_for_backward({x, w});
    return {y};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(9);  // input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    if (!grads[0].defined()) return out;
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &x = s[0], &w = s[1];
    const auto geo = ConvCallGeometry::load(ctx);
    const at::Tensor g = exactly_in_layout(grads[0], ctx->saved_data["channels_last"].toBool());
    // a first-order backward records nothing: the ops' own autograd kernels are skipped (host time)
    std::optional<at::AutoDispatchBelowADInplaceOrView> below;
    if (!at::GradMode::is_enabled()) below.emplace();
    if (needs_grad(ctx, 0)) out[0] = geo.backward_input(g, w, x.sizes());
    if (needs_grad(ctx, 1)) out[1] = geo.backward_weight(g, x, w.sizes());
    const int64_t bias_size = ctx->saved_data["bias_size"].toInt();
    if (bias_size >= 0 && needs_grad(ctx, 2)) {
      // a result without channels (an input without them) leaves the bias without a gradient: zeros
      out[2] = g.size(1) == bias_size ? backward_bias_op().call(g) : at::zeros({bias_size}, g.options());
    }
    return out;
  }
};

// conv_backward_input (Dgrad: dx from g and w) and conv_backward_weight (Wgrad: dw from g and x), each linear in g
// and in its second operand: the derivative in g is the convolution, the one in the second operand the other
// backward op (the table above).
template <Pass kPass>
struct BackwardFn : torch::autograd::Function<BackwardFn<kPass>> {
  static constexpr bool kInput = kPass == Pass::Dgrad;
  static const c10::TypedOperatorHandle<BackwardSig>& op() {
    return kInput ? backward_input_op() : backward_weight_op();
  }
  static const char* name() { return kInput ? "torch_dnn.conv_backward_input" : "torch_dnn.conv_backward_weight"; }

  static variable_list forward(AutogradContext* ctx, const at::Tensor& g, const at::Tensor& other, IntArrayRef size,
                               IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool transposed,
                               IntArrayRef output_padding, int64_t groups) {
    const at::Tensor d =
        call_below(op(), g, other, size, stride, padding, dilation, transposed, output_padding, groups);
    ConvCallGeometry::of(stride, padding, dilation, transposed, output_padding, groups).save(ctx);
    ctx->save_for_backward({g, other});
    return {d};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(9);  // grad_output, weight (input), input_size (weight_size), then the geometry
    if (!grads[0].defined()) return out;
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &g = s[0], &other = s[1];
    const auto geo = ConvCallGeometry::load(ctx);
    if (needs_grad(ctx, 0)) out[0] = kInput ? geo.conv(grads[0], other) : geo.conv(other, grads[0]);
    if (needs_grad(ctx, 1)) {
      out[1] = kInput ? geo.backward_weight(g, grads[0], other.sizes())
                      : geo.backward_input(g, grads[0], other.sizes());
    }
    return out;
  }

  // The op's Autograd kernel.
  static at::Tensor kernel(const at::Tensor& g, const at::Tensor& other, IntArrayRef size, IntArrayRef stride,
                           IntArrayRef padding, IntArrayRef dilation, bool transposed, IntArrayRef output_padding,
                           int64_t groups) {
    check_no_tangent(name(), g, other);
    if (!records_grad(g, other))
      return call_below(op(), g, other, size, stride, padding, dilation, transposed, output_padding, groups);
    return BackwardFn::apply(g, other, size, stride, padding, dilation, transposed, output_padding, groups)[0];
  }
};

struct BackwardBiasFn : torch::autograd::Function<BackwardBiasFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& g) {
    const at::Tensor db = call_below(backward_bias_op(), g);
    ctx->saved_data["sizes"] = g.sizes().vec();
    return {db};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor()};
    const Ints sizes = ctx->saved_data["sizes"].toIntVector();
    return {per_channel(grads[0], int64_t(sizes.size())).expand(sizes)};
  }
};

}  // namespace
}  // namespace conv
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::conv;
  m.impl("convolution", [](const at::Tensor& x, const at::Tensor& w, const OptTensor& b, IntArrayRef stride,
                           IntArrayRef padding, IntArrayRef dilation, bool transposed, IntArrayRef output_padding,
                           int64_t groups) {
    check_no_tangent("torch_dnn.convolution", x, w, b);
    if (!records_grad(x, w, b))
      return call_below(convolution_op(), x, w, b, stride, padding, dilation, transposed, output_padding, groups);
    return ConvolutionFn::apply(x, w, b, stride, padding, dilation, transposed, output_padding, groups)[0];
  });
  m.impl("conv_backward_input", &BackwardFn<Pass::Dgrad>::kernel);
  m.impl("conv_backward_weight", &BackwardFn<Pass::Wgrad>::kernel);
  m.impl("conv_backward_bias", [](const at::Tensor& g) {
    check_no_tangent("torch_dnn.conv_backward_bias", g);
    if (!records_grad(g)) return call_below(backward_bias_op(), g);
    return BackwardBiasFn::apply(g)[0];
  });
}
