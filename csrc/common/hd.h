// Torch-free basics shared by host (g++) and device (nvcc) code.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TD_HD __host__ __device__ __forceinline__
#else
#define TD_HD inline
#endif

namespace torch_dnn {

// The dtypes our kernels are instantiated for. Launchers map at::ScalarType onto this so that kernel code
// never sees a torch header.
enum class DType : int { Float32 = 0, Float16 = 1, BFloat16 = 2, Float64 = 3 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float64: return "float64";
  }
  return "?";
}

// Math that picks the float or double version by overload, usable on host and device.
TD_HD float td_exp(float x) { return expf(x); }
TD_HD double td_exp(double x) { return exp(x); }
TD_HD float td_expm1(float x) { return expm1f(x); }
TD_HD double td_expm1(double x) { return expm1(x); }
TD_HD float td_log(float x) { return logf(x); }
TD_HD double td_log(double x) { return log(x); }
TD_HD float td_log1p(float x) { return log1pf(x); }
TD_HD double td_log1p(double x) { return log1p(x); }
TD_HD float td_tanh(float x) { return tanhf(x); }
TD_HD double td_tanh(double x) { return tanh(x); }
TD_HD float td_erf(float x) { return erff(x); }
TD_HD double td_erf(double x) { return erf(x); }
// 1/sqrt(x) correctly rounded twice (not the hardware rsqrt), so CPU and GPU agree to an ulp
TD_HD float td_rsqrt(float x) { return 1.0f / sqrtf(x); }
TD_HD double td_rsqrt(double x) { return 1.0 / sqrt(x); }

// exp and log at the hardware units' precision (a few ulp) on the GPU, for results stored in 16 bits, where
// the accurate versions would make the kernel compute-bound; accurate everywhere else.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float td_exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float td_exp_fast(float x) { return __expf(x); }
__device__ __forceinline__ float td_log_fast(float x) { return __logf(x); }
#else
inline float td_exp2_fast(float x) { return exp2f(x); }
inline float td_exp_fast(float x) { return expf(x); }
inline float td_log_fast(float x) { return logf(x); }
#endif
TD_HD double td_exp2_fast(double x) { return exp2(x); }

// 1/x at the hardware unit's precision (1 ulp, denormal results flushed) on the GPU, for results stored in 16
// bits: the IEEE division is a dozen instructions with a slow-path branch, this is one.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float td_rcp_fast(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#else
inline float td_rcp_fast(float x) { return 1.f / x; }
#endif
TD_HD double td_rcp_fast(double x) { return 1.0 / x; }

// The normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2 for results stored in 16 bits: erfc(|z|) by Abramowitz &
// Stegun 7.1.26 (1.5e-7 absolute; one exp, one reciprocal, five FMAs), and Phi from it without the cancellation
// of 1 + erf for negative x. NaN stays NaN; Phi(+inf) = 1, Phi(-inf) = 0.
TD_HD float td_phi_fast(float x) {
  const float z = fabsf(x) * 0.70710678118654752440f;
  const float t = td_rcp_fast(1.f + 0.3275911f * z);
  const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float q = poly * td_exp_fast(-z * z);  // erfc(z)
  return x >= 0.f ? 1.f - 0.5f * q : 0.5f * q;
}
TD_HD double td_phi_fast(double x) { return 0.5 * erfc(-x * 0.70710678118654752440); }
TD_HD double td_exp_fast(double x) { return exp(x); }
TD_HD double td_log_fast(double x) { return log(x); }

}  // namespace torch_dnn
