// CPU kernels: at::parallel_for over dense memory. Each task stages its elements through local buffers of
// kBlock values in the accumulation type (float for half/bfloat16) and runs activation_math.h's formulas over a
// buffer in a loop the compiler vectorises: float through VecFloat (activation_cpu_vec.h: the same arithmetic,
// with exp, expm1, log1p, tanh and erf that vectorise), double through libm, scalar where it calls libm, so that
// float64 is as exact as libm. The buffers also keep the in-place form (y is x) and the parameters out of the
// vectoriser's aliasing analysis. On x86-64 every block loop is compiled twice, for the baseline ISA and for
// AVX2, and picked at run time (cpu_isa.h).

// The formulas' ternaries (x > 0 ? x : a * expm1(x)) vectorise only because GCC may assume that no float operation
// traps (-fno-trapping-math, setup.py).

#include "activation/activation_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "activation/activation_cpu_vec.h"
#include "activation/cpu_isa.h"

namespace torch_dnn {
namespace activation {
namespace {

constexpr int64_t kGrain = 32768;
constexpr int64_t kBlock = 256;

// The type the formulas run in: VecFloat for float (vectorisable transcendentals), the type itself otherwise.
template <typename A>
struct MathType {
  using type = A;
};
template <>
struct MathType<float> {
  using type = cpu_vec::VecFloat;
};
TD_VEC_INLINE float unwrap(cpu_vec::VecFloat v) { return v.v; }
TD_VEC_INLINE double unwrap(double v) { return v; }

// y[begin, end) = act(x)
template <Act K, typename T>
struct ForwardSpan {
  using A = at::opmath_type<T>;
  static TD_VEC_INLINE void run(const T* x, T* y, int64_t begin, int64_t end, A a, A b) {
    using V = typename MathType<A>::type;
    const V va(a), vb(b);
    alignas(64) A in[kBlock], out[kBlock];
    for (int64_t i0 = begin; i0 < end; i0 += kBlock) {
      const int64_t m = std::min(kBlock, end - i0);
      for (int64_t j = 0; j < m; ++j) in[j] = A(x[i0 + j]);
      for (int64_t j = 0; j < m; ++j) out[j] = unwrap(act_forward<K, V>(V(in[j]), va, vb));
      for (int64_t j = 0; j < m; ++j) y[i0 + j] = T(out[j]);
    }
  }
};

// d[begin, end) = act'(s) g, s the saved input (or result, for sigmoid and tanh)
template <Act K, typename T>
struct BackwardSpan {
  using A = at::opmath_type<T>;
  static TD_VEC_INLINE void run(const T* g, const T* s, T* d, int64_t begin, int64_t end, A a, A b) {
    using V = typename MathType<A>::type;
    const V va(a), vb(b);
    alignas(64) A gb[kBlock], sb[kBlock], out[kBlock];
    for (int64_t i0 = begin; i0 < end; i0 += kBlock) {
      const int64_t m = std::min(kBlock, end - i0);
      for (int64_t j = 0; j < m; ++j) gb[j] = A(g[i0 + j]);
      for (int64_t j = 0; j < m; ++j) sb[j] = A(s[i0 + j]);
      for (int64_t j = 0; j < m; ++j) out[j] = unwrap(act_backward<K, V>(V(gb[j]), V(sb[j]), va, vb));
      for (int64_t j = 0; j < m; ++j) d[i0 + j] = T(out[j]);
    }
  }
};

// Rows [r0, r1) of bias_act's [outer, C, inner] view: y = act(x + bias[c]). The bias value of each element is
// laid out alongside it in a buffer (one counter walk), so that any inner, 1 included, runs in the vector loop.
template <Act K, typename T>
struct BiasForwardRows {
  using A = at::opmath_type<T>;
  static TD_VEC_INLINE void run(const T* x, const T* bias, T* y, BiasActShape s, int64_t r0, int64_t r1, A a, A b) {
    using V = typename MathType<A>::type;
    const V va(a), vb(b);
    alignas(64) A in[kBlock], bv[kBlock], out[kBlock];
    int64_t c = r0 % s.C, k = 0;  // the channel of the next element, and its position in its row
    for (int64_t i0 = r0 * s.inner; i0 < r1 * s.inner; i0 += kBlock) {
      const int64_t m = std::min(kBlock, r1 * s.inner - i0);
      for (int64_t j = 0; j < m; ++j) in[j] = A(x[i0 + j]);
      for (int64_t j = 0; j < m; ++j) {
        bv[j] = bias ? A(bias[c]) : A(0);
        if (++k == s.inner) k = 0, c = c + 1 == s.C ? 0 : c + 1;
      }
      for (int64_t j = 0; j < m; ++j) out[j] = unwrap(act_forward<K, V>(V(in[j]) + V(bv[j]), va, vb));
      for (int64_t j = 0; j < m; ++j) y[i0 + j] = T(out[j]);
    }
  }
};

// Rows [r0, r1) of bias_act's backward: dx = act'(x + bias[c]) g, and each row's sum of the unrounded dx, added
// in element order, to row_sums[r] (when row_sums is not null).
template <Act K, typename T>
struct BiasBackwardRows {
  using A = at::opmath_type<T>;
  static TD_VEC_INLINE void run(const T* g, const T* x, const T* bias, T* d, A* row_sums, BiasActShape s, int64_t r0,
                                int64_t r1, A a, A b) {
    using V = typename MathType<A>::type;
    const V va(a), vb(b);
    alignas(64) A gb[kBlock], in[kBlock], bv[kBlock], out[kBlock];
    int64_t r = r0, c = r0 % s.C, k = 0;  // the row and channel of the next element, and its position in the row
    for (int64_t i0 = r0 * s.inner; i0 < r1 * s.inner; i0 += kBlock) {
      const int64_t m = std::min(kBlock, r1 * s.inner - i0);
      for (int64_t j = 0; j < m; ++j) gb[j] = A(g[i0 + j]);
      for (int64_t j = 0; j < m; ++j) in[j] = A(x[i0 + j]);
      const int64_t r_block = r, k_block = k;
      for (int64_t j = 0; j < m; ++j) {
        bv[j] = bias ? A(bias[c]) : A(0);
        if (++k == s.inner) k = 0, ++r, c = c + 1 == s.C ? 0 : c + 1;
      }
      for (int64_t j = 0; j < m; ++j)
        out[j] = unwrap(act_backward_at_input<K, V>(V(gb[j]), V(in[j]) + V(bv[j]), va, vb));
      for (int64_t j = 0; j < m; ++j) d[i0 + j] = T(out[j]);
      if (row_sums == nullptr) continue;
      int64_t rr = r_block, kk = k_block;
      for (int64_t j = 0; j < m; ++j) {
        if (kk == 0) row_sums[rr] = A(0);
        row_sums[rr] += out[j];
        if (++kk == s.inner) kk = 0, ++rr;
      }
    }
  }
};

using cpu_isa::run_kernel;

}  // namespace

void CpuBackend::forward(const at::Tensor& x, at::Tensor& y, Act k, ActParams p) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.activation", [&] {
    using A = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    const A a = A(p.a), b = A(p.b);
    dispatch_act(k, [&]<Act K>() {
      at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
        run_kernel<ForwardSpan<K, scalar_t>>(xp, yp, begin, end, a, b);
      });
    });
  });
}

void CpuBackend::backward(const at::Tensor& g, const at::Tensor& s, at::Tensor& dx, Act k, ActParams p) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, s.scalar_type(), "torch_dnn.activation_backward", [&] {
    using A = at::opmath_type<scalar_t>;
    const scalar_t* gp = g.const_data_ptr<scalar_t>();
    const scalar_t* sp = s.const_data_ptr<scalar_t>();
    scalar_t* dp = dx.data_ptr<scalar_t>();
    const A a = A(p.a), b = A(p.b);
    dispatch_act(k, [&]<Act K>() {
      at::parallel_for(0, s.numel(), kGrain, [&](int64_t begin, int64_t end) {
        run_kernel<BackwardSpan<K, scalar_t>>(gp, sp, dp, begin, end, a, b);
      });
    });
  });
}

void CpuBackend::bias_act_forward(const at::Tensor& x, const at::Tensor& bias, at::Tensor& y, BiasActShape s, Act k,
                                  ActParams p) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.bias_act", [&] {
    using A = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* bp = bias.defined() ? bias.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* yp = y.data_ptr<scalar_t>();
    const A a = A(p.a), b = A(p.b);
    dispatch_act(k, [&]<Act K>() {
      // Tasks of whole [c, inner] rows.
      at::parallel_for(0, s.outer * s.C, std::max<int64_t>(1, kGrain / s.inner), [&](int64_t begin, int64_t end) {
        run_kernel<BiasForwardRows<K, scalar_t>>(xp, bp, yp, s, begin, end, a, b);
      });
    });
  });
}

void CpuBackend::bias_act_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& bias, at::Tensor& dx,
                                   at::Tensor& dbias, BiasActShape s, Act k, ActParams p) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.bias_act_backward", [&] {
    using A = at::opmath_type<scalar_t>;
    const scalar_t* gp = g.const_data_ptr<scalar_t>();
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* bp = bias.defined() ? bias.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* dp = dx.data_ptr<scalar_t>();
    const A a = A(p.a), b = A(p.b);
    // dbias[c] sums the unrounded grad_input over outer and inner (one rounding, at the end): each [c, inner]
    // row's sum goes to row_sums, then the rows of one c are added in a fixed order.
    std::vector<A> row_sums(dbias.defined() ? s.outer * s.C : 0);
    dispatch_act(k, [&]<Act K>() {
      A* sums = row_sums.empty() ? nullptr : row_sums.data();
      at::parallel_for(0, s.outer * s.C, std::max<int64_t>(1, kGrain / s.inner), [&](int64_t begin, int64_t end) {
        run_kernel<BiasBackwardRows<K, scalar_t>>(gp, xp, bp, dp, sums, s, begin, end, a, b);
      });
    });
    if (!dbias.defined()) return;
    scalar_t* dbp = dbias.data_ptr<scalar_t>();
    for (int64_t c = 0; c < s.C; ++c) {
      A acc = A(0);
      for (int64_t o = 0; o < s.outer; ++o) acc += row_sums[o * s.C + c];
      dbp[c] = scalar_t(acc);
    }
  });
}

}  // namespace activation
}  // namespace torch_dnn
