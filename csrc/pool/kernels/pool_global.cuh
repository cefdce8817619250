// Global average pooling (adaptive to one output per (n, c) volume of P positions) beyond pool.cuh's:
//   global_avg_nc_warp: NCDHW with planes of at most 8 vectors: a warp a run of 32 planes, loaded coalesced into
//     the warp's slot of shared memory, a lane a plane summed from there (the next run in flight meanwhile).
//   global_avg_nc_chunk: NCDHW with short planes (P = 49 at 7x7: a warp per plane idles half its lanes on
//     scalar loads). A block takes PB consecutive planes = one contiguous run of PB * P elements, loads it
//     with 16-byte vectors into shared memory as float, then TPP = 256 / PB threads sum each plane (strided,
//     then a fixed xor-shuffle tree: deterministic).
//   global_avg_cl_col: channels-last with many columns (n, channel vector): a thread a column sums its P rows
//     with U loads in flight; no block reduction and no barrier (pool.cuh's global_avg_cl spreads a column's
//     rows over lanes, for few columns).
//   global_bcast: the backward, dx = g / P broadcast over each volume: a pure write stream (g is tiny and
//     cached), 16-byte stores; NCDHW walks the flat output (or a warp a run of 32 planes, g by shuffles),
//     channels-last walks (channel vector, row, n), or with many columns a thread a column writes its P rows.
#pragma once
#include "pool/kernels/pool_tile.cuh"

namespace torch_dnn {
namespace pool {

template <typename T, int V, int PB>
__global__ void __launch_bounds__(kThreads) global_avg_nc_chunk(const T* __restrict__ x, T* __restrict__ y,
                                                                 int64_t planes, int P) {
  using A = acc_t<T>;
  constexpr int TPP = kThreads / PB;
  A* buf = reinterpret_cast<A*>(tile_smem());
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
    for (int i0 = threadIdx.x; i0 < nv; i0 += U * kThreads) {
      Vec<T, V> r[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i0 + u * kThreads < nv) r[u] = load_vec<T, V>(src + int64_t(i0 + u * kThreads) * V);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i0 + u * kThreads < nv)
#pragma unroll
          for (int j = 0; j < V; ++j) buf[(i0 + u * kThreads) * V + j] = to_acc<A>(r[u].v[j]);
    }
    for (int i = nv * V + threadIdx.x; i < n; i += kThreads) buf[i] = to_acc<A>(src[i]);  // tail / scalar
    __syncthreads();
    const int pl = threadIdx.x / TPP, lane = threadIdx.x % TPP;
    A acc = A(0);
    if (pl < np)
      for (int i = lane; i < P; i += TPP) acc += buf[pl * P + i];
    acc = warp_reduce(acc, SumOp{}, TPP);
    if (lane == 0 && pl < np) y[p0 + pl] = from_acc<T>(acc * inv);
  }
}

// NCDHW with short planes, a warp a run of 32 consecutive planes (32 * P contiguous elements, 16-byte aligned):
// the lanes load the run as 16-byte vectors (R = ceil(P / V) a lane, all in flight), put them in the warp's
// shared-memory slot as they are, and each lane sums one plane from there. The next run's vectors are loaded
// before this run's sums; no block barrier. Every warp of a block takes the same number of steps (a warp past
// the last run idles through them), so __syncwarp is a block barrier in the host emulation too.
template <typename T, int V, int RMAX>
__global__ void __launch_bounds__(kThreads) global_avg_nc_warp(const T* __restrict__ x, T* __restrict__ y,
                                                                int64_t planes, int P) {
  using A = acc_t<T>;
  constexpr int W = kThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* slot = reinterpret_cast<T*>(tile_smem()) + warp * 32 * P;
  const A inv = A(1) / A(P);
  const int64_t runs = (planes + 31) / 32;
  const int R = (P + V - 1) / V;
  Vec<T, V> r[RMAX];
  auto load_run = [&](int64_t k) {  // the vectors of run k (those before its scalar tail)
    if (k >= runs) return;
    const int nv = int((planes - k * 32 < 32 ? planes - k * 32 : 32) * P / V);
    const T* src = x + k * 32 * P;
#pragma unroll
    for (int u = 0; u < RMAX; ++u)
      if (u < R && lane + 32 * u < nv) r[u] = load_vec<T, V>(src + int64_t(lane + 32 * u) * V);
  };
  load_run(int64_t(blockIdx.x) * W + warp);
  for (int64_t kb = int64_t(blockIdx.x) * W; kb < runs; kb += int64_t(gridDim.x) * W) {
    const int64_t k = kb + warp;
    const int np = k < runs ? int(planes - k * 32 < 32 ? planes - k * 32 : 32) : 0;
    const int n = np * P, nv = n / V;
    __syncwarp();  // the previous run's sums are done with the slot
#pragma unroll
    for (int u = 0; u < RMAX; ++u)
      if (u < R && lane + 32 * u < nv) store_vec<T, V>(slot + (lane + 32 * u) * V, r[u]);
    for (int i = nv * V + lane; i < n; i += 32) slot[i] = x[k * 32 * P + i];  // tail (a short last run)
    __syncwarp();
    load_run(k + int64_t(gridDim.x) * W);  // in flight during the sums
    if (lane < np) {
      A acc = A(0);
#pragma unroll 7
      for (int i = 0; i < P; ++i) acc += to_acc<A>(slot[lane * P + i]);
      y[k * 32 + lane] = from_acc<T>(acc * inv);
    }
  }
}

// channels-last, a thread a column (n, channel vector c) of x[N][P][C]: P rows, U in flight, summed in row order.
template <typename T, int V, int U>
__global__ void __launch_bounds__(kThreads) global_avg_cl_col(const T* __restrict__ x, T* __restrict__ y,
                                                              int64_t N, int64_t P, int64_t G) {
  using A = acc_t<T>;
  const A inv = A(1) / A(P);
  const int64_t C = G * V, cols = N * G;
  const bool small = cols < (int64_t(1) << 31);
  POOL_GRID_LOOP(t, cols) {
    int64_t n;
    if (small) n = uint32_t(t) / uint32_t(G);
    else n = t / G;
    const T* xp = x + n * P * C + (t - n * G) * V;
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
        if (r0 + u < P)
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] += to_acc<A>(v[u].v[j]);
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

// NCDHW backward, a warp a run of 32 planes (P >= V, dx 16-byte aligned): lane l loads g of the run's plane l
// once; the run's 16-byte output vectors take their one or two planes' values from the lanes by shuffles, so no
// store waits on a load. Loops are uniform over the block (shuffles in the host emulation are block-wide).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) global_bcast_nc_warp(const T* __restrict__ g, T* __restrict__ dx,
                                                                  int64_t planes, int P, FastDivmod32 by_p) {
  using A = acc_t<T>;
  constexpr int W = kThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const A inv = A(1) / A(P);
  const int64_t runs = (planes + 31) / 32;
  for (int64_t kb = int64_t(blockIdx.x) * W; kb < runs; kb += int64_t(gridDim.x) * W) {
    const int64_t k = kb + warp;
    const int np = k < runs ? int(planes - k * 32 < 32 ? planes - k * 32 : 32) : 0;
    const A gl = lane < np ? to_acc<A>(g[k * 32 + lane]) * inv : A(0);
    const int n = np * P;
    T* out = dx + k * 32 * P;
    for (int base = 0; base < 32 * P; base += 32 * V) {  // every lane the same trip count (the shuffles)
      const int e0 = base + lane * V;
      uint32_t q, r;
      by_p.divmod(uint32_t(e0), q, r);
      const A a0 = __shfl_sync(0xffffffffu, gl, int(q < 31 ? q : 31));
      const A a1 = __shfl_sync(0xffffffffu, gl, int(q < 30 ? q + 1 : 31));
      if (e0 >= n) continue;
      A v[V];
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = int(r) + j < P ? a0 : a1;
      if (e0 + V <= n) {
        store_acc<V>(out + e0, v);
      } else {
        for (int j = 0; e0 + j < n; ++j) out[e0 + j] = from_acc<T>(v[j]);
      }
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
                                                                int64_t N, int64_t P, int64_t G) {
  using A = acc_t<T>;
  const A inv = A(1) / A(P);
  const int64_t C = G * V, cols = N * G;
  const bool small = cols < (int64_t(1) << 31);
  POOL_GRID_LOOP(t, cols) {
    int64_t n;
    if (small) n = uint32_t(t) / uint32_t(G);
    else n = t / G;
    A v[V];
    load_acc<V>(g + t * V, v);  // g[n][c]: column t's V channels
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] *= inv;
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>(v[j]);
    T* dp = dx + n * P * C + (t - n * G) * V;
#pragma unroll 4
    for (int64_t r = 0; r < P; ++r, dp += C) store_vec<T, V>(dp, o);
  }
}

}  // namespace pool
}  // namespace torch_dnn
