// CPU kernels of the batch_norm family (the readable reference; see batch_norm_ops.h for the contract).
#pragma once
#include <ATen/ATen.h>

#include "batch_norm/batch_norm_coeffs.h"

namespace torch_dnn {
namespace batch_norm {

struct CpuBackend {
  // Per-channel mean and m2 (sum of squared deviations) of x (N, C, *), in the statistics dtype.
  static void stats(const at::Tensor& x, at::Tensor& mean, at::Tensor& m2);
  // y = act(x * scale[c] + shift[c] + res), scale/shift per channel in the statistics dtype.
  static void apply(const at::Tensor& x, const at::Tensor& res, const at::Tensor& scale, const at::Tensor& shift,
                    at::Tensor& y, int64_t act);
  // dz = dy * act'(z) with z = x * scale + shift + res recomputed; returns sums over (N, *) per channel of
  // dz and dz * (x - mean), and writes dz into `dz` (same layout as x).
  static void reduce(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& res, const at::Tensor& scale,
                     const at::Tensor& shift, const at::Tensor& mean, int64_t act, at::Tensor& dz,
                     at::Tensor& sum_dz, at::Tensor& sum_dz_xmu);
  // dx = k[c] * (dz - a[c] - (x - mean[c]) * b[c]) with per-channel coefficients in the statistics dtype.
  static void elemt(const at::Tensor& dz, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& k,
                    const at::Tensor& a, const at::Tensor& b, at::Tensor& dx);
  // The per-channel steps (batch_norm_coeffs.h): loops over the C channels.
  static void fwd_coeffs(FwdCoeffArgs& a) { fwd_coeffs_per_channel(a); }
  static void affine(const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& w, const at::Tensor& b,
                     at::Tensor& scale, at::Tensor& shift) {
    affine_per_channel(mean, invstd, w, b, scale, shift);
  }
  static void bwd_coeffs(BwdCoeffArgs& a) { bwd_coeffs_per_channel(a); }
  // stats then fwd_coeffs on the batch statistics (a.stat_mean, a.stat_var made here); reduce then bwd_coeffs on
  // the sums (a.sum_dz, a.sum_dz_xmu made here). The CUDA backend fuses each pair's per-channel step.
  static void stats_coeffs(const at::Tensor& x, FwdCoeffArgs& a) {
    a.stat_mean = at::empty_like(a.mean);
    a.stat_var = at::empty_like(a.mean);
    stats(x, a.stat_mean, a.stat_var);
    fwd_coeffs(a);
  }
  static void reduce_coeffs(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& res, const at::Tensor& scale,
                            const at::Tensor& shift, const at::Tensor& mean, int64_t act, at::Tensor& dz,
                            BwdCoeffArgs& a) {
    a.sum_dz = at::empty_like(a.invstd);
    a.sum_dz_xmu = at::empty_like(a.invstd);
    reduce(dy, x, res, scale, shift, mean, act, dz, a.sum_dz, a.sum_dz_xmu);
    bwd_coeffs(a);
  }
  // No one-kernel passes on the CPU: the ops layer runs the passes above.
  static bool fused_forward(const at::Tensor&, const at::Tensor&, int64_t, FwdCoeffArgs&, at::Tensor&) {
    return false;
  }
  static bool eval_forward(const at::Tensor&, const at::Tensor&, int64_t, FwdCoeffArgs&, at::Tensor&) { return false; }
  static bool fused_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, const at::Tensor&, int64_t, BwdCoeffArgs&, const at::Tensor&,
                             at::Tensor&) {
    return false;
  }
};

}  // namespace batch_norm
}  // namespace torch_dnn
