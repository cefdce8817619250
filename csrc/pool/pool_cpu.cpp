// CPU pooling: one (n, c) plane at a time, planes spread over threads. Both layouts are walked through the
// same addressing: element (h, w) of plane (n, c) lies at base + (h * W + w) * step, with step 1 for NCHW and
// C for channels_last. Backward gathers, for each input element, from the output windows that cover it.
#include "pool/pool_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

namespace torch_dnn {
namespace pool {

namespace {

struct Plane {
  int64_t base, step;
};
inline Plane plane(const PoolShape& s, int64_t nc, int64_t h, int64_t w) {
  const int64_t n = nc / s.C, c = nc % s.C;
  if (s.channels_last) return {n * h * w * s.C + c, s.C};
  return {nc * h * w, 1};
}

template <class F>
void for_planes(const PoolShape& s, int64_t work_per_plane, F&& f) {
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, work_per_plane));
  at::parallel_for(0, s.N * s.C, grain, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) f(nc);
  });
}

template <typename T>
void max_forward_planes(const T* x, T* y, int64_t* ind, const PoolShape& s) {
  using A = at::opmath_type<T>;
  for_planes(s, s.OH * s.OW * s.kh * s.kw, [&](int64_t nc) {
    const Plane pi = plane(s, nc, s.H, s.W), po = plane(s, nc, s.OH, s.OW);
    for (int64_t oh = 0; oh < s.OH; ++oh) {
      int64_t h0 = oh * s.sh - s.ph;
      const int64_t h1 = std::min(h0 + (s.kh - 1) * s.dh + 1, s.H);
      while (h0 < 0) h0 += s.dh;
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        int64_t w0 = ow * s.sw - s.pw;
        const int64_t w1 = std::min(w0 + (s.kw - 1) * s.dw + 1, s.W);
        while (w0 < 0) w0 += s.dw;
        // As PyTorch: the first element's index when nothing beats -inf; a NaN wins (the last NaN seen).
        A m = -std::numeric_limits<A>::infinity();
        int64_t mi = h0 * s.W + w0;
        for (int64_t h = h0; h < h1; h += s.dh)
          for (int64_t w = w0; w < w1; w += s.dw) {
            const int64_t i = h * s.W + w;
            const A v = A(x[pi.base + i * pi.step]);
            if (v > m || std::isnan(v)) m = v, mi = i;
          }
        const int64_t o = po.base + (oh * s.OW + ow) * po.step;
        y[o] = T(m);
        ind[o] = mi;
      }
    }
  });
}

template <typename T>
void max_backward_planes(const T* g, const int64_t* ind, T* dx, const PoolShape& s) {
  using A = at::opmath_type<T>;
  for_planes(s, s.H * s.W * 4, [&](int64_t nc) {
    const Plane pi = plane(s, nc, s.H, s.W), po = plane(s, nc, s.OH, s.OW);
    for (int64_t h = 0; h < s.H; ++h) {
      const Range rh = covering_outputs(h, s.H, s.OH, s.kh, s.sh, s.ph, s.dh, false);
      for (int64_t w = 0; w < s.W; ++w) {
        const Range rw = covering_outputs(w, s.W, s.OW, s.kw, s.sw, s.pw, s.dw, false);
        const int64_t i = h * s.W + w;
        A acc = 0;
        for (int64_t oh = rh.begin; oh < rh.end; ++oh)
          for (int64_t ow = rw.begin; ow < rw.end; ++ow) {
            const int64_t o = po.base + (oh * s.OW + ow) * po.step;
            if (ind[o] == i) acc += A(g[o]);
          }
        dx[pi.base + i * pi.step] = T(acc);
      }
    }
  });
}

template <typename T>
void avg_forward_planes(const T* x, T* y, const PoolShape& s) {
  using A = at::opmath_type<T>;
  for_planes(s, s.H * s.W + s.OH * s.OW, [&](int64_t nc) {
    const Plane pi = plane(s, nc, s.H, s.W), po = plane(s, nc, s.OH, s.OW);
    for (int64_t oh = 0; oh < s.OH; ++oh) {
      int64_t lh = 0, lw = 0;
      const Range rh = avg_window(oh, s.H, s.OH, s.kh, s.sh, s.ph, s.adaptive, lh);
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        const Range rw = avg_window(ow, s.W, s.OW, s.kw, s.sw, s.pw, s.adaptive, lw);
        A acc = 0;
        for (int64_t h = rh.begin; h < rh.end; ++h)
          for (int64_t w = rw.begin; w < rw.end; ++w) acc += A(x[pi.base + (h * s.W + w) * pi.step]);
        y[po.base + (oh * s.OW + ow) * po.step] = T(acc / A(avg_divisor(s, rh, rw, lh, lw)));
      }
    }
  });
}

template <typename T>
void avg_backward_planes(const T* g, T* dx, const PoolShape& s) {
  using A = at::opmath_type<T>;
  for_planes(s, s.H * s.W * 4, [&](int64_t nc) {
    const Plane pi = plane(s, nc, s.H, s.W), po = plane(s, nc, s.OH, s.OW);
    for (int64_t h = 0; h < s.H; ++h) {
      const Range ch = covering_outputs(h, s.H, s.OH, s.kh, s.sh, s.ph, 1, s.adaptive);
      for (int64_t w = 0; w < s.W; ++w) {
        const Range cw = covering_outputs(w, s.W, s.OW, s.kw, s.sw, s.pw, 1, s.adaptive);
        A acc = 0;
        for (int64_t oh = ch.begin; oh < ch.end; ++oh) {
          int64_t lh = 0, lw = 0;
          const Range rh = avg_window(oh, s.H, s.OH, s.kh, s.sh, s.ph, s.adaptive, lh);
          if (h < rh.begin || h >= rh.end) continue;
          for (int64_t ow = cw.begin; ow < cw.end; ++ow) {
            const Range rw = avg_window(ow, s.W, s.OW, s.kw, s.sw, s.pw, s.adaptive, lw);
            if (w < rw.begin || w >= rw.end) continue;
            acc += A(g[po.base + (oh * s.OW + ow) * po.step]) / A(avg_divisor(s, rh, rw, lh, lw));
          }
        }
        dx[pi.base + (h * s.W + w) * pi.step] = T(acc);
      }
    }
  });
}

#define POOL_DISPATCH(t, name, ...) AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t, name, __VA_ARGS__)

}  // namespace

void CpuBackend::max_forward(const at::Tensor& x, at::Tensor& y, at::Tensor& indices, const PoolShape& s) {
  POOL_DISPATCH(x.scalar_type(), "torch_dnn.max_pool2d", [&] {
    max_forward_planes<scalar_t>(x.const_data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), s);
  });
}

void CpuBackend::max_backward(const at::Tensor& g, const at::Tensor& indices, at::Tensor& dx, const PoolShape& s) {
  POOL_DISPATCH(g.scalar_type(), "torch_dnn.max_pool2d_backward", [&] {
    max_backward_planes<scalar_t>(g.const_data_ptr<scalar_t>(), indices.const_data_ptr<int64_t>(),
                                  dx.data_ptr<scalar_t>(), s);
  });
}

void CpuBackend::avg_forward(const at::Tensor& x, at::Tensor& y, const PoolShape& s) {
  POOL_DISPATCH(x.scalar_type(), "torch_dnn.avg_pool2d", [&] {
    avg_forward_planes<scalar_t>(x.const_data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), s);
  });
}

void CpuBackend::avg_backward(const at::Tensor& g, at::Tensor& dx, const PoolShape& s) {
  POOL_DISPATCH(g.scalar_type(), "torch_dnn.avg_pool2d_backward", [&] {
    avg_backward_planes<scalar_t>(g.const_data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(), s);
  });
}

}  // namespace pool
}  // namespace torch_dnn
