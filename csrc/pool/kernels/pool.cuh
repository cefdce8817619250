// Pooling kernels, one thread per item of V channels (grid-stride, 64-bit indices):
//   NCHW (CL = false, V = 1): items ordered (n, c, row, col), consecutive threads along the columns
//   NHWC (CL = true): items ordered (n, row, col, channel group), consecutive threads along C with V channels
//   each (V = 16 bytes when C and the pointers allow it), so every access is a coalesced 16-byte vector.
// Forward items are output positions; backward items are input positions that gather from the output
// windows covering them (no atomics: deterministic).
#pragma once
#include <cmath>

#include "common/cuda/device.cuh"
#include "common/cuda/vec.cuh"
#include "pool/pool_kernels.h"

namespace torch_dnn {
namespace pool {

constexpr int kThreads = 256;

struct Loc {
  int64_t n, c, p, q;  // batch, first channel, row, column
};

// The item t of a [N, C, P, Q] tensor.
template <bool CL, int V>
__device__ __forceinline__ Loc locate(int64_t t, int64_t C, int64_t P, int64_t Q) {
  Loc l;
  if constexpr (CL) {
    const int64_t groups = C / V;
    l.c = (t % groups) * V;
    t /= groups;
    l.q = t % Q;
    t /= Q;
    l.p = t % P;
    l.n = t / P;
  } else {
    l.q = t % Q;
    t /= Q;
    l.p = t % P;
    t /= P;
    l.c = t % C;
    l.n = t / C;
  }
  return l;
}

// Offset of element (n, c, p, q) of a [N, C, P, Q] tensor.
template <bool CL>
__device__ __forceinline__ int64_t offset(int64_t n, int64_t c, int64_t p, int64_t q, int64_t C, int64_t P, int64_t Q) {
  return CL ? ((n * P + p) * Q + q) * C + c : ((n * C + c) * P + p) * Q + q;
}

#define POOL_GRID_LOOP(t, items) \
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < (items); t += int64_t(gridDim.x) * blockDim.x)

template <typename T, bool CL, int V>
__global__ void __launch_bounds__(kThreads) max_pool_fwd(const T* x, T* y, int64_t* ind, PoolShape s, int64_t items) {
  using A = acc_t<T>;
  POOL_GRID_LOOP(t, items) {
    const Loc l = locate<CL, V>(t, s.C, s.OH, s.OW);
    int64_t h0 = l.p * s.sh - s.ph, w0 = l.q * s.sw - s.pw;
    const int64_t h1 = min(h0 + (s.kh - 1) * s.dh + 1, s.H), w1 = min(w0 + (s.kw - 1) * s.dw + 1, s.W);
    while (h0 < 0) h0 += s.dh;
    while (w0 < 0) w0 += s.dw;
    // As PyTorch: the first element's index when nothing beats -inf; a NaN wins (the last NaN seen).
    A m[V];
    int64_t mi[V];
#pragma unroll
    for (int j = 0; j < V; ++j) m[j] = A(-INFINITY), mi[j] = h0 * s.W + w0;
    for (int64_t h = h0; h < h1; h += s.dh)
      for (int64_t w = w0; w < w1; w += s.dw) {
        A v[V];
        load_acc<V>(x + offset<CL>(l.n, l.c, h, w, s.C, s.H, s.W), v);
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (v[j] > m[j] || v[j] != v[j]) m[j] = v[j], mi[j] = h * s.W + w;
      }
    const int64_t o = offset<CL>(l.n, l.c, l.p, l.q, s.C, s.OH, s.OW);
    store_acc<V>(y + o, m);
#pragma unroll
    for (int j = 0; j < V; ++j) ind[o + (CL ? j : 0)] = mi[j];
  }
}

template <typename T, bool CL, int V>
__global__ void __launch_bounds__(kThreads) max_pool_bwd(const T* g, const int64_t* ind, T* dx, PoolShape s, int64_t items) {
  using A = acc_t<T>;
  POOL_GRID_LOOP(t, items) {
    const Loc l = locate<CL, V>(t, s.C, s.H, s.W);
    const Range rh = covering_outputs(l.p, s.H, s.OH, s.kh, s.sh, s.ph, s.dh, false);
    const Range rw = covering_outputs(l.q, s.W, s.OW, s.kw, s.sw, s.pw, s.dw, false);
    const int64_t i = l.p * s.W + l.q;
    A acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = A(0);
    for (int64_t oh = rh.begin; oh < rh.end; ++oh)
      for (int64_t ow = rw.begin; ow < rw.end; ++ow) {
        const int64_t o = offset<CL>(l.n, l.c, oh, ow, s.C, s.OH, s.OW);
        A gv[V];
        load_acc<V>(g + o, gv);
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (ind[o + (CL ? j : 0)] == i) acc[j] += gv[j];
      }
    store_acc<V>(dx + offset<CL>(l.n, l.c, l.p, l.q, s.C, s.H, s.W), acc);
  }
}

template <typename T, bool CL, int V>
__global__ void __launch_bounds__(kThreads) avg_pool_fwd(const T* x, T* y, PoolShape s, int64_t items) {
  using A = acc_t<T>;
  POOL_GRID_LOOP(t, items) {
    const Loc l = locate<CL, V>(t, s.C, s.OH, s.OW);
    int64_t lh = 0, lw = 0;
    const Range rh = avg_window(l.p, s.H, s.OH, s.kh, s.sh, s.ph, s.adaptive, lh);
    const Range rw = avg_window(l.q, s.W, s.OW, s.kw, s.sw, s.pw, s.adaptive, lw);
    A acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = A(0);
    for (int64_t h = rh.begin; h < rh.end; ++h)
      for (int64_t w = rw.begin; w < rw.end; ++w) {
        A v[V];
        load_acc<V>(x + offset<CL>(l.n, l.c, h, w, s.C, s.H, s.W), v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += v[j];
      }
    const A inv = A(1) / A(avg_divisor(s, rh, rw, lh, lw));
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] *= inv;
    store_acc<V>(y + offset<CL>(l.n, l.c, l.p, l.q, s.C, s.OH, s.OW), acc);
  }
}

template <typename T, bool CL, int V>
__global__ void __launch_bounds__(kThreads) avg_pool_bwd(const T* g, T* dx, PoolShape s, int64_t items) {
  using A = acc_t<T>;
  POOL_GRID_LOOP(t, items) {
    const Loc l = locate<CL, V>(t, s.C, s.H, s.W);
    const Range ch = covering_outputs(l.p, s.H, s.OH, s.kh, s.sh, s.ph, 1, s.adaptive);
    const Range cw = covering_outputs(l.q, s.W, s.OW, s.kw, s.sw, s.pw, 1, s.adaptive);
    A acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = A(0);
    for (int64_t oh = ch.begin; oh < ch.end; ++oh) {
      int64_t lh = 0, lw = 0;
      const Range rh = avg_window(oh, s.H, s.OH, s.kh, s.sh, s.ph, s.adaptive, lh);
      if (l.p < rh.begin || l.p >= rh.end) continue;
      for (int64_t ow = cw.begin; ow < cw.end; ++ow) {
        const Range rw = avg_window(ow, s.W, s.OW, s.kw, s.sw, s.pw, s.adaptive, lw);
        if (l.q < rw.begin || l.q >= rw.end) continue;
        const A inv = A(1) / A(avg_divisor(s, rh, rw, lh, lw));
        A gv[V];
        load_acc<V>(g + offset<CL>(l.n, l.c, oh, ow, s.C, s.OH, s.OW), gv);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += gv[j] * inv;
      }
    }
    store_acc<V>(dx + offset<CL>(l.n, l.c, l.p, l.q, s.C, s.H, s.W), acc);
  }
}

// Calls f(T{}, bool_constant<CL>, int_constant<V>): 16-byte vectors along C in NHWC when C and every pointer
// allow, one channel a thread otherwise.
template <class F>
void dispatch_layout(DType t, const PoolShape& s, bool aligned, F&& f) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    if (!s.channels_last) f(tag, std::false_type{}, std::integral_constant<int, 1>{});
    else if (s.C % V == 0 && aligned) f(tag, std::true_type{}, std::integral_constant<int, V>{});
    else f(tag, std::true_type{}, std::integral_constant<int, 1>{});
  });
}

}  // namespace pool
}  // namespace torch_dnn
