// batch_norm per-channel steps: forward and backward coefficients, running statistics, in double.
#pragma once
#include "batch_norm/kernels/bn_common.cuh"

namespace torch_dnn {
namespace batch_norm {
namespace {

// ---- per-channel steps: computed in double, read and written in each vector's own dtype ----

__device__ double load_any(const ChannelVec& v, int64_t i, double absent) {
  if (v.p == nullptr) return absent;
  switch (v.t) {
    case DType::Float32: return static_cast<const float*>(v.p)[i];
    case DType::Float16: return __half2float(static_cast<const __half*>(v.p)[i]);
    case DType::BFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(v.p)[i]);
    case DType::Float64: return static_cast<const double*>(v.p)[i];
  }
  return absent;
}
__device__ void store_any(const ChannelVec& v, int64_t i, double x) {
  if (v.p == nullptr) return;
  switch (v.t) {
    case DType::Float32: static_cast<float*>(v.p)[i] = float(x); break;
    case DType::Float16: static_cast<__half*>(v.p)[i] = __float2half_rn(float(x)); break;
    case DType::BFloat16: static_cast<__nv_bfloat16*>(v.p)[i] = __float2bfloat16_rn(float(x)); break;
    case DType::Float64: static_cast<double*>(v.p)[i] = x; break;
  }
}

// Channel c's forward coefficients from its statistics mu and v (training: m2, the sum of squared deviations;
// evaluation: the running variance); also updates the running statistics in training. Returns (scale, shift).
__device__ void fwd_coeffs_one(const FwdCoeffPtrs& p, int64_t c, double mu, double v, double* scale_out,
                               double* shift_out) {
  const double n = double(p.count);
  const double invstd = 1.0 / sqrt((p.training ? v / n : v) + p.eps);
  if (p.training && p.running_mean.p != nullptr) {
    const double m = p.momentum;
    store_any(p.running_mean, c, (1.0 - m) * load_any(p.running_mean, c, 0.0) + m * mu);
    store_any(p.running_var, c, (1.0 - m) * load_any(p.running_var, c, 0.0) + m * (v / (n - 1.0)));
  }
  const double scale = invstd * load_any(p.weight, c, 1.0), shift = load_any(p.bias, c, 0.0) - mu * scale;
  store_any(p.mean, c, mu);
  store_any(p.invstd, c, invstd);
  store_any(p.scale, c, scale);
  store_any(p.shift, c, shift);
  *scale_out = scale;
  *shift_out = shift;
}

__global__ void fwd_coeffs_kernel(FwdCoeffPtrs p, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double scale, shift;
  fwd_coeffs_one(p, c, load_any(p.stat_mean, c, 0.0), load_any(p.stat_var, c, 0.0), &scale, &shift);
}

__global__ void affine_kernel(ChannelVec mean, ChannelVec invstd, ChannelVec w, ChannelVec b, ChannelVec scale,
                              ChannelVec shift, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double sc = load_any(invstd, c, 0.0) * load_any(w, c, 1.0);
  store_any(scale, c, sc);
  store_any(shift, c, load_any(b, c, 0.0) - load_any(mean, c, 0.0) * sc);
}

// Channel c's d_weight, d_bias and d_input coefficients (k, a, b) from its sums s1 = sum dz and s2 = sum dz * (x - mean).
struct BwdCoeffs {
  double k, a, b;
};
__device__ BwdCoeffs bwd_coeffs_one(const BwdCoeffPtrs& p, int64_t c, double s1, double s2) {
  const double is = load_any(p.invstd, c, 0.0), n = double(p.count);
  const BwdCoeffs r{is * load_any(p.weight, c, 1.0), p.training ? s1 / n : 0.0, p.training ? s2 * is * is / n : 0.0};
  store_any(p.dw, c, s2 * is);
  store_any(p.db, c, s1);
  store_any(p.k, c, r.k);
  store_any(p.a, c, r.a);
  store_any(p.b, c, r.b);
  return r;
}

__global__ void bwd_coeffs_kernel(BwdCoeffPtrs p, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  bwd_coeffs_one(p, c, load_any(p.sum_dz, c, 0.0), load_any(p.sum_dz_xmu, c, 0.0));
}

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn
