// The pooling family's ops, written once over a backend (CPU or CUDA). pool.cpp declares the schemas; each
// backend file calls register_pool_impls<Backend>(m). A backend provides, on 4-D dense tensors of one layout
// (NCHW-contiguous or channels_last, told by PoolShape::channels_last), shapes with N * C * H * W > 0:
//   static void max_forward(const Tensor& x, Tensor& y, Tensor& indices, const PoolShape&);
//   static void max_backward(const Tensor& g, const Tensor& indices, Tensor& dx, const PoolShape&);
//   static void avg_forward(const Tensor& x, Tensor& y, const PoolShape&);    // avg and adaptive avg
//   static void avg_backward(const Tensor& g, Tensor& dx, const PoolShape&);
#pragma once
#include <torch/library.h>

#include "common/tensor_utils.h"
#include "pool/pool_kernels.h"

namespace torch_dnn {
namespace pool {

// PyTorch's pooling_output_shape: floor (or ceil) division, and with ceil_mode the last window must start
// inside the input or the left padding.
inline int64_t output_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = num / stride - ((num % stride != 0) && (num < 0)) + 1;  // rounds towards -inf
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

inline void check_pair(at::IntArrayRef v, const char* op, const char* arg, int64_t min_value) {
  TORCH_CHECK(v.size() == 2, op, ": expected ", arg, " to have 2 elements, but got ", v.size());
  TORCH_CHECK(v[0] >= min_value && v[1] >= min_value, op, ": expected ", arg, " to be ",
              min_value == 0 ? "non-negative" : "positive", ", but got ", v);
}

inline void check_input(const at::Tensor& x, const char* op) {
  check_floating(x, op, "input");
  const bool ok = (x.dim() == 3 && x.numel() > 0) ||
                  (x.dim() == 4 && x.size(1) > 0 && x.size(2) > 0 && x.size(3) > 0);
  TORCH_CHECK(ok, op, ": expected input to be 3-D (C, H, W) or 4-D (N, C, H, W) with non-zero C, H and W, but got ",
              x.sizes());
}

// The input as a dense 4-D tensor in the layout the output will take: channels_last when the 4-D input
// suggests it (as PyTorch), NCHW-contiguous otherwise.
inline at::Tensor as_4d(const at::Tensor& x) {
  if (x.dim() == 3) return x.contiguous().unsqueeze(0);
  const auto fmt = x.suggest_memory_format();
  return x.contiguous(fmt);
}

inline at::Tensor empty_out(const at::Tensor& x4, int64_t OH, int64_t OW, at::ScalarType t) {
  return at::empty({x4.size(0), x4.size(1), OH, OW}, x4.options().dtype(t).memory_format(x4.suggest_memory_format()));
}

inline PoolShape base_shape(const at::Tensor& x4) {
  PoolShape s;
  s.N = x4.size(0), s.C = x4.size(1), s.H = x4.size(2), s.W = x4.size(3);
  s.channels_last = x4.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
  return s;
}

// kernel/stride/padding/dilation checks (PyTorch's rules) and the output size.
inline PoolShape window_shape(const char* op, const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef st,
                              at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode) {
  check_input(x, op);
  check_pair(k, op, "kernel_size", 1);
  check_pair(st, op, "stride", 1);
  check_pair(pad, op, "padding", 0);
  check_pair(dil, op, "dilation", 1);
  TORCH_CHECK(pad[0] <= k[0] / 2 && pad[1] <= k[1] / 2, op,
              ": expected padding to be at most half of kernel_size, but got padding=", pad, " and kernel_size=", k);
  const int64_t H = x.size(-2), W = x.size(-1);
  const int64_t OH = output_size(H, k[0], pad[0], st[0], dil[0], ceil_mode);
  const int64_t OW = output_size(W, k[1], pad[1], st[1], dil[1], ceil_mode);
  TORCH_CHECK(OH > 0 && OW > 0, op, ": output size is too small: input size (", H, ", ", W,
              ") gives output size (", OH, ", ", OW, ")");
  PoolShape s;
  s.H = H, s.W = W, s.OH = OH, s.OW = OW;
  s.kh = k[0], s.kw = k[1], s.sh = st[0], s.sw = st[1], s.ph = pad[0], s.pw = pad[1], s.dh = dil[0], s.dw = dil[1];
  return s;
}

inline PoolShape with_layout(PoolShape s, const at::Tensor& x4) {
  const PoolShape b = base_shape(x4);
  s.N = b.N, s.C = b.C, s.channels_last = b.channels_last;
  return s;
}

inline at::Tensor back_to_rank(const at::Tensor& t, int64_t rank) { return rank == 3 ? t.squeeze(0) : t; }

// grad_output (and indices) as 4-D tensors laid out as the forward's output.
inline at::Tensor grad_as_4d(const char* op, const at::Tensor& g, const at::Tensor& x, const PoolShape& s,
                             const char* arg) {
  std::vector<int64_t> want = {s.N, s.C, s.OH, s.OW};
  if (x.dim() == 3) want.erase(want.begin());
  TORCH_CHECK(g.sizes() == at::IntArrayRef(want), op, ": expected ", arg, " to have shape ", at::IntArrayRef(want),
              ", but got ", g.sizes());
  const at::Tensor g4 = x.dim() == 3 ? g.unsqueeze(0) : g;
  return g4.contiguous(s.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
}

template <class B>
std::tuple<at::Tensor, at::Tensor> max_pool2d(const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef st,
                                              at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode) {
  const char* op = "torch_dnn.max_pool2d";
  PoolShape s = window_shape(op, x, k, st, pad, dil, ceil_mode);
  const at::Tensor x4 = as_4d(x);
  s = with_layout(s, x4);
  at::Tensor y = empty_out(x4, s.OH, s.OW, x.scalar_type());
  at::Tensor idx = empty_out(x4, s.OH, s.OW, at::kLong);
  if (y.numel() > 0) B::max_forward(x4, y, idx, s);
  return {back_to_rank(y, x.dim()), back_to_rank(idx, x.dim())};
}

template <class B>
at::Tensor max_pool2d_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& indices,
                               at::IntArrayRef k, at::IntArrayRef st, at::IntArrayRef pad, at::IntArrayRef dil,
                               bool ceil_mode) {
  const char* op = "torch_dnn.max_pool2d_backward";
  PoolShape s = window_shape(op, x, k, st, pad, dil, ceil_mode);
  check_same_dtype(x, g, op, "input", "grad_output");
  check_same_device(x, g, op, "input", "grad_output");
  check_same_device(x, indices, op, "input", "indices");
  TORCH_CHECK(indices.scalar_type() == at::kLong, op, ": expected indices to be int64, but got ", indices.scalar_type());
  const at::Tensor x4 = as_4d(x);
  s = with_layout(s, x4);
  const at::Tensor g4 = grad_as_4d(op, g, x, s, "grad_output");
  const at::Tensor i4 = grad_as_4d(op, indices, x, s, "indices");
  at::Tensor dx = at::empty_like(x4);
  if (dx.numel() > 0) B::max_backward(g4, i4, dx, s);
  return back_to_rank(dx, x.dim());
}

inline PoolShape avg_shape(const char* op, const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef st,
                           at::IntArrayRef pad, bool ceil_mode, bool count_include_pad, c10::optional<int64_t> div) {
  const int64_t one[2] = {1, 1};
  PoolShape s = window_shape(op, x, k, st, pad, one, ceil_mode);
  TORCH_CHECK(!div.has_value() || *div != 0, op, ": expected divisor_override to be non-zero");
  s.count_include_pad = count_include_pad;
  s.divisor_override = div.value_or(0);
  return s;
}

template <class B>
at::Tensor avg_pool2d(const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef st, at::IntArrayRef pad, bool ceil_mode,
                      bool count_include_pad, c10::optional<int64_t> div) {
  PoolShape s = avg_shape("torch_dnn.avg_pool2d", x, k, st, pad, ceil_mode, count_include_pad, div);
  const at::Tensor x4 = as_4d(x);
  s = with_layout(s, x4);
  at::Tensor y = empty_out(x4, s.OH, s.OW, x.scalar_type());
  if (y.numel() > 0) B::avg_forward(x4, y, s);
  return back_to_rank(y, x.dim());
}

template <class B>
at::Tensor avg_pool2d_backward(const at::Tensor& g, const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef st,
                               at::IntArrayRef pad, bool ceil_mode, bool count_include_pad,
                               c10::optional<int64_t> div) {
  const char* op = "torch_dnn.avg_pool2d_backward";
  PoolShape s = avg_shape(op, x, k, st, pad, ceil_mode, count_include_pad, div);
  check_same_dtype(x, g, op, "input", "grad_output");
  check_same_device(x, g, op, "input", "grad_output");
  const at::Tensor x4 = as_4d(x);
  s = with_layout(s, x4);
  const at::Tensor g4 = grad_as_4d(op, g, x, s, "grad_output");
  at::Tensor dx = at::empty_like(x4);
  if (dx.numel() > 0) B::avg_backward(g4, dx, s);
  return back_to_rank(dx, x.dim());
}

inline PoolShape adaptive_shape(const char* op, const at::Tensor& x, at::IntArrayRef out) {
  check_input(x, op);
  check_pair(out, op, "output_size", 1);
  const at::Tensor x4 = as_4d(x);
  PoolShape s = base_shape(x4);
  s.OH = out[0], s.OW = out[1];
  s.adaptive = true;
  return s;
}

template <class B>
at::Tensor adaptive_avg_pool2d(const at::Tensor& x, at::IntArrayRef out) {
  const PoolShape s = adaptive_shape("torch_dnn.adaptive_avg_pool2d", x, out);
  const at::Tensor x4 = as_4d(x);
  at::Tensor y = empty_out(x4, s.OH, s.OW, x.scalar_type());
  if (y.numel() > 0) B::avg_forward(x4, y, s);
  return back_to_rank(y, x.dim());
}

template <class B>
at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& g, const at::Tensor& x) {
  const char* op = "torch_dnn.adaptive_avg_pool2d_backward";
  TORCH_CHECK(g.dim() == x.dim() && g.dim() >= 2, op, ": expected grad_output to have the rank of input (", x.dim(),
              "), but got ", g.dim());
  const int64_t out[2] = {g.size(-2), g.size(-1)};
  const PoolShape s = adaptive_shape(op, x, out);
  check_same_dtype(x, g, op, "input", "grad_output");
  check_same_device(x, g, op, "input", "grad_output");
  const at::Tensor x4 = as_4d(x);
  const at::Tensor g4 = grad_as_4d(op, g, x, s, "grad_output");
  at::Tensor dx = at::empty_like(x4);
  if (dx.numel() > 0) B::avg_backward(g4, dx, s);
  return back_to_rank(dx, x.dim());
}

template <class B>
void register_pool_impls(torch::Library& m) {
  m.impl("max_pool2d", &max_pool2d<B>);
  m.impl("max_pool2d_backward", &max_pool2d_backward<B>);
  m.impl("avg_pool2d", &avg_pool2d<B>);
  m.impl("avg_pool2d_backward", &avg_pool2d_backward<B>);
  m.impl("adaptive_avg_pool2d", &adaptive_avg_pool2d<B>);
  m.impl("adaptive_avg_pool2d_backward", &adaptive_avg_pool2d_backward<B>);
}

}  // namespace pool
}  // namespace torch_dnn
