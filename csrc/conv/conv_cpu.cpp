// CPU convolution: direct loops over conv_kernels.h's 3-D problem (1-D and 2-D ones have unit leading dims), every
// operand read through its strides. Each pass owns a disjoint part of its result, so threads never share an
// accumulator and the result does not depend on the thread count:
//   fprop: one (n, k) output plane per task, accumulated over the group's channels and the taps;
//   dgrad: one (n, c) input plane per task, the output gradient scattered back through each tap;
//   wgrad: one (k, c) filter per task, a sum over the batch and the output positions for each tap.
// The innermost loop runs along the output's last spatial dim (contiguous in NCHW; the channel stride apart in
// channels-last) over the positions whose tap lands inside the input, so no bounds test sits inside it.
#include "conv/conv_cpu.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace torch_dnn {
namespace conv {

namespace {

// The output positions o in [lo, hi) whose input position o * stride + off lies in [0, in).
struct Range {
  int64_t lo, hi;
};
inline Range inside(int64_t in, int64_t out, int64_t stride, int64_t off) {
  const int64_t lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  const int64_t last = in - 1 - off;  // o * stride <= last
  const int64_t hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  return {std::min(lo, hi), hi};
}

// Element offsets of the three spatial dims of an operand.
inline int64_t at3(const int64_t* st, int64_t a, int64_t b, int64_t c) { return a * st[2] + b * st[3] + c * st[4]; }

template <typename T>
void fprop(const ConvArgs& a) {
  using A = at::opmath_type<T>;
  const ConvGeometry& g = a.g;
  const T* x = static_cast<const T*>(a.x.ptr);
  const T* w = static_cast<const T*>(a.w.ptr);
  T* y = static_cast<T*>(a.y.ptr);
  const T* bias = static_cast<const T*>(a.bias);
  const int64_t *xs = a.x.stride, *ws = a.w.stride, *ys = a.y.stride;
  const int64_t Cg = g.c_per_group(), Kg = g.k_per_group();
  const int64_t P = g.out[0], Q = g.out[1], O = g.out[2];
  at::parallel_for(0, g.N * g.K, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(size_t(P * Q * O));
    for (int64_t nk = begin; nk < end; ++nk) {
      const int64_t n = nk / g.K, k = nk % g.K, c0 = (k / Kg) * Cg;
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t cc = 0; cc < Cg; ++cc) {
        const T* xc = x + n * xs[0] + (c0 + cc) * xs[1];
        const T* wk = w + k * ws[0] + cc * ws[1];
        for (int64_t t = 0; t < g.ker[0]; ++t) {
          const int64_t off0 = t * g.dil[0] - g.pad[0];
          const Range rp = inside(g.in[0], P, g.stride[0], off0);
          for (int64_t r = 0; r < g.ker[1]; ++r) {
            const int64_t off1 = r * g.dil[1] - g.pad[1];
            const Range rq = inside(g.in[1], Q, g.stride[1], off1);
            for (int64_t s = 0; s < g.ker[2]; ++s) {
              const int64_t off2 = s * g.dil[2] - g.pad[2];
              const Range ro = inside(g.in[2], O, g.stride[2], off2);
              if (ro.lo >= ro.hi) continue;
              const A wv = A(wk[at3(ws, t, r, s)]);
              const int64_t step = g.stride[2] * xs[4], n_o = ro.hi - ro.lo;
              for (int64_t p = rp.lo; p < rp.hi; ++p) {
                for (int64_t q = rq.lo; q < rq.hi; ++q) {
                  const T* xr = xc + at3(xs, p * g.stride[0] + off0, q * g.stride[1] + off1,
                                         ro.lo * g.stride[2] + off2);
                  A* ar = acc.data() + (p * Q + q) * O + ro.lo;
                  for (int64_t o = 0; o < n_o; ++o) ar[o] += wv * A(xr[o * step]);
                }
              }
            }
          }
        }
      }
      const A b = bias != nullptr ? A(bias[k]) : A(0);
      T* yk = y + n * ys[0] + k * ys[1];
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          const A* ar = acc.data() + (p * Q + q) * O;
          T* yr = yk + at3(ys, p, q, 0);
          for (int64_t o = 0; o < O; ++o) yr[o * ys[4]] = T(ar[o] + b);
        }
    }
  });
}

template <typename T>
void dgrad(const ConvArgs& a) {
  using A = at::opmath_type<T>;
  const ConvGeometry& g = a.g;
  T* dx = static_cast<T*>(a.x.ptr);
  const T* w = static_cast<const T*>(a.w.ptr);
  const T* dy = static_cast<const T*>(a.y.ptr);
  const int64_t *xs = a.x.stride, *ws = a.w.stride, *ys = a.y.stride;
  const int64_t Cg = g.c_per_group(), Kg = g.k_per_group();
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  const int64_t P = g.out[0], Q = g.out[1], O = g.out[2];
  at::parallel_for(0, g.N * g.C, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(size_t(D * H * W));
    for (int64_t nc = begin; nc < end; ++nc) {
      const int64_t n = nc / g.C, c = nc % g.C, cc = c % Cg, k0 = (c / Cg) * Kg;
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t kk = 0; kk < Kg; ++kk) {
        const T* dyk = dy + n * ys[0] + (k0 + kk) * ys[1];
        const T* wk = w + (k0 + kk) * ws[0] + cc * ws[1];
        for (int64_t t = 0; t < g.ker[0]; ++t) {
          const int64_t off0 = t * g.dil[0] - g.pad[0];
          const Range rp = inside(D, P, g.stride[0], off0);
          for (int64_t r = 0; r < g.ker[1]; ++r) {
            const int64_t off1 = r * g.dil[1] - g.pad[1];
            const Range rq = inside(H, Q, g.stride[1], off1);
            for (int64_t s = 0; s < g.ker[2]; ++s) {
              const int64_t off2 = s * g.dil[2] - g.pad[2];
              const Range ro = inside(W, O, g.stride[2], off2);
              if (ro.lo >= ro.hi) continue;
              const A wv = A(wk[at3(ws, t, r, s)]);
              const int64_t n_o = ro.hi - ro.lo, sw = g.stride[2];
              for (int64_t p = rp.lo; p < rp.hi; ++p) {
                for (int64_t q = rq.lo; q < rq.hi; ++q) {
                  const T* dr = dyk + at3(ys, p, q, ro.lo);
                  A* ar = acc.data() + ((p * g.stride[0] + off0) * H + q * g.stride[1] + off1) * W + ro.lo * sw + off2;
                  for (int64_t o = 0; o < n_o; ++o) ar[o * sw] += wv * A(dr[o * ys[4]]);
                }
              }
            }
          }
        }
      }
      T* dxc = dx + n * xs[0] + c * xs[1];
      for (int64_t d = 0; d < D; ++d)
        for (int64_t h = 0; h < H; ++h) {
          const A* ar = acc.data() + (d * H + h) * W;
          T* xr = dxc + at3(xs, d, h, 0);
          for (int64_t i = 0; i < W; ++i) xr[i * xs[4]] = T(ar[i]);
        }
    }
  });
}

template <typename T>
void wgrad(const ConvArgs& a) {
  using A = at::opmath_type<T>;
  const ConvGeometry& g = a.g;
  const T* x = static_cast<const T*>(a.x.ptr);
  T* dw = static_cast<T*>(a.w.ptr);
  const T* dy = static_cast<const T*>(a.y.ptr);
  const int64_t *xs = a.x.stride, *ws = a.w.stride, *ys = a.y.stride;
  const int64_t Cg = g.c_per_group(), Kg = g.k_per_group();
  const int64_t P = g.out[0], Q = g.out[1], O = g.out[2];
  at::parallel_for(0, g.K * Cg, 1, [&](int64_t begin, int64_t end) {
    for (int64_t kc = begin; kc < end; ++kc) {
      const int64_t k = kc / Cg, cc = kc % Cg, c = (k / Kg) * Cg + cc;
      for (int64_t t = 0; t < g.ker[0]; ++t) {
        const int64_t off0 = t * g.dil[0] - g.pad[0];
        const Range rp = inside(g.in[0], P, g.stride[0], off0);
        for (int64_t r = 0; r < g.ker[1]; ++r) {
          const int64_t off1 = r * g.dil[1] - g.pad[1];
          const Range rq = inside(g.in[1], Q, g.stride[1], off1);
          for (int64_t s = 0; s < g.ker[2]; ++s) {
            const int64_t off2 = s * g.dil[2] - g.pad[2];
            const Range ro = inside(g.in[2], O, g.stride[2], off2);
            const int64_t n_o = ro.hi - ro.lo, step = g.stride[2] * xs[4];
            A total = 0;
            for (int64_t n = 0; n < g.N && n_o > 0; ++n) {
              const T* xc = x + n * xs[0] + c * xs[1];
              const T* dyk = dy + n * ys[0] + k * ys[1];
              A part = 0;  // one sample's sum, then the batch's (a shorter chain of float additions)
              for (int64_t p = rp.lo; p < rp.hi; ++p) {
                for (int64_t q = rq.lo; q < rq.hi; ++q) {
                  const T* dr = dyk + at3(ys, p, q, ro.lo);
                  const T* xr = xc + at3(xs, p * g.stride[0] + off0, q * g.stride[1] + off1,
                                         ro.lo * g.stride[2] + off2);
                  A row = 0;
                  for (int64_t o = 0; o < n_o; ++o) row += A(dr[o * ys[4]]) * A(xr[o * step]);
                  part += row;
                }
              }
              total += part;
            }
            dw[k * ws[0] + cc * ws[1] + at3(ws, t, r, s)] = T(total);
          }
        }
      }
    }
  });
}

template <typename T>
void bias_grad(const ConvGeometry& g, const Operand5& dyo, T* db) {
  using A = at::opmath_type<T>;
  const T* dy = static_cast<const T*>(dyo.ptr);
  const int64_t* ys = dyo.stride;
  at::parallel_for(0, g.K, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      A total = 0;
      for (int64_t n = 0; n < g.N; ++n) {
        A part = 0;
        const T* dyk = dy + n * ys[0] + k * ys[1];
        for (int64_t p = 0; p < g.out[0]; ++p)
          for (int64_t q = 0; q < g.out[1]; ++q) {
            const T* dr = dyk + at3(ys, p, q, 0);
            A row = 0;
            for (int64_t o = 0; o < g.out[2]; ++o) row += A(dr[o * ys[4]]);
            part += row;
          }
        total += part;
      }
      db[k] = T(total);
    }
  });
}

template <class F>
void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Float16: return f(c10::Half{});
    case DType::BFloat16: return f(c10::BFloat16{});
  }
  TORCH_CHECK(false, "torch_dnn: convolution: unsupported dtype");
}

}  // namespace

void conv_cpu(Pass pass, const ConvArgs& a) {
  dispatch(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (pass) {
      case Pass::Fprop: return fprop<T>(a);
      case Pass::Dgrad: return dgrad<T>(a);
      case Pass::Wgrad: return wgrad<T>(a);
    }
  });
}

void conv_bias_grad_cpu(DType dtype, const ConvGeometry& g, const Operand5& dy, void* db) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    bias_grad<T>(g, dy, static_cast<T*>(db));
  });
}

}  // namespace conv
}  // namespace torch_dnn
