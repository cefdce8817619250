// A float that GCC's loop vectoriser sees through, for the CPU activation kernels. activation_math.h's formulas
// instantiated with VecFloat do exactly the float arithmetic they do with float (same operations, same order,
// same comparisons, so the same NaN and infinity behaviour), except that td_exp, td_expm1, td_log1p, td_tanh and
// td_erf resolve (by argument-dependent lookup) to the branch-free versions below instead of libm's calls, which
// no loop around them can vectorise. Torch-free.
//
// Accuracy, float32, against the correctly rounded result: exp and expm1 about 1 ulp (Cephes' expf polynomial),
// log1p and tanh 1-2.5 ulp (Cephes' logf and tanhf), erf 3.5 ulp (its Taylor series below |x| = 1, above it
// Abramowitz & Stegun 7.1.26, 2e-7 absolute: the formula of PyTorch's own vectorised CPU erf). NaN in, NaN out;
// the infinities give the limits libm gives.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

#include "activation/activation_math.h"

#if defined(__GNUC__)
#define TD_VEC_INLINE inline __attribute__((always_inline))
#else
#define TD_VEC_INLINE inline
#endif

namespace torch_dnn {
namespace activation {
namespace cpu_vec {

struct VecFloat {
  float v;
  VecFloat() = default;
  template <typename U>
  constexpr explicit VecFloat(U u) : v(static_cast<float>(u)) {}
};

TD_VEC_INLINE constexpr VecFloat operator+(VecFloat a, VecFloat b) { return VecFloat(a.v + b.v); }
TD_VEC_INLINE constexpr VecFloat operator-(VecFloat a, VecFloat b) { return VecFloat(a.v - b.v); }
TD_VEC_INLINE constexpr VecFloat operator*(VecFloat a, VecFloat b) { return VecFloat(a.v * b.v); }
TD_VEC_INLINE constexpr VecFloat operator/(VecFloat a, VecFloat b) { return VecFloat(a.v / b.v); }
TD_VEC_INLINE constexpr VecFloat operator-(VecFloat a) { return VecFloat(-a.v); }
TD_VEC_INLINE constexpr bool operator<(VecFloat a, VecFloat b) { return a.v < b.v; }
TD_VEC_INLINE constexpr bool operator>(VecFloat a, VecFloat b) { return a.v > b.v; }
TD_VEC_INLINE constexpr bool operator<=(VecFloat a, VecFloat b) { return a.v <= b.v; }
TD_VEC_INLINE constexpr bool operator>=(VecFloat a, VecFloat b) { return a.v >= b.v; }

TD_VEC_INLINE float from_bits(int32_t i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
TD_VEC_INLINE int32_t to_bits(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}
TD_VEC_INLINE float abs_f(float x) { return from_bits(to_bits(x) & 0x7fffffff); }
// |m| with the sign of s
TD_VEC_INLINE float with_sign_of(float m, float s) {
  return from_bits((to_bits(m) & 0x7fffffff) | (to_bits(s) & int32_t(0x80000000u)));
}
// 2^n for n in [-126, 127]
TD_VEC_INLINE float pow2i(int32_t n) { return from_bits((n + 127) << 23); }
// x rounded to the nearest integer (ties to even) for |x| < 2^22: no SSE4.1 round instruction needed
TD_VEC_INLINE float round_small(float x) { return (x + 12582912.f) - 12582912.f; }

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi exact in 9 bits

// e^r - 1 - r over r^2 for |r| <= ln2 / 2 (Cephes expf)
TD_VEC_INLINE float exp_poly(float r) {
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p;
}

TD_VEC_INLINE float exp_f(float x) {
  // clamped to where e^x is 0 and infinite (NaN goes to the lower bound here and is restored at the end)
  float xc = x > -105.f ? x : -105.f;
  xc = xc < 89.f ? xc : 89.f;
  const float n = round_small(xc * kLog2e);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  const float er = exp_poly(r) * (r * r) + r + 1.f;
  // 2^n in two factors, so that n in [-152, 129] needs no denormal or infinite factor: the product rounds once
  const int32_t ni = static_cast<int32_t>(n), n1 = ni >> 1;
  const float y = er * pow2i(n1) * pow2i(ni - n1);
  return x != x ? x : y;
}

TD_VEC_INLINE float expm1_f(float x) {
  // below -87, e^x - 1 rounds to -1; above 89, it is infinite
  float xc = x > -87.f ? x : -87.f;
  xc = xc < 89.f ? xc : 89.f;
  const float n = round_small(xc * kLog2e);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  const float em = exp_poly(r) * (r * r) + r;  // e^r - 1, no cancellation near 0
  const int32_t ni = static_cast<int32_t>(n);  // in [-126, 129]
  // small n: 2^n (e^r - 1) + (2^n - 1), exact at n = 0; large n: e^x itself (the -1 is below its ulp)
  const float s = pow2i(ni < 25 ? ni : 25);
  const float small = s * em + (s - 1.f);
  const int32_t n1 = ni >> 1;
  const float large = (em + 1.f) * pow2i(n1) * pow2i(ni - n1) - 1.f;
  const float y = ni < 25 ? small : large;
  return x != x ? x : y;
}

// log(u) for u in [FLT_MIN, FLT_MAX] (Cephes logf)
TD_VEC_INLINE float log_normal(float u) {
  const int32_t ib = to_bits(u);
  int32_t e = ((ib >> 23) & 0xff) - 126;
  float m = from_bits((ib & 0x007fffff) | 0x3f000000);  // u = m 2^e, m in [1/2, 1)
  const bool low = m < 0.707106781186547524f;
  e = low ? e - 1 : e;
  m = low ? (m + m) - 1.f : m - 1.f;
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m + -1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m + -1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m + -1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m + -2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  const float fe = static_cast<float>(e);
  float y = p * m * z;
  y = y + fe * kLn2Lo;
  y = y - 0.5f * z;
  return (m + y) + fe * kLn2Hi;
}

TD_VEC_INLINE float log1p_f(float x) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float u = 1.f + x;
  const float lu = log_normal(u > 0.f && u < inf ? u : 1.f);
  // log(u) x / (u - 1) corrects for the rounding of 1 + x (Goldberg); where 1 + x rounds to 1, log1p(x) = x
  float y = u == 1.f ? x : lu * (x / (u - 1.f));
  y = u == inf ? inf : y;
  y = u == 0.f ? -inf : y;
  y = u < 0.f ? std::numeric_limits<float>::quiet_NaN() : y;
  return x != x ? x : y;
}

TD_VEC_INLINE float tanh_f(float x) {
  const float ax = abs_f(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z + -5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z + -3.33332819422e-1f;
  const float small = p * z * x + x;
  const float large = with_sign_of(1.f - 2.f / (exp_f(ax + ax) + 1.f), x);
  const float y = ax < 0.625f ? small : large;
  return x != x ? x : y;
}

TD_VEC_INLINE float erf_f(float x) {
  const float ax = abs_f(x);
  // |x| < 1: x (2 / sqrt pi) sum_n (-x^2)^n / (n! (2n + 1)), to n = 12
  const float z = x * x;
  float p = 9.422759064650411e-11f;
  p = p * z + -1.2290555301717926e-09f;
  p = p * z + 1.4807192815879218e-08f;
  p = p * z + -1.6365844691234924e-07f;
  p = p * z + 1.6462114365889246e-06f;
  p = p * z + -1.492565035840625e-05f;
  p = p * z + 1.2055332981789664e-04f;
  p = p * z + -8.548327023450852e-04f;
  p = p * z + 5.223977625442188e-03f;
  p = p * z + -2.6866170645131252e-02f;
  p = p * z + 1.1283791670955126e-01f;
  p = p * z + -3.7612638903183754e-01f;
  p = p * z + 1.1283791670955126f;
  const float small = p * x;
  // |x| >= 1: 1 - (a1 t + ... + a5 t^5) e^(-x^2), t = 1 / (1 + p |x|)
  const float t = 1.f / (0.3275911f * ax + 1.f);
  float q = 1.061405429f;
  q = q * t + -1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t + -0.284496736f;
  q = q * t + 0.254829592f;
  const float large = with_sign_of(1.f - q * t * exp_f(-z), x);
  const float y = ax < 1.f ? small : large;
  return x != x ? x : y;
}

TD_VEC_INLINE VecFloat td_exp(VecFloat x) { return VecFloat(exp_f(x.v)); }
TD_VEC_INLINE VecFloat td_expm1(VecFloat x) { return VecFloat(expm1_f(x.v)); }
TD_VEC_INLINE VecFloat td_log1p(VecFloat x) { return VecFloat(log1p_f(x.v)); }
TD_VEC_INLINE VecFloat td_tanh(VecFloat x) { return VecFloat(tanh_f(x.v)); }
TD_VEC_INLINE VecFloat td_erf(VecFloat x) { return VecFloat(erf_f(x.v)); }
// named by Mish's formula outside an `if constexpr`; the CPU kernels never take the FAST path
TD_VEC_INLINE VecFloat td_exp_fast(VecFloat x) { return VecFloat(exp_f(x.v)); }

}  // namespace cpu_vec
}  // namespace activation
}  // namespace torch_dnn
