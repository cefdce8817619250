// The softmax family's ops, written once over a backend (CPU or CUDA). softmax.cpp declares the schemas;
// each backend file calls register_softmax_impls<Backend>(m). A backend provides, on dense tensors of one
// layout seen as [outer, dim, inner] (SoftmaxShape), for the dtype pairs fused_pair() accepts:
//   static void forward(const Tensor& x, Tensor& y, SoftmaxShape, bool log);
//   static void backward(const Tensor& g, const Tensor& y, Tensor& dx, SoftmaxShape, bool log);
#pragma once
#include <torch/library.h>

#include "common/tensor_utils.h"
#include "softmax/softmax_kernels.h"

namespace torch_dnn {
namespace softmax {

// Input/output dtype pairs the kernels read and write directly; any other dtype= request casts first.
inline bool fused_pair(at::ScalarType in, at::ScalarType out) {
  return in == out || (out == at::kFloat && (in == at::kHalf || in == at::kBFloat16));
}

inline SoftmaxShape shape_of(const at::Tensor& dense, int64_t dim) {
  const DimSplit s = split_at_dim(dense, dim);
  return {s.outer, s.size, s.inner};
}

template <class B>
at::Tensor forward(const char* op, const at::Tensor& x, int64_t dim, c10::optional<at::ScalarType> dtype, bool log) {
  check_floating(x, op, "input");
  dim = wrap_dim(dim, x.dim(), op);
  const at::ScalarType out_t = dtype.value_or(x.scalar_type());
  TORCH_CHECK(is_kernel_dtype(out_t), op, ": expected dtype to be a floating point type, but got ", out_t);
  // dtype=: "the input is cast to dtype before the operation"; half/bfloat16 -> float is fused.
  at::Tensor in = fused_pair(x.scalar_type(), out_t) ? x : x.to(out_t);
  // PyTorch's softmax returns a contiguous tensor whatever the input's layout (and its backward a contiguous
  // gradient): the kernels run on contiguous copies of other layouts
  in = in.contiguous();
  at::Tensor y = at::empty_like(in, in.options().dtype(out_t));
  if (y.numel() > 0) B::forward(in, y, shape_of(in, dim), log);
  return y;
}

template <class B>
at::Tensor backward(const char* op, const at::Tensor& g, const at::Tensor& y, int64_t dim, at::ScalarType in_t, bool log) {
  check_floating(y, op, "output");
  check_matching(y, g, op, "output", "grad_output");
  TORCH_CHECK(is_kernel_dtype(in_t), op, ": expected input_dtype to be a floating point type, but got ", in_t);
  dim = wrap_dim(dim, y.dim(), op);
  const bool fused = fused_pair(in_t, y.scalar_type());
  at::Tensor yd = y.contiguous();
  at::Tensor gd = g.contiguous();
  at::Tensor dx = at::empty_like(yd, yd.options().dtype(fused ? in_t : y.scalar_type()));
  if (dx.numel() > 0) B::backward(gd, yd, dx, shape_of(yd, dim), log);
  return fused ? dx : dx.to(in_t);
}

template <class B>
void register_softmax_impls(torch::Library& m) {
  using T = at::Tensor;
  using OptType = c10::optional<at::ScalarType>;
  m.impl("softmax", [](const T& x, int64_t dim, OptType dt) { return forward<B>("torch_dnn.softmax", x, dim, dt, false); });
  m.impl("log_softmax", [](const T& x, int64_t dim, OptType dt) { return forward<B>("torch_dnn.log_softmax", x, dim, dt, true); });
  m.impl("softmax_backward", [](const T& g, const T& y, int64_t dim, at::ScalarType in_t) {
    return backward<B>("torch_dnn.softmax_backward", g, y, dim, in_t, false);
  });
  m.impl("log_softmax_backward", [](const T& g, const T& y, int64_t dim, at::ScalarType in_t) {
    return backward<B>("torch_dnn.log_softmax_backward", g, y, dim, in_t, true);
  });
}

}  // namespace softmax
}  // namespace torch_dnn
