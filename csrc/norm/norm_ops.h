// The norm family's ops, written once over a backend (CPU or CUDA). norm.cpp declares the schemas; each
// backend file calls register_norm_impls<Backend>(m). A backend provides, on dense rows (NormShape) whose
// tensors share one layout, with rows > 0 and cols > 0, weight and bias in the input's dtype:
//   static void forward(const Tensor& x, const Tensor& res, const Tensor& w, const Tensor& b, Tensor& y,
//                       Tensor& sum, Tensor& mean, Tensor& rstd, NormShape, bool rms, double eps);
//   static void backward(const Tensor& dy, const Tensor& dsum, const Tensor& x, const Tensor& mean,
//                        const Tensor& rstd, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db, NormShape, bool rms);
// Undefined tensors stand for absent arguments (res, w, b, dsum, mean for rms) and unwanted results.
#pragma once
#include <torch/library.h>

#include <array>
#include <sstream>
#include <tuple>
#include <vector>

#include "common/memory_format.h"
#include "common/tensor_utils.h"
#include "norm/norm_kernels.h"

namespace torch_dnn {
namespace norm {

using at::Tensor;
using OptTensor = c10::optional<at::Tensor>;

// The input's rows: input.shape[-k:] must equal normalized_shape (k = its length).
inline NormShape check_input(const char* op, const Tensor& x, at::IntArrayRef ns) {
  check_floating(x, op, "input");
  TORCH_CHECK(!ns.empty(), op, ": expected normalized_shape to have at least one dimension, but got []");
  const int64_t k = int64_t(ns.size());
  if (x.dim() < k || x.sizes().slice(x.dim() - k) != ns) {
    std::ostringstream want;
    want << "[*";
    for (int64_t v : ns) want << ", " << v;
    want << "]";
    TORCH_CHECK(false, op, ": given normalized_shape=", ns, ", expected input with shape ", want.str(),
                ", but got input of size ", x.sizes());
  }
  NormShape s;
  s.cols = c10::multiply_integers(ns);
  s.rows = s.cols == 0 ? c10::multiply_integers(x.sizes().slice(0, x.dim() - k)) : x.numel() / s.cols;
  return s;
}

// weight or bias: the normalized shape, on the input's device; computed in the input's dtype.
inline Tensor check_param(const char* op, const char* arg, const Tensor& x, const OptTensor& p, at::IntArrayRef ns) {
  if (!given(p)) return Tensor();
  check_floating(*p, op, arg);
  check_same_device(x, *p, op, "input", arg);
  TORCH_CHECK(p->sizes() == ns, op, ": expected ", arg, " of shape ", ns, " (normalized_shape), but got ", p->sizes());
  return p->to(x.scalar_type()).contiguous();
}

// `x` itself when its memory is whole rows (dense, the k trailing dims innermost and row-major: contiguous
// tensors, and e.g. a transposed batch of rows), else a contiguous copy. Outputs made with empty_like(x)
// share that layout; torch_dnn/ops/norm.py's fake kernels mirror this rule.
inline Tensor rows_dense(const Tensor& x, int64_t k) {
  if (!x.is_non_overlapping_and_dense()) return x.contiguous();
  int64_t expect = 1;
  for (int64_t d = x.dim() - 1; d >= x.dim() - k; --d) {
    if (x.size(d) == 1) continue;
    if (x.stride(d) != expect) return x.contiguous();
    expect *= x.size(d);
  }
  return x;
}

// Per-row statistics of `xd` (dense rows): shape = the leading dims, laid out as the rows are in memory so
// that row r (in memory order) has its statistic at offset r.
inline std::vector<int64_t> stat_strides(const Tensor& xd, int64_t k, int64_t cols) {
  const int64_t lead = xd.dim() - k;
  if (cols == 0) {
    const auto c = c10::contiguous_strides(xd.sizes().slice(0, lead));
    return std::vector<int64_t>(c.begin(), c.end());
  }
  std::vector<int64_t> st(lead);
  for (int64_t d = 0; d < lead; ++d) st[d] = xd.stride(d) / cols;
  return st;
}
inline Tensor empty_stats(const Tensor& xd, int64_t k, int64_t cols) {
  return at::empty_strided(xd.sizes().slice(0, xd.dim() - k), stat_strides(xd, k, cols),
                           xd.options().dtype(stat_type(xd.scalar_type())));
}

// A saved statistic laid out as empty_stats(xd) would be (a copy only if it is not).
inline Tensor stats_like(const char* op, const char* arg, const Tensor& t, const Tensor& xd, int64_t k, int64_t cols) {
  const auto lead = xd.sizes().slice(0, xd.dim() - k);
  TORCH_CHECK(t.sizes() == lead, op, ": expected ", arg, " of shape ", lead, " (the input's leading dims), but got ",
              t.sizes());
  check_same_device(xd, t, op, "input", arg);
  const auto st = stat_strides(xd, k, cols);
  const auto want = stat_type(xd.scalar_type());
  if (t.scalar_type() == want && (t.numel() <= 1 || t.strides() == at::IntArrayRef(st))) return t;
  return at::empty_strided(lead, st, xd.options().dtype(want)).copy_(t);
}

// The layouts of PyTorch's results (the kernels run on rows_dense's layout; a result PyTorch lays out otherwise is
// copied into PyTorch's layout). layer_norm normalises input.contiguous(): its result and gradient are contiguous.
// rms_norm runs its composite where the input suggests channels_last(_3d) (the result in the input's layout, the
// gradient in grad_out's), else its fused kernel (a contiguous result; a contiguous gradient on CUDA, while the
// CPU's composite again gives grad_out's). The add_ ops are x + residual (in x's layout), then the norm; their
// input gradient is the sum's gradient plus the norm's, in grad_sum's layout where one is given.
// torch_dnn/ops/norm.py's fake kernels mirror these rules.
inline bool suggests_channels_last(const Tensor& x) {
  const auto f = x.suggest_memory_format();
  return f == at::MemoryFormat::ChannelsLast || f == at::MemoryFormat::ChannelsLast3d;
}
inline std::vector<int64_t> contiguous_strides_of(const Tensor& x) {
  const auto c = c10::contiguous_strides(x.sizes());
  return std::vector<int64_t>(c.begin(), c.end());
}
inline std::vector<int64_t> result_strides(const Tensor& in, bool rms) {
  return rms && suggests_channels_last(in) ? iter_strides({in}) : contiguous_strides_of(in);
}
inline std::vector<int64_t> grad_strides(const Tensor& dy, const OptTensor& grad_sum, const Tensor& in, bool rms) {
  if (given(grad_sum)) return iter_strides({*grad_sum, in});
  if (rms && (suggests_channels_last(in) || in.is_cpu())) return iter_strides({dy, in});
  return contiguous_strides_of(in);
}

// Forward of layer_norm / rms_norm / add_layer_norm / add_rms_norm: (sum, y, mean, rstd), sum and mean
// undefined where the op has none.
template <class B>
std::array<Tensor, 4> forward(const char* op, const Tensor& x, const OptTensor& residual, at::IntArrayRef ns,
                              const OptTensor& weight, const OptTensor& bias, double eps, bool rms) {
  const NormShape s = check_input(op, x, ns);
  const int64_t k = int64_t(ns.size());
  Tensor res;
  if (given(residual)) {
    check_matching(x, *residual, op, "input", "residual");
  }
  const Tensor w = check_param(op, "weight", x, weight, ns);
  const Tensor b = check_param(op, "bias", x, bias, ns);
  const Tensor xd = rows_dense(x, k);
  if (given(residual)) res = same_layout_as(*residual, xd);
  Tensor y = at::empty_like(xd);
  Tensor sum = given(residual) ? at::empty_like(xd) : Tensor();
  Tensor mean = rms ? Tensor() : empty_stats(xd, k, s.cols);
  Tensor rstd = empty_stats(xd, k, s.cols);
  if (s.rows > 0 && s.cols > 0) {
    B::forward(xd, res, w, b, y, sum, mean, rstd, s, rms, eps);
  } else if (s.rows > 0) {  // statistics of empty rows, as PyTorch's mean of nothing
    if (mean.defined()) mean.fill_(NAN);
    rstd.fill_(NAN);
  }
  if (sum.defined()) sum = with_strides(sum, iter_strides({x, *residual}));
  y = with_strides(y, result_strides(sum.defined() ? sum : x, rms));
  return {sum, y, mean, rstd};
}

// Backward of all four: (dx, dw, db) in the input's dtype; unwanted results are empty tensors. dx includes
// grad_sum (the residual stream's own gradient) when given.
template <class B>
std::tuple<Tensor, Tensor, Tensor> backward(const char* op, const Tensor& dy, const OptTensor& grad_sum, const Tensor& x,
                                            const OptTensor& mean, const Tensor& rstd, const OptTensor& weight,
                                            at::IntArrayRef ns, std::array<bool, 3> mask, bool rms) {
  const NormShape s = check_input(op, x, ns);
  const int64_t k = int64_t(ns.size());
  check_matching(x, dy, op, "input", "grad_out");
  if (given(grad_sum)) {
    check_matching(x, *grad_sum, op, "input", "grad_sum");
  }
  const Tensor w = check_param(op, "weight", x, weight, ns);
  TORCH_CHECK(!mask[1] || w.defined(), op, ": output_mask asks for the weight gradient, but weight is None");
  const Tensor xd = rows_dense(x, k);
  const Tensor dyd = same_layout_as(dy, xd);
  const Tensor dsd = given(grad_sum) ? same_layout_as(*grad_sum, xd) : Tensor();
  const Tensor md = rms ? Tensor() : stats_like(op, "mean", *mean, xd, k, s.cols);
  const Tensor rd = stats_like(op, "rstd", rstd, xd, k, s.cols);
  const auto empty0 = [&] { return at::empty({0}, x.options()); };
  Tensor dx = mask[0] ? at::empty_like(xd) : empty0();
  Tensor dw = mask[1] ? at::empty(ns, x.options()) : empty0();
  Tensor db = mask[2] ? at::empty(ns, x.options()) : empty0();
  if (s.rows > 0 && s.cols > 0) {
    Tensor dx_k = mask[0] ? dx : Tensor(), dw_k = mask[1] ? dw : Tensor(), db_k = mask[2] ? db : Tensor();
    B::backward(dyd, dsd, xd, md, rd, w, dx_k, dw_k, db_k, s, rms);
  } else {  // sums over no rows
    if (mask[1]) dw.zero_();
    if (mask[2]) db.zero_();
  }
  if (mask[0]) dx = with_strides(dx, grad_strides(dy, grad_sum, x, rms));
  return {dx, dw, db};
}

template <class B>
void register_norm_impls(torch::Library& m) {
  using IntArr = at::IntArrayRef;
  m.impl("layer_norm", [](const Tensor& x, IntArr ns, const OptTensor& w, const OptTensor& b, double eps) {
    auto r = forward<B>("torch_dnn.layer_norm", x, c10::nullopt, ns, w, b, eps, false);
    return std::make_tuple(r[1], r[2], r[3]);
  });
  m.impl("rms_norm", [](const Tensor& x, IntArr ns, const OptTensor& w, double eps) {
    auto r = forward<B>("torch_dnn.rms_norm", x, c10::nullopt, ns, w, c10::nullopt, eps, true);
    return std::make_tuple(r[1], r[3]);
  });
  m.impl("add_layer_norm", [](const Tensor& x, const Tensor& res, IntArr ns, const OptTensor& w, const OptTensor& b,
                              double eps) {
    auto r = forward<B>("torch_dnn.add_layer_norm", x, res, ns, w, b, eps, false);
    return std::make_tuple(r[0], r[1], r[2], r[3]);
  });
  m.impl("add_rms_norm", [](const Tensor& x, const Tensor& res, IntArr ns, const OptTensor& w, double eps) {
    auto r = forward<B>("torch_dnn.add_rms_norm", x, res, ns, w, c10::nullopt, eps, true);
    return std::make_tuple(r[0], r[1], r[3]);
  });
  m.impl("layer_norm_backward", [](const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const OptTensor& w, IntArr ns, std::array<bool, 3> mask) {
    return backward<B>("torch_dnn.layer_norm_backward", dy, c10::nullopt, x, mean, rstd, w, ns, mask, false);
  });
  m.impl("add_layer_norm_backward", [](const Tensor& dy, const OptTensor& dsum, const Tensor& sum, const Tensor& mean,
                                       const Tensor& rstd, const OptTensor& w, IntArr ns, std::array<bool, 3> mask) {
    return backward<B>("torch_dnn.add_layer_norm_backward", dy, dsum, sum, mean, rstd, w, ns, mask, false);
  });
  m.impl("rms_norm_backward", [](const Tensor& dy, const Tensor& x, const Tensor& rstd, const OptTensor& w, IntArr ns,
                                 std::array<bool, 2> mask) {
    auto r = backward<B>("torch_dnn.rms_norm_backward", dy, c10::nullopt, x, c10::nullopt, rstd, w, ns,
                         {mask[0], mask[1], false}, true);
    return std::make_tuple(std::get<0>(r), std::get<1>(r));
  });
  m.impl("add_rms_norm_backward", [](const Tensor& dy, const OptTensor& dsum, const Tensor& sum, const Tensor& rstd,
                                     const OptTensor& w, IntArr ns, std::array<bool, 2> mask) {
    auto r = backward<B>("torch_dnn.add_rms_norm_backward", dy, dsum, sum, c10::nullopt, rstd, w, ns,
                         {mask[0], mask[1], false}, true);
    return std::make_tuple(std::get<0>(r), std::get<1>(r));
  });
}

}  // namespace norm
}  // namespace torch_dnn
