// batch_norm elementwise passes: the forward apply (its coefficients read, or computed from the running statistics
// in evaluation) and the backward dx, over the rows or planes walk.
#pragma once
#include "batch_norm/kernels/bn_coeffs.cuh"
#include "batch_norm/kernels/bn_common.cuh"

namespace torch_dnn {
namespace batch_norm {
namespace {

// ---- elementwise passes: an Op holds its pointers, loads V channels' parameters, and runs on V elements ----
// params' owner: this thread is the one thread of the launch chosen for these channels (the rows walk: the first
// row's; the planes walk: lane 0 on the first piece of the channel's plane in the first batch entry), where an Op
// that writes per-channel results writes them, once.

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
  __device__ __forceinline__ void params(P<V>& p, int64_t c, bool one_channel, bool /*owner*/) const {
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

// The evaluation forward in one pass: each thread computes its channels' coefficients from the running statistics,
// in double as fwd_coeffs_kernel does (the same scale and shift to the bit), instead of reading a coefficients
// pass's; the owner also writes the channel's mean and invstd (the backward's saved statistics).
template <typename T>
struct EvalApplyOp {
  using A = acc_t<T>;
  ApplyOp<T> apply;  // its scale and shift unused
  FwdCoeffPtrs p;    // reads stat_mean, stat_var (the running statistics), weight, bias, eps; writes mean, invstd
  template <int V>
  using P = typename ApplyOp<T>::template P<V>;
  template <int V>
  __device__ __forceinline__ void params(P<V>& q, int64_t c, bool one_channel, bool owner) const {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (one_channel && j > 0) {
        q.sc[j] = q.sc[0];
        q.sh[j] = q.sh[0];
        continue;
      }
      const int64_t i = c + j;
      const double mu = load_any(p.stat_mean, i, 0.0), invstd = 1.0 / sqrt(load_any(p.stat_var, i, 0.0) + p.eps);
      const double scale = invstd * load_any(p.weight, i, 1.0);
      q.sc[j] = A(scale);
      q.sh[j] = A(load_any(p.bias, i, 0.0) - mu * scale);
      if (owner) {
        store_any(p.mean, i, mu);
        store_any(p.invstd, i, invstd);
      }
    }
  }
  template <int V>
  __device__ __forceinline__ void run(const P<V>& q, int64_t o) const {
    apply.template run<V>(q, o);
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
  __device__ __forceinline__ void params(P<V>& p, int64_t c, bool one_channel, bool /*owner*/) const {
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
  op.params(p, c0, false, blockIdx.y == 0 && ty == 0);
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
    op.params(p, pl % C, true, pl < C && i0 == 0 && lane == 0);
    const int64_t base = pl * S;
#pragma unroll 4
    for (int64_t i = i0 + lane; i < end; i += 32) op.template run<V>(p, base + i * V);
  }
}

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn
