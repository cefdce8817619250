// Global average pooling (adaptive to one output per (n, c) volume of P positions) beyond pool.cuh's:
//   global_avg_nc_chunk: NCDHW with short planes (P = 49 at 7x7: a warp per plane idles half its lanes on
//     scalar loads). A block takes PB consecutive planes = one contiguous run of PB * P elements, loads it
//     with 16-byte vectors into shared memory, then TPP = 256 / PB threads sum each plane (strided,
//     then a fixed xor-shuffle tree: deterministic).
//   global_avg_cl_col: channels-last with many columns (n, channel vector): a thread a column sums its P rows
//     with U loads in flight; no block reduction and no barrier (pool.cuh's global_avg_cl spreads a column's
//     rows over lanes, for few columns).
//   global_bcast: the backward, dx = g / P broadcast over each volume: a pure write stream (g is tiny and
//     cached), 16-byte stores; NCDHW walks the flat output, channels-last walks (channel vector, row, n), or
//     with many columns a thread a column writes its P rows.
#pragma once
#include "pool/pool_plan.h"

namespace torch_dnn {
namespace pool {

// The chunk is kept in shared memory as loaded (T), converted where summed: converted to float on its way in it took
// 62 registers (4 blocks an SM) against 48 (5 blocks), and measured slower. Registers unbounded: held to 32 (8
// blocks an SM) it measured no faster (docs/pool.md).
// PS: the plane size P when known at compile time (kStaticP: 7x7), 0 otherwise.
template <typename T, int V, int PB, int PS = 0>
__global__ void __launch_bounds__(kThreads, 1) global_avg_nc_chunk(const T* __restrict__ x, T* __restrict__ y,
                                                                 int64_t planes, int P_) {
  using A = acc_t<T>;
  const int P = PS ? PS : P_;
  constexpr int TPP = kThreads / PB;
  T* buf = reinterpret_cast<T*>(tile_smem());
  const A inv = A(1) / A(P);
  const int64_t chunks = (planes + PB - 1) / PB;
  for (int64_t b = blockIdx.x; b < chunks; b += gridDim.x) {
    const int64_t p0 = b * PB;
    const int np = int(planes - p0 < PB ? planes - p0 : PB);
    const int n = np * P;
    const T* src = x + p0 * P;  // 16-byte aligned for V > 1: PB * P is a multiple of V (host)
    __syncthreads();  // the previous chunk's readers are done
    constexpr int U = 4;
    const int nv = V > 1 ? n / V : 0;
#pragma unroll 1
    for (int i0 = threadIdx.x; i0 < nv; i0 += U * kThreads) {
      Vec<T, V> r[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i0 + u * kThreads < nv) r[u] = load_vec<T, V>(src + int64_t(i0 + u * kThreads) * V);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i0 + u * kThreads < nv) store_vec<T, V>(buf + (i0 + u * kThreads) * V, r[u]);
    }
    for (int i = nv * V + threadIdx.x; i < n; i += kThreads) buf[i] = src[i];  // tail / scalar
    __syncthreads();
    const int pl = threadIdx.x / TPP, lane = threadIdx.x % TPP;
    A acc = A(0);
    if (pl < np)
#pragma unroll 4
      for (int i = lane; i < P; i += TPP) acc += to_acc<A>(buf[pl * P + i]);
    acc = warp_reduce(acc, SumOp{}, TPP);
    if (lane == 0 && pl < np) y[p0 + pl] = from_acc<T>(acc * inv);
  }
}

// Channels-last x[N][P][C] seen as N * G columns of V channels (G = by_g.d = C / V): the offset of column t's first
// row. div: how t is divided by G (column_div, pool_plan.h).
__device__ __forceinline__ int64_t column_start(int64_t t, FastDivmod32 by_g, int64_t P, int64_t C, int V,
                                                ColumnDiv div) {
  const int64_t G = by_g.d;
  int64_t n;
  if (div == ColumnDiv::Fast) n = by_g.div(uint32_t(t));
  else n = t / G;
  return n * P * C + (t - n * G) * V;
}

// channels-last, a thread a column (n, channel vector c) of x[N][P][C]: P rows, U loads in flight, summed in row
// order. Held to <= 128 registers: 2 blocks of 256 an SM keep 256x2048x7x7's 65536 columns all resident (U = 16
// took 178 registers and two waves of blocks). U = 7 by default, the fastest of 4, 7 and 8; fewer registers by
// loading zeros past P, two threads a column, or two pipelined register stages all measured slower (docs/pool.md).
// PS: P when known at compile time (kStaticP), 0 otherwise.
template <typename T, int V, int PS = 0>
__global__ void __launch_bounds__(kThreads, 2) global_avg_cl_col(const T* __restrict__ x, T* __restrict__ y,
                                                              int64_t N, int64_t P_, FastDivmod32 by_g,
                                                              ColumnDiv div) {
  using A = acc_t<T>;
  constexpr int U = 7;
  const int64_t P = PS ? PS : P_;
  const A inv = A(1) / A(P);
  const int64_t G = by_g.d, C = G * V, cols = N * G;
  POOL_GRID_LOOP(t, cols) {
    const T* xp = x + column_start(t, by_g, P, C, V, div);
    A acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = A(0);
    for (int64_t r0 = 0; r0 < P; r0 += U, xp += U * C) {
      Vec<T, V> v[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (r0 + u < P) v[u] = load_vec<T, V>(xp + u * C);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (r0 + u < P) add_vec<V>(acc, v[u]);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] *= inv;
    store_acc<V>(y + t * V, acc);  // y[n][c]: column t's V channels
  }
}

// NCDHW backward: dx[plane * P + p] = g[plane] / P over `total` = planes * P elements, V per item.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) global_bcast_nc(const T* __restrict__ g, T* __restrict__ dx,
                                                             int64_t total, int64_t P, FastDivmod32 by_p) {
  using A = acc_t<T>;
  const A inv = A(1) / A(P);
  const int64_t items = (total + V - 1) / V;
  const bool small = total < (int64_t(1) << 31);
  POOL_GRID_LOOP(t, items) {
    const int64_t e0 = t * V;
    int64_t plane, p;
    if (small) {
      uint32_t q, r;
      by_p.divmod(uint32_t(e0), q, r);
      plane = q, p = r;
    } else {
      plane = e0 / P, p = e0 - plane * P;
    }
    A v[V];
    if (P >= V && e0 + V <= total) {
      // the V elements span at most two planes: two loads of g, not V
      const A g0 = to_acc<A>(g[plane]) * inv;
      const A g1 = p + V > P ? to_acc<A>(g[plane + 1]) * inv : g0;
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = p + j < P ? g0 : g1;
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        v[j] = e0 + j < total ? to_acc<A>(g[plane]) * inv : A(0);
        if (++p == P) p = 0, ++plane;
      }
    }
    if (V > 1 && e0 + V <= total) {
      store_acc<V>(dx + e0, v);
    } else {
      for (int j = 0; j < V && e0 + j < total; ++j) dx[e0 + j] = from_acc<T>(v[j]);
    }
  }
}

// channels-last backward: dx[n][p][c] = g[n][c] / P, items (channel vector, p, n).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) global_bcast_cl(const T* __restrict__ g, T* __restrict__ dx,
                                                             int64_t N, int64_t P, int64_t C, Splitter<2> sp) {
  using A = acc_t<T>;
  const A inv = A(1) / A(P);
  const int64_t items = N * P * (C / V);
  POOL_GRID_LOOP(t, items) {
    int64_t q[3];
    split(sp, t, q);
    const int64_t c = q[0] * V, n = q[2];
    A v[V];
    load_acc<V>(g + n * C + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] *= inv;
    store_acc<V>(dx + t * V, v);  // item t's V channels are elements [t * V, t * V + V) of dx
  }
}

// channels-last backward with many columns: a thread a column (n, channel vector) writes g[n][c] / P to its
// P rows (one load of g, no index division a store).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) global_bcast_cl_col(const T* __restrict__ g, T* __restrict__ dx,
                                                                int64_t N, int64_t P, FastDivmod32 by_g,
                                                                ColumnDiv div) {
  using A = acc_t<T>;
  const A inv = A(1) / A(P);
  const int64_t G = by_g.d, C = G * V, cols = N * G;
  POOL_GRID_LOOP(t, cols) {
    A v[V];
    load_acc<V>(g + t * V, v);  // g[n][c]: column t's V channels
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] *= inv;
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>(v[j]);
    T* dp = dx + column_start(t, by_g, P, C, V, div);
#pragma unroll 4
    for (int64_t r = 0; r < P; ++r, dp += C) store_vec<T, V>(dp, o);
  }
}

}  // namespace pool
}  // namespace torch_dnn
