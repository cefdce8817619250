// local_response_norm's ops, written once over a backend (CPU or CUDA). lrn.cpp declares the schemas; each
// backend file calls register_lrn_impls<Backend>(m). A backend provides, on dense inputs of one layout
// (LrnShape::channels_last) with N * C * S > 0:
//   static void forward(const Tensor& x, Tensor& y, const LrnShape&);
//   static void backward(const Tensor& dy, const Tensor& x, Tensor& dx, const LrnShape&);
#pragma once
#include <torch/library.h>

#include "common/memory_format.h"
#include "common/tensor_utils.h"
#include "lrn/lrn_kernels.h"

namespace torch_dnn {
namespace lrn {

using at::Tensor;

// Whether t is dense with the channels (dim 1) innermost, then the spatial dims in order, then the batch: the
// kernels' channels_last layout, for any rank (channels_last, channels_last_3d, and (N, L, C) in memory for 3-D).
inline bool channels_innermost(const Tensor& t) {
  int64_t expect = 1;
  const auto next = [&](int64_t d) {
    if (t.size(d) == 1) return true;
    if (t.stride(d) != expect) return false;
    expect *= t.size(d);
    return true;
  };
  if (!next(1)) return false;
  for (int64_t d = t.dim() - 1; d >= 2; --d)
    if (!next(d)) return false;
  return next(0);
}

// Where the kernels write `out`: out itself when its layout is one of theirs (contiguous or channels innermost),
// else a contiguous temporary (copied into out afterwards).
inline Tensor kernel_output(const Tensor& out) {
  return out.is_contiguous() || channels_innermost(out) ? out : at::empty(out.sizes(), out.options());
}

inline LrnShape shape_of(const char* op, const Tensor& x, int64_t size, double alpha, double beta, double k) {
  check_floating(x, op, "input");
  TORCH_CHECK(x.dim() >= 3, op, ": expected input of shape (N, C, *) with at least 3 dimensions, but got ",
              x.sizes());
  TORCH_CHECK(size > 0, op, ": expected size to be positive, but got ", size);
  LrnShape s;
  s.N = x.size(0);
  s.C = x.size(1);
  s.S = spatial_size(x);
  s.size = size;
  s.alpha = alpha;
  s.beta = beta;
  s.k = k;
  return s;
}

// The result takes x's layout and the gradient grad_out's, as in PyTorch's composite (x / scale^beta; the sum of
// the gradient's terms); torch_dnn/ops/lrn.py's fake kernels mirror this.
template <class B>
Tensor forward(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  LrnShape s = shape_of("torch_dnn.local_response_norm", x, size, alpha, beta, k);
  Tensor y = at::empty_strided(x.sizes(), iter_strides({x}), x.options());
  if (y.numel() == 0) return y;
  Tensor yk = kernel_output(y);
  const Tensor xd = in_layout_of(x, yk);
  s.channels_last = !yk.is_contiguous();
  B::forward(xd, yk, s);
  if (!yk.is_same(y)) y.copy_(yk);
  return y;
}

template <class B>
Tensor backward(const Tensor& dy, const Tensor& x, int64_t size, double alpha, double beta, double k) {
  const char* op = "torch_dnn.local_response_norm_backward";
  LrnShape s = shape_of(op, x, size, alpha, beta, k);
  check_matching(x, dy, op, "input", "grad_out");
  Tensor dx = at::empty_strided(x.sizes(), iter_strides({dy, x}), x.options());
  if (dx.numel() == 0) return dx;
  Tensor dxk = kernel_output(dx);
  const Tensor xd = in_layout_of(x, dxk), dyd = in_layout_of(dy, dxk);
  s.channels_last = !dxk.is_contiguous();
  B::backward(dyd, xd, dxk, s);
  if (!dxk.is_same(dx)) dx.copy_(dxk);
  return dx;
}

template <class B>
void register_lrn_impls(torch::Library& m) {
  m.impl("local_response_norm", &forward<B>);
  m.impl("local_response_norm_backward", &backward<B>);
}

}  // namespace lrn
}  // namespace torch_dnn
