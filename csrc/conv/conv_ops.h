// The convolution family's ops, written once over a backend (CPU or CUDA). conv.cpp declares the schemas; each
// backend file calls register_conv_impls<Backend>(m).
//
// Every op is one of the kernels' three passes over the single problem of conv_kernels.h (x, w, y: the
// cross-correlation of torch.nn.functional.conv3d), 1-D and 2-D tensors viewed as 3-D ones with unit leading spatial
// dims. A transposed convolution is the adjoint of the convolution whose input has the transposed op's output shape:
//
//   op (transposed = false)     pass    x           w        y                (x, y: the kernels' operands)
//   convolution                 fprop   input       weight   result (+ bias in the epilogue)
//   conv_backward_input         dgrad   result      weight   grad_output
//   conv_backward_weight        wgrad   input       result   grad_output
//   op (transposed = true)
//   convolution                 dgrad   result      weight   input            (bias added afterwards)
//   conv_backward_input         fprop   grad_output weight   result
//   conv_backward_weight        wgrad   grad_output result   input
//
// A backend provides, on operands of any strides (the ops pass them dense in the result's layout), problems with
// N * C * K and the written operand's size non-zero:
//   static void run(Pass, ConvArgs&, const Tensor& like, const Tensor& weight);
//     like: the device and options of the call; weight: the caller's weight tensor where the pass reads it (fprop,
//     dgrad), which a backend may key copies of the weight on (conv_weight_cache.h), else undefined
//   static void bias_grad(const ConvGeometry&, const Operand5& dy, const Tensor& db);  // db dense [K], dy's dtype
//
// Layouts (PyTorch's): the result of convolution is channels-last (channels innermost: channels_last,
// channels_last_3d, (N, L, C) for 1-D) where PyTorch's own convolution would return it so (conv_channels_last: its
// backend choice asked, CPU and CUDA alike), else contiguous. The backward ops' results are channels-last exactly
// when grad_output's strides are exactly channels-last's (the autograd kernels pass grad_output so laid out in
// the forward's layout, as PyTorch's backward does, so both gradients come back in the forward's layout).
#pragma once
#include <ATen/native/ConvUtils.h>
#include <c10/util/SmallVector.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "common/tensor_utils.h"
#include "conv/conv_kernels.h"

namespace torch_dnn {
namespace conv {

using at::IntArrayRef;
using at::Tensor;

enum class Pass { Fprop, Dgrad, Wgrad };

// Per-dim values and shapes of a call, held inline (no allocation per call: host time of small convolutions). Four
// per-dim values leave room for conv_channels_last's extra leading dim of a 1-D problem.
using Dims = c10::SmallVector<int64_t, 4>;
using Shape = c10::SmallVector<int64_t, 5>;

// The geometry arguments of one call, checked and expanded to the spatial rank (a list of one value stands for
// every dim, as PyTorch's expand_param_if_needed).
struct Params {
  int64_t rank = 2;  // spatial dims: 1, 2 or 3
  Dims stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
};

inline Dims expand(const char* op, IntArrayRef v, int64_t rank, const char* arg) {
  TORCH_CHECK(int64_t(v.size()) == rank || v.size() == 1, op, ": expected ", arg, " to have 1 or ", rank,
              " elements, but got ", v);
  return v.size() == 1 ? Dims(size_t(rank), v[0]) : Dims(v.begin(), v.end());
}

inline Params check_params(const char* op, int64_t rank, IntArrayRef stride, IntArrayRef padding,
                           IntArrayRef dilation, bool transposed, IntArrayRef output_padding, int64_t groups) {
  Params p;
  p.rank = rank;
  p.transposed = transposed;
  p.groups = groups;
  p.stride = expand(op, stride, rank, "stride");
  p.padding = expand(op, padding, rank, "padding");
  p.dilation = expand(op, dilation, rank, "dilation");
  p.output_padding = transposed ? expand(op, output_padding, rank, "output_padding") : Dims(size_t(rank), 0);
  for (int64_t i = 0; i < rank; ++i) {
    TORCH_CHECK(p.stride[i] > 0, op, ": expected stride to be positive, but got ", stride);
    TORCH_CHECK(p.padding[i] >= 0, op, ": expected padding to be non-negative, but got ", padding);
    TORCH_CHECK(p.dilation[i] > 0, op, ": expected dilation to be positive, but got ", dilation);
    TORCH_CHECK(p.output_padding[i] >= 0, op, ": expected output_padding to be non-negative, but got ",
                output_padding);
    TORCH_CHECK(p.output_padding[i] < p.stride[i] || p.output_padding[i] < p.dilation[i], op,
                ": expected output_padding to be smaller than either stride or dilation, but got output_padding=",
                output_padding, ", stride=", stride, " and dilation=", dilation);
  }
  TORCH_CHECK(groups > 0, op, ": expected groups to be positive, but got ", groups);
  return p;
}

// The spatial size of the op's result for an input of spatial size `in` (a transposed op's is the input size of
// the convolution it is the adjoint of).
inline int64_t result_size(const Params& p, int64_t i, int64_t in, int64_t k) {
  const int64_t span = p.dilation[i] * (k - 1);
  return p.transposed ? (in - 1) * p.stride[i] - 2 * p.padding[i] + span + p.output_padding[i] + 1
                      : (in + 2 * p.padding[i] - span - 1) / p.stride[i] + 1;
}

// The checks of the op's input and weight (ranks, channels, groups, sizes) and the result's shape.
inline std::vector<int64_t> check_shapes(const char* op, IntArrayRef in, IntArrayRef ws, const Params& p,
                                         const char* input_arg) {
  const int64_t G = p.groups;
  TORCH_CHECK(ws[0] > 0, op, ": expected weight to have at least one ", p.transposed ? "input" : "output",
              " channel (dimension 0), but got weight of size ", ws);
  TORCH_CHECK(ws[0] % G == 0, op, ": expected weight's dimension 0 to be divisible by groups=", G,
              ", but got weight of size ", ws);
  const int64_t channels = p.transposed ? ws[0] : ws[1] * G;
  TORCH_CHECK(in[1] == channels, op, ": expected ", input_arg, " to have ", channels, " channels (weight of size ",
              ws, ", groups=", G, ", transposed=", p.transposed ? "true" : "false", "), but got ", input_arg, " of size ", in);
  // PyTorch's rule: an input without channels gives a result without channels (not the bias alone)
  std::vector<int64_t> out;
  out.reserve(size_t(2 + p.rank));
  out.push_back(in[0]);
  out.push_back(p.transposed ? ws[1] * G : (ws[1] == 0 ? 0 : ws[0]));
  for (int64_t i = 0; i < p.rank; ++i) {
    const int64_t k = ws[2 + i], x = in[2 + i];
    if (!p.transposed) {
      TORCH_CHECK(x + 2 * p.padding[i] >= p.dilation[i] * (k - 1) + 1, op, ": expected the padded ", input_arg,
                  " (size ", in.slice(2), " plus padding ", IntArrayRef(p.padding),
                  ") to be at least as large as the dilated kernel (weight of size ", ws, ", dilation ",
                  IntArrayRef(p.dilation), ")");
    }
    out.push_back(result_size(p, i, x, k));
    TORCH_CHECK(out.back() > 0, op, ": expected a positive output size, but ", input_arg, " of size ", in,
                " and weight of size ", ws, " give ", IntArrayRef(out));
  }
  return out;
}

inline void check_tensor(const char* op, const Tensor& t, const char* arg, int64_t rank) {
  check_floating(t, op, arg);
  TORCH_CHECK(t.dim() == rank, op, ": expected ", arg, " to have ", rank, " dimensions, but got ", arg, " of size ",
              t.sizes());
}

// The op's first tensor, which fixes the rank (3, 4 or 5: (N, C, *spatial), batched).
inline void check_first(const char* op, const Tensor& t, const char* arg) {
  check_floating(t, op, arg);
  TORCH_CHECK(t.dim() >= 3 && t.dim() <= 5, op, ": expected ", arg,
              " to be 3-D, 4-D or 5-D (N, C, *spatial), but got ", arg, " of size ", t.sizes());
}

inline void check_like(const char* op, const Tensor& first, const Tensor& t, const char* arg0, const char* arg) {
  check_same_dtype(first, t, op, arg0, arg);
  check_same_device(first, t, op, arg0, arg);
}

// The two tensors every op but conv_backward_bias starts with: the first (input or grad_output), then the second
// (weight or input) of its rank, dtype and device.
inline void check_operands(const char* op, const Tensor& first, const char* arg0, const Tensor& second,
                           const char* arg) {
  check_first(op, first, arg0);
  check_tensor(op, second, arg, first.dim());
  check_like(op, first, second, arg0, arg);
}

// Whether the forward ops' optional bias is given; a given one checked for dtype and device against the input (its
// size once the output's channels are known).
inline bool check_bias(const char* op, const Tensor& input, const std::optional<Tensor>& bias_opt) {
  if (!given(bias_opt)) return false;
  check_floating(*bias_opt, op, "bias");
  check_like(op, input, *bias_opt, "input", "bias");
  return true;
}

// A backward op's size argument (input_size, weight_size): one element per dim of grad_output, none negative.
inline void check_size_arg(const char* op, const char* arg, IntArrayRef size, const Tensor& grad_output) {
  TORCH_CHECK(int64_t(size.size()) == grad_output.dim(), op, ": expected ", arg, " to have ", grad_output.dim(),
              " elements, but got ", size);
  for (const int64_t s : size) TORCH_CHECK(s >= 0, op, ": expected ", arg, " to be non-negative, but got ", size);
}

// grad_output against the shape of the forward's output.
inline void check_grad_output_shape(const char* op, const Tensor& grad_output, const std::vector<int64_t>& out) {
  TORCH_CHECK(grad_output.sizes() == IntArrayRef(out), op, ": expected grad_output to have the shape of the output ",
              IntArrayRef(out), ", but got ", grad_output.sizes());
}

// ---- layouts ----

inline at::MemoryFormat channels_last_format(int64_t rank) {
  return rank == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
}

// The exact strides of a dense tensor of `sizes` with the channels (dim 1) innermost, then the spatial dims in
// order, then the batch.
inline Shape channels_last_strides(IntArrayRef sizes) {
  Shape st(sizes.size());
  int64_t next = 1;
  st[1] = next;
  next *= std::max<int64_t>(sizes[1], 1);
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 2; --d) {
    st[d] = next;
    next *= std::max<int64_t>(sizes[d], 1);
  }
  st[0] = next;
  return st;
}

inline Shape row_major_strides(IntArrayRef sizes) {
  const auto c = c10::contiguous_strides(sizes);
  return Shape(c.begin(), c.end());
}

inline Tensor empty_in(IntArrayRef sizes, const at::TensorOptions& opts, bool channels_last) {
  return at::empty_strided(sizes, channels_last ? channels_last_strides(sizes) : row_major_strides(sizes), opts);
}

// t dense in the layout (a no-op when every element already sits where the layout puts it).
inline Tensor in_layout(const Tensor& t, bool channels_last) {
  if (!channels_last) return t.contiguous();
  if (t.dim() == 3) return t.transpose(1, 2).contiguous().transpose(1, 2);
  return t.contiguous(channels_last_format(t.dim()));
}

// t with exactly the layout's strides (a copy unless it has them): how the autograd kernels hand grad_output to the
// backward ops, which read the layout of their results from it.
inline Tensor exactly_in_layout(const Tensor& t, bool channels_last) {
  const auto want = channels_last ? channels_last_strides(t.sizes()) : row_major_strides(t.sizes());
  if (t.strides() == IntArrayRef(want)) return t;
  return at::empty_strided(t.sizes(), want, t.options()).copy_(t);
}

// The backward ops' rule: channels-last results for a grad_output whose strides are exactly channels-last's. The
// autograd kernels also read back with it the layout an op chose for a result it made (empty_in), instead of asking
// PyTorch's backend choice again (host time): where both layouts give the same strides, either answer names the
// same layout.
inline bool strides_channels_last(const Tensor& t) {
  return t.strides() == IntArrayRef(channels_last_strides(t.sizes())) &&
         t.strides() != IntArrayRef(row_major_strides(t.sizes()));
}

// Whether PyTorch's convolution of this input and weight computes in and returns a channels-last layout: its own
// backend choice and that backend's layout (at::native::select_conv_backend, _determine_backend_memory_format),
// with 1-D problems asked as PyTorch asks them (the input made contiguous and both viewed as 2-D).
// torch_dnn/ops/conv.py's _channels_last mirrors this for the fake kernels.
inline bool conv_channels_last(const Tensor& input, const Tensor& weight, const Params& p) {
  Tensor x = input, w = weight;
  Dims stride = p.stride, padding = p.padding, dilation = p.dilation, output_padding = p.output_padding;
  if (p.rank == 1) {
    // a contiguous stand-in for the input (its layout is all the query reads): a view of the input's own memory
    // where it is dense, else a fresh tensor
    x = input.is_contiguous()                    ? input
        : input.is_non_overlapping_and_dense() ? input.as_strided(input.sizes(), row_major_strides(input.sizes()),
                                                                    input.storage_offset())
                                               : at::empty(input.sizes(), input.options());
    x = x.unsqueeze(2);
    w = weight.unsqueeze(2);
    stride.insert(stride.begin(), 1);
    padding.insert(padding.begin(), 0);
    dilation.insert(dilation.begin(), 1);
    output_padding.insert(output_padding.begin(), 0);
  }
  const auto backend = at::native::select_conv_backend(
      x, w, std::nullopt, c10::fromIntArrayRefSlow(stride), c10::fromIntArrayRefSlow(padding),
      c10::fromIntArrayRefSlow(dilation), p.transposed, c10::fromIntArrayRefSlow(output_padding), p.groups,
      std::nullopt);
  const auto f = at::native::_determine_backend_memory_format(x, w, backend);
  return f == at::MemoryFormat::ChannelsLast || f == at::MemoryFormat::ChannelsLast3d;
}

// ---- the kernels' operands ----

// A rank-3/4/5 tensor's element strides as a 5-D operand [N][C][D][H][W] (missing leading spatial dims of size 1).
inline Operand5 operand(const Tensor& t) {
  Operand5 o;
  o.ptr = const_cast<void*>(t.const_data_ptr());
  const int64_t r = t.dim() - 2;
  o.stride[0] = t.stride(0);
  o.stride[1] = t.stride(1);
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t d = i - (3 - r);
    o.stride[2 + i] = d >= 0 ? t.stride(2 + d) : 0;
  }
  return o;
}

// The kernels' geometry from the shapes of their x, w and y.
inline ConvGeometry geometry(IntArrayRef xs, IntArrayRef ws, IntArrayRef ys, const Params& p) {
  ConvGeometry g;
  g.N = xs[0];
  g.C = xs[1];
  g.K = ys[1];
  g.G = p.groups;
  for (int64_t i = 0; i < p.rank; ++i) {
    const int64_t a = 3 - p.rank + i;
    g.in[a] = xs[2 + i];
    g.out[a] = ys[2 + i];
    g.ker[a] = ws[2 + i];
    g.stride[a] = p.stride[i];
    g.pad[a] = p.padding[i];
    g.dil[a] = p.dilation[i];
  }
  return g;
}

inline ConvArgs make_args(const Tensor& x, const Tensor& w, const Tensor& y, const Params& p) {
  ConvArgs a;
  a.dtype = to_dtype(w.scalar_type());
  a.g = geometry(x.sizes(), w.sizes(), y.sizes(), p);
  a.x = operand(x);
  a.w = operand(w);
  a.y = operand(y);
  return a;
}

// bias viewed to broadcast along dim 1 of a rank-`rank` tensor
inline Tensor per_channel(const Tensor& bias, int64_t rank) {
  std::vector<int64_t> shape(rank, 1);
  shape[1] = bias.size(0);
  return bias.view(shape);
}

// ---- the ops ----

template <class B>
Tensor convolution(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias_opt,
                   IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool transposed,
                   IntArrayRef output_padding, int64_t groups) {
  const char* op = "torch_dnn.convolution";
  check_operands(op, input, "input", weight, "weight");
  const bool has_bias = check_bias(op, input, bias_opt);
  const Params p = check_params(op, input.dim() - 2, stride, padding, dilation, transposed, output_padding, groups);
  const std::vector<int64_t> out_sizes = check_shapes(op, input.sizes(), weight.sizes(), p, "input");
  if (has_bias) {
    const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
    TORCH_CHECK(bias_opt->dim() == 1 && bias_opt->size(0) == channels, op, ": expected bias to be 1-D with ",
                channels, " elements, but got bias of size ", bias_opt->sizes());
  }
  const bool cl = conv_channels_last(input, weight, p);
  Tensor out = empty_in(out_sizes, input.options(), cl);
  if (out.numel() == 0) return out;
  if (input.numel() == 0) {  // a transposed op's empty input: the bias alone
    if (has_bias) out.copy_(per_channel(*bias_opt, out.dim()).expand(out_sizes));
    else out.zero_();
    return out;
  }
  const Tensor xd = in_layout(input, cl), wd = in_layout(weight, cl);
  if (!transposed) {
    ConvArgs a = make_args(xd, wd, out, p);
    const Tensor bias = has_bias ? bias_opt->contiguous() : Tensor();
    a.bias = has_bias ? bias.const_data_ptr() : nullptr;
    B::run(Pass::Fprop, a, input, weight);
  } else {
    ConvArgs a = make_args(out, wd, xd, p);
    B::run(Pass::Dgrad, a, input, weight);
    if (has_bias) out.add_(per_channel(*bias_opt, out.dim()));
  }
  return out;
}

// A backward op's start: what both check (grad_output and their other operand `other`, argument `other_arg`; the
// geometry; their size argument `size_arg`, input_size or weight_size; grad_output's shape against the forward's
// output for input sizes `in` and weight sizes `ws`, one of them the size argument), then the geometry, the layout
// (grad_output's) and the result, uninitialized, of the size argument's sizes in that layout.
struct BackwardStart {
  Params p;
  bool channels_last;
  Tensor result;
};

inline BackwardStart start_backward(const char* op, const Tensor& grad_output, const Tensor& other,
                                    const char* other_arg, const char* size_arg, IntArrayRef size, IntArrayRef in,
                                    IntArrayRef ws, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                                    bool transposed, IntArrayRef output_padding, int64_t groups) {
  check_operands(op, grad_output, "grad_output", other, other_arg);
  const Params p =
      check_params(op, grad_output.dim() - 2, stride, padding, dilation, transposed, output_padding, groups);
  check_size_arg(op, size_arg, size, grad_output);
  check_grad_output_shape(op, grad_output, check_shapes(op, in, ws, p, "input"));
  const bool cl = strides_channels_last(grad_output);
  return {p, cl, empty_in(size, grad_output.options(), cl)};
}

template <class B>
Tensor conv_backward_input(const Tensor& grad_output, const Tensor& weight, IntArrayRef input_size,
                           IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool transposed,
                           IntArrayRef output_padding, int64_t groups) {
  const auto [p, cl, dx] =
      start_backward("torch_dnn.conv_backward_input", grad_output, weight, "weight", "input_size", input_size,
                     input_size, weight.sizes(), stride, padding, dilation, transposed, output_padding, groups);
  if (dx.numel() == 0) return dx;
  if (grad_output.numel() == 0) return dx.zero_();  // no output channels (a transposed op's empty result)
  const Tensor gd = in_layout(grad_output, cl), wd = in_layout(weight, cl);
  if (!transposed) {
    ConvArgs a = make_args(dx, wd, gd, p);
    B::run(Pass::Dgrad, a, grad_output, weight);
  } else {
    ConvArgs a = make_args(gd, wd, dx, p);
    B::run(Pass::Fprop, a, grad_output, weight);
  }
  return dx;
}

template <class B>
Tensor conv_backward_weight(const Tensor& grad_output, const Tensor& input, IntArrayRef weight_size,
                            IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool transposed,
                            IntArrayRef output_padding, int64_t groups) {
  const auto [p, cl, dw] =
      start_backward("torch_dnn.conv_backward_weight", grad_output, input, "input", "weight_size", weight_size,
                     input.sizes(), weight_size, stride, padding, dilation, transposed, output_padding, groups);
  if (dw.numel() == 0) return dw;
  if (grad_output.numel() == 0 || input.numel() == 0) return dw.zero_();  // empty batch
  const Tensor gd = in_layout(grad_output, cl), xd = in_layout(input, cl);
  ConvArgs a = transposed ? make_args(gd, dw, xd, p) : make_args(xd, dw, gd, p);
  B::run(Pass::Wgrad, a, grad_output, Tensor());
  return dw;
}

template <class B>
Tensor conv_backward_bias(const Tensor& grad_output) {
  const char* op = "torch_dnn.conv_backward_bias";
  check_first(op, grad_output, "grad_output");
  Tensor db = at::empty({grad_output.size(1)}, grad_output.options());
  if (db.numel() == 0) return db;
  if (grad_output.numel() == 0) return db.zero_();
  ConvGeometry g;  // dy's shape as the kernels' y
  g.N = grad_output.size(0);
  g.C = g.K = grad_output.size(1);
  const int64_t rank = grad_output.dim() - 2;
  for (int64_t i = 0; i < rank; ++i) g.in[3 - rank + i] = g.out[3 - rank + i] = grad_output.size(2 + i);
  B::bias_grad(g, operand(grad_output), db);
  return db;
}

template <class B>
void register_conv_impls(torch::Library& m) {
  m.impl("convolution", &convolution<B>);
  m.impl("conv_backward_input", &conv_backward_input<B>);
  m.impl("conv_backward_weight", &conv_backward_weight<B>);
  m.impl("conv_backward_bias", &conv_backward_bias<B>);
}

}  // namespace conv
}  // namespace torch_dnn
