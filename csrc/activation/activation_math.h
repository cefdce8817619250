// The activation functions and their derivatives, written once for the CPU kernels (g++) and the CUDA
// kernels (nvcc). Torch-free. `T` is the accumulation type (float for float/half/bfloat16, double for double).
// NaN propagates exactly as in PyTorch: comparisons are arranged so that a NaN input takes the branch that
// PyTorch's own kernels take.
#pragma once
#include "common/hd.h"

namespace torch_dnn {
namespace activation {

enum class Act : int {
  Identity = 0,
  Relu,
  Relu6,
  Hardtanh,
  LeakyRelu,
  Elu,
  Gelu,
  GeluTanh,
  Silu,
  Sigmoid,
  Tanh,
  Softplus,
  Mish,
  Hardswish,
  Hardsigmoid,
};

// Scalar parameters of the parameterised activations: hardtanh (a=min, b=max), leaky_relu (a=slope),
// elu (a=alpha), softplus (a=beta, b=threshold). Relu6 is hardtanh(0, 6).
struct ActParams {
  double a = 0.0;
  double b = 0.0;
};

// A dense tensor seen in memory as [outer, C, inner], with bias_act's bias indexed by c.
struct BiasActShape {
  int64_t outer = 1, C = 1, inner = 1;
  TD_HD int64_t numel() const { return outer * C * inner; }
};

// Sigmoid and tanh differentiate through their result (as PyTorch does); every other one through its input.
constexpr bool backward_uses_result(Act k) { return k == Act::Sigmoid || k == Act::Tanh; }

// FAST: the result is stored in 16 bits; transcendental-heavy activations may use td_*_fast.
template <Act K, typename T, bool FAST = false>
TD_HD T act_forward(T x, T a, T b) {
  constexpr T kSqrt1_2 = T(0.70710678118654752440);
  constexpr T kSqrt2OverPi = T(0.79788456080286535588);
  constexpr T kKappa = T(0.044715);
  if constexpr (K == Act::Identity) {
    return x;
  } else if constexpr (K == Act::Relu) {
    return x < T(0) ? T(0) : x;
  } else if constexpr (K == Act::Relu6) {
    return x < T(0) ? T(0) : (x > T(6) ? T(6) : x);
  } else if constexpr (K == Act::Hardtanh) {
    return x < a ? a : (x > b ? b : x);
  } else if constexpr (K == Act::LeakyRelu) {
    return x > T(0) ? x : x * a;
  } else if constexpr (K == Act::Elu) {
    return x > T(0) ? x : a * td_expm1(x);
  } else if constexpr (K == Act::Gelu) {
    if constexpr (FAST) return x * td_phi_fast(x);
    else return T(0.5) * x * (T(1) + td_erf(x * kSqrt1_2));
  } else if constexpr (K == Act::GeluTanh) {
    // (1 + tanh u) / 2 = 1 / (1 + e^(-2u)): one exp and one reciprocal, and no cancellation for negative x
    if constexpr (FAST) return x * td_rcp_fast(T(1) + td_exp_fast(T(-2) * kSqrt2OverPi * (x + kKappa * x * x * x)));
    else return T(0.5) * x * (T(1) + td_tanh(kSqrt2OverPi * (x + kKappa * x * x * x)));
  } else if constexpr (K == Act::Silu) {
    if constexpr (FAST) return x * td_rcp_fast(T(1) + td_exp_fast(-x));
    else return x / (T(1) + td_exp(-x));
  } else if constexpr (K == Act::Sigmoid) {
    if constexpr (FAST) return td_rcp_fast(T(1) + td_exp_fast(-x));
    else return T(1) / (T(1) + td_exp(-x));
  } else if constexpr (K == Act::Tanh) {
    return td_tanh(x);
  } else if constexpr (K == Act::Softplus) {
    if constexpr (FAST) return x * a > b ? x : td_log_fast(T(1) + td_exp_fast(x * a)) / a;
    else return x * a > b ? x : td_log1p(td_exp(x * a)) / a;
  } else if constexpr (K == Act::Mish) {
    // tanh(log1p(e^x)) = n / (n + 2) with n = e^x (e^x + 2): one exp and one division instead of
    // exp + log1p + tanh. Past x = 20 the factor is 1 to the last bit of a double.
    if (x > T(20)) return x;
    const T e = FAST ? td_exp_fast(x) : td_exp(x);
    const T n = e * (e + T(2));
    return x * (n / (n + T(2)));
  } else if constexpr (K == Act::Hardswish) {
    const T r = x + T(3);
    return x * (r < T(0) ? T(0) : (r > T(6) ? T(6) : r)) / T(6);
  } else if constexpr (K == Act::Hardsigmoid) {
    const T r = x + T(3);
    return (r < T(0) ? T(0) : (r > T(6) ? T(6) : r)) / T(6);
  }
}

// d(act)/dx times g. `s` is the saved tensor's value: the input x, or for Sigmoid/Tanh the result y.
template <Act K, typename T, bool FAST = false>
TD_HD T act_backward(T g, T s, T a, T b) {
  constexpr T kSqrt1_2 = T(0.70710678118654752440);
  constexpr T kInvSqrt2Pi = T(0.39894228040143267794);
  constexpr T kSqrt2OverPi = T(0.79788456080286535588);
  constexpr T kKappa = T(0.044715);
  if constexpr (K == Act::Identity) {
    return g;
  } else if constexpr (K == Act::Relu) {
    return s <= T(0) ? T(0) : g;
  } else if constexpr (K == Act::Relu6) {
    return (s <= T(0) || s >= T(6)) ? T(0) : g;
  } else if constexpr (K == Act::Hardtanh) {
    return (s <= a || s >= b) ? T(0) : g;
  } else if constexpr (K == Act::LeakyRelu) {
    return s > T(0) ? g : g * a;
  } else if constexpr (K == Act::Elu) {
    return s <= T(0) ? g * a * td_exp(s) : g;
  } else if constexpr (K == Act::Gelu) {
    // accurate erf here: the fast one made bias_act's backward (32 values a thread in flight) slower
    const T cdf = T(0.5) * (T(1) + td_erf(s * kSqrt1_2));
    const T pdf = td_exp(T(-0.5) * s * s) * kInvSqrt2Pi;
    return g * (cdf + s * pdf);
  } else if constexpr (K == Act::GeluTanh) {
    const T inner = kSqrt2OverPi * (s + kKappa * s * s * s);
    const T t = td_tanh(inner);
    const T left = T(0.5) * s;
    const T right = T(1) + t;
    const T d_inner = kSqrt2OverPi * (T(1) + T(3) * kKappa * s * s);
    return g * (T(0.5) * right + left * (T(1) - t * t) * d_inner);
  } else if constexpr (K == Act::Silu) {
    const T sig = T(1) / (T(1) + td_exp(-s));
    return g * sig * (T(1) + s * (T(1) - sig));
  } else if constexpr (K == Act::Sigmoid) {
    return g * (T(1) - s) * s;
  } else if constexpr (K == Act::Tanh) {
    return g * (T(1) - s * s);
  } else if constexpr (K == Act::Softplus) {
    const T z = td_exp(s * a);
    return s * a > b ? g : g * z / (z + T(1));
  } else if constexpr (K == Act::Mish) {
    // sigmoid(s) = e / (1 + e) and tanh(softplus(s)) = n / (n + 2), n = e (e + 2), from one e = exp(s).
    if (s > T(20)) return g * (T(1) + s * T(0));  // s * 0: NaN at +inf, as PyTorch's formula gives
    const T e = FAST ? td_exp_fast(s) : td_exp(s);
    const T n = e * (e + T(2));
    const T tsp = n / (n + T(2));
    const T sig = e / (T(1) + e);
    return g * (tsp + s * sig * (T(1) - tsp * tsp));
  } else if constexpr (K == Act::Hardswish) {
    return s <= T(-3) ? T(0) : (s < T(3) ? g * (s / T(3) + T(0.5)) : g);
  } else if constexpr (K == Act::Hardsigmoid) {
    return (s > T(-3) && s < T(3)) ? g / T(6) : T(0);
  }
}

// The derivative at input z for every activation: Sigmoid and Tanh recompute their result first. Used where
// the input is what is at hand (bias_act recomputes z = x + bias).
template <Act K, typename T, bool FAST = false>
TD_HD T act_backward_at_input(T g, T z, T a, T b) {
  if constexpr (backward_uses_result(K)) return act_backward<K, T, FAST>(g, act_forward<K, T, FAST>(z, a, b), a, b);
  else return act_backward<K, T, FAST>(g, z, a, b);
}

// Calls f.template operator()<K>() with the activation as a compile-time constant.
template <class F>
auto dispatch_act(Act k, F&& f) {
  switch (k) {
    case Act::Identity: return f.template operator()<Act::Identity>();
    case Act::Relu: return f.template operator()<Act::Relu>();
    case Act::Relu6: return f.template operator()<Act::Relu6>();
    case Act::Hardtanh: return f.template operator()<Act::Hardtanh>();
    case Act::LeakyRelu: return f.template operator()<Act::LeakyRelu>();
    case Act::Elu: return f.template operator()<Act::Elu>();
    case Act::Gelu: return f.template operator()<Act::Gelu>();
    case Act::GeluTanh: return f.template operator()<Act::GeluTanh>();
    case Act::Silu: return f.template operator()<Act::Silu>();
    case Act::Sigmoid: return f.template operator()<Act::Sigmoid>();
    case Act::Tanh: return f.template operator()<Act::Tanh>();
    case Act::Softplus: return f.template operator()<Act::Softplus>();
    case Act::Mish: return f.template operator()<Act::Mish>();
    case Act::Hardswish: return f.template operator()<Act::Hardswish>();
    case Act::Hardsigmoid: return f.template operator()<Act::Hardsigmoid>();
  }
  return f.template operator()<Act::Identity>();
}

}  // namespace activation
}  // namespace torch_dnn
