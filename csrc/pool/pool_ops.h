// The pooling family's ops, written once over a backend (CPU or CUDA) and the pooling rank R (1, 2, 3).
// pool.cpp declares the schemas; each backend file calls register_pool_impls<Backend>(m). A rank-R op takes
// an unbatched (C, *spatial) or batched (N, C, *spatial) input and runs as the 5-D problem of PoolShape
// (pool_kernels.h), the unused leading spatial axes of size 1. A backend provides, on dense tensors of one
// layout (NCDHW-contiguous or channels-last, told by PoolShape::channels_last), shapes with N * C * volume > 0:
//   static void max_forward(const Tensor& x, Tensor& y, Tensor& indices, const PoolShape&);  // max, adaptive max
//   static void max_backward(const Tensor& g, const Tensor& indices, Tensor& dx, const PoolShape&);
//   static void avg_forward(const Tensor& x, Tensor& y, const PoolShape&);   // avg, adaptive avg, lp
//   static void avg_backward(const Tensor& g, Tensor& dx, const PoolShape&); // avg, adaptive avg
//   static void lp_backward(const Tensor& g, const Tensor& x, const Tensor& y, Tensor& dx, const PoolShape&);
#pragma once
#include <torch/library.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "common/memory_format.h"
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

inline void check_list(at::IntArrayRef v, int64_t R, const char* op, const char* arg, int64_t min_value) {
  TORCH_CHECK(int64_t(v.size()) == R, op, ": expected ", arg, " to have ", R, " element", R > 1 ? "s" : "",
              ", but got ", v.size());
  for (const int64_t e : v)
    TORCH_CHECK(e >= min_value, op, ": expected ", arg, " to be ", min_value == 0 ? "non-negative" : "positive",
                ", but got ", v);
}

inline const char* input_ranks(int R) {
  switch (R) {
    case 1: return "2-D (C, L) or 3-D (N, C, L)";
    case 2: return "3-D (C, H, W) or 4-D (N, C, H, W)";
    default: return "4-D (C, D, H, W) or 5-D (N, C, D, H, W)";
  }
}

// A batched input may have N = 0; channels and spatial sizes must be non-zero (PyTorch's rule).
template <int R>
void check_input(const at::Tensor& x, const char* op) {
  check_floating(x, op, "input");
  bool ok = x.dim() == R + 1 || x.dim() == R + 2;
  for (int64_t d = x.dim() - R - 1; ok && d < x.dim(); ++d) ok = x.size(d) > 0;
  TORCH_CHECK(ok, op, ": expected input to be ", input_ranks(R), " with non-zero channels and spatial sizes, but got ",
              x.sizes());
}

// `t` (shaped as an input or an output of a rank-R op) dense in the layout the op computes in: channels-last
// (C innermost in memory) or contiguous.
template <int R>
at::Tensor in_layout(const at::Tensor& t, bool channels_last) {
  if (!channels_last) return t.contiguous();
  if constexpr (R == 1) return t.transpose(1, 2).contiguous().transpose(1, 2);  // (N, L, C) in memory
  else return t.contiguous(R == 2 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d);
}

// Whether a rank-R op computes in channels-last: as PyTorch, when a batched input suggests that memory format
// (for 1-D: when its (N, C, 1, L) view does); unbatched inputs run contiguous.
template <int R>
bool wants_channels_last(const at::Tensor& x) {
  if (x.dim() != R + 2) return false;
  if constexpr (R == 1) return x.unsqueeze(-2).suggest_memory_format() == at::MemoryFormat::ChannelsLast;
  else if constexpr (R == 2) return x.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
  else return x.suggest_memory_format() == at::MemoryFormat::ChannelsLast3d;
}

// A new tensor of `sizes` (the input's leading sizes, then spatial ones) in the layout of the computation.
template <int R>
at::Tensor empty_in_layout(at::IntArrayRef sizes, const at::TensorOptions& opts, bool channels_last) {
  if (!channels_last) return at::empty(sizes, opts);
  if constexpr (R == 1) return at::empty({sizes[0], sizes[2], sizes[1]}, opts).transpose(1, 2);
  else return at::empty(sizes, opts.memory_format(R == 2 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d));
}

// An output of the op: the input's leading (N, C) sizes and the output's spatial sizes.
template <int R>
at::Tensor empty_output(const at::Tensor& xd, const PoolShape& s, at::ScalarType t) {
  c10::SmallVector<int64_t, 5> sizes(xd.sizes().begin(), xd.sizes().end() - R);
  for (int i = 3 - R; i < 3; ++i) sizes.push_back(s.ax[i].out);
  return empty_in_layout<R>(sizes, xd.options().dtype(t), s.channels_last);
}

// A gradient of the input (strides fixed by the layout alone, whatever the input's strides of size-1 dims).
template <int R>
at::Tensor empty_input(const at::Tensor& xd, const PoolShape& s) {
  return empty_in_layout<R>(xd.sizes(), xd.options(), s.channels_last);
}

// The op's input made dense in its layout, and the shape's batch, channels and input sizes. `keeps_layout`: whether
// PyTorch's op computes in (and returns) the layout the input suggests; where it is false, PyTorch's results are
// contiguous whatever the input's layout (avg_pool3d, adaptive_avg_pool3d, adaptive_max_pool3d and so lp_pool3d;
// the gradient of a global average pool, which PyTorch computes as a mean).
template <int R>
void describe_input(const at::Tensor& x, PoolShape& s, bool keeps_layout = true) {
  s.channels_last = keeps_layout && wants_channels_last<R>(x);
  s.N = x.dim() == R + 2 ? x.size(0) : 1;
  s.C = x.size(-R - 1);
  for (int i = 0; i < R; ++i) s.ax[3 - R + i].in = x.size(-R + i);
}
template <int R>
at::Tensor prepare_input(const at::Tensor& x, PoolShape& s, bool keeps_layout = true) {
  describe_input<R>(x, s, keeps_layout);
  return in_layout<R>(x, s.channels_last);
}

// kernel/stride/padding/dilation checks (PyTorch's rules) and the output sizes. PyTorch's avg_pool3d (and so
// lp_pool3d) also wants the input at least as large as the kernel, padding or not: `input_at_least_kernel`.
template <int R>
PoolShape window_shape(const char* op, const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef st,
                       at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode, bool input_at_least_kernel = false) {
  check_input<R>(x, op);
  check_list(k, R, op, "kernel_size", 1);
  check_list(st, R, op, "stride", 1);
  check_list(pad, R, op, "padding", 0);
  check_list(dil, R, op, "dilation", 1);
  for (int i = 0; i < R; ++i)
    TORCH_CHECK(pad[i] <= k[i] / 2, op, ": expected padding to be at most half of kernel_size, but got padding=", pad,
                " and kernel_size=", k);
  if (input_at_least_kernel) {
    bool ok = true;
    for (int i = 0; i < R; ++i) ok = ok && x.size(-R + i) >= k[i];
    TORCH_CHECK(ok, op, ": input size ", x.sizes().slice(x.dim() - R), " is smaller than kernel_size ", k);
  }
  PoolShape s;
  std::array<int64_t, R> in{}, out{};
  bool ok = true;
  for (int i = 0; i < R; ++i) {
    Axis& a = s.ax[3 - R + i];
    a.in = x.size(-R + i);
    a.k = k[i], a.s = st[i], a.p = pad[i], a.d = dil[i];
    a.out = output_size(a.in, a.k, a.p, a.s, a.d, ceil_mode);
    in[i] = a.in;
    out[i] = a.out;
    ok = ok && a.out > 0;
  }
  TORCH_CHECK(ok, op, ": output size is too small: input size ", at::IntArrayRef(in), " gives output size ",
              at::IntArrayRef(out));
  return s;
}

// grad_output (or indices, or the forward's output) checked against the output's shape, in the op's layout.
template <int R>
at::Tensor like_output(const char* op, const at::Tensor& t, const at::Tensor& x, const PoolShape& s, const char* arg) {
  c10::SmallVector<int64_t, 5> want(x.sizes().begin(), x.sizes().end() - R);
  for (int i = 3 - R; i < 3; ++i) want.push_back(s.ax[i].out);
  TORCH_CHECK(t.sizes() == at::IntArrayRef(want), op, ": expected ", arg, " to have shape ", at::IntArrayRef(want),
              ", but got ", t.sizes());
  check_same_device(x, t, op, "input", arg);
  return in_layout<R>(t, s.channels_last);
}

inline void check_grad(const char* op, const at::Tensor& g, const at::Tensor& x) {
  check_same_dtype(x, g, op, "input", "grad_output");
  check_same_device(x, g, op, "input", "grad_output");
}

inline void check_indices(const char* op, const at::Tensor& indices) {
  TORCH_CHECK(indices.scalar_type() == at::kLong, op, ": expected indices to be int64, but got ",
              indices.scalar_type());
}

// R copies of v (the fixed dilation or padding of the ops that take none).
template <int R>
std::array<int64_t, R> filled(int64_t v) {
  std::array<int64_t, R> a{};
  a.fill(v);
  return a;
}

// The op's name for its messages; callers keep it in a function-local static (built once, not on every call).
inline std::string op_name(const char* base, int R, const char* suffix = "") {
  return std::string("torch_dnn.") + base + std::to_string(R) + "d" + suffix;
}

// ---- max_pool ----

// max_pool's and adaptive_max_pool's forward and backward once the op has its shape (keeps_layout: prepare_input)
template <class B, int R>
std::tuple<at::Tensor, at::Tensor> run_max_forward(const at::Tensor& x, PoolShape& s, bool keeps_layout) {
  const at::Tensor xd = prepare_input<R>(x, s, keeps_layout);
  at::Tensor y = empty_output<R>(xd, s, x.scalar_type());
  at::Tensor idx = empty_output<R>(xd, s, at::kLong);
  if (y.numel() > 0) B::max_forward(xd, y, idx, s);
  return {y, idx};
}

template <class B, int R>
at::Tensor run_max_backward(const char* op, const at::Tensor& g, const at::Tensor& x, const at::Tensor& indices,
                            PoolShape& s, bool keeps_layout) {
  check_grad(op, g, x);
  check_indices(op, indices);
  const at::Tensor xd = prepare_input<R>(x, s, keeps_layout);
  const at::Tensor gd = like_output<R>(op, g, x, s, "grad_output");
  const at::Tensor id = like_output<R>(op, indices, x, s, "indices");
  at::Tensor dx = empty_input<R>(xd, s);
  if (dx.numel() > 0) B::max_backward(gd, id, dx, s);
  return dx;
}

template <class B, int R>
std::tuple<at::Tensor, at::Tensor> max_pool(const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef st,
                                            at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode) {
  static const std::string op = op_name("max_pool", R);
  PoolShape s = window_shape<R>(op.c_str(), x, k, st, pad, dil, ceil_mode);
  return run_max_forward<B, R>(x, s, true);
}

template <class B, int R>
at::Tensor max_pool_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& indices, at::IntArrayRef k,
                             at::IntArrayRef st, at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode) {
  static const std::string op = op_name("max_pool", R, "_backward");
  PoolShape s = window_shape<R>(op.c_str(), x, k, st, pad, dil, ceil_mode);
  return run_max_backward<B, R>(op.c_str(), g, x, indices, s, true);
}

// ---- avg_pool ----

template <int R>
PoolShape avg_shape(const char* op, const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef st, at::IntArrayRef pad,
                    bool ceil_mode, bool count_include_pad, std::optional<int64_t> div) {
  const std::array<int64_t, R> one = filled<R>(1);
  PoolShape s = window_shape<R>(op, x, k, st, pad, one, ceil_mode, R == 3);
  TORCH_CHECK(!div.has_value() || *div != 0, op, ": expected divisor_override to be non-zero");
  s.count_include_pad = count_include_pad;
  s.divisor_override = div.value_or(0);
  return s;
}

template <class B, int R>
at::Tensor avg_pool(const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef st, at::IntArrayRef pad, bool ceil_mode,
                    bool count_include_pad, std::optional<int64_t> div) {
  static const std::string op = op_name("avg_pool", R);
  PoolShape s = avg_shape<R>(op.c_str(), x, k, st, pad, ceil_mode, count_include_pad, div);
  const at::Tensor xd = prepare_input<R>(x, s, R != 3);
  at::Tensor y = empty_output<R>(xd, s, x.scalar_type());
  if (y.numel() > 0) B::avg_forward(xd, y, s);
  return y;
}

template <class B, int R>
at::Tensor avg_pool_backward(const at::Tensor& g, const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef st,
                             at::IntArrayRef pad, bool ceil_mode, bool count_include_pad, std::optional<int64_t> div) {
  static const std::string op = op_name("avg_pool", R, "_backward");
  PoolShape s = avg_shape<R>(op.c_str(), x, k, st, pad, ceil_mode, count_include_pad, div);
  check_grad(op.c_str(), g, x);
  describe_input<R>(x, s, R != 3);  // the backward reads x's sizes only: no dense copy of it
  const at::Tensor gd = like_output<R>(op.c_str(), g, x, s, "grad_output");
  at::Tensor dx = empty_input<R>(x, s);
  if (dx.numel() > 0) B::avg_backward(gd, dx, s);
  return dx;
}

// ---- adaptive pooling ----

template <int R>
PoolShape adaptive_shape(const char* op, const at::Tensor& x, at::IntArrayRef out) {
  check_input<R>(x, op);
  check_list(out, R, op, "output_size", 0);  // as PyTorch, 0 gives an empty output
  PoolShape s;
  for (int i = 0; i < R; ++i) s.ax[3 - R + i].out = out[i];
  s.adaptive = true;
  return s;
}

// The output size of an adaptive op's backward, from grad_output.
template <int R>
std::vector<int64_t> adaptive_grad_size(const char* op, const at::Tensor& g, const at::Tensor& x) {
  TORCH_CHECK(g.dim() == x.dim(), op, ": expected grad_output to have the rank of input (", x.dim(), "), but got ",
              g.dim());
  return std::vector<int64_t>(g.sizes().end() - R, g.sizes().end());
}

template <class B, int R>
at::Tensor adaptive_avg_pool(const at::Tensor& x, at::IntArrayRef out) {
  static const std::string op = op_name("adaptive_avg_pool", R);
  PoolShape s = adaptive_shape<R>(op.c_str(), x, out);
  const at::Tensor xd = prepare_input<R>(x, s, R != 3);
  at::Tensor y = empty_output<R>(xd, s, x.scalar_type());
  if (y.numel() > 0) B::avg_forward(xd, y, s);
  return y;
}

template <class B, int R>
at::Tensor adaptive_avg_pool_backward(const at::Tensor& g, const at::Tensor& x) {
  static const std::string op = op_name("adaptive_avg_pool", R, "_backward");
  PoolShape s = adaptive_shape<R>(op.c_str(), x, adaptive_grad_size<R>(op.c_str(), g, x));
  check_grad(op.c_str(), g, x);
  bool global = true;
  for (int i = 3 - R; i < 3; ++i) global = global && s.ax[i].out == 1;
  describe_input<R>(x, s, R != 3 && !global);  // the backward reads x's sizes only: no dense copy of it
  const at::Tensor gd = like_output<R>(op.c_str(), g, x, s, "grad_output");
  at::Tensor dx = empty_input<R>(x, s);
  if (dx.numel() > 0) B::avg_backward(gd, dx, s);
  // PyTorch's global average is a mean, whose gradient is an elementwise op over grad_output expanded to the input:
  // contiguous where the input suggests channels-last (the mean's result is restrided, and grad_output with it),
  // else laid out as grad_output's batch and channels are
  if (global && !wants_channels_last<R>(x)) dx = with_strides(dx, iter_strides({g.expand(x.sizes())}));
  return dx;
}

template <class B, int R>
std::tuple<at::Tensor, at::Tensor> adaptive_max_pool(const at::Tensor& x, at::IntArrayRef out) {
  static const std::string op = op_name("adaptive_max_pool", R);
  PoolShape s = adaptive_shape<R>(op.c_str(), x, out);
  return run_max_forward<B, R>(x, s, R != 3);
}

template <class B, int R>
at::Tensor adaptive_max_pool_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& indices) {
  static const std::string op = op_name("adaptive_max_pool", R, "_backward");
  PoolShape s = adaptive_shape<R>(op.c_str(), x, adaptive_grad_size<R>(op.c_str(), g, x));
  return run_max_backward<B, R>(op.c_str(), g, x, indices, s, R != 3);
}

// ---- lp_pool: PyTorch's avg_pool(x^p) (padding 0, dilation 1) -> (avg * kernel numel)^(1/p) ----

template <int R>
PoolShape lp_shape(const char* op, const at::Tensor& x, double norm_type, at::IntArrayRef k, at::IntArrayRef st,
                   bool ceil_mode) {
  TORCH_CHECK(std::isfinite(norm_type) && norm_type != 0, op, ": expected norm_type to be finite and non-zero, but got ",
              norm_type);
  const std::array<int64_t, R> zero = filled<R>(0), one = filled<R>(1);
  PoolShape s = window_shape<R>(op, x, k, st, zero, one, ceil_mode, R == 3);
  s.norm_type = norm_type;
  return s;
}

template <class B, int R>
at::Tensor lp_pool(const at::Tensor& x, double norm_type, at::IntArrayRef k, at::IntArrayRef st, bool ceil_mode) {
  static const std::string op = op_name("lp_pool", R);
  PoolShape s = lp_shape<R>(op.c_str(), x, norm_type, k, st, ceil_mode);
  const at::Tensor xd = prepare_input<R>(x, s, R != 3);
  at::Tensor y = empty_output<R>(xd, s, x.scalar_type());
  if (y.numel() > 0) B::avg_forward(xd, y, s);
  return y;
}

template <class B, int R>
at::Tensor lp_pool_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& y, double norm_type,
                            at::IntArrayRef k, at::IntArrayRef st, bool ceil_mode) {
  static const std::string op = op_name("lp_pool", R, "_backward");
  PoolShape s = lp_shape<R>(op.c_str(), x, norm_type, k, st, ceil_mode);
  check_grad(op.c_str(), g, x);
  check_same_dtype(x, y, op.c_str(), "input", "output");
  const at::Tensor xd = prepare_input<R>(x, s, R != 3);
  const at::Tensor gd = like_output<R>(op.c_str(), g, x, s, "grad_output");
  const at::Tensor yd = like_output<R>(op.c_str(), y, x, s, "output");
  at::Tensor dx = empty_input<R>(xd, s);
  if (dx.numel() > 0) B::lp_backward(gd, xd, yd, dx, s);
  return dx;
}

// ---- schemas and registration: the same templates for every rank ----

// Every op exists for ranks 1, 2 and 3 (max_pool1d, max_pool2d, max_pool3d, ...), its size arguments lists of
// that length (normalised in Python). In the schemas below "{r}" and "{n}" both stand for the rank.
inline void define_pool_schemas(torch::Library& m) {
  const char* schemas[] = {
      // (output, indices): indices are flat (d * H + h) * W + w positions within each (n, c) volume, as PyTorch's
      "max_pool{r}d(Tensor self, int[{n}] kernel_size, int[{n}] stride, int[{n}] padding, int[{n}] dilation, bool ceil_mode) -> (Tensor, Tensor)",
      "max_pool{r}d_backward(Tensor grad_output, Tensor self, Tensor indices, int[{n}] kernel_size, int[{n}] stride, int[{n}] padding, int[{n}] dilation, bool ceil_mode) -> Tensor",
      "avg_pool{r}d(Tensor self, int[{n}] kernel_size, int[{n}] stride, int[{n}] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
      "avg_pool{r}d_backward(Tensor grad_output, Tensor self, int[{n}] kernel_size, int[{n}] stride, int[{n}] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
      "adaptive_avg_pool{r}d(Tensor self, int[{n}] output_size) -> Tensor",
      "adaptive_avg_pool{r}d_backward(Tensor grad_output, Tensor self) -> Tensor",
      "adaptive_max_pool{r}d(Tensor self, int[{n}] output_size) -> (Tensor, Tensor)",
      "adaptive_max_pool{r}d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor",
      // PyTorch's lp_pool: (avg_pool(x^p) * kernel numel)^(1/p), padding 0; norm_type finite and non-zero
      "lp_pool{r}d(Tensor self, float norm_type, int[{n}] kernel_size, int[{n}] stride, bool ceil_mode) -> Tensor",
      "lp_pool{r}d_backward(Tensor grad_output, Tensor self, Tensor output, float norm_type, int[{n}] kernel_size, int[{n}] stride, bool ceil_mode) -> Tensor",
  };
  for (int rank = 1; rank <= 3; ++rank) {
    const std::string r = std::to_string(rank);
    for (const char* schema : schemas) {
      std::string s = schema;
      for (size_t at = s.find('{'); at != std::string::npos; at = s.find('{', at)) s.replace(at, 3, r);
      m.def(s.c_str());
    }
  }
}

template <class B, int R>
void register_rank(torch::Library& m) {
  const std::string r = std::to_string(R) + "d";
  m.impl(("max_pool" + r).c_str(), &max_pool<B, R>);
  m.impl(("max_pool" + r + "_backward").c_str(), &max_pool_backward<B, R>);
  m.impl(("avg_pool" + r).c_str(), &avg_pool<B, R>);
  m.impl(("avg_pool" + r + "_backward").c_str(), &avg_pool_backward<B, R>);
  m.impl(("adaptive_avg_pool" + r).c_str(), &adaptive_avg_pool<B, R>);
  m.impl(("adaptive_avg_pool" + r + "_backward").c_str(), &adaptive_avg_pool_backward<B, R>);
  m.impl(("adaptive_max_pool" + r).c_str(), &adaptive_max_pool<B, R>);
  m.impl(("adaptive_max_pool" + r + "_backward").c_str(), &adaptive_max_pool_backward<B, R>);
  m.impl(("lp_pool" + r).c_str(), &lp_pool<B, R>);
  m.impl(("lp_pool" + r + "_backward").c_str(), &lp_pool_backward<B, R>);
}

template <class B>
void register_pool_impls(torch::Library& m) {
  register_rank<B, 1>(m);
  register_rank<B, 2>(m);
  register_rank<B, 3>(m);
}

}  // namespace pool
}  // namespace torch_dnn
