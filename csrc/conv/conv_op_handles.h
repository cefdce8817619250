// The convolution family's ops as typed dispatcher handles, looked up once: what the autograd kernels
// (conv_autograd.cpp, conv_fused_autograd.cpp) call for gradients and recomputations, and the geometry arguments
// their nodes keep to call them with.
#pragma once
#include <vector>

#include "common/autograd_kernel.h"

namespace torch_dnn {
namespace conv {

using ConvSig = at::Tensor(const at::Tensor&, const at::Tensor&, const autograd_kernel::OptionalTensor&,
                           c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, bool, c10::IntArrayRef, int64_t);
using BackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, c10::IntArrayRef, c10::IntArrayRef,
                               c10::IntArrayRef, c10::IntArrayRef, bool, c10::IntArrayRef, int64_t);
using BiasSig = at::Tensor(const at::Tensor&);

inline const c10::TypedOperatorHandle<ConvSig>& convolution_op() {
  static const auto op = autograd_kernel::op_handle<ConvSig>("torch_dnn::convolution");
  return op;
}
inline const c10::TypedOperatorHandle<BackwardSig>& backward_input_op() {
  static const auto op = autograd_kernel::op_handle<BackwardSig>("torch_dnn::conv_backward_input");
  return op;
}
inline const c10::TypedOperatorHandle<BackwardSig>& backward_weight_op() {
  static const auto op = autograd_kernel::op_handle<BackwardSig>("torch_dnn::conv_backward_weight");
  return op;
}
inline const c10::TypedOperatorHandle<BiasSig>& backward_bias_op() {
  static const auto op = autograd_kernel::op_handle<BiasSig>("torch_dnn::conv_backward_bias");
  return op;
}

// The geometry arguments every convolution op takes, as an autograd node keeps them, and the ops called with them.
struct ConvCallGeometry {
  std::vector<int64_t> stride, padding, dilation, output_padding{0};
  bool transposed = false;
  int64_t groups = 1;

  static ConvCallGeometry of(c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                             bool transposed, c10::IntArrayRef output_padding, int64_t groups) {
    return {stride.vec(), padding.vec(), dilation.vec(), output_padding.vec(), transposed, groups};
  }
  void save(autograd_kernel::AutogradContext* ctx) const {
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["dilation"] = dilation;
    ctx->saved_data["output_padding"] = output_padding;
    ctx->saved_data["transposed"] = transposed;
    ctx->saved_data["groups"] = groups;
  }
  static ConvCallGeometry load(autograd_kernel::AutogradContext* ctx) {
    return {ctx->saved_data["stride"].toIntVector(), ctx->saved_data["padding"].toIntVector(),
            ctx->saved_data["dilation"].toIntVector(), ctx->saved_data["output_padding"].toIntVector(),
            ctx->saved_data["transposed"].toBool(), ctx->saved_data["groups"].toInt()};
  }
  at::Tensor conv(const at::Tensor& x, const at::Tensor& w, const autograd_kernel::OptionalTensor& b = {}) const {
    return convolution_op().call(x, w, b, stride, padding, dilation, transposed, output_padding, groups);
  }
  at::Tensor backward_input(const at::Tensor& g, const at::Tensor& w, c10::IntArrayRef input_size) const {
    return backward_input_op().call(g, w, input_size, stride, padding, dilation, transposed, output_padding, groups);
  }
  at::Tensor backward_weight(const at::Tensor& g, const at::Tensor& x, c10::IntArrayRef weight_size) const {
    return backward_weight_op().call(g, x, weight_size, stride, padding, dilation, transposed, output_padding,
                                     groups);
  }
};

}  // namespace conv
}  // namespace torch_dnn
