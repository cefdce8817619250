// CPU softmax: each line (o, i) of `dim` elements, `inner` apart, is reduced (max, then sum of exp(x - max))
// in the accumulation type and written in one more pass. Lines are spread over threads. float32 lines with
// inner == 1 (softmax over the last dimension) take contiguous_line_*: exp(x - max) computed once, by the
// vectorisable exp of activation_cpu_vec.h (1 ulp), stored in y and scaled in place; the sums stay sequential.

// exp_f's clamps and the backward's selects vectorise only because GCC may assume that no float operation traps
// (-fno-trapping-math, setup.py).

#include "softmax/softmax_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "activation/activation_cpu_vec.h"

namespace torch_dnn {
namespace softmax {

namespace {

// One contiguous float line: y = softmax(x) or log_softmax(x).
inline void contiguous_line_forward(const float* __restrict x, float* __restrict y, int64_t n, bool log) {
  using activation::cpu_vec::exp_f;
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t d = 0; d < n; ++d) {
    const float v = x[d];
    if (std::isnan(v) || v > m) m = v;
    if (std::isnan(m)) break;
  }
  if (log) {
    float sum = 0;
    for (int64_t d0 = 0; d0 < n; d0 += 256) {
      float e[256];
      const int64_t b = std::min<int64_t>(256, n - d0);
      for (int64_t d = 0; d < b; ++d) e[d] = exp_f(x[d0 + d] - m);
      for (int64_t d = 0; d < b; ++d) sum += e[d];
    }
    const float log_sum = std::log(sum);
    for (int64_t d = 0; d < n; ++d) y[d] = x[d] - m - log_sum;
  } else {
    for (int64_t d = 0; d < n; ++d) y[d] = exp_f(x[d] - m);
    float sum = 0;
    for (int64_t d = 0; d < n; ++d) sum += y[d];
    const float inv = 1.f / sum;
    for (int64_t d = 0; d < n; ++d) y[d] *= inv;
  }
}

// One contiguous float line of the backward.
inline void contiguous_line_backward(const float* __restrict g, const float* __restrict y, float* __restrict dx,
                                     int64_t n, bool log) {
  using activation::cpu_vec::exp_f;
  float sum = 0;
  if (log) {
    for (int64_t d = 0; d < n; ++d) sum += g[d];
    for (int64_t d = 0; d < n; ++d) dx[d] = g[d] - exp_f(y[d]) * sum;
  } else {
    for (int64_t d = 0; d < n; ++d) sum += g[d] * y[d];
    for (int64_t d = 0; d < n; ++d) dx[d] = y[d] * (g[d] - sum);
  }
}

template <typename Ti, typename To>
void forward_lines(const Ti* x, To* y, SoftmaxShape s, bool log) {
  using A = at::opmath_type<Ti>;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.dim));
  at::parallel_for(0, s.outer * s.inner, grain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<Ti, float> && std::is_same_v<To, float>) {
      if (s.inner == 1) {
        for (int64_t line = begin; line < end; ++line) contiguous_line_forward(x + line * s.dim, y + line * s.dim, s.dim, log);
        return;
      }
    }
    for (int64_t line = begin; line < end; ++line) {
      const int64_t o = line / s.inner, i = line % s.inner;
      const Ti* xp = x + o * s.dim * s.inner + i;
      To* yp = y + o * s.dim * s.inner + i;
      A m = -std::numeric_limits<A>::infinity();
      for (int64_t d = 0; d < s.dim; ++d) {
        const A v = A(xp[d * s.inner]);
        if (std::isnan(v) || v > m) m = v;
        if (std::isnan(m)) break;
      }
      A sum = 0;
      for (int64_t d = 0; d < s.dim; ++d) sum += std::exp(A(xp[d * s.inner]) - m);
      if (log) {
        const A log_sum = std::log(sum);
        for (int64_t d = 0; d < s.dim; ++d) yp[d * s.inner] = To(A(xp[d * s.inner]) - m - log_sum);
      } else {
        const A inv = A(1) / sum;
        for (int64_t d = 0; d < s.dim; ++d) yp[d * s.inner] = To(std::exp(A(xp[d * s.inner]) - m) * inv);
      }
    }
  });
}

template <typename Ti, typename To>
void backward_lines(const To* g, const To* y, Ti* dx, SoftmaxShape s, bool log) {
  using A = at::opmath_type<To>;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.dim));
  at::parallel_for(0, s.outer * s.inner, grain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<Ti, float> && std::is_same_v<To, float>) {
      if (s.inner == 1) {
        for (int64_t line = begin; line < end; ++line)
          contiguous_line_backward(g + line * s.dim, y + line * s.dim, dx + line * s.dim, s.dim, log);
        return;
      }
    }
    for (int64_t line = begin; line < end; ++line) {
      const int64_t o = line / s.inner, i = line % s.inner;
      const int64_t base = o * s.dim * s.inner + i;
      A sum = 0;
      for (int64_t d = 0; d < s.dim; ++d) {
        const A gv = A(g[base + d * s.inner]);
        sum += log ? gv : gv * A(y[base + d * s.inner]);
      }
      for (int64_t d = 0; d < s.dim; ++d) {
        const A gv = A(g[base + d * s.inner]), yv = A(y[base + d * s.inner]);
        dx[base + d * s.inner] = Ti(log ? gv - std::exp(yv) * sum : yv * (gv - sum));
      }
    }
  });
}

}  // namespace

void CpuBackend::forward(const at::Tensor& x, at::Tensor& y, SoftmaxShape s, bool log) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.softmax", [&] {
    if (y.scalar_type() == x.scalar_type()) {
      forward_lines<scalar_t, scalar_t>(x.const_data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), s, log);
    } else {
      TORCH_INTERNAL_ASSERT(y.scalar_type() == at::kFloat);
      forward_lines<scalar_t, float>(x.const_data_ptr<scalar_t>(), y.data_ptr<float>(), s, log);
    }
  });
}

void CpuBackend::backward(const at::Tensor& g, const at::Tensor& y, at::Tensor& dx, SoftmaxShape s, bool log) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dx.scalar_type(), "torch_dnn.softmax_backward", [&] {
    if (y.scalar_type() == dx.scalar_type()) {
      backward_lines<scalar_t, scalar_t>(g.const_data_ptr<scalar_t>(), y.const_data_ptr<scalar_t>(),
                                         dx.data_ptr<scalar_t>(), s, log);
    } else {
      TORCH_INTERNAL_ASSERT(y.scalar_type() == at::kFloat);
      backward_lines<scalar_t, float>(g.const_data_ptr<float>(), y.const_data_ptr<float>(), dx.data_ptr<scalar_t>(), s, log);
    }
  });
}

}  // namespace softmax
}  // namespace torch_dnn
