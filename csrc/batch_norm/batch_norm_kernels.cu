// batch_norm CUDA kernels. Two walks over a dense [outer][C][inner] tensor:
//   rows   (inner == 1, e.g. channels_last): [R = outer][C] rows; a block is TX threads across channel vectors
//          (V channels each, 16-byte accesses when C allows) times TY rows, each thread keeping its own
//          channels' parameters or partial sums in registers while it strides down the rows.
//   planes (inner > 1, e.g. NCHW): planes of `inner` contiguous elements, one channel each, cut into pieces
//          of at most kPiece accesses; a warp walks a piece with 16-byte accesses when inner allows.
// Reductions (stats, backward sums) write per-block partials, then a finalize kernel merges them per channel
// in a fixed order: no atomics, deterministic. Statistics are per-thread shifted sums (shift = the channel's
// first element, folded every 64 accesses) merged with Chan's parallel formula, so large means do not cancel.
#include "batch_norm/batch_norm_kernels.h"
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/cuda/bulk_copy.cuh"
#include "common/cuda/device.cuh"
#include "common/cuda/int_math.h"
#include "common/cuda/reduce.cuh"
#include "common/cuda/types.cuh"
#include "common/cuda/vec.cuh"
#include "common/env.h"

namespace torch_dnn {
namespace batch_norm {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kFold = 64;     // accesses between folds of the shifted sums
constexpr int kPiece = 512;   // accesses of a plane a warp takes at a time (16 per lane)

// Partial k of channel c from split j, laid out [k][c][j] so that a finalize warp reads a channel's splits
// with consecutive lanes.
template <typename A>
__device__ __forceinline__ A* partial(A* part, int k, int64_t c, int64_t j, int64_t C) {
  return part + (int64_t(k) * C + c) * gridDim.y + j;
}

// act: 0 identity, 1 relu (NaN propagates, as torch.relu), 2 silu
template <typename A>
__device__ __forceinline__ A act_fwd(A z, int act) {
  if (act == 1) return (z > A(0) || z != z) ? z : A(0);
  if (act == 2) return z / (A(1) + td_exp(-z));
  return z;
}
template <typename A>
__device__ __forceinline__ A act_grad(A z, int act) {
  if (act == 1) return z > A(0) ? A(1) : A(0);
  if (act == 2) {
    const A s = A(1) / (A(1) + td_exp(-z));
    return s * (A(1) + z * (A(1) - s));
  }
  return A(1);
}

template <typename A>
struct Moments {
  A n, mean, m2;
};
template <typename A>
__device__ __forceinline__ Moments<A> merge(const Moments<A>& a, const Moments<A>& b) {
  const A n = a.n + b.n;
  if (b.n == A(0)) return a;
  if (a.n == A(0)) return b;
  const A d = b.mean - a.mean, f = b.n / n;
  return {n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f};
}
// cnt values v with sum(v - shift) = s and sum((v - shift)^2) = q
template <typename A>
__device__ __forceinline__ Moments<A> from_sums(int cnt, A shift, A s, A q) {
  if (cnt == 0) return {A(0), A(0), A(0)};
  const A n = A(cnt), md = s / n, m2 = q - s * md;
  return {n, shift + md, m2 < A(0) ? A(0) : m2};  // rounding may go below 0; NaN stays NaN
}
template <typename A>
__device__ __forceinline__ Moments<A> warp_merge(Moments<A> m) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Moments<A> b{__shfl_down_sync(0xffffffffu, m.n, o), __shfl_down_sync(0xffffffffu, m.mean, o),
                       __shfl_down_sync(0xffffffffu, m.m2, o)};
    m = merge(m, b);
  }
  return m;  // lane 0 holds the warp's moments
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- launch geometry (a function of the shape alone, so the workspace size is known before the launch) ----

struct RowsGeom {
  int V, TX, TY;
  int64_t gx;
};
template <typename T>
RowsGeom rows_geom(const BnShape& s, bool vec) {
  RowsGeom g;
  g.V = vec ? kVec16<T> : 1;
  const int64_t cv = s.C / g.V;
  g.TX = pow2_at_least(cv, 32);
  g.TY = kThreads / g.TX;
  g.gx = ceil_div(cv, g.TX);
  return g;
}
// Pieces per plane (planes walk): units of work are (plane, piece).
template <typename T>
int64_t pieces_of(const BnShape& s, bool vec) {
  return ceil_div(s.inner / (vec ? kVec16<T> : 1), kPiece);
}
// ---- statistics ----

template <typename T, int V>
__global__ void __launch_bounds__(kThreads, 3) stats_rows(const T* __restrict__ x, int64_t R, int64_t C, int TX,
                                                       acc_t<T>* __restrict__ part) {
  using A = acc_t<T>;
  __shared__ Moments<A> sm[kThreads * V];
  const int TY = kThreads / TX, tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int64_t c0 = (int64_t(blockIdx.x) * TX + tx) * V;
  const bool active = c0 < C;
  Moments<A> m[V];
#pragma unroll
  for (int j = 0; j < V; ++j) m[j] = {A(0), A(0), A(0)};
  if (active) {
    A sh[V], s[V], q[V];
    load_acc<V>(x + c0, sh);
    const int64_t step = int64_t(gridDim.y) * TY;
    int64_t r = int64_t(blockIdx.y) * TY + ty;
    while (r < R) {
      const int64_t end = min(R, r + kFold * step);
      int cnt = 0;
#pragma unroll
      for (int j = 0; j < V; ++j) s[j] = q[j] = A(0);
      // four rows' loads issued before any is used: enough bytes in flight per thread
      for (; r + 3 * step < end; r += 4 * step) {
        A v[4][V];
#pragma unroll
        for (int u = 0; u < 4; ++u) load_acc<V>(x + (r + u * step) * C + c0, v[u]);
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const A d = v[u][j] - sh[j];
            s[j] += d;
            q[j] = fma(d, d, q[j]);
          }
        cnt += 4;
      }
      for (; r < end; r += step) {
        A v[V];
        load_acc<V>(x + r * C + c0, v);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A d = v[j] - sh[j];
          s[j] += d;
          q[j] = fma(d, d, q[j]);
        }
        ++cnt;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) m[j] = merge(m[j], from_sums(cnt, sh[j], s[j], q[j]));
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) sm[threadIdx.x * V + j] = m[j];
  __syncthreads();
  for (int h = TY / 2; h > 0; h >>= 1) {
    if (ty < h) {
#pragma unroll
      for (int j = 0; j < V; ++j)
        sm[threadIdx.x * V + j] = merge(sm[threadIdx.x * V + j], sm[(threadIdx.x + h * TX) * V + j]);
    }
    __syncthreads();
  }
  if (ty == 0 && active) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const Moments<A> t = sm[threadIdx.x * V + j];
      *partial(part, 0, c0 + j, blockIdx.y, C) = t.n;
      *partial(part, 1, c0 + j, blockIdx.y, C) = t.mean;
      *partial(part, 2, c0 + j, blockIdx.y, C) = t.m2;
    }
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads, 3) stats_planes(const T* __restrict__ x, int64_t N, int64_t C, int64_t S,
                                                         int64_t pieces, acc_t<T>* __restrict__ part) {
  using A = acc_t<T>;
  __shared__ Moments<A> sm[kWarps];
  const int64_t c = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const A sh = to_acc<A>(x[c * S]);
  const int64_t sv = S / V;
  Moments<A> m{A(0), A(0), A(0)};
  for (int64_t u = int64_t(blockIdx.y) * kWarps + warp; u < N * pieces; u += int64_t(gridDim.y) * kWarps) {
    const int64_t n = u / pieces, i0 = (u - n * pieces) * kPiece, end = min(sv, i0 + kPiece);
    const T* p = x + (n * C + c) * S;
    static_assert(kPiece <= kFold * 32, "one fold per piece");
    A s = A(0), q = A(0);
    int cnt = 0;
    int64_t i = i0 + lane;
    for (; i + 96 < end; i += 128) {
      A v[4][V];
#pragma unroll
      for (int u = 0; u < 4; ++u) load_acc<V>(p + (i + 32 * u) * V, v[u]);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A d = v[u][j] - sh;
          s += d;
          q = fma(d, d, q);
        }
      cnt += 4 * V;
    }
    for (; i < end; i += 32) {
      A v[V];
      load_acc<V>(p + i * V, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A d = v[j] - sh;
        s += d;
        q = fma(d, d, q);
      }
      cnt += V;
    }
    m = merge(m, from_sums(cnt, sh, s, q));
  }
  m = warp_merge(m);
  if (lane == 0) sm[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    Moments<A> t = sm[0];
    for (int w = 1; w < kWarps; ++w) t = merge(t, sm[w]);
    *partial(part, 0, c, blockIdx.y, C) = t.n;
    *partial(part, 1, c, blockIdx.y, C) = t.mean;
    *partial(part, 2, c, blockIdx.y, C) = t.m2;
  }
}

// One warp per channel merges the splits' moments: lane-strided, then across the warp (fixed order).
template <typename A>
__global__ void __launch_bounds__(kThreads) stats_finalize(const A* __restrict__ part, int splits, int64_t C,
                                                           A* __restrict__ mean, A* __restrict__ m2) {
  const int64_t c = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= C) return;
  Moments<A> m{A(0), A(0), A(0)};
  const int64_t cs = C * splits;
  for (int j = lane; j < splits; j += 32) {
    const A* p = part + c * splits + j;
    m = merge(m, Moments<A>{p[0], p[cs], p[2 * cs]});
  }
  m = warp_merge(m);
  if (lane == 0) {
    mean[c] = m.mean;
    m2[c] = m.m2;
  }
}

// ---- backward sums ----

template <typename T>
struct GradArgs {
  using A = acc_t<T>;
  const T* dy;
  const T* x;
  const T* res;
  const A* scale;
  const A* shift;
  const A* mean;
  T* dz;
  int act;
};

template <typename T, int V>
struct GradIn {
  acc_t<T> d[V], v[V], r[V];
};
// ACT: an activation (and maybe a residual) to differentiate through; false is plain batch_norm, whose
// kernels then keep no activation state in registers.
template <typename T, int V, bool ACT>
__device__ __forceinline__ void grad_load(const GradArgs<T>& g, int64_t o, GradIn<T, V>& in) {
  load_acc<V>(g.dy + o, in.d);
  load_acc<V>(g.x + o, in.v);
  if (ACT && g.res) load_acc<V>(g.res + o, in.r);
}
template <typename T, int V, bool ACT>
__device__ __forceinline__ void grad_use(const GradArgs<T>& g, int64_t o, GradIn<T, V>& in, const acc_t<T> (&mu)[V],
                                         const acc_t<T> (&sc)[V], const acc_t<T> (&sh)[V], acc_t<T> (&s1)[V],
                                         acc_t<T> (&s2)[V]) {
  using A = acc_t<T>;
  if constexpr (ACT) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      in.d[j] *= act_grad(fma(in.v[j], sc[j], sh[j]) + (g.res ? in.r[j] : A(0)), g.act);
  }
  if (g.dz) store_acc<V>(g.dz + o, in.d);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    s1[j] += in.d[j];
    s2[j] = fma(in.d[j], in.v[j] - mu[j], s2[j]);
  }
}
// Two accesses' loads issued before either is used.
template <typename T, int V, bool ACT>
__device__ __forceinline__ void grad_pair(const GradArgs<T>& g, int64_t o0, int64_t o1, const acc_t<T> (&mu)[V],
                                          const acc_t<T> (&sc)[V], const acc_t<T> (&sh)[V], acc_t<T> (&s1)[V],
                                          acc_t<T> (&s2)[V]) {
  GradIn<T, V> a, b;
  grad_load<T, V, ACT>(g, o0, a);
  grad_load<T, V, ACT>(g, o1, b);
  grad_use<T, V, ACT>(g, o0, a, mu, sc, sh, s1, s2);
  grad_use<T, V, ACT>(g, o1, b, mu, sc, sh, s1, s2);
}
template <typename T, int V, bool ACT>
__device__ __forceinline__ void grad_one(const GradArgs<T>& g, int64_t o, const acc_t<T> (&mu)[V],
                                         const acc_t<T> (&sc)[V], const acc_t<T> (&sh)[V], acc_t<T> (&s1)[V],
                                         acc_t<T> (&s2)[V]) {
  GradIn<T, V> a;
  grad_load<T, V, ACT>(g, o, a);
  grad_use<T, V, ACT>(g, o, a, mu, sc, sh, s1, s2);
}

template <typename T, int V, bool ACT>
__global__ void __launch_bounds__(kThreads, 3) reduce_rows(GradArgs<T> g, int64_t R, int64_t C, int TX,
                                                        acc_t<T>* __restrict__ part) {
  using A = acc_t<T>;
  __shared__ A sm[2][kThreads * V];
  const int TY = kThreads / TX, tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int64_t c0 = (int64_t(blockIdx.x) * TX + tx) * V;
  const bool active = c0 < C;
  A s1[V], s2[V];
#pragma unroll
  for (int j = 0; j < V; ++j) s1[j] = s2[j] = A(0);
  if (active) {
    A mu[V], sc[V], sh[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      mu[j] = g.mean[c0 + j];
      sc[j] = ACT ? g.scale[c0 + j] : A(0);
      sh[j] = ACT ? g.shift[c0 + j] : A(0);
    }
    const int64_t step = int64_t(gridDim.y) * TY;
    int64_t r = int64_t(blockIdx.y) * TY + ty;
    for (; r + step < R; r += 2 * step) grad_pair<T, V, ACT>(g, r * C + c0, (r + step) * C + c0, mu, sc, sh, s1, s2);
    if (r < R) grad_one<T, V, ACT>(g, r * C + c0, mu, sc, sh, s1, s2);
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    sm[0][threadIdx.x * V + j] = s1[j];
    sm[1][threadIdx.x * V + j] = s2[j];
  }
  __syncthreads();
  for (int h = TY / 2; h > 0; h >>= 1) {
    if (ty < h) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        sm[0][threadIdx.x * V + j] += sm[0][(threadIdx.x + h * TX) * V + j];
        sm[1][threadIdx.x * V + j] += sm[1][(threadIdx.x + h * TX) * V + j];
      }
    }
    __syncthreads();
  }
  if (ty == 0 && active) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      *partial(part, 0, c0 + j, blockIdx.y, C) = sm[0][threadIdx.x * V + j];
      *partial(part, 1, c0 + j, blockIdx.y, C) = sm[1][threadIdx.x * V + j];
    }
  }
}

template <typename T, int V, bool ACT>
__global__ void __launch_bounds__(kThreads, 3) reduce_planes(GradArgs<T> g, int64_t N, int64_t C, int64_t S,
                                                          int64_t pieces, acc_t<T>* __restrict__ part) {
  using A = acc_t<T>;
  __shared__ A sm[2][kWarps];
  const int64_t c = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  A mu[V], sc[V], sh[V], s1[V], s2[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    mu[j] = g.mean[c];
    sc[j] = ACT ? g.scale[c] : A(0);
    sh[j] = ACT ? g.shift[c] : A(0);
    s1[j] = s2[j] = A(0);
  }
  const int64_t sv = S / V;
  for (int64_t u = int64_t(blockIdx.y) * kWarps + warp; u < N * pieces; u += int64_t(gridDim.y) * kWarps) {
    const int64_t n = u / pieces, i0 = (u - n * pieces) * kPiece, end = min(sv, i0 + kPiece);
    const int64_t base = (n * C + c) * S;
    int64_t i = i0 + lane;
    for (; i + 32 < end; i += 64) grad_pair<T, V, ACT>(g, base + i * V, base + (i + 32) * V, mu, sc, sh, s1, s2);
    if (i < end) grad_one<T, V, ACT>(g, base + i * V, mu, sc, sh, s1, s2);
  }
  A a = A(0), b = A(0);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    a += s1[j];
    b += s2[j];
  }
  a = warp_reduce(a, SumOp{});
  b = warp_reduce(b, SumOp{});
  if (lane == 0) {
    sm[0][warp] = a;
    sm[1][warp] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      a += sm[0][w];
      b += sm[1][w];
    }
    *partial(part, 0, c, blockIdx.y, C) = a;
    *partial(part, 1, c, blockIdx.y, C) = b;
  }
}

template <typename A>
__global__ void __launch_bounds__(kThreads) reduce_finalize(const A* __restrict__ part, int splits, int64_t C,
                                                            A* __restrict__ sum_dz, A* __restrict__ sum_dz_xmu) {
  const int64_t c = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= C) return;
  A a = A(0), b = A(0);
  for (int j = lane; j < splits; j += 32) {
    a += part[c * splits + j];
    b += part[(C + c) * splits + j];
  }
  a = warp_reduce(a, SumOp{});
  b = warp_reduce(b, SumOp{});
  if (lane == 0) {
    sum_dz[c] = a;
    sum_dz_xmu[c] = b;
  }
}

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

template <typename T, int V, class Op>
void launch_elementwise(const Op& op, const BnShape& s, cudaStream_t stream) {
  if (s.inner == 1) {
    const RowsGeom g = rows_geom<T>(s, V > 1);
    const int64_t most = ceil_div(s.outer, g.TY);
    int64_t gy = ceil_div(int64_t(sm_count()) * 8, g.gx);
    gy = gy < most ? gy : most;
    gy = gy < 65535 ? gy : 65535;
    elementwise_rows<V><<<dim3(unsigned(g.gx), unsigned(gy < 1 ? 1 : gy)), kThreads, 0, stream>>>(op, s.outer, s.C,
                                                                                                    g.TX);
  } else {
    const int64_t planes = s.outer * s.C, pieces = pieces_of<T>(s, V > 1);
    elementwise_planes<V><<<grid_for(planes * pieces, kWarps, 1), kThreads, 0, stream>>>(op, planes, s.C, s.inner,
                                                                                         pieces);
  }
}

// Splits of a reduction: one full wave of resident blocks (so the pass walks the tensor front to back, which
// the reversed elementwise pass after it relies on for L2 hits), capped by the work.
template <auto Kernel>
int64_t resident_blocks() {
  return int64_t(std::max(resident_per_sm<Kernel>(kThreads), 1)) * sm_count();
}
template <typename T, bool STATS>
int reduction_splits(const BnShape& s) {
  constexpr int VM = kVec16<T>;
  const bool vec = (s.inner == 1 ? s.C : s.inner) % VM == 0;
  int64_t splits, most;
  if (s.inner == 1) {
    const RowsGeom g = rows_geom<T>(s, vec);
    const int64_t res = STATS ? (vec ? resident_blocks<stats_rows<T, VM>>() : resident_blocks<stats_rows<T, 1>>())
                              : (vec ? resident_blocks<reduce_rows<T, VM, false>>()
                                     : resident_blocks<reduce_rows<T, 1, false>>());
    splits = res / g.gx;
    most = ceil_div(s.outer, g.TY);
  } else {
    const int64_t res = STATS ? (vec ? resident_blocks<stats_planes<T, VM>>() : resident_blocks<stats_planes<T, 1>>())
                              : (vec ? resident_blocks<reduce_planes<T, VM, false>>()
                                     : resident_blocks<reduce_planes<T, 1, false>>());
    splits = res / s.C;
    most = ceil_div(s.outer * pieces_of<T>(s, vec), kWarps);
  }
  splits = splits < most ? splits : most;
  splits = splits < 65535 ? splits : 65535;
  return int(splits < 1 ? 1 : splits);
}

// 16-byte accesses when the channel count (rows) or the plane size (planes) is a multiple of the vector and
// every pointer is aligned.
template <typename T>
bool use_vectors(const BnShape& s, std::initializer_list<const void*> ptrs) {
  if ((s.inner == 1 ? s.C : s.inner) % kVec16<T> != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

bool empty(const BnShape& s) { return s.outer == 0 || s.C == 0 || s.inner == 0; }

// ---- per-channel steps: computed in double, read and written in each vector's own dtype ----

__device__ double load_any(const ChannelVec& v, int64_t i, double absent) {
  if (v.p == nullptr) return absent;
  switch (v.t) {
    case DType::Float32: return static_cast<const float*>(v.p)[i];
    case DType::Float16: return __half2float(static_cast<const __half*>(v.p)[i]);
    case DType::BFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(v.p)[i]);
    case DType::Float64: return static_cast<const double*>(v.p)[i];
  }
  return absent;
}
__device__ void store_any(const ChannelVec& v, int64_t i, double x) {
  if (v.p == nullptr) return;
  switch (v.t) {
    case DType::Float32: static_cast<float*>(v.p)[i] = float(x); break;
    case DType::Float16: static_cast<__half*>(v.p)[i] = __float2half_rn(float(x)); break;
    case DType::BFloat16: static_cast<__nv_bfloat16*>(v.p)[i] = __float2bfloat16_rn(float(x)); break;
    case DType::Float64: static_cast<double*>(v.p)[i] = x; break;
  }
}

// Channel c's forward coefficients from its statistics mu and v (training: m2, the sum of squared deviations;
// evaluation: the running variance); also updates the running statistics in training. Returns (scale, shift).
__device__ void fwd_coeffs_one(const FwdCoeffPtrs& p, int64_t c, double mu, double v, double* scale_out,
                               double* shift_out) {
  const double n = double(p.count);
  const double invstd = 1.0 / sqrt((p.training ? v / n : v) + p.eps);
  if (p.training && p.running_mean.p != nullptr) {
    const double m = p.momentum;
    store_any(p.running_mean, c, (1.0 - m) * load_any(p.running_mean, c, 0.0) + m * mu);
    store_any(p.running_var, c, (1.0 - m) * load_any(p.running_var, c, 0.0) + m * (v / (n - 1.0)));
  }
  const double scale = invstd * load_any(p.weight, c, 1.0), shift = load_any(p.bias, c, 0.0) - mu * scale;
  store_any(p.mean, c, mu);
  store_any(p.invstd, c, invstd);
  store_any(p.scale, c, scale);
  store_any(p.shift, c, shift);
  *scale_out = scale;
  *shift_out = shift;
}

__global__ void fwd_coeffs_kernel(FwdCoeffPtrs p, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double scale, shift;
  fwd_coeffs_one(p, c, load_any(p.stat_mean, c, 0.0), load_any(p.stat_var, c, 0.0), &scale, &shift);
}

__global__ void affine_kernel(ChannelVec mean, ChannelVec invstd, ChannelVec w, ChannelVec b, ChannelVec scale,
                              ChannelVec shift, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double sc = load_any(invstd, c, 0.0) * load_any(w, c, 1.0);
  store_any(scale, c, sc);
  store_any(shift, c, load_any(b, c, 0.0) - load_any(mean, c, 0.0) * sc);
}

// Channel c's d_weight, d_bias and d_input coefficients (k, a, b) from its sums s1 = sum dz and s2 = sum dz * (x - mean).
struct BwdCoeffs {
  double k, a, b;
};
__device__ BwdCoeffs bwd_coeffs_one(const BwdCoeffPtrs& p, int64_t c, double s1, double s2) {
  const double is = load_any(p.invstd, c, 0.0), n = double(p.count);
  const BwdCoeffs r{is * load_any(p.weight, c, 1.0), p.training ? s1 / n : 0.0, p.training ? s2 * is * is / n : 0.0};
  store_any(p.dw, c, s2 * is);
  store_any(p.db, c, s1);
  store_any(p.k, c, r.k);
  store_any(p.a, c, r.a);
  store_any(p.b, c, r.b);
  return r;
}

__global__ void bwd_coeffs_kernel(BwdCoeffPtrs p, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  bwd_coeffs_one(p, c, load_any(p.sum_dz, c, 0.0), load_any(p.sum_dz_xmu, c, 0.0));
}

// ---- persistent training passes (rows walk): statistics and the elementwise pass in one kernel ----
//
// The separate passes above read x twice in the forward (statistics, then apply) and dy and x twice in the
// backward (sums, then dx). Here one co-resident grid (cooperative launch, one 512-thread block per SM, sm_90)
// does a whole direction, each block owning a contiguous range of rows cut into chunks of ~16 KB (all
// tensors of the direction together). Chunks move by 1-D bulk copies (common/cuda/bulk_copy.cuh): one thread
// issues them, an mbarrier says when they landed, so a block keeps ~100 KB in flight for a few instructions.
//   pass 1  the first chunks of the range are copied into shared memory to stay there (the "cache"); the
//           others stream through a ring of slots (6 x 16 KB) (the last ones with an L2 evict_last hint);
//           each thread adds its rows' values into per-channel sums; a fixed tree gives the block's sums.
//   merge   after a grid barrier, a warp per channel adds the blocks' sums in a fixed order (deterministic) and
//           writes the per-channel outputs (fwd_coeffs_one / bwd_coeffs_one) and pass 2's coefficients.
//   pass 2  after a second barrier: the cached chunks from shared memory, the others streamed again, newest
//           first (L2 hits). batch_norm_add_act's backward writes dz = dy * act'(z) in pass 1 (over the cached
//           chunks' dy too) and streams dz instead of dy here; its residual rides in the chunks as a third tensor.
// The ring occupies the top slots of the shared-memory area; cached chunks there are copied in after pass 1's
// stream and used first in pass 2, before the ring streams again. 227 KB x 132 SMs keeps ~30 MB of the 103 MB
// of a 64x256x56x56 bf16 tensor on chip: the forward reads 176 MB instead of 206, the backward 382 instead of 412.

constexpr int kPersistThreads = 512;
constexpr int kPersistWarps = kPersistThreads / 32;
// Ring slots and chunk size: 6 x 16 KB by default (knobs TORCH_DNN_BN_RING, TORCH_DNN_BN_CHUNK_KB for A/B).
constexpr int kMaxRingStages = 8;
constexpr int kRingStagesDefault = 6;
constexpr int kChunkKbDefault = 16;
constexpr int kBarBytes = 128;  // the mbarriers: the ring's slots, the cache's two copy groups

// Phase timestamps of a persistent launch (TORCH_DNN_BN_TRACE=1, a measurement aid): thread 0 of each block
// writes the global timer at kernel start, end of pass 1, after each grid barrier, and at the end.
constexpr int kTracePoints = 5;
__device__ __forceinline__ void trace_point(unsigned long long* trace, int k) {
  if (trace != nullptr && threadIdx.x == 0) {
    unsigned long long t = 0;
#if defined(__CUDA_ARCH__)
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
#endif
    trace[blockIdx.x * kTracePoints + k] = t;
  }
}

// All blocks of the co-resident grid meet here, the writes before visible to all after: cooperative groups'
// grid barrier, whose counter the cooperative launch provides (an own counter needed a memset before every
// launch, which cost more host time than the launch itself).
__device__ __forceinline__ void grid_barrier() { cooperative_groups::this_grid().sync(); }

// Per-thread sums s += a, q += a * b over V channels, folded into (S, Q) every kFold rows (two-level
// summation: the error of a long per-thread run stays that of 64-term sums).
template <int V>
struct FoldedSums {
  float s[V], q[V], S[V], Q[V];
  int cnt;
  __device__ __forceinline__ void init() {
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = q[j] = S[j] = Q[j] = 0.f;
    cnt = 0;
  }
  __device__ __forceinline__ void fold() {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      S[j] += s[j];
      Q[j] += q[j];
      s[j] = q[j] = 0.f;
    }
    cnt = 0;
  }
  __device__ __forceinline__ void add(const float (&a)[V], const float (&b)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      s[j] += a[j];
      q[j] = fma(a[j], b[j], q[j]);
    }
    if (++cnt == kFold) fold();
  }
};

// The block's (S, Q) per channel: a fixed tree over the TY thread rows through `red` ([red_h][2][C] floats);
// thread row 0 then writes them to part[k][c][block].
template <int V>
__device__ void block_sums_to_partials(FoldedSums<V>& acc, bool active, int tx, int ty, int TY, int red_h,
                                       int64_t C, float* red, float* __restrict__ part) {
  const int64_t c0 = int64_t(tx) * V;
  for (int h = red_h; h >= 1; h >>= 1) {
    if (active && ty >= h && ty < 2 * h) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        red[(int64_t(ty - h) * 2) * C + c0 + j] = acc.S[j];
        red[(int64_t(ty - h) * 2 + 1) * C + c0 + j] = acc.Q[j];
      }
    }
    __syncthreads();
    if (active && ty < h && ty + h < TY) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        acc.S[j] += red[(int64_t(ty) * 2) * C + c0 + j];
        acc.Q[j] += red[(int64_t(ty) * 2 + 1) * C + c0 + j];
      }
    }
    __syncthreads();
  }
  if (active && ty == 0) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      part[(c0 + j) * gridDim.x + blockIdx.x] = acc.S[j];
      part[(C + c0 + j) * gridDim.x + blockIdx.x] = acc.Q[j];
    }
  }
}

// Channel c's sums over all blocks, in double, in a fixed order (lane-strided, then a butterfly): every lane of
// the warp gets them.
__device__ __forceinline__ void merge_partials(const float* part, int64_t c, int64_t C, double& S, double& Q) {
  const int lane = threadIdx.x % 32;
  const int G = int(gridDim.x);
  S = 0.0;
  Q = 0.0;
  // eight blocks' partials a lane in flight before they are added (one L2 round trip for up to 256 blocks)
  for (int j0 = 0; j0 < G; j0 += 256) {
    float s[8], q[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int j = j0 + 32 * u + lane;
      s[u] = j < G ? __ldcg(part + c * G + j) : 0.f;
      q[u] = j < G ? __ldcg(part + (C + c) * G + j) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      S += double(s[u]);
      Q += double(q[u]);
    }
  }
  S = warp_reduce(S, SumOp{});
  Q = warp_reduce(Q, SumOp{});
}

// V consecutive floats written in this launch (by other blocks): 16-byte loads that skip L1.
template <int V>
__device__ __forceinline__ void load_coefs(const float* p, float (&out)[V]) {
#pragma unroll
  for (int j = 0; j < V; j += 4) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(p + j));
    out[j] = v.x;
    out[j + 1] = v.y;
    out[j + 2] = v.z;
    out[j + 3] = v.w;
  }
}

// A block's rows as chunks of NT tensors' rows, and where they live in shared memory. Chunk k covers rows
// [k * SR, k * SR + rows(k)) of the block; its image in a slot is NT row-blocks of SR rows (tensor t at
// t * SR * rowb). Chunks [0, ncc) are cached in slots [0, ncc): [0, lo) below the ring, [lo, ncc) inside it.
struct NoPre {
  __device__ __forceinline__ void operator()(int, int) const {}
};

template <int NT>
struct ChunkPlan {
  const char* src[NT];  // the block's first row of each tensor
  int64_t r0, nb, rowb;
  int SR, nchunks, ncc, lo, ring_base;
  int live = NT;  // the tensors a copy brings (the first `live`; the backward with a residual drops it for pass 2)
  char* slots;
  size_t slot_bytes;

  __device__ ChunkPlan(const void* const (&base)[NT], int64_t R, int64_t row_bytes, const PersistGeom& g, char* area) {
    const int64_t G = gridDim.x, b = blockIdx.x;
    r0 = R * b / G;
    nb = R * (b + 1) / G - r0;
    rowb = row_bytes;
#pragma unroll
    for (int t = 0; t < NT; ++t) src[t] = static_cast<const char*>(base[t]) + r0 * rowb;
    SR = g.chunk_rows;
    nchunks = int((nb + SR - 1) / SR);
    ring_base = g.slots - g.stages;
    ncc = min(nchunks, min(g.slots, g.cache_cap));
    lo = min(ncc, ring_base);
    slots = area;
    slot_bytes = size_t(NT) * SR * rowb;
  }
  __device__ int rows(int k) const { return int(min(int64_t(SR), nb - int64_t(k) * SR)); }
  __device__ char* slot(int s) const { return slots + size_t(s) * slot_bytes; }
  // thread 0: chunks [k0, k1) into slots [s0, s0 + k1 - k0) as one phase of `bar`
  __device__ void issue(int k0, int k1, int s0, uint64_t* bar, uint64_t pol) const {
    if (k1 <= k0) return;
    const int64_t r_end = min(nb, int64_t(k1) * SR), nrows = r_end - int64_t(k0) * SR;
    mbar_arrive_expect_tx(bar, unsigned(live * nrows * rowb));
    for (int k = k0; k < k1; ++k) {
      const unsigned bytes = unsigned(rows(k) * rowb);
#pragma unroll
      for (int t = 0; t < NT; ++t)
        if (t < live)
          bulk_copy_g2s(slot(s0 + k - k0) + size_t(t) * SR * rowb, src[t] + int64_t(k) * SR * rowb, bytes, bar, pol);
    }
  }
  // pass 2's order (persist_pass2): the cached chunks inside the ring, those below it, then the streamed ones
  // newest first; pass2_index inverts pass2_chunk
  __device__ int pass2_chunk(int j) const {
    if (j < ncc - lo) return lo + j;
    return j < ncc ? j - (ncc - lo) : nchunks - 1 - (j - ncc);
  }
  __device__ int pass2_index(int k) const {
    if (k >= ncc) return ncc + (nchunks - 1 - k);
    return k >= lo ? k - lo : (ncc - lo) + k;
  }
  // a hint to the L2 for chunk k's rows of a tensor laid out as the plan's (first: the block's first row)
  __device__ void prefetch_l2(const char* first, int k) const {
    bulk_prefetch_l2(first + int64_t(k) * SR * rowb, unsigned(rows(k) * rowb));
  }
  // the rows of chunk k in slot s that thread row ty handles, with the thread's vectors of each tensor; pre(k, n)
  // first (n: the chunk's rows)
  template <class F, class P = NoPre>
  __device__ __forceinline__ void for_rows(int k, int s, int ty, int TY, int64_t vec_off, F&& f, P&& pre = P{}) const {
    const char* base = slot(s) + vec_off;
    const int n = rows(k);
    pre(k, n);
    for (int i = ty; i < n; i += TY) {
      const char* p[NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) p[t] = base + (size_t(t) * SR + i) * rowb;
      f(p, int64_t(k) * SR + i);
    }
  }
};

// Shared-memory layout of a persistent block: mbarriers, the reduction tree's buffer, the chunk slots.
struct PersistSmem {
  uint64_t* ring_bar;   // [kMaxRingStages]
  uint64_t* lo_bar;     // cached chunks below the ring
  uint64_t* hi_bar;     // cached chunks inside the ring
  float* red;
  char* area;
  __device__ PersistSmem(char* smem, const PersistGeom& g) {
    ring_bar = reinterpret_cast<uint64_t*>(smem);
    lo_bar = ring_bar + kMaxRingStages;
    hi_bar = lo_bar + 1;
    red = reinterpret_cast<float*>(smem + kBarBytes);
    area = smem + kBarBytes + g.red_bytes;
    static_assert((kMaxRingStages + 2) * 8 <= kBarBytes, "mbarriers fit");
  }
};

// Pass 1 of a block: copies the cached chunks, streams the others through the ring, calls use(p, row) on every
// row of the thread's (pointers to its 16-byte vectors, one per tensor). q counts ring copies (slot q %
// stages, parity (q / stages) & 1) across both passes.
template <int NT, class F>
__device__ void persist_pass1(const ChunkPlan<NT>& cp, const PersistSmem& sm, const PersistGeom& g, int ty, int TY,
                              int64_t vec_off, bool active, F&& use) {
  const bool lead = threadIdx.x == 0;
  const int S = g.stages;
  if (lead) {
    for (int s = 0; s < S; ++s) mbar_init(&sm.ring_bar[s], 1);
    mbar_init(sm.lo_bar, 1);
    mbar_init(sm.hi_bar, 1);
    mbar_fence_init();
  }
  __syncthreads();
  const uint64_t keep = l2_policy_evict_last(), drop = l2_policy_evict_first();
  const int n1 = cp.nchunks - cp.ncc;
  const auto pol1 = [&](int k) { return k >= cp.nchunks - g.l2_chunks ? keep : drop; };
  if (lead) {
    cp.issue(0, cp.lo, 0, sm.lo_bar, drop);
    for (int q = 0; q < S && q < n1; ++q)
      cp.issue(cp.ncc + q, cp.ncc + q + 1, cp.ring_base + q, &sm.ring_bar[q], pol1(cp.ncc + q));
  }
  for (int q = 0; q < n1; ++q) {
    const int s = q % S;
    mbar_wait(&sm.ring_bar[s], (q / S) & 1);
    if (active) cp.for_rows(cp.ncc + q, cp.ring_base + s, ty, TY, vec_off, use);
    __syncthreads();  // the slot is free again
    const int k = cp.ncc + q + S;
    if (lead && k < cp.nchunks) cp.issue(k, k + 1, cp.ring_base + s, &sm.ring_bar[s], pol1(k));
  }
  // the cached chunks inside the ring now that the ring is idle (the loop's last barrier)
  if (lead) cp.issue(cp.lo, cp.ncc, cp.lo, sm.hi_bar, drop);
  if (cp.lo > 0) {
    mbar_wait(sm.lo_bar, 0);
    if (active)
      for (int k = 0; k < cp.lo; ++k) cp.for_rows(k, k, ty, TY, vec_off, use);
  }
  if (cp.ncc > cp.lo) {
    mbar_wait(sm.hi_bar, 0);
    if (active)
      for (int k = cp.lo; k < cp.ncc; ++k) cp.for_rows(k, k, ty, TY, vec_off, use);
  }
}

// Pass 2 of a block: out(p, row) on every row of the thread's: the cached chunks inside the ring first, then
// the others streamed again newest first (the L2 holds the latest) while the cached chunks below the ring run.
template <int NT, class F, class P>
__device__ void persist_pass2(const ChunkPlan<NT>& cp, const PersistSmem& sm, const PersistGeom& g, int ty, int TY,
                              int64_t vec_off, bool active, F&& out, P&& pre) {
  const bool lead = threadIdx.x == 0;
  const int S = g.stages;
  if (active)
    for (int k = cp.lo; k < cp.ncc; ++k) cp.for_rows(k, k, ty, TY, vec_off, out, pre);
  __syncthreads();  // the ring's slots are free
  const uint64_t drop = l2_policy_evict_first();
  const int n1 = cp.nchunks - cp.ncc, n2 = n1;
  const auto chunk = [&](int p) { return cp.nchunks - 1 - p; };
  if (lead)
    for (int p = 0; p < S && p < n2; ++p) {
      const int s = (n1 + p) % S;
      cp.issue(chunk(p), chunk(p) + 1, cp.ring_base + s, &sm.ring_bar[s], drop);
    }
  if (active)
    for (int k = 0; k < cp.lo; ++k) cp.for_rows(k, k, ty, TY, vec_off, out, pre);
  for (int p = 0; p < n2; ++p) {
    const int q = n1 + p, s = q % S;
    mbar_wait(&sm.ring_bar[s], (q / S) & 1);
    if (active) cp.for_rows(chunk(p), cp.ring_base + s, ty, TY, vec_off, out, pre);
    __syncthreads();
    if (lead && p + S < n2) {
      const int k = chunk(p + S);
      cp.issue(k, k + 1, cp.ring_base + s, &sm.ring_bar[s], drop);
    }
  }
}

// What both directions' kernels share: a block's thread layout over its rows, its chunk plan and shared memory,
// and the phases around their own math: pass 1 (rows into per-thread sums), the exchange (block partials, grid
// barrier, a warp per channel merging every block's sums in a fixed order, grid barrier) and pass 2.
template <typename T, int NT>
struct PersistBlock {
  static constexpr int V = kVec16<T>;
  const PersistGeom& g;
  int TX, TY, tx, ty;
  bool active;
  int64_t C, c0, vec_off;
  PersistSmem sm;
  ChunkPlan<NT> cp;
  unsigned long long* trace;

  __device__ PersistBlock(const PersistGeom& geo, const void* const (&base)[NT], int64_t R, int64_t C_, char* smem,
                          unsigned long long* trace_)
      : g(geo),
        TX(geo.TX),
        TY(kPersistThreads / geo.TX),
        tx(int(threadIdx.x) % geo.TX),
        ty(int(threadIdx.x) / geo.TX),
        active(ty < TY),
        C(C_),
        c0(int64_t(tx) * V),
        vec_off(int64_t(tx) * V * int64_t(sizeof(T))),
        sm(smem, geo),
        cp(base, R, C_ * int64_t(sizeof(T)), geo, sm.area),
        trace(trace_) {
    trace_point(trace, 0);
  }

  template <class F>
  __device__ void pass1(FoldedSums<V>& acc, F&& use) {
    persist_pass1(cp, sm, g, ty, TY, vec_off, active, use);
    acc.fold();
    trace_point(trace, 1);
  }
  // merge(c, S, Q) on lane 0 of channel c's warp, with the channel's sums over all blocks (double)
  template <class F>
  __device__ void exchange(FoldedSums<V>& acc, float* part, F&& merge) {
    block_sums_to_partials<V>(acc, active, tx, ty, TY, g.red_h, C, sm.red, part);
    grid_barrier();
    trace_point(trace, 2);
    for (int64_t c = int64_t(blockIdx.x) * kPersistWarps + threadIdx.x / 32; c < C;
         c += int64_t(gridDim.x) * kPersistWarps) {
      double S, Q;
      merge_partials(part, c, C, S, Q);
      if (threadIdx.x % 32 == 0) merge(c, S, Q);
    }
    grid_barrier();
    trace_point(trace, 3);
  }
  template <class F, class P = NoPre>
  __device__ void pass2(F&& out, P&& pre = P{}) {
    persist_pass2(cp, sm, g, ty, TY, vec_off, active, out, pre);
    __syncthreads();
    trace_point(trace, 4);
  }
};

// A row vector of the chunk image: 16 bytes of T in shared memory, as floats.
template <typename T, int V>
__device__ __forceinline__ void row_vec(const char* p, float (&out)[V]) {
  load_acc<V>(reinterpret_cast<const T*>(p), out);
}

template <typename T>
struct PersistFwdArgs {
  const T* x;
  const T* res;
  T* y;
  int act;
  bool prefetch;  // the residual's rows a chunk at a time (TORCH_DNN_BN_RES_PREFETCH)
  int res_ahead;  // pass 2 asks the L2 for the residual of the chunk this many ahead (TORCH_DNN_BN_RES_AHEAD)
  int64_t R, C;
  PersistGeom geo;
  float* part;   // [2][C][G]
  float* coef;   // [2][C]: scale, shift
  FwdCoeffPtrs p;
  unsigned long long* trace;  // null unless TORCH_DNN_BN_TRACE=1
};

// ACT: an activation and/or a residual in pass 2 (batch_norm_add_act); false: plain batch_norm.
template <typename T, bool ACT>
__global__ void __launch_bounds__(kPersistThreads, 1) bn_persist_fwd(PersistFwdArgs<T> a) {
  // (compiled for every architecture, launched on sm_90+ only: the bulk copies are no-ops below)
  constexpr int V = kVec16<T>;
  extern __shared__ __align__(16) char persist_smem[];
  const void* const base[1] = {a.x};
  PersistBlock<T, 1> b(a.geo, base, a.R, a.C, persist_smem, a.trace);
  const int64_t C = a.C, c0 = b.c0;

  // pass 1: shifted sums (shift: the channel's first element, the same for every block)
  FoldedSums<V> acc;
  acc.init();
  float sh[V];
  if (b.active) load_acc<V>(a.x + c0, sh);
  b.pass1(acc, [&](const char* const (&p)[1], int64_t) {
    float v[V];
    row_vec<T, V>(p[0], v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] -= sh[j];
    acc.add(v, v);
  });
  // the residual of pass 2's first res_ahead chunks is asked of the L2 now, while the grid waits at the barriers
  const char* res_rows = ACT && a.res ? reinterpret_cast<const char*>(a.res + b.cp.r0 * a.C) : nullptr;
  if (res_rows && threadIdx.x == 0)
    for (int j = 0; j < min(a.res_ahead, b.cp.nchunks); ++j) b.cp.prefetch_l2(res_rows, b.cp.pass2_chunk(j));
  b.exchange(acc, a.part, [&](int64_t c, double S, double Q) {
    const double n = double(a.R), d = S / n;
    double m2 = Q - S * d;
    m2 = m2 < 0.0 ? 0.0 : m2;  // rounding may go below 0; NaN stays NaN
    double scale, shift;
    fwd_coeffs_one(a.p, c, double(to_acc<float>(a.x[c])) + d, m2, &scale, &shift);
    a.coef[c] = float(scale);
    a.coef[C + c] = float(shift);
  });

  // pass 2: y = act(x * scale + shift + res)
  float sc[V], sf[V];
  if (b.active) {
    load_coefs<V>(a.coef + c0, sc);
    load_coefs<V>(a.coef + C + c0, sf);
  }
  T* yb = a.y + b.cp.r0 * C + c0;
  const T* rb = ACT && a.res ? a.res + b.cp.r0 * C + c0 : nullptr;
  // the residual is read from global memory (x alone fills the chunk images): a chunk's two rows of the thread
  // (16 KB chunks: two rows a thread at any C) are loaded together when the chunk starts, so that their latencies
  // overlap; other rows are loaded where used. TORCH_DNN_BN_RES_PREFETCH=0: every row where used (A/B). And when a
  // chunk starts, the residual of the chunk res_ahead later in pass 2's order is asked of the L2 (a bulk prefetch;
  // one chunk ahead measured best, deeper prefetches compete with the stream: docs/batch_norm.md;
  // TORCH_DNN_BN_RES_AHEAD).
  Vec<T, V> r0v, r1v;
  int64_t rbase = -1;
  const auto pre = [&](int k, int n) {
    if (!ACT || !rb) return;
    if (threadIdx.x == 0 && a.res_ahead > 0) {
      const int j = b.cp.pass2_index(k) + a.res_ahead;
      if (j < b.cp.nchunks) b.cp.prefetch_l2(res_rows, b.cp.pass2_chunk(j));
    }
    if (!a.prefetch) return;
    rbase = int64_t(k) * b.cp.SR + b.ty;
    if (b.ty < n) r0v = load_vec<T, V>(rb + rbase * C);
    if (b.ty + b.TY < n) r1v = load_vec<T, V>(rb + (rbase + b.TY) * C);
  };
  b.pass2([&](const char* const (&p)[1], int64_t i) {
    float v[V];
    row_vec<T, V>(p[0], v);
    if constexpr (ACT) {
      float r[V];
      if (rb) {
        const int64_t d = i - rbase;
        const Vec<T, V> rv = d == 0 ? r0v : (d == b.TY ? r1v : load_vec<T, V>(rb + i * C));
#pragma unroll
        for (int j = 0; j < V; ++j) r[j] = vec_elem<float>(rv, j);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) r[j] = 0.f;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = act_fwd(fma(v[j], sc[j], sf[j]) + r[j], a.act);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = fma(v[j], sc[j], sf[j]);
    }
    store_acc<V>(yb + i * C, v);
  }, pre);
}

template <typename T>
struct PersistBwdArgs {
  const T* dy;
  const T* x;
  const float* mean;
  T* dx;
  // batch_norm_add_act (the ACT kernels): the residual (RES), the forward's affine map z = x * scale + shift (+ res)
  // for the activation's derivative (read when act != 0), and dz = dy * act'(z), written in pass 1 (d_residual, or
  // a scratch tensor): pass 2 streams dz instead of dy
  const T* res;
  const float* scale;
  const float* shift;
  int act;
  T* dz;
  int64_t R, C;
  PersistGeom geo;
  float* part;   // [2][C][G]
  float* coef;   // [3][C]: k, a, b
  BwdCoeffPtrs p;
  unsigned long long* trace;  // null unless TORCH_DNN_BN_TRACE=1
};

// ACT: batch_norm_add_act's backward (an activation and/or a residual), whose pass 1 turns dy into dz = dy * act'(z)
// and writes it (global, and over dy's image in the cached chunks), so that pass 2 is plain batch_norm's on dz;
// RES: the residual comes through the chunk images too (a third tensor), so that no row waits on a global load.
template <typename T, bool ACT = false, bool RES = false>
__global__ void __launch_bounds__(kPersistThreads, 1) bn_persist_bwd(PersistBwdArgs<T> a) {
  // (compiled for every architecture, launched on sm_90+ only: the bulk copies are no-ops below)
  constexpr int V = kVec16<T>;
  constexpr int NT = RES ? 3 : 2;
  static_assert(ACT || !RES, "a residual comes with the ACT kernel");
  extern __shared__ __align__(16) char persist_smem[];
  const void* base[NT];
  base[0] = a.dy;
  base[1] = a.x;
  if constexpr (RES) base[NT - 1] = a.res;
  PersistBlock<T, NT> b(a.geo, base, a.R, a.C, persist_smem, a.trace);
  const int64_t C = a.C, c0 = b.c0;

  // pass 1: sum dz and sum dz * (x - mean), dz = dy (plain batch_norm) or dy * act'(z)
  FoldedSums<V> acc;
  acc.init();
  float mu[V], sc[V], sf[V];
  if (b.active) load_coefs<V>(a.mean + c0, mu);
  if (ACT && a.act != 0 && b.active) {
    load_coefs<V>(a.scale + c0, sc);
    load_coefs<V>(a.shift + c0, sf);
  }
  T* zb = ACT ? a.dz + b.cp.r0 * C + c0 : nullptr;
  const int64_t cached_rows = int64_t(b.cp.ncc) * b.cp.SR;  // rows below this stay in shared memory for pass 2
  b.pass1(acc, [&](const char* const (&p)[NT], int64_t i) {
    float d[V], v[V];
    row_vec<T, V>(p[0], d);
    row_vec<T, V>(p[1], v);
    if constexpr (ACT) {
      if (a.act != 0) {
        float r[V];
        if constexpr (RES) {
          row_vec<T, V>(p[NT - 1], r);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) r[j] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < V; ++j) d[j] *= act_grad(fma(v[j], sc[j], sf[j]) + r[j], a.act);
      }
      store_acc<V>(zb + i * C, d);
      // a cached chunk's dy image becomes dz (as stored, the rounding pass 2 would read back from global memory)
      if (i < cached_rows) store_acc<V>(reinterpret_cast<T*>(const_cast<char*>(p[0])), d);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] -= mu[j];
    acc.add(d, v);
  });
  if constexpr (ACT) {
    // dz was written by the generic proxy, to global memory and over the cached images; pass 2's bulk copies
    // (async proxy) read the former and refill some of the latter's slots: order the writes before them (the
    // exchange's barriers follow)
    fence_proxy_async();
    b.cp.src[0] = reinterpret_cast<const char*>(a.dz + b.cp.r0 * C);
    b.cp.live = 2;  // pass 2 streams dz and x; the residual is done with
  }
  b.exchange(acc, a.part, [&](int64_t c, double S1, double S2) {
    const BwdCoeffs k = bwd_coeffs_one(a.p, c, S1, S2);
    a.coef[c] = float(k.k);
    a.coef[C + c] = float(k.a);
    a.coef[2 * C + c] = float(k.b);
  });

  // pass 2: dx = k * (dy - a - (x - mean) * b)
  float kk[V], ka[V], kb[V];
  if (b.active) {
    load_coefs<V>(a.coef + c0, kk);
    load_coefs<V>(a.coef + C + c0, ka);
    load_coefs<V>(a.coef + 2 * C + c0, kb);
  }
  T* dxb = a.dx + b.cp.r0 * C + c0;
  b.pass2([&](const char* const (&p)[NT], int64_t i) {
    float d[V], v[V];
    row_vec<T, V>(p[0], d);
    row_vec<T, V>(p[1], v);
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] = kk[j] * (d[j] - ka[j] - (v[j] - mu[j]) * kb[j]);
    store_acc<V>(dxb + i * C, d);
  });
}

// ---- persistent passes: host side ----

// The geometry of a persistent launch over NT tensors a row (1 forward, 2 backward, 3 with a residual); false
// when the device (before sm_90) or the shape does not fit it: the separate passes run then. Knobs
// (docs/batch_norm.md): TORCH_DNN_BN_PERSIST=0 off; TORCH_DNN_BN_CACHE_KB caps a block's cached chunks;
// TORCH_DNN_BN_L2_MB sets the share of the grid's last streamed chunks loaded with evict_last; TORCH_DNN_BN_RING /
// TORCH_DNN_BN_CHUNK_KB the ring (launch_persist_forward reads the residual's two, TORCH_DNN_BN_RES_PREFETCH and
// TORCH_DNN_BN_RES_AHEAD).
template <typename T, auto Kernel>
bool persist_geom(const BnShape& s, int NT, PersistGeom& g) {
  constexpr int V = kVec16<T>;
  if (env::get_int("TORCH_DNN_BN_PERSIST", 1) == 0) return false;
  if (cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(0) < 9) return false;
  if (s.inner != 1 || s.C % V != 0 || s.C / V > kPersistThreads || s.outer < 1) return false;
  g.TX = int(s.C / V);
  const int TY = kPersistThreads / g.TX;
  int p2 = 1;
  while (p2 < TY) p2 *= 2;
  g.red_h = p2 / 2;
  g.red_bytes = int(int64_t(g.red_h) * 2 * s.C * int64_t(sizeof(float)));
  const int64_t row_bytes = int64_t(NT) * s.C * int64_t(sizeof(T));
  g.stages = std::min(std::max(env::get_int("TORCH_DNN_BN_RING", kRingStagesDefault), 2), kMaxRingStages);
  g.chunk_rows = int(std::max<int64_t>(1, int64_t(std::max(env::get_int("TORCH_DNN_BN_CHUNK_KB", kChunkKbDefault), 1)) * 1024 / row_bytes));
  const int64_t slot_bytes = row_bytes * g.chunk_rows;
  // the kernels have no static shared memory; the limit is raised once per device to the opt-in maximum
  if (raise_smem_limit_once<Kernel>(max_smem_optin()) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const int64_t area = int64_t(max_smem_optin()) - kBarBytes - g.red_bytes;
  g.slots = int(area > 0 ? area / slot_bytes : 0);
  if (g.slots < g.stages + 1) return false;
  const int cap_kb = env::get_int("TORCH_DNN_BN_CACHE_KB", -1);
  g.cache_cap = cap_kb >= 0 ? int(int64_t(cap_kb) * 1024 / slot_bytes) : g.slots;
  g.G = sm_count();  // one block per SM (launch bounds (512, 1): at most 128 registers, so one always fits)
  const int64_t chunks = (s.outer + g.G - 1) / g.G / g.chunk_rows + 1;  // a block's chunks, at most
  const int used = int(std::min<int64_t>(g.slots, std::max<int64_t>(chunks, g.stages + 1)));
  g.smem = size_t(kBarBytes) + size_t(g.red_bytes) + size_t(used) * size_t(slot_bytes);
  g.slots = used;
  g.l2_chunks = int((int64_t(env::get_int("TORCH_DNN_BN_L2_MB", 16)) << 20) / (int64_t(g.G) * slot_bytes));
  return true;
}

template <class K, class Args>
cudaError_t launch_cooperative_once(K kernel, const PersistGeom& g, const Args& args, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(g.G));
  cfg.blockDim = dim3(kPersistThreads);
  cfg.dynamicSmemBytes = g.smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args);
}

// The launch; with TORCH_DNN_BN_TRACE=1 it also waits for the kernel and prints each phase's end (min / max
// over the blocks, microseconds from the first block's start) to stderr.
template <class K, class Args>
cudaError_t launch_cooperative(K kernel, const PersistGeom& g, Args args, cudaStream_t stream) {
  if (env::get_int("TORCH_DNN_BN_TRACE", 0) != 1) return launch_cooperative_once(kernel, g, args, stream);
  const size_t n = size_t(g.G) * kTracePoints;
  cudaError_t err = cudaMalloc(&args.trace, n * sizeof(unsigned long long));
  if (err != cudaSuccess) return err;
  err = launch_cooperative_once(kernel, g, args, stream);
  std::vector<unsigned long long> t(n);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess) err = cudaMemcpy(t.data(), args.trace, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
  cudaFree(args.trace);
  if (err != cudaSuccess) return err;
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < g.G; ++b) t0 = std::min(t0, t[size_t(b) * kTracePoints]);
  std::fprintf(stderr, "bn persistent trace (us from the first start, min..max over %d blocks):", g.G);
  for (int k = 0; k < kTracePoints; ++k) {
    unsigned long long lo = ~0ull, hi = 0;
    for (int b = 0; b < g.G; ++b) {
      lo = std::min(lo, t[size_t(b) * kTracePoints + k]);
      hi = std::max(hi, t[size_t(b) * kTracePoints + k]);
    }
    std::fprintf(stderr, " [%d] %.1f..%.1f", k, (lo - t0) * 1e-3, (hi - t0) * 1e-3);
  }
  std::fprintf(stderr, "\n");
  return cudaSuccess;
}

// The workspace of a persistent launch, in floats: partial sums [2][C][G], coefficients [3][C].
int64_t persist_ws_floats(const BnShape& s, int G) { return 2 * s.C * G + 3 * s.C; }

unsigned channel_blocks(int64_t C) { return unsigned(ceil_div(C, kThreads)); }

}  // namespace

int64_t stats_workspace(DType dtype, const BnShape& s) {
  if (empty(s)) return 0;
  int64_t n = 0;
  dispatch_dtype(dtype, [&](auto tag) { n = int64_t(reduction_splits<decltype(tag), true>(s)) * s.C * 3; });
  return n;
}

cudaError_t launch_stats(DType dtype, const BnShape& s, const void* x, void* mean, void* m2, void* ws,
                         cudaStream_t stream) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const int splits = reduction_splits<T, true>(s);
    const T* xp = static_cast<const T*>(x);
    A* part = static_cast<A*>(ws);
    constexpr int VM = kVec16<T>;
    const bool vec = use_vectors<T>(s, {x});
    if (s.inner == 1) {
      const RowsGeom g = rows_geom<T>(s, vec);
      const dim3 grid(unsigned(g.gx), unsigned(splits));
      if (vec)
        stats_rows<T, VM><<<grid, kThreads, 0, stream>>>(xp, s.outer, s.C, g.TX, part);
      else
        stats_rows<T, 1><<<grid, kThreads, 0, stream>>>(xp, s.outer, s.C, g.TX, part);
    } else {
      const dim3 grid(unsigned(s.C), unsigned(splits));
      if (vec)
        stats_planes<T, VM><<<grid, kThreads, 0, stream>>>(xp, s.outer, s.C, s.inner, pieces_of<T>(s, vec), part);
      else
        stats_planes<T, 1><<<grid, kThreads, 0, stream>>>(xp, s.outer, s.C, s.inner, pieces_of<T>(s, vec), part);
    }
    stats_finalize<A><<<unsigned(ceil_div(s.C, kWarps)), kThreads, 0, stream>>>(part, splits, s.C, static_cast<A*>(mean),
                                                                                 static_cast<A*>(m2));
  });
  return cudaGetLastError();
}

cudaError_t launch_apply(DType dtype, const BnShape& s, const void* x, const void* res, const void* scale,
                         const void* shift, void* y, int act, cudaStream_t stream) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const ApplyOp<T> op{static_cast<const T*>(x), static_cast<const T*>(res), static_cast<const A*>(scale),
                        static_cast<const A*>(shift), static_cast<T*>(y), act};
    if (use_vectors<T>(s, {x, res, y}))
      launch_elementwise<T, kVec16<T>>(op, s, stream);
    else
      launch_elementwise<T, 1>(op, s, stream);
  });
  return cudaGetLastError();
}

int64_t reduce_workspace(DType dtype, const BnShape& s) {
  if (empty(s)) return 0;
  int64_t n = 0;
  dispatch_dtype(dtype, [&](auto tag) { n = int64_t(reduction_splits<decltype(tag), false>(s)) * s.C * 2; });
  return n;
}

cudaError_t launch_reduce(DType dtype, const BnShape& s, const void* dy, const void* x, const void* res,
                          const void* scale, const void* shift, const void* mean, int act, void* dz, void* sum_dz,
                          void* sum_dz_xmu, void* ws, cudaStream_t stream) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const int splits = reduction_splits<T, false>(s);
    const GradArgs<T> g{static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(res),
                        static_cast<const A*>(scale), static_cast<const A*>(shift), static_cast<const A*>(mean),
                        static_cast<T*>(dz), act};
    A* part = static_cast<A*>(ws);
    constexpr int VM = kVec16<T>;
    const bool vec = use_vectors<T>(s, {dy, x, res, dz});
    const auto run = [&](auto act_tag) {
      constexpr bool ACT = decltype(act_tag)::value;
      if (s.inner == 1) {
        const RowsGeom geo = rows_geom<T>(s, vec);
        const dim3 grid(unsigned(geo.gx), unsigned(splits));
        if (vec)
          reduce_rows<T, VM, ACT><<<grid, kThreads, 0, stream>>>(g, s.outer, s.C, geo.TX, part);
        else
          reduce_rows<T, 1, ACT><<<grid, kThreads, 0, stream>>>(g, s.outer, s.C, geo.TX, part);
      } else {
        const dim3 grid(unsigned(s.C), unsigned(splits));
        if (vec)
          reduce_planes<T, VM, ACT><<<grid, kThreads, 0, stream>>>(g, s.outer, s.C, s.inner, pieces_of<T>(s, vec), part);
        else
          reduce_planes<T, 1, ACT><<<grid, kThreads, 0, stream>>>(g, s.outer, s.C, s.inner, pieces_of<T>(s, vec), part);
      }
    };
    if (act != 0)
      run(std::true_type{});
    else
      run(std::false_type{});
    reduce_finalize<A><<<unsigned(ceil_div(s.C, kWarps)), kThreads, 0, stream>>>(
        part, splits, s.C, static_cast<A*>(sum_dz), static_cast<A*>(sum_dz_xmu));
  });
  return cudaGetLastError();
}

cudaError_t launch_elemt(DType dtype, const BnShape& s, const void* dz, const void* x, const void* mean,
                         const void* k, const void* a, const void* b, void* dx, cudaStream_t stream) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const ElemtOp<T> op{static_cast<const T*>(dz), static_cast<const T*>(x), static_cast<const A*>(mean),
                        static_cast<const A*>(k), static_cast<const A*>(a), static_cast<const A*>(b),
                        static_cast<T*>(dx)};
    if (use_vectors<T>(s, {dz, x, dx}))
      launch_elementwise<T, kVec16<T>>(op, s, stream);
    else
      launch_elementwise<T, 1>(op, s, stream);
  });
  return cudaGetLastError();
}

PersistPlan plan_persist(DType dtype, const BnShape& s, PersistKind kind, std::initializer_list<const void*> ptrs) {
  PersistPlan plan;
  if (empty(s) || dtype == DType::Float64) return plan;
  for (const void* q : ptrs)
    if (!aligned16(q)) return plan;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      switch (kind) {
        case PersistKind::Forward: plan.ok = persist_geom<T, bn_persist_fwd<T, false>>(s, 1, plan.geo); break;
        case PersistKind::ForwardAct: plan.ok = persist_geom<T, bn_persist_fwd<T, true>>(s, 1, plan.geo); break;
        case PersistKind::Backward: plan.ok = persist_geom<T, bn_persist_bwd<T>>(s, 2, plan.geo); break;
        case PersistKind::BackwardAct: plan.ok = persist_geom<T, bn_persist_bwd<T, true>>(s, 2, plan.geo); break;
        case PersistKind::BackwardActRes:
          plan.ok = persist_geom<T, bn_persist_bwd<T, true, true>>(s, 3, plan.geo);
          break;
      }
    }
  });
  if (plan.ok) {
    plan.kind = kind;
    plan.dtype = dtype;
    plan.s = s;
    plan.ws_floats = persist_ws_floats(s, plan.geo.G);
  }
  return plan;
}

cudaError_t launch_persist_forward(const PersistPlan& plan, const void* x, const void* res, void* y, int act,
                                   const FwdCoeffPtrs& p, void* ws, cudaStream_t stream) {
  const bool with_act = plan.kind == PersistKind::ForwardAct;
  if (!plan.ok || (plan.kind != PersistKind::Forward && !with_act) || (!with_act && (res != nullptr || act != 0)))
    return cudaErrorInvalidValue;
  cudaError_t err = cudaErrorInvalidValue;
  dispatch_dtype(plan.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      PersistFwdArgs<T> a{};
      a.geo = plan.geo;
      a.x = static_cast<const T*>(x);
      a.res = static_cast<const T*>(res);
      a.y = static_cast<T*>(y);
      a.act = act;
      a.prefetch = env::get_int("TORCH_DNN_BN_RES_PREFETCH", 1) != 0;
      a.res_ahead = std::max(env::get_int("TORCH_DNN_BN_RES_AHEAD", 1), 0);
      a.R = plan.s.outer;
      a.C = plan.s.C;
      a.part = static_cast<float*>(ws);
      a.coef = a.part + 2 * a.C * a.geo.G;
      a.p = p;
      err = with_act ? launch_cooperative(bn_persist_fwd<T, true>, a.geo, a, stream)
                       : launch_cooperative(bn_persist_fwd<T, false>, a.geo, a, stream);
    }
  });
  return err;
}

cudaError_t launch_persist_backward(const PersistPlan& plan, const void* dy, const void* x, const void* mean,
                                    const BwdCoeffPtrs& p, void* dx, void* ws, cudaStream_t stream,
                                    const BwdActArgs& act) {
  const bool plain = plan.kind == PersistKind::Backward, with_res = plan.kind == PersistKind::BackwardActRes;
  if (!plan.ok || !(plain || with_res || plan.kind == PersistKind::BackwardAct)) return cudaErrorInvalidValue;
  if (plain ? (act.res || act.act != 0 || act.dz) : (!act.dz || with_res != (act.res != nullptr) ||
                                                      (act.act != 0 && (!act.scale || !act.shift))))
    return cudaErrorInvalidValue;
  cudaError_t err = cudaErrorInvalidValue;
  dispatch_dtype(plan.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      PersistBwdArgs<T> a{};
      a.geo = plan.geo;
      a.dy = static_cast<const T*>(dy);
      a.x = static_cast<const T*>(x);
      a.mean = static_cast<const float*>(mean);
      a.dx = static_cast<T*>(dx);
      a.R = plan.s.outer;
      a.C = plan.s.C;
      a.part = static_cast<float*>(ws);
      a.coef = a.part + 2 * a.C * a.geo.G;
      a.p = p;
      a.res = static_cast<const T*>(act.res);
      a.scale = act.scale;
      a.shift = act.shift;
      a.act = act.act;
      a.dz = static_cast<T*>(act.dz);
      err = plain      ? launch_cooperative(bn_persist_bwd<T>, a.geo, a, stream)
            : with_res ? launch_cooperative(bn_persist_bwd<T, true, true>, a.geo, a, stream)
                       : launch_cooperative(bn_persist_bwd<T, true>, a.geo, a, stream);
    }
  });
  return err;
}

cudaError_t launch_fwd_coeffs(const FwdCoeffPtrs& p, int64_t C, cudaStream_t stream) {
  if (C > 0) fwd_coeffs_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(p, C);
  return cudaGetLastError();
}

cudaError_t launch_affine(ChannelVec mean, ChannelVec invstd, ChannelVec weight, ChannelVec bias, ChannelVec scale,
                          ChannelVec shift, int64_t C, cudaStream_t stream) {
  if (C > 0) affine_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(mean, invstd, weight, bias, scale, shift, C);
  return cudaGetLastError();
}

cudaError_t launch_bwd_coeffs(const BwdCoeffPtrs& p, int64_t C, cudaStream_t stream) {
  if (C > 0) bwd_coeffs_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(p, C);
  return cudaGetLastError();
}

}  // namespace batch_norm
}  // namespace torch_dnn
