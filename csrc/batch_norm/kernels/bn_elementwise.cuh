// batch_norm elementwise passes: the forward apply and the backward dx, over the rows or planes walk.
#pragma once
#include "batch_norm/kernels/bn_common.cuh"

namespace torch_dnn {
namespace batch_norm {
namespace {

// ---- elementwise passes: an Op holds its pointers, loads V channels' parameters, and runs on V elements ----

template <typename T>
struct ApplyOp {
  using A = acc_t<T>;
  const T* x;
  const T* res;
  const A* scale;
  const A* shift;
  T* y;
  int act;
  template <int V>
  struct P {
    A sc[V], sh[V];
  };
  template <int V>
  __device__ __forceinline__ void params(P<V>& p, int64_t c, bool one_channel) const {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      p.sc[j] = scale[one_channel ? c : c + j];
      p.sh[j] = shift[one_channel ? c : c + j];
    }
  }
  template <int V>
  __device__ __forceinline__ void run(const P<V>& p, int64_t o) const {
    A v[V], r[V];
    load_acc<V>(x + o, v);
    if (res) {
      load_acc<V>(res + o, r);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) r[j] = A(0);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = act_fwd(fma(v[j], p.sc[j], p.sh[j]) + r[j], act);
    store_acc<V>(y + o, v);
  }
};

template <typename T>
struct ElemtOp {
  using A = acc_t<T>;
  const T* dz;
  const T* x;
  const A* mean;
  const A* k;
  const A* a;
  const A* b;
  T* dx;
  template <int V>
  struct P {
    A mu[V], k[V], a[V], b[V];
  };
  template <int V>
  __device__ __forceinline__ void params(P<V>& p, int64_t c, bool one_channel) const {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t i = one_channel ? c : c + j;
      p.mu[j] = mean[i];
      p.k[j] = k[i];
      p.a[j] = a[i];
      p.b[j] = b[i];
    }
  }
  template <int V>
  __device__ __forceinline__ void run(const P<V>& p, int64_t o) const {
    A g[V], v[V];
    load_acc<V>(dz + o, g);
    load_acc<V>(x + o, v);
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] = p.k[j] * (g[j] - p.a[j] - (v[j] - p.mu[j]) * p.b[j]);
    store_acc<V>(dx + o, g);
  }
};

template <int V, class Op>
__global__ void __launch_bounds__(kThreads) elementwise_rows(Op op, int64_t R, int64_t C, int TX) {
  const int TY = kThreads / TX, tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int64_t c0 = (int64_t(blockIdx.x) * TX + tx) * V;
  if (c0 >= C) return;
  typename Op::template P<V> p;
  op.params(p, c0, false);
  const int64_t step = int64_t(gridDim.y) * TY;
  // back to front: the reduction before this pass walked front to back, so its last rows are still in L2
#pragma unroll 4
  for (int64_t r = int64_t(blockIdx.y) * TY + ty; r < R; r += step) op.template run<V>(p, (R - 1 - r) * C + c0);
}

template <int V, class Op>
__global__ void __launch_bounds__(kThreads) elementwise_planes(Op op, int64_t planes, int64_t C, int64_t S,
                                                               int64_t pieces) {
  const int lane = threadIdx.x % 32;
  const int64_t sv = S / V;
  const int64_t units = planes * pieces;
  for (int64_t t = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; t < units; t += int64_t(gridDim.x) * kWarps) {
    const int64_t u = units - 1 - t;  // back to front, as elementwise_rows
    const int64_t pl = u / pieces, i0 = (u - pl * pieces) * kPiece, end = min(sv, i0 + kPiece);
    typename Op::template P<V> p;
    op.params(p, pl % C, true);
    const int64_t base = pl * S;
#pragma unroll 4
    for (int64_t i = i0 + lane; i < end; i += 32) op.template run<V>(p, base + i * V);
  }
}

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn
