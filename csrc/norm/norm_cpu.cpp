// CPU layer_norm / rms_norm: each row is reduced in two passes (mean, then the mean of squared deviations: exact
// where one-pass sums of squares cancel), the sums in double whatever the input's type (a float sum over a long
// row gathers an error that grows with the row), then written in the accumulation type. Rows are spread over
// threads. Weight and bias gradients are summed per fixed block of rows, then over blocks in a fixed order,
// so they do not depend on the thread count.
#include "norm/norm_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "common/hd.h"
#include "common/tensor_utils.h"

namespace torch_dnn {
namespace norm {

namespace {

template <typename T>
void forward_rows(const T* x, const T* res, const T* w, const T* b, T* y, T* sum, at::opmath_type<T>* mean,
                  at::opmath_type<T>* rstd, NormShape s, bool rms, double eps) {
  using A = at::opmath_type<T>;
  const int64_t N = s.cols;
  const int64_t grain = std::max<int64_t>(1, 32768 / N);
  at::parallel_for(0, s.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* src = x + r * N;
      if (res) {  // normalize the sum as stored (rounded to T), as add-then-norm does
        T* sr = sum + r * N;
        for (int64_t j = 0; j < N; ++j) sr[j] = T(A(src[j]) + A(res[r * N + j]));
        src = sr;
      }
      double md = 0;
      if (!rms) {
        for (int64_t j = 0; j < N; ++j) md += double(src[j]);
        md /= double(N);
      }
      double v = 0;
      for (int64_t j = 0; j < N; ++j) {
        const double d = double(src[j]) - md;
        v += d * d;
      }
      const A m = A(md), rs = A(1.0 / std::sqrt(v / double(N) + eps));
      if (mean) mean[r] = m;
      rstd[r] = rs;
      T* yr = y + r * N;
      for (int64_t j = 0; j < N; ++j) {
        A o = (A(src[j]) - m) * rs;
        if (w) o *= A(w[j]);
        if (b) o += A(b[j]);
        yr[j] = T(o);
      }
    }
  });
}

constexpr int64_t kRowBlock = 64;  // rows per block of weight-gradient partial sums

template <typename T>
void backward_rows(const T* dy, const T* dsum, const T* x, const at::opmath_type<T>* mean,
                   const at::opmath_type<T>* rstd, const T* w, T* dx, T* dw, T* db, NormShape s) {
  using A = at::opmath_type<T>;
  const int64_t N = s.cols;
  const bool param_grads = dw || db;
  const int64_t P = (s.rows + kRowBlock - 1) / kRowBlock;
  std::vector<double> partial(param_grads ? size_t(P * 2 * N) : 0);  // sums in double, as the forward's
  at::parallel_for(0, P, 1, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      double* pw = param_grads ? partial.data() + blk * 2 * N : nullptr;
      const int64_t r_end = std::min(s.rows, (blk + 1) * kRowBlock);
      for (int64_t r = blk * kRowBlock; r < r_end; ++r) {
        const T* xr = x + r * N;
        const T* gr = dy + r * N;
        const A m = mean ? mean[r] : A(0), rs = rstd[r];
        double s1 = 0, s2 = 0;  // sum(dy * w * xhat), sum(dy * w)
        for (int64_t j = 0; j < N; ++j) {
          const A xh = (A(xr[j]) - m) * rs, g = A(gr[j]);
          const A wg = w ? g * A(w[j]) : g;
          s1 += wg * xh;
          s2 += wg;
          if (pw) {
            pw[j] += g * xh;
            pw[N + j] += g;
          }
        }
        if (!dx) continue;
        const A c1 = A(s1 / double(N)), c2 = mean ? A(s2 / double(N)) : A(0);  // rms_norm has no mean to differentiate
        T* dr = dx + r * N;
        for (int64_t j = 0; j < N; ++j) {
          const A xh = (A(xr[j]) - m) * rs, g = A(gr[j]);
          const A wg = w ? g * A(w[j]) : g;
          A d = rs * (wg - xh * c1 - c2);
          if (dsum) d += A(dsum[r * N + j]);
          dr[j] = T(d);
        }
      }
    }
  });
  if (!param_grads) return;
  at::parallel_for(0, N, 256, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      double sw = 0, sb = 0;
      for (int64_t p = 0; p < P; ++p) {
        sw += partial[p * 2 * N + j];
        sb += partial[p * 2 * N + N + j];
      }
      if (dw) dw[j] = T(sw);
      if (db) db[j] = T(sb);
    }
  });
}

}  // namespace

void CpuBackend::forward(const at::Tensor& x, const at::Tensor& res, const at::Tensor& w, const at::Tensor& b,
                         at::Tensor& y, at::Tensor& sum, at::Tensor& mean, at::Tensor& rstd, NormShape s, bool rms,
                         double eps) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.norm", [&] {
    using A = at::opmath_type<scalar_t>;
    forward_rows<scalar_t>(x.const_data_ptr<scalar_t>(), ptr_or_null<scalar_t>(res), ptr_or_null<scalar_t>(w),
                           ptr_or_null<scalar_t>(b), y.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(sum),
                           ptr_or_null<A>(mean), rstd.data_ptr<A>(), s, rms, eps);
  });
}

void CpuBackend::backward(const at::Tensor& dy, const at::Tensor& dsum, const at::Tensor& x, const at::Tensor& mean,
                          const at::Tensor& rstd, const at::Tensor& w, at::Tensor& dx, at::Tensor& dw, at::Tensor& db,
                          NormShape s, bool rms) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.norm_backward", [&] {
    using A = at::opmath_type<scalar_t>;
    backward_rows<scalar_t>(dy.const_data_ptr<scalar_t>(), ptr_or_null<scalar_t>(dsum), x.const_data_ptr<scalar_t>(),
                            rms ? nullptr : mean.const_data_ptr<A>(), rstd.const_data_ptr<A>(), ptr_or_null<scalar_t>(w),
                            ptr_or_null<scalar_t>(dx), ptr_or_null<scalar_t>(dw), ptr_or_null<scalar_t>(db), s);
  });
}

}  // namespace norm
}  // namespace torch_dnn
