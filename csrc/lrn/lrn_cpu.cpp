// CPU local_response_norm: one thread walks the channels of one (n, position) column; each window sum is
// computed afresh (no running sum, so no cancellation), in the accumulation type.
#include "lrn/lrn_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

namespace torch_dnn {
namespace lrn {

namespace {

// The channel columns both passes walk, one (n, position) each: a column's first element, the channel stride, and
// channel c's window (size / 2 channels before it, (size - 1) / 2 after, clipped to the channels).
struct Columns {
  const LrnShape& s;
  int64_t cs, before, after;
  explicit Columns(const LrnShape& shape)
      : s(shape), cs(shape.channels_last ? 1 : shape.S), before(shape.size / 2), after((shape.size - 1) / 2) {}
  int64_t base(int64_t col) const {
    const int64_t n = col / s.S, j = col % s.S;
    return s.channels_last ? (n * s.S + j) * s.C : n * s.C * s.S + j;
  }
  // the sum of squares of column xc's channels in channel c's window
  template <typename A, typename T>
  A window_sum_sq(const T* xc, int64_t c) const {
    A sum = 0;
    for (int64_t q = std::max<int64_t>(0, c - before); q <= std::min(s.C - 1, c + after); ++q) {
      const A v = A(xc[q * cs]);
      sum += v * v;
    }
    return sum;
  }
  // f(begin, end) over ranges of columns, across threads
  template <class F>
  void parallel(F&& f) const {
    at::parallel_for(0, s.N * s.S, std::max<int64_t>(1, 4096 / s.C), f);
  }
};

template <typename T>
void forward_columns(const T* x, T* y, const LrnShape& s) {
  using A = at::opmath_type<T>;
  const Columns cols(s);
  const int64_t cs = cols.cs;
  const A a = A(s.alpha) / A(s.size), k = A(s.k), nb = -A(s.beta);
  cols.parallel([&](int64_t begin, int64_t end) {
    for (int64_t col = begin; col < end; ++col) {
      const int64_t base = cols.base(col);
      for (int64_t c = 0; c < s.C; ++c) {
        const A sum = cols.window_sum_sq<A>(x + base, c);
        y[base + c * cs] = T(A(x[base + c * cs]) * std::pow(k + a * sum, nb));
      }
    }
  });
}

template <typename T>
void backward_columns(const T* dy, const T* x, T* dx, const LrnShape& s) {
  using A = at::opmath_type<T>;
  const Columns cols(s);
  const int64_t cs = cols.cs, before = cols.before, after = cols.after;
  const A a = A(s.alpha) / A(s.size), k = A(s.k), beta = A(s.beta);
  cols.parallel([&](int64_t begin, int64_t end) {
    std::vector<A> pw(size_t(s.C)), t(size_t(s.C));  // scale^-beta, dy x scale^(-beta-1)
    for (int64_t col = begin; col < end; ++col) {
      const int64_t base = cols.base(col);
      for (int64_t c = 0; c < s.C; ++c) {
        const A scale = k + a * cols.window_sum_sq<A>(x + base, c);
        pw[c] = std::pow(scale, -beta);
        t[c] = A(dy[base + c * cs]) * A(x[base + c * cs]) * pw[c] / scale;
      }
      // input q is in the windows of channels [q - after, q + before]
      for (int64_t q = 0; q < s.C; ++q) {
        A acc = 0;
        for (int64_t c = std::max<int64_t>(0, q - after); c <= std::min(s.C - 1, q + before); ++c) acc += t[c];
        const int64_t i = base + q * cs;
        dx[i] = T(A(dy[i]) * pw[q] - A(2) * a * beta * A(x[i]) * acc);
      }
    }
  });
}

}  // namespace

void CpuBackend::forward(const at::Tensor& x, at::Tensor& y, const LrnShape& s) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.local_response_norm", [&] {
    forward_columns<scalar_t>(x.const_data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), s);
  });
}

void CpuBackend::backward(const at::Tensor& dy, const at::Tensor& x, at::Tensor& dx, const LrnShape& s) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "torch_dnn.local_response_norm_backward",
                                  [&] {
                                    backward_columns<scalar_t>(dy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
                                                               dx.data_ptr<scalar_t>(), s);
                                  });
}

}  // namespace lrn
}  // namespace torch_dnn
