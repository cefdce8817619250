// local_response_norm's ops, written once over a backend (CPU or CUDA). lrn.cpp declares the schemas; each
// backend file calls register_lrn_impls<Backend>(m). A backend provides, on dense inputs of one layout
// (LrnShape::channels_last) with N * C * S > 0:
//   static void forward(const Tensor& x, Tensor& y, const LrnShape&);
//   static void backward(const Tensor& dy, const Tensor& x, Tensor& dx, const LrnShape&);
#pragma once
#include <torch/library.h>

#include "common/tensor_utils.h"
#include "lrn/lrn_kernels.h"

namespace torch_dnn {
namespace lrn {

using at::Tensor;

// Itself when NCHW-contiguous or channels_last(_3d)-contiguous, else a copy in the layout PyTorch suggests
// (torch_dnn/ops/lrn.py's fake kernels mirror this).
inline Tensor dense_input(const Tensor& x) {
  if (x.is_contiguous()) return x;
  if (x.dim() == 4 && x.is_contiguous(at::MemoryFormat::ChannelsLast)) return x;
  if (x.dim() == 5 && x.is_contiguous(at::MemoryFormat::ChannelsLast3d)) return x;
  return x.contiguous(x.suggest_memory_format());
}

inline LrnShape shape_of(const char* op, const Tensor& x, int64_t size, double alpha, double beta, double k) {
  check_floating(x, op, "input");
  TORCH_CHECK(x.dim() >= 3, op, ": expected input of shape (N, C, *) with at least 3 dimensions, but got ",
              x.sizes());
  TORCH_CHECK(size > 0, op, ": expected size to be positive, but got ", size);
  LrnShape s;
  s.N = x.size(0);
  s.C = x.size(1);
  s.S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s.S *= x.size(d);
  s.size = size;
  s.alpha = alpha;
  s.beta = beta;
  s.k = k;
  return s;
}

template <class B>
Tensor forward(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  LrnShape s = shape_of("torch_dnn.local_response_norm", x, size, alpha, beta, k);
  const Tensor xd = dense_input(x);
  s.channels_last = !xd.is_contiguous();
  Tensor y = at::empty_like(xd);
  if (y.numel() > 0) B::forward(xd, y, s);
  return y;
}

template <class B>
Tensor backward(const Tensor& dy, const Tensor& x, int64_t size, double alpha, double beta, double k) {
  const char* op = "torch_dnn.local_response_norm_backward";
  LrnShape s = shape_of(op, x, size, alpha, beta, k);
  check_same_dtype(x, dy, op, "input", "grad_out");
  check_same_device(x, dy, op, "input", "grad_out");
  check_same_shape(x, dy, op, "input", "grad_out");
  const Tensor xd = dense_input(x);
  s.channels_last = !xd.is_contiguous();
  const Tensor dyd = same_layout_as(dy, xd);
  Tensor dx = at::empty_like(xd);
  if (dx.numel() > 0) B::backward(dyd, xd, dx, s);
  return dx;
}

template <class B>
void register_lrn_impls(torch::Library& m) {
  m.impl("local_response_norm", &forward<B>);
  m.impl("local_response_norm_backward", &backward<B>);
}

}  // namespace lrn
}  // namespace torch_dnn
