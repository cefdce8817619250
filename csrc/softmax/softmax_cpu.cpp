// CPU softmax: each line (o, i) of `dim` elements, `inner` apart, is reduced (max, then sum of exp(x - max))
// in the accumulation type and written in one more pass. Lines are spread over threads.
#include "softmax/softmax_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

namespace torch_dnn {
namespace softmax {

namespace {

template <typename Ti, typename To>
void forward_lines(const Ti* x, To* y, SoftmaxShape s, bool log) {
  using A = at::opmath_type<Ti>;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.dim));
  at::parallel_for(0, s.outer * s.inner, grain, [&](int64_t begin, int64_t end) {
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
