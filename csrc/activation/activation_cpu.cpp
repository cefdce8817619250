// CPU kernels: flat loops over dense memory with at::parallel_for, math from activation_math.h in the
// accumulation type (float for half/bfloat16).
#include "activation/activation_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <vector>

namespace torch_dnn {
namespace activation {

constexpr int64_t kGrain = 32768;

void CpuBackend::forward(const at::Tensor& x, at::Tensor& y, Act k, ActParams p) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.activation", [&] {
    using A = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    const A a = A(p.a), b = A(p.b);
    dispatch_act(k, [&]<Act K>() {
      at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) yp[i] = scalar_t(act_forward<K, A>(A(xp[i]), a, b));
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
        for (int64_t i = begin; i < end; ++i) dp[i] = scalar_t(act_backward<K, A>(A(gp[i]), A(sp[i]), a, b));
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
      // One task per [c, inner] row: the bias is one value along it.
      at::parallel_for(0, s.outer * s.C, std::max<int64_t>(1, kGrain / s.inner), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const A bv = bp ? A(bp[r % s.C]) : A(0);
          for (int64_t i = r * s.inner; i < (r + 1) * s.inner; ++i) yp[i] = scalar_t(act_forward<K, A>(A(xp[i]) + bv, a, b));
        }
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
      at::parallel_for(0, s.outer * s.C, std::max<int64_t>(1, kGrain / s.inner), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const A bv = bp ? A(bp[r % s.C]) : A(0);
          A acc = A(0);
          for (int64_t i = r * s.inner; i < (r + 1) * s.inner; ++i) {
            const A d = act_backward_at_input<K, A>(A(gp[i]), A(xp[i]) + bv, a, b);
            dp[i] = scalar_t(d);
            acc += d;
          }
          if (!row_sums.empty()) row_sums[r] = acc;
        }
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
