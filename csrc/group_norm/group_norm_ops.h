// The group_norm family's ops, written once over a backend (CPU or CUDA). group_norm.cpp declares the
// schemas; each backend file calls register_group_norm_impls<Backend>(m). A backend provides, on dense
// inputs of one layout (GnShape::channels_last) with N * C * S > 0, weight and bias in the input's dtype:
//   static void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, Tensor& mean,
//                       Tensor& rstd, const GnShape&, double eps, bool stats_given);
//   static void backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
//                        const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db, const GnShape&, bool stats_given);
// Undefined tensors stand for absent arguments (w, b) and unwanted results (dx, dw, db).
#pragma once
#include <torch/library.h>

#include <array>
#include <tuple>

#include "common/tensor_utils.h"
#include "group_norm/group_norm_kernels.h"

namespace torch_dnn {
namespace group_norm {

using at::Tensor;
using OptTensor = c10::optional<at::Tensor>;

inline void check_input(const char* op, const Tensor& x, int64_t G) {
  check_floating(x, op, "input");
  TORCH_CHECK(x.dim() >= 2, op, ": expected input of shape (N, C, *) with at least 2 dimensions, but got ",
              x.sizes());
  TORCH_CHECK(G > 0, op, ": expected num_groups to be positive, but got ", G);
  TORCH_CHECK(x.size(1) % G == 0, op, ": expected the number of channels (", x.size(1),
              ") to be divisible by num_groups (", G, "), but got input of shape ", x.sizes());
}

// x made contiguous: by the backend's own copy where it has one (`static Tensor contiguous(const Tensor&)`: the
// CUDA backend's tiled transpose of a dense channels-last tensor, faster than ATen's permuting copy; see
// docs/group_norm.md), else by ATen's.
template <class B>
Tensor contiguous_input(const Tensor& x) {
  if (x.is_contiguous()) return x;
  if constexpr (requires { B::contiguous(x); }) {
    return B::contiguous(x);
  } else {
    return x.contiguous();
  }
}

// The input in the layout the kernels run on, which is the layout of the results: PyTorch's native_group_norm
// (and its backward) runs in the layout the input suggests on the CPU, contiguous on CUDA. So on the CPU: itself
// when NCHW-contiguous or channels_last(_3d)-contiguous, else a copy in its suggested layout; on CUDA: contiguous.
// torch_dnn/ops/group_norm.py's fake kernels mirror this.
template <class B>
Tensor dense_input(const Tensor& x) {
  if (x.is_contiguous() || !x.is_cpu()) return contiguous_input<B>(x);
  if (x.dim() == 4 && x.is_contiguous(at::MemoryFormat::ChannelsLast)) return x;
  if (x.dim() == 5 && x.is_contiguous(at::MemoryFormat::ChannelsLast3d)) return x;
  return x.contiguous(x.suggest_memory_format());
}

inline GnShape shape_of(const Tensor& xd, int64_t G) {
  GnShape s;
  s.N = xd.size(0);
  s.C = xd.size(1);
  s.S = spatial_size(xd);
  s.G = G;
  s.channels_last = !xd.is_contiguous();
  return s;
}

// weight or bias: C elements on the input's device; computed in the input's dtype.
inline Tensor check_param(const char* op, const char* arg, const Tensor& x, const OptTensor& p) {
  if (!given(p)) return Tensor();
  check_floating(*p, op, arg);
  check_same_device(x, *p, op, "input", arg);
  TORCH_CHECK(p->dim() == 1 && p->size(0) == x.size(1), op, ": expected ", arg, " of shape [", x.size(1),
              "] (the input's channels), but got ", p->sizes());
  return p->to(x.scalar_type()).contiguous();
}

// Statistics [N, G] in the accumulation type, contiguous (a copy only where they are not).
inline Tensor check_stats(const char* op, const char* arg, const Tensor& t, const Tensor& x, int64_t G) {
  const int64_t want[2] = {x.size(0), G};
  TORCH_CHECK(t.sizes() == at::IntArrayRef(want), op, ": expected ", arg, " of shape ", at::IntArrayRef(want),
              " (N, num_groups), but got ", t.sizes());
  check_same_device(x, t, op, "input", arg);
  return t.to(stat_type(x.scalar_type())).contiguous();
}

// group_norm (stats computed: mean/rstd out) and group_norm_with_stats (stats given).
template <class B>
std::tuple<Tensor, Tensor, Tensor> forward(const char* op, const Tensor& x, int64_t G, const OptTensor& weight,
                                           const OptTensor& bias, double eps, const Tensor* mean_in,
                                           const Tensor* rstd_in) {
  check_input(op, x, G);
  const Tensor w = check_param(op, "weight", x, weight);
  const Tensor b = check_param(op, "bias", x, bias);
  const bool stats_given = mean_in != nullptr;
  // A backend that normalises a channels-last input straight into the contiguous result (B::forward_to_contiguous:
  // CUDA's cluster plan) spares the input's copy; it returns false, having done nothing, where it cannot.
  if constexpr (requires(Tensor t) { B::forward_to_contiguous(x, G, w, b, eps, t, t, t); }) {
    Tensor y, mean, rstd;
    if (!stats_given && B::forward_to_contiguous(x, G, w, b, eps, y, mean, rstd)) return {y, mean, rstd};
  }
  const Tensor xd = dense_input<B>(x);
  const GnShape s = shape_of(xd, G);
  Tensor y = at::empty_like(xd);
  Tensor mean, rstd;
  if (stats_given) {
    mean = check_stats(op, "mean", *mean_in, x, G);
    rstd = check_stats(op, "rstd", *rstd_in, x, G);
  } else {
    mean = at::empty({s.N, G}, x.options().dtype(stat_type(x.scalar_type())));
    rstd = at::empty({s.N, G}, x.options().dtype(stat_type(x.scalar_type())));
  }
  if (s.N > 0 && s.C > 0 && s.S > 0) {
    B::forward(xd, w, b, y, mean, rstd, s, eps, stats_given);
  } else if (!stats_given && mean.numel() > 0) {  // groups of no elements: PyTorch's mean of nothing
    mean.fill_(NAN);
    rstd.fill_(NAN);
  }
  return {y, mean, rstd};
}

template <class B>
std::tuple<Tensor, Tensor, Tensor> backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                            const OptTensor& weight, int64_t G, bool stats_given,
                                            std::array<bool, 3> mask) {
  const char* op = "torch_dnn.group_norm_backward";
  check_input(op, x, G);
  check_matching(x, dy, op, "input", "grad_out");
  const Tensor w = check_param(op, "weight", x, weight);
  const Tensor md = check_stats(op, "mean", mean, x, G);
  const Tensor rd = check_stats(op, "rstd", rstd, x, G);
  const Tensor xd = dense_input<B>(x);
  // grad_out in x's layout (contiguous: the backend's copy, as x's)
  const Tensor dyd = xd.is_contiguous() ? contiguous_input<B>(dy) : same_layout_as(dy, xd);
  const GnShape s = shape_of(xd, G);
  const auto empty0 = [&] { return at::empty({0}, x.options()); };
  Tensor dx = mask[0] ? at::empty_like(xd) : empty0();
  Tensor dw = mask[1] ? at::empty({s.C}, x.options()) : empty0();
  Tensor db = mask[2] ? at::empty({s.C}, x.options()) : empty0();
  if (s.N > 0 && s.C > 0 && s.S > 0) {
    Tensor dx_k = mask[0] ? dx : Tensor(), dw_k = mask[1] ? dw : Tensor(), db_k = mask[2] ? db : Tensor();
    B::backward(dyd, xd, md, rd, w, dx_k, dw_k, db_k, s, stats_given);
  } else {  // sums over no elements
    if (mask[1]) dw.zero_();
    if (mask[2]) db.zero_();
  }
  return {dx, dw, db};
}

template <class B>
void register_group_norm_impls(torch::Library& m) {
  m.impl("group_norm", [](const Tensor& x, int64_t G, const OptTensor& w, const OptTensor& b, double eps) {
    return forward<B>("torch_dnn.group_norm", x, G, w, b, eps, nullptr, nullptr);
  });
  m.impl("group_norm_with_stats", [](const Tensor& x, int64_t G, const Tensor& mean, const Tensor& rstd,
                                     const OptTensor& w, const OptTensor& b) {
    return std::get<0>(forward<B>("torch_dnn.group_norm_with_stats", x, G, w, b, 0.0, &mean, &rstd));
  });
  m.impl("group_norm_backward", [](const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const OptTensor& w, int64_t G, bool stats_given, std::array<bool, 3> mask) {
    return backward<B>(dy, x, mean, rstd, w, G, stats_given, mask);
  });
}

}  // namespace group_norm
}  // namespace torch_dnn
