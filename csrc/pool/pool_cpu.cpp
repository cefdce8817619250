// CPU pooling: one (n, c) volume at a time, volumes spread over threads. Both layouts are walked through the
// same addressing: element (d, h, w) of volume (n, c) lies at base + ((d * H + h) * W + w) * step, with step 1
// for NCDHW and C for channels-last. Backward gathers, for each input element, from the output windows that
// cover it. The window formulas are pool_kernels.h's, shared with the CUDA kernels.
#include "pool/pool_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

namespace torch_dnn {
namespace pool {

namespace {

struct Volume {
  int64_t base, step;
  int64_t at(int64_t spatial) const { return base + spatial * step; }
};
inline Volume volume(const PoolShape& s, int64_t nc, int64_t size) {
  const int64_t n = nc / s.C, c = nc % s.C;
  if (s.channels_last) return {n * size * s.C + c, s.C};
  return {nc * size, 1};
}

template <class F>
void for_volumes(const PoolShape& s, int64_t work_per_volume, F&& f) {
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, work_per_volume));
  at::parallel_for(0, s.N * s.C, grain, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) f(nc);
  });
}

// f(od, oh, ow, flat output position) over the output, or f(d, h, w, flat input position) over the input.
template <class F>
void for_positions(const PoolShape& s, bool output, F&& f) {
  const int64_t D = output ? s.ax[0].out : s.ax[0].in, H = output ? s.ax[1].out : s.ax[1].in,
                W = output ? s.ax[2].out : s.ax[2].in;
  for (int64_t d = 0; d < D; ++d)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) f(d, h, w, (d * H + h) * W + w);
}

// f(od, oh, ow, o) for each output whose window can hold input element (d, h, w) (covering_outputs along each
// dim; a window may still skip it), o the output's element offset in volume vo: the backward passes' gather.
template <class F>
void for_covering_outputs(const PoolShape& s, const Volume& vo, int64_t d, int64_t h, int64_t w, F&& f) {
  const Axis &aD = s.ax[0], &aH = s.ax[1], &aW = s.ax[2];
  const Range cd = covering_outputs(d, aD, s.adaptive), ch = covering_outputs(h, aH, s.adaptive),
              cw = covering_outputs(w, aW, s.adaptive);
  for (int64_t od = cd.begin; od < cd.end; ++od)
    for (int64_t oh = ch.begin; oh < ch.end; ++oh)
      for (int64_t ow = cw.begin; ow < cw.end; ++ow) f(od, oh, ow, vo.at((od * aH.out + oh) * aW.out + ow));
}

template <typename T>
void max_forward_volumes(const T* x, T* y, int64_t* ind, const PoolShape& s) {
  using A = at::opmath_type<T>;
  const Axis &aD = s.ax[0], &aH = s.ax[1], &aW = s.ax[2];
  const int64_t step_d = s.adaptive ? 1 : aD.d, step_h = s.adaptive ? 1 : aH.d, step_w = s.adaptive ? 1 : aW.d;
  for_volumes(s, s.out_volume() * s.kernel_volume(), [&](int64_t nc) {
    const Volume vi = volume(s, nc, s.in_volume()), vo = volume(s, nc, s.out_volume());
    for_positions(s, true, [&](int64_t od, int64_t oh, int64_t ow, int64_t o) {
      const Range rd = max_window(od, aD, s.adaptive), rh = max_window(oh, aH, s.adaptive),
                  rw = max_window(ow, aW, s.adaptive);
      // As PyTorch: the first element's index when nothing beats -inf; a NaN wins (the last NaN seen).
      A m = -std::numeric_limits<A>::infinity();
      int64_t mi = (rd.begin * aH.in + rh.begin) * aW.in + rw.begin;
      for (int64_t d = rd.begin; d < rd.end; d += step_d)
        for (int64_t h = rh.begin; h < rh.end; h += step_h)
          for (int64_t w = rw.begin; w < rw.end; w += step_w) {
            const int64_t i = (d * aH.in + h) * aW.in + w;
            const A v = A(x[vi.at(i)]);
            if (v > m || std::isnan(v)) m = v, mi = i;
          }
      y[vo.at(o)] = T(m);
      ind[vo.at(o)] = mi;
    });
  });
}

template <typename T>
void max_backward_volumes(const T* g, const int64_t* ind, T* dx, const PoolShape& s) {
  using A = at::opmath_type<T>;
  for_volumes(s, s.in_volume() * 8, [&](int64_t nc) {
    const Volume vi = volume(s, nc, s.in_volume()), vo = volume(s, nc, s.out_volume());
    for_positions(s, false, [&](int64_t d, int64_t h, int64_t w, int64_t i) {
      A acc = 0;
      for_covering_outputs(s, vo, d, h, w, [&](int64_t, int64_t, int64_t, int64_t o) {
        if (ind[o] == i) acc += A(g[o]);
      });
      dx[vi.at(i)] = T(acc);
    });
  });
}

// avg_pool, adaptive avg_pool and lp_pool (s.lp(): the average of x^p, then (avg * K)^(1/p))
template <typename T>
void avg_forward_volumes(const T* x, T* y, const PoolShape& s) {
  using A = at::opmath_type<T>;
  const A p = A(s.norm_type), K = A(s.kernel_volume());
  for_volumes(s, s.out_volume() * s.kernel_volume(), [&](int64_t nc) {
    const Volume vi = volume(s, nc, s.in_volume()), vo = volume(s, nc, s.out_volume());
    for_positions(s, true, [&](int64_t od, int64_t oh, int64_t ow, int64_t o) {
      const AvgWindow win = avg_window3(s, od, oh, ow);
      A acc = 0;
      for (int64_t d = win.r[0].begin; d < win.r[0].end; ++d)
        for (int64_t h = win.r[1].begin; h < win.r[1].end; ++h)
          for (int64_t w = win.r[2].begin; w < win.r[2].end; ++w) {
            const A v = A(x[vi.at((d * s.ax[1].in + h) * s.ax[2].in + w)]);
            acc += s.lp() ? lp_pre(v, p) : v;
          }
      const A avg = acc / A(win.divisor);
      y[vo.at(o)] = T(s.lp() ? lp_post(avg, K, p) : avg);
    });
  });
}

// avg_pool and adaptive avg_pool backward, and lp_pool's (x, y given): each input element sums
// grad / divisor over the windows that hold it (lp: times d out / d avg, and d x^p / d x at the end).
template <typename T>
void avg_backward_volumes(const T* g, const T* x, const T* y, T* dx, const PoolShape& s) {
  using A = at::opmath_type<T>;
  const A p = A(s.norm_type), K = A(s.kernel_volume());
  for_volumes(s, s.in_volume() * 8, [&](int64_t nc) {
    const Volume vi = volume(s, nc, s.in_volume()), vo = volume(s, nc, s.out_volume());
    for_positions(s, false, [&](int64_t d, int64_t h, int64_t w, int64_t i) {
      A acc = 0;
      for_covering_outputs(s, vo, d, h, w, [&](int64_t od, int64_t oh, int64_t ow, int64_t o) {
        const AvgWindow win = avg_window3(s, od, oh, ow);
        const bool inside = d >= win.r[0].begin && d < win.r[0].end && h >= win.r[1].begin && h < win.r[1].end &&
                            w >= win.r[2].begin && w < win.r[2].end;
        if (!inside) return;
        A term = A(g[o]) / A(win.divisor);
        if (s.lp()) term *= lp_out_grad_scale(A(y[o]), K, p);
        acc += term;
      });
      if (s.lp()) acc *= lp_in_grad_scale(A(x[vi.at(i)]), p);
      dx[vi.at(i)] = T(acc);
    });
  });
}

#define POOL_DISPATCH(t, name, ...) AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t, name, __VA_ARGS__)

}  // namespace

void CpuBackend::max_forward(const at::Tensor& x, at::Tensor& y, at::Tensor& indices, const PoolShape& s) {
  POOL_DISPATCH(x.scalar_type(), "torch_dnn.max_pool", [&] {
    max_forward_volumes<scalar_t>(x.const_data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), s);
  });
}

void CpuBackend::max_backward(const at::Tensor& g, const at::Tensor& indices, at::Tensor& dx, const PoolShape& s) {
  POOL_DISPATCH(g.scalar_type(), "torch_dnn.max_pool_backward", [&] {
    max_backward_volumes<scalar_t>(g.const_data_ptr<scalar_t>(), indices.const_data_ptr<int64_t>(),
                                   dx.data_ptr<scalar_t>(), s);
  });
}

void CpuBackend::avg_forward(const at::Tensor& x, at::Tensor& y, const PoolShape& s) {
  POOL_DISPATCH(x.scalar_type(), "torch_dnn.avg_pool", [&] {
    avg_forward_volumes<scalar_t>(x.const_data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), s);
  });
}

void CpuBackend::avg_backward(const at::Tensor& g, at::Tensor& dx, const PoolShape& s) {
  POOL_DISPATCH(g.scalar_type(), "torch_dnn.avg_pool_backward", [&] {
    avg_backward_volumes<scalar_t>(g.const_data_ptr<scalar_t>(), nullptr, nullptr, dx.data_ptr<scalar_t>(), s);
  });
}

void CpuBackend::lp_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& y, at::Tensor& dx,
                             const PoolShape& s) {
  POOL_DISPATCH(g.scalar_type(), "torch_dnn.lp_pool_backward", [&] {
    avg_backward_volumes<scalar_t>(g.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
                                   y.const_data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(), s);
  });
}

}  // namespace pool
}  // namespace torch_dnn
