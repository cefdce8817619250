// The batch_norm family's per-channel steps between the big passes: from statistics to the affine map (and
// the running-stat update), and from the backward sums to d_weight, d_bias and the d_input coefficients: the
// CPU backend's loops over channels; the CUDA backend computes the same in its kernels (kernels/bn_coeffs.cuh).
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

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

// One element of a per-channel tensor (contiguous, any floating dtype) read and written as double; an undefined
// tensor reads as `absent` and ignores writes. The steps below are loops over C channels rather than tensor math,
// which would take some twenty small ATen calls a forward: on small inputs those calls would be most of the CPU
// op's host time.
class ChannelIo {
 public:
  explicit ChannelIo(const at::Tensor& t)
      : p_(t.defined() ? t.data_ptr() : nullptr), type_(t.defined() ? t.scalar_type() : at::kDouble) {
    TORCH_INTERNAL_ASSERT(!t.defined() || t.is_contiguous());
  }
  double get(int64_t i, double absent) const {
    if (p_ == nullptr) return absent;
    switch (type_) {
      case at::kFloat: return static_cast<const float*>(p_)[i];
      case at::kDouble: return static_cast<const double*>(p_)[i];
      case at::kHalf: return static_cast<float>(static_cast<const at::Half*>(p_)[i]);
      case at::kBFloat16: return static_cast<float>(static_cast<const at::BFloat16*>(p_)[i]);
      default: TORCH_INTERNAL_ASSERT(false, "batch_norm: per-channel tensor of dtype ", type_);
    }
  }
  void set(int64_t i, double v) const {
    if (p_ == nullptr) return;
    switch (type_) {
      case at::kFloat: static_cast<float*>(p_)[i] = static_cast<float>(v); break;
      case at::kDouble: static_cast<double*>(p_)[i] = v; break;
      case at::kHalf: static_cast<at::Half*>(p_)[i] = static_cast<at::Half>(static_cast<float>(v)); break;
      case at::kBFloat16: static_cast<at::BFloat16*>(p_)[i] = static_cast<at::BFloat16>(static_cast<float>(v)); break;
      default: TORCH_INTERNAL_ASSERT(false, "batch_norm: per-channel tensor of dtype ", type_);
    }
  }

 private:
  void* p_;
  at::ScalarType type_;
};

// v rounded to the statistics dtype (float32, or float64).
inline double in_stat_type(double v, at::ScalarType st) { return st == at::kDouble ? v : double(float(v)); }

// scale = invstd * w, shift = b - mean * scale, each rounded to the statistics dtype, shift from the rounded
// scale: the apply pass's x * scale + shift then cancels the mean exactly as (x - mean) * scale does, where a
// shift from the unrounded scale would leave x times the scale's rounding (large when the mean is large against
// the spread).
inline void affine_per_channel(const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& w,
                               const at::Tensor& b, at::Tensor& scale, at::Tensor& shift) {
  const ChannelIo m(mean), is(invstd), wi(w), bi(b), sc(scale), sh(shift);
  const at::ScalarType st = scale.scalar_type();
  for (int64_t c = 0; c < mean.numel(); ++c) {
    const double k = in_stat_type(is.get(c, 0.0) * wi.get(c, 1.0), st);
    sc.set(c, k);
    sh.set(c, bi.get(c, 0.0) - m.get(c, 0.0) * k);
  }
}

// The statistics' per-channel step in double: mean and invstd rounded to the statistics dtype as stored, the
// running statistics updated (rounded once into their own dtype), then affine_per_channel's map.
inline void fwd_coeffs_per_channel(FwdCoeffArgs& a) {
  const ChannelIo sm(a.stat_mean), sv(a.stat_var), rm(a.running_mean), rv(a.running_var);
  const ChannelIo mean(a.mean), invstd(a.invstd);
  const at::ScalarType st = a.mean.scalar_type();
  const double n = double(a.count);
  for (int64_t c = 0; c < a.mean.numel(); ++c) {
    const double mu = sm.get(c, 0.0), v = sv.get(c, 0.0);
    if (a.training && a.running_mean.defined()) {
      // count 1: 0/0 = NaN in the running variance, as PyTorch
      rm.set(c, (1.0 - a.momentum) * rm.get(c, 0.0) + a.momentum * mu);
      rv.set(c, (1.0 - a.momentum) * rv.get(c, 0.0) + a.momentum * (v / (n - 1.0)));
    }
    mean.set(c, in_stat_type(mu, st));
    invstd.set(c, in_stat_type(1.0 / std::sqrt((a.training ? v / n : v) + a.eps), st));
  }
  affine_per_channel(a.mean, a.invstd, a.weight, a.bias, a.scale, a.shift);
}

// The sums' per-channel step in double (the CUDA backend's bwd_coeffs_one).
inline void bwd_coeffs_per_channel(BwdCoeffArgs& a) {
  const ChannelIo s1(a.sum_dz), s2(a.sum_dz_xmu), invstd(a.invstd), w(a.weight), dw(a.dw), db(a.db);
  const ChannelIo k(a.k), ka(a.a), kb(a.b);
  const double n = double(a.count);
  for (int64_t c = 0; c < a.invstd.numel(); ++c) {
    const double is = invstd.get(c, 0.0), sum1 = s1.get(c, 0.0), sum2 = s2.get(c, 0.0);
    dw.set(c, sum2 * is);
    db.set(c, sum1);
    k.set(c, is * w.get(c, 1.0));
    ka.set(c, a.training ? sum1 / n : 0.0);
    kb.set(c, a.training ? sum2 * is * is / n : 0.0);
  }
}

}  // namespace batch_norm
}  // namespace torch_dnn
