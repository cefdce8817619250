// CPU group_norm: each (n, group) is reduced in two passes (mean, then the mean of squared deviations), the sums
// in double whatever the input's type (a float sum over a large group gathers an error that grows with it), then
// written; groups are spread over threads. The backward sums dy * xhat and dy per
// (n, channel), combines them per group for dx, and sums them over n in a fixed order for the weight and
// bias gradients, so results do not depend on the thread count.
#include "group_norm/group_norm_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>

#include <vector>

#include "common/tensor_utils.h"

namespace torch_dnn {
namespace group_norm {

namespace {

// Element (n, c, j) of the dense [N, C, S] input in either layout.
struct Index {
  int64_t C, S;
  bool cl;
  int64_t operator()(int64_t n, int64_t c, int64_t j) const { return cl ? (n * S + j) * C + c : (n * C + c) * S + j; }
};

template <typename T>
void forward_groups(const T* x, const T* w, const T* b, T* y, at::opmath_type<T>* mean, at::opmath_type<T>* rstd,
                    const GnShape& s, double eps, bool stats_given) {
  using A = at::opmath_type<T>;
  const Index at_{s.C, s.S, s.channels_last};
  const int64_t D = s.C / s.G, L = D * s.S;
  const int64_t grain = std::max<int64_t>(1, 32768 / L);
  at::parallel_for(0, s.N * s.G, grain, [&](int64_t begin, int64_t end) {
    for (int64_t ng = begin; ng < end; ++ng) {
      const int64_t n = ng / s.G, c0 = (ng % s.G) * D;
      A m, rs;
      if (stats_given) {
        m = mean[ng];
        rs = rstd[ng];
      } else {
        double sum = 0;
        for (int64_t c = c0; c < c0 + D; ++c)
          for (int64_t j = 0; j < s.S; ++j) sum += double(x[at_(n, c, j)]);
        const double md = sum / double(L);
        double q = 0;
        for (int64_t c = c0; c < c0 + D; ++c)
          for (int64_t j = 0; j < s.S; ++j) {
            const double d = double(x[at_(n, c, j)]) - md;
            q += d * d;
          }
        m = A(md);
        rs = A(1.0 / std::sqrt(q / double(L) + eps));
        mean[ng] = m;
        rstd[ng] = rs;
      }
      for (int64_t c = c0; c < c0 + D; ++c) {
        const A wc = w ? A(w[c]) : A(1), bc = b ? A(b[c]) : A(0);
        for (int64_t j = 0; j < s.S; ++j) {
          const int64_t i = at_(n, c, j);
          y[i] = T((A(x[i]) - m) * rs * wc + bc);
        }
      }
    }
  });
}

template <typename T>
void backward_groups(const T* dy, const T* x, const at::opmath_type<T>* mean, const at::opmath_type<T>* rstd,
                     const T* w, T* dx, T* dw, T* db, const GnShape& s, bool stats_given) {
  using A = at::opmath_type<T>;
  const Index at_{s.C, s.S, s.channels_last};
  const int64_t D = s.C / s.G, L = D * s.S;
  // per (n, c): sum of dy * xhat and of dy
  std::vector<double> p(size_t(s.N * s.C)), q(size_t(s.N * s.C));  // sums in double, as the forward's
  const int64_t grain = std::max<int64_t>(1, 32768 / L);
  at::parallel_for(0, s.N * s.G, grain, [&](int64_t begin, int64_t end) {
    for (int64_t ng = begin; ng < end; ++ng) {
      const int64_t n = ng / s.G, c0 = (ng % s.G) * D;
      const A m = mean[ng], rs = rstd[ng];
      double s1 = 0, s2 = 0;  // sum(g * xhat), sum(g) with g = dy * w
      for (int64_t c = c0; c < c0 + D; ++c) {
        double pc = 0, qc = 0;
        for (int64_t j = 0; j < s.S; ++j) {
          const int64_t i = at_(n, c, j);
          const A g = A(dy[i]);
          pc += double(g * (A(x[i]) - m) * rs);
          qc += double(g);
        }
        p[n * s.C + c] = pc;
        q[n * s.C + c] = qc;
        const double wc = w ? double(w[c]) : 1.0;
        s1 += wc * pc;
        s2 += wc * qc;
      }
      if (!dx) continue;
      // statistics given (constants): dx = rstd * w * dy
      const A c1 = stats_given ? A(0) : A(s1 / double(L)), c2 = stats_given ? A(0) : A(s2 / double(L));
      for (int64_t c = c0; c < c0 + D; ++c) {
        const A wc = w ? A(w[c]) : A(1);
        for (int64_t j = 0; j < s.S; ++j) {
          const int64_t i = at_(n, c, j);
          const A xh = (A(x[i]) - m) * rs;
          dx[i] = T(rs * (A(dy[i]) * wc - xh * c1 - c2));
        }
      }
    }
  });
  if (!dw && !db) return;
  for (int64_t c = 0; c < s.C; ++c) {
    double sw = 0, sb = 0;
    for (int64_t n = 0; n < s.N; ++n) {
      sw += p[n * s.C + c];
      sb += q[n * s.C + c];
    }
    if (dw) dw[c] = T(sw);
    if (db) db[c] = T(sb);
  }
}

}  // namespace

void CpuBackend::forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, at::Tensor& y,
                         at::Tensor& mean, at::Tensor& rstd, const GnShape& s, double eps, bool stats_given) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.group_norm", [&] {
    using A = at::opmath_type<scalar_t>;
    forward_groups<scalar_t>(x.const_data_ptr<scalar_t>(), ptr_or_null<scalar_t>(w), ptr_or_null<scalar_t>(b),
                             y.data_ptr<scalar_t>(), mean.data_ptr<A>(), rstd.data_ptr<A>(), s, eps, stats_given);
  });
}

void CpuBackend::backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
                          const at::Tensor& w, at::Tensor& dx, at::Tensor& dw, at::Tensor& db, const GnShape& s,
                          bool stats_given) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.group_norm_backward", [&] {
    using A = at::opmath_type<scalar_t>;
    backward_groups<scalar_t>(dy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(), mean.const_data_ptr<A>(),
                              rstd.const_data_ptr<A>(), ptr_or_null<scalar_t>(w), ptr_or_null<scalar_t>(dx),
                              ptr_or_null<scalar_t>(dw), ptr_or_null<scalar_t>(db), s, stats_given);
  });
}

}  // namespace group_norm
}  // namespace torch_dnn
