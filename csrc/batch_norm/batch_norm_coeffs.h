// The batch_norm family's per-channel steps between the big passes: from statistics to the affine map (and
// the running-stat update), and from the backward sums to d_weight, d_bias and the d_input coefficients.
// Written here once as tensor math (the CPU backend's implementation, and the CUDA backend's fallback for
// non-contiguous per-channel tensors); the CUDA backend runs each as one small kernel.
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace torch_dnn {
namespace batch_norm {

struct FwdCoeffArgs {
  // training: the batch's mean and m2 (sum of squared deviations); evaluation: running mean and variance
  at::Tensor stat_mean, stat_var;
  at::Tensor weight, bias;                 // C elements of any floating dtype, or undefined
  at::Tensor running_mean, running_var;    // training: updated in place when defined (unbiased variance)
  bool training = true;
  double momentum = 0.1, eps = 1e-5;
  int64_t count = 0;                       // elements per channel
  at::Tensor mean, invstd, scale, shift;   // outputs, C elements of the statistics dtype
};

struct BwdCoeffArgs {
  at::Tensor sum_dz, sum_dz_xmu, invstd;   // statistics dtype
  at::Tensor weight;                       // any floating dtype, or undefined
  bool training = true;
  int64_t count = 0;
  at::Tensor dw, db;                       // outputs in their own dtype, or undefined (not wanted)
  at::Tensor k, a, b;                      // dx = k * (dz - a - (x - mean) * b), statistics dtype
};

// scale = invstd * w, shift = b - mean * scale
inline void affine_tensor_math(const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& w,
                               const at::Tensor& b, at::Tensor& scale, at::Tensor& shift) {
  const auto st = invstd.scalar_type();
  scale.copy_(w.defined() ? invstd * w.to(st) : invstd);
  at::Tensor sh = -mean * scale;
  if (b.defined()) sh = sh + b.to(st);
  shift.copy_(sh);
}

inline void fwd_coeffs_tensor_math(FwdCoeffArgs& a) {
  at::NoGradGuard ng;
  const auto st = a.mean.scalar_type();
  a.mean.copy_(a.stat_mean);
  if (a.training) {
    a.invstd.copy_((a.stat_var / double(a.count) + a.eps).rsqrt());
    if (a.running_mean.defined()) {
      const at::Tensor unbiased = a.stat_var / double(a.count - 1);  // count 1: 0/0 = NaN, as PyTorch
      // in the statistics dtype, rounded once into the buffers' own dtype
      a.running_mean.copy_(a.running_mean.to(st) * (1.0 - a.momentum) + a.stat_mean * a.momentum);
      a.running_var.copy_(a.running_var.to(st) * (1.0 - a.momentum) + unbiased * a.momentum);
    }
  } else {
    a.invstd.copy_((a.stat_var.to(st) + a.eps).rsqrt());
  }
  affine_tensor_math(a.mean, a.invstd, a.weight, a.bias, a.scale, a.shift);
}

inline void bwd_coeffs_tensor_math(BwdCoeffArgs& a) {
  const auto st = a.invstd.scalar_type();
  if (a.dw.defined()) a.dw.copy_(a.sum_dz_xmu * a.invstd);
  if (a.db.defined()) a.db.copy_(a.sum_dz);
  a.k.copy_(a.weight.defined() ? a.invstd * a.weight.to(st) : a.invstd);
  if (a.training) {
    a.a.copy_(a.sum_dz / double(a.count));
    a.b.copy_(a.sum_dz_xmu * a.invstd * a.invstd / double(a.count));
  } else {
    a.a.zero_();
    a.b.zero_();
  }
}

}  // namespace batch_norm
}  // namespace torch_dnn
