// The convolution family's ops as typed dispatcher handles, looked up once: what the autograd kernels
// (conv_autograd.cpp, conv_fused_autograd.cpp) call for gradients and recomputations.
#pragma once
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

}  // namespace conv
}  // namespace torch_dnn
