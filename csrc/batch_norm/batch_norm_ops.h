// The batch_norm family's ops, written once over a backend (batch_norm_cpu.h, batch_norm_cuda.cpp) that
// provides the big passes over the data (stats, apply, reduce, elemt) and the per-channel steps between them
// (fwd_coeffs, affine, bwd_coeffs: batch_norm_coeffs.h); stats_coeffs and reduce_coeffs are a pass and its step
// together (the CUDA backend computes the step inside the pass's last kernel). batch_norm.cpp declares the schemas. x is (N, C, *)
// in any layout; per-channel statistics are in the statistics dtype (float32; float64 for float64 input).
//   batch_norm / batch_norm_add_act: y = act(bn(x) + res); training: batch statistics, running stats updated
//   in place with `momentum` (unbiased variance); evaluation: running statistics. Returns (y, save_mean,
//   save_invstd); in evaluation they are the running statistics' mean and 1/sqrt(var + eps), so the backward
//   reads one pair in both modes.
//   batch_norm_stats: per-channel (mean, m2) of the local batch, for SyncBatchNorm's cross-process merge.
//   batch_norm_elemt / batch_norm_backward_reduce / batch_norm_backward_elemt: SyncBatchNorm's forward apply
//   with given statistics, the backward's local sums (sum dy, sum dy*(x-mean)), and the input gradient from
//   the all-reduced sums over `count` elements per channel (all processes together).
#pragma once
#include <torch/library.h>

#include <array>
#include <cstdint>
#include <limits>
#include <tuple>

#include "batch_norm/batch_norm_coeffs.h"
#include "common/memory_format.h"
#include "common/tensor_utils.h"

namespace torch_dnn {
namespace batch_norm {

using at::Tensor;
using OptTensor = c10::optional<at::Tensor>;

inline int64_t check_input(const char* op, const Tensor& x) {
  check_floating(x, op, "input");
  TORCH_CHECK(x.dim() >= 2, op, ": expected input of shape (N, C, *) with at least 2 dimensions, but got input of size ",
              x.sizes());
  return x.size(1);
}

// A per-channel tensor (weight, bias, running stats, saved stats): C elements on the input's device, contiguous,
// in its own floating dtype (the backends read any of them).
inline Tensor check_channel(const char* op, const char* arg, const Tensor& x, const OptTensor& p) {
  if (!given(p)) return Tensor();
  check_floating(*p, op, arg);
  check_same_device(x, *p, op, "input", arg);
  TORCH_CHECK(p->dim() == 1 && p->numel() == x.size(1), op, ": expected ", arg, " of shape [", x.size(1),
              "] (the input's channel count, dim 1), but got ", p->sizes());
  return p->contiguous();
}

inline Tensor out_like(const Tensor& x) { return at::empty_like(x, x.suggest_memory_format()); }

// The layouts of PyTorch's CUDA kernels where they differ from out_like (torch_dnn/ops/batch_norm.py's fake kernels
// mirror these). Its forward and training backward give the input's suggested layout as its CPU kernels do
// (cuDNN's exactly; its native kernel keeps a dense input's own strides, the same for contiguous and channels-last
// inputs, not for other dense permutations); the rest, in aten/src/ATen/native/cuda/Normalization.cu(h):

// batch_norm_use_channels_last_kernels.
inline bool cuda_channels_last_kernels(const Tensor& t) {
  return t.is_contiguous(at::MemoryFormat::ChannelsLast) || t.is_contiguous(at::MemoryFormat::ChannelsLast3d) ||
         (t.is_contiguous() && t.stride(1) == 1);
}

// at::cuda::detail::canUse32BitIndexMath: every element's offset (and the count) below 2^31 - 1.
inline bool fits_32bit_index(const Tensor& t) {
  const int64_t max = std::numeric_limits<int32_t>::max();
  if (t.numel() >= max) return false;
  int64_t offset = 0, linear = t.numel() - 1;
  for (int64_t d = t.dim() - 1; d >= 0 && linear > 0; --d) {
    offset += (linear % t.size(d)) * t.stride(d);
    linear /= t.size(d);
  }
  return offset < max;
}

// The input gradient of batch_norm (and of batch_norm_add_act, whose composite runs it): in evaluation PyTorch's
// backward is always native_batch_norm_backward (_batch_norm_impl_index_backward falls back to it from cuDNN),
// whose CUDA paths (batch_norm_backward_cuda_template, batch_norm_elementwise_backward_eval) allocate it
// contiguous, whatever the layouts of the input and grad_output; otherwise the input's suggested layout.
inline Tensor dx_like(const Tensor& x, bool training) {
  if (x.is_cuda() && !training) return at::empty(x.sizes(), x.options());
  return out_like(x);
}

// batch_norm_elemt: batch_norm_elemt_cuda returns empty_like(input) (the input's own strides when it is dense).
inline Tensor elemt_out_like(const Tensor& x) { return x.is_cuda() ? at::empty_like(x) : out_like(x); }

// batch_norm_backward_elemt: batch_norm_backward_elemt_cuda takes its channels-last kernel, which returns
// empty_like(input), when grad_output and the input both suit it (and grad_output is 32-bit indexable); its
// other kernel returns a contiguous gradient.
inline Tensor backward_elemt_dx_like(const Tensor& dy, const Tensor& x) {
  if (!x.is_cuda()) return out_like(x);
  if (fits_32bit_index(dy) && cuda_channels_last_kernels(dy) && cuda_channels_last_kernels(x)) return at::empty_like(x);
  return at::empty(x.sizes(), x.options());
}

// batch_norm_add_act's residual gradient, the gradient at the activation's input, laid out as PyTorch's composite
// lays it out: relu's backward (threshold_backward) in its result's layout, out_like(x); silu's in grad_out's, and
// with no activation it is grad_out itself.
inline Tensor residual_grad_like(const Tensor& dy, const Tensor& x, int64_t act) {
  if (act == 1) return out_like(x);
  return at::empty_strided(x.sizes(), iter_strides({dy, x}), x.options());
}

// A per-channel tensor in the statistics dtype of input x (what the backends' passes read).
inline Tensor as_stat(const Tensor& x, const Tensor& t) {
  return t.defined() ? t.to(stat_type(x.scalar_type())).contiguous() : t;
}

template <class B>
std::tuple<Tensor, Tensor, Tensor> forward(const char* op, const Tensor& x, const OptTensor& residual,
                                           const OptTensor& weight, const OptTensor& bias, const OptTensor& running_mean,
                                           const OptTensor& running_var, bool training, double momentum, double eps,
                                           int64_t act) {
  const int64_t C = check_input(op, x);
  TORCH_CHECK(act >= 0 && act <= 2, op, ": act must be 0 (identity), 1 (relu) or 2 (silu), but got ", act);
  Tensor res;
  if (given(residual)) {
    check_matching(x, *residual, op, "input", "residual");
    res = *residual;
  }
  const Tensor w = check_channel(op, "weight", x, weight), b = check_channel(op, "bias", x, bias);
  const Tensor rm = check_channel(op, "running_mean", x, running_mean);
  const Tensor rv = check_channel(op, "running_var", x, running_var);
  TORCH_CHECK(given(running_mean) == given(running_var), op,
              ": running_mean and running_var must both be given or both be None");
  TORCH_CHECK(training || given(running_mean), op, ": running_mean and running_var must be defined in evaluation mode");
  const auto sopt = x.options().dtype(stat_type(x.scalar_type()));
  Tensor y = out_like(x);
  Tensor mean = at::empty({C}, sopt), invstd = at::empty({C}, sopt);
  if (training && x.numel() == 0) {  // as PyTorch: nothing to normalise, running stats untouched
    mean.zero_();
    invstd.zero_();
    return {y, mean, invstd};
  }
  FwdCoeffArgs a;
  a.weight = w;
  a.bias = b;
  a.training = training;
  a.momentum = momentum;
  a.eps = eps;
  a.count = x.numel() / std::max<int64_t>(C, 1);
  a.mean = mean;
  a.invstd = invstd;
  bool done = false;  // by the backend's one-kernel forward (training: statistics, coefficients and y)
  if (training) {
    // the in-place update goes to the caller's tensors (contiguous ones: the usual buffers)
    a.running_mean = given(running_mean) && running_mean->is_contiguous() ? *running_mean : rm;
    a.running_var = given(running_var) && running_var->is_contiguous() ? *running_var : rv;
    done = B::fused_forward(x, res, act, a, y);
  } else {
    a.stat_mean = rm;
    a.stat_var = rv;
    done = B::eval_forward(x, res, act, a, y);
  }
  if (!done) {  // the separate passes' affine map (the one-kernel forward keeps its own)
    a.scale = at::empty({C}, sopt);
    a.shift = at::empty({C}, sopt);
    if (training)
      B::stats_coeffs(x, a);  // from the batch statistics
    else
      B::fwd_coeffs(a);
  }
  if (training && given(running_mean) && !a.running_mean.is_same(*running_mean)) {
    at::NoGradGuard ng;
    running_mean->copy_(a.running_mean);
    running_var->copy_(a.running_var);
  }
  if (!done && x.numel() > 0) B::apply(x, res, a.scale, a.shift, y, act);
  return {y, mean, invstd};
}

// (dx, dres, dw, db); unwanted ones are empty tensors. dres (= the gradient at the add) exists for the fused op.
template <class B>
std::array<Tensor, 4> backward(const char* op, const Tensor& dy, const Tensor& x, const OptTensor& residual,
                               const OptTensor& weight, const OptTensor& bias, const Tensor& save_mean,
                               const Tensor& save_invstd, bool training, int64_t act, std::array<bool, 4> mask) {
  const int64_t C = check_input(op, x);
  check_matching(x, dy, op, "input", "grad_out");
  const Tensor w = check_channel(op, "weight", x, weight), b = check_channel(op, "bias", x, bias);
  const auto sopt = x.options().dtype(stat_type(x.scalar_type()));
  const Tensor mean = check_channel(op, "save_mean", x, save_mean).to(sopt.dtype());
  const Tensor invstd = check_channel(op, "save_invstd", x, save_invstd).to(sopt.dtype());
  Tensor res;
  if (given(residual)) {
    check_matching(x, *residual, op, "input", "residual");  // read in the input's dtype
    res = *residual;
  }
  const auto pdtype = [&](const OptTensor& p) { return given(p) ? p->scalar_type() : x.scalar_type(); };
  const auto empty0 = [&] { return at::empty({0}, x.options()); };
  Tensor dx = mask[0] ? dx_like(x, training) : empty0();
  Tensor dres = mask[1] ? residual_grad_like(dy, x, act) : empty0();
  Tensor dw = mask[2] ? at::empty({C}, x.options().dtype(pdtype(weight))) : empty0();
  // batch_norm_backward takes no bias: d_bias then takes the weight's dtype (PyTorch's convention: weight and
  // bias share one), not the input's, so float32 parameters of a bf16 input get float32 sums
  Tensor db = mask[3] ? at::empty({C}, x.options().dtype(given(bias) ? bias->scalar_type() : pdtype(weight))) : empty0();
  if (x.numel() == 0) {
    if (mask[2]) dw.zero_();
    if (mask[3]) db.zero_();
    return {dx, dres, dw, db};
  }
  BwdCoeffArgs a;
  a.invstd = invstd;
  a.weight = w;
  a.training = training;
  a.count = x.numel() / C;
  if (mask[2]) a.dw = dw;
  if (mask[3]) a.db = db;
  const bool plain = act == 0 && !res.defined();
  // plain batch_norm's training backward: the backend's one-kernel path (sums, coefficients and dx), if it has one
  if (plain && training && mask[0] && !mask[1] && B::fused_backward(dy, x, res, {}, {}, mean, 0, a, {}, dx))
    return {dx, dres, dw, db};
  Tensor scale, shift;  // the forward's affine map, to recompute the activation's input
  if (act != 0) {
    scale = at::empty({C}, sopt);
    shift = at::empty({C}, sopt);
    B::affine(mean, invstd, w, b, scale, shift);
  }
  // dz, the gradient at the activation's input: written for dres, else only when an activation needs it
  Tensor dz = mask[1] ? dres : (act != 0 ? out_like(x) : Tensor());
  // batch_norm_add_act's training backward in one kernel (dz, written to dres or scratch, then dx from it)
  if (!plain && training && mask[0] && B::fused_backward(dy, x, res, scale, shift, mean, act, a, dz, dx))
    return {dx, dres, dw, db};
  a.k = at::empty({C}, sopt);
  a.a = at::empty({C}, sopt);
  a.b = at::empty({C}, sopt);
  B::reduce_coeffs(dy, x, res, scale, shift, mean, act, dz, a);
  if (!dz.defined()) dz = dy;
  if (mask[0]) B::elemt(dz, x, mean, a.k, a.a, a.b, dx);
  return {dx, dres, dw, db};
}

template <class B>
void register_batch_norm_impls(torch::Library& m) {
  m.impl("batch_norm", [](const Tensor& x, const OptTensor& w, const OptTensor& b, const OptTensor& rm,
                          const OptTensor& rv, bool training, double momentum, double eps) {
    return forward<B>("torch_dnn.batch_norm", x, c10::nullopt, w, b, rm, rv, training, momentum, eps, 0);
  });
  m.impl("batch_norm_add_act", [](const Tensor& x, const OptTensor& res, const OptTensor& w, const OptTensor& b,
                                  const OptTensor& rm, const OptTensor& rv, bool training, double momentum, double eps,
                                  int64_t act) {
    return forward<B>("torch_dnn.batch_norm_add_act", x, res, w, b, rm, rv, training, momentum, eps, act);
  });
  m.impl("batch_norm_backward", [](const Tensor& dy, const Tensor& x, const OptTensor& w, const OptTensor& rm,
                                   const OptTensor& rv, const OptTensor& save_mean, const OptTensor& save_invstd,
                                   bool training, double eps, std::array<bool, 3> mask) {
    const char* op = "torch_dnn.batch_norm_backward";
    if (given(rm)) check_same_device(x, *rm, op, "input", "running_mean");
    if (given(rv)) check_same_device(x, *rv, op, "input", "running_var");
    Tensor mean, invstd;
    if (given(save_mean) && given(save_invstd) && save_mean->numel() > 0) {
      mean = *save_mean;
      invstd = *save_invstd;
    } else {
      TORCH_CHECK(given(rm) && given(rv), op, ": needs save_mean/save_invstd or running_mean/running_var");
      mean = rm->to(stat_type(x.scalar_type()));
      invstd = (rv->to(stat_type(x.scalar_type())) + eps).rsqrt();
    }
    auto r = backward<B>(op, dy, x, c10::nullopt, w, c10::nullopt, mean, invstd, training, 0,
                         {mask[0], false, mask[1], mask[2]});
    return std::make_tuple(r[0], r[2], r[3]);
  });
  m.impl("batch_norm_add_act_backward", [](const Tensor& dy, const Tensor& x, const OptTensor& res, const OptTensor& w,
                                           const OptTensor& b, const Tensor& save_mean, const Tensor& save_invstd,
                                           bool training, int64_t act, std::array<bool, 4> mask) {
    auto r = backward<B>("torch_dnn.batch_norm_add_act_backward", dy, x, res, w, b, save_mean, save_invstd, training,
                         act, mask);
    return std::make_tuple(r[0], r[1], r[2], r[3]);
  });
  m.impl("batch_norm_stats", [](const Tensor& x) {
    const char* op = "torch_dnn.batch_norm_stats";
    const int64_t C = check_input(op, x);
    const auto sopt = x.options().dtype(stat_type(x.scalar_type()));
    Tensor mean = at::zeros({C}, sopt), m2 = at::zeros({C}, sopt);
    if (x.numel() > 0) B::stats(x, mean, m2);
    return std::make_tuple(mean, m2);
  });
  m.impl("batch_norm_elemt", [](const Tensor& x, const Tensor& mean, const Tensor& invstd, const OptTensor& weight,
                                const OptTensor& bias) {
    const char* op = "torch_dnn.batch_norm_elemt";
    check_input(op, x);
    const Tensor m = check_channel(op, "mean", x, mean), is = check_channel(op, "invstd", x, invstd);
    const Tensor w = check_channel(op, "weight", x, weight), b = check_channel(op, "bias", x, bias);
    Tensor y = elemt_out_like(x);
    if (x.numel() == 0) return y;
    const Tensor scale = as_stat(x, w.defined() ? is * w : is);
    Tensor shift = -m * scale;
    if (b.defined()) shift = shift + b;
    B::apply(x, Tensor(), scale, as_stat(x, shift), y, 0);
    return y;
  });
  m.impl("batch_norm_backward_reduce", [](const Tensor& dy, const Tensor& x, const Tensor& mean,
                                          const Tensor& invstd) {
    const char* op = "torch_dnn.batch_norm_backward_reduce";
    const int64_t C = check_input(op, x);
    check_matching(x, dy, op, "input", "grad_out");
    const Tensor m = check_channel(op, "mean", x, mean), is = check_channel(op, "invstd", x, invstd);
    const auto sopt = x.options().dtype(stat_type(x.scalar_type()));
    Tensor sum_dy = at::zeros({C}, sopt), sum_dy_xmu = at::zeros({C}, sopt);
    if (x.numel() == 0) return std::make_tuple(sum_dy, sum_dy_xmu);
    Tensor dz;  // act 0, no residual: dz is dy itself, not written; scale and shift are not read then
    B::reduce(dy, x, Tensor(), Tensor(), Tensor(), as_stat(x, m), 0, dz, sum_dy, sum_dy_xmu);
    return std::make_tuple(sum_dy, sum_dy_xmu);
  });
  m.impl("batch_norm_backward_elemt", [](const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                         const OptTensor& weight, const Tensor& sum_dy, const Tensor& sum_dy_xmu,
                                         int64_t count) {
    const char* op = "torch_dnn.batch_norm_backward_elemt";
    check_input(op, x);
    check_matching(x, dy, op, "input", "grad_out");
    const Tensor m = check_channel(op, "mean", x, mean), is = check_channel(op, "invstd", x, invstd);
    const Tensor w = check_channel(op, "weight", x, weight);
    const Tensor s1 = check_channel(op, "sum_dy", x, sum_dy), s2 = check_channel(op, "sum_dy_xmu", x, sum_dy_xmu);
    TORCH_CHECK(count > 0, op, ": expected count (the number of elements per channel over all processes) > 0, but got ",
                count);
    Tensor dx = backward_elemt_dx_like(dy, x);
    if (x.numel() == 0) return dx;
    const Tensor k = as_stat(x, w.defined() ? is * w : is);
    const Tensor a = as_stat(x, s1 / double(count));
    const Tensor bb = as_stat(x, s2 * is * is / double(count));
    B::elemt(dy, x, as_stat(x, m), k, a, bb, dx);
    return dx;
  });
}

}  // namespace batch_norm
}  // namespace torch_dnn
