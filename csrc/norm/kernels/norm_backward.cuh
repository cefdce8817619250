// layer_norm / rms_norm backward. With xhat = (x - mean) * rstd (mean = 0 for RMS) and g = dy * w:
//   dx = rstd * (g - xhat * mean(g * xhat) - mean(g))   [RMS: no mean(g) term]   (+ dsum, the residual's own)
//   dw = sum over rows of dy * xhat,  db = sum over rows of dy
// norm_block_bwd   vectorizable rows <= 16K (8K double): a block per row, persistent over rows; each thread
//                  owns kBwdCols columns and keeps their dw/db partial sums in registers across its rows;
//                  pass 1 (row sums, partials) reads x and dy, pass 2 re-reads them (L1) and writes dx.
//                  Partials go to a [P, N] workspace (one row per block), then a fixed-order column sum.
// otherwise        norm_row_bwd (a block per row, dx only) + norm_col_bwd (dw/db partials per row group).
#pragma once
#include <algorithm>

#include "common/cuda/column_sum.cuh"
#include "norm/kernels/norm_common.cuh"

namespace torch_dnn {
namespace norm {

// xhat, dy and g = dy * w of V elements at `off` (column `col`).
template <int V, typename T, typename A>
__device__ __forceinline__ void load_grad(const BwdParams<T>& p, int64_t off, int64_t col, A m, A rs, A (&xh)[V],
                                          A (&dy)[V], A (&g)[V]) {
  const Vec<T, V> xv = load_vec<T, V>(p.x + off), gv = load_vec<T, V>(p.dy + off);
  A w[V];
  load_param<V>(p.w, col, A(1), w);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    xh[j] = (to_acc<A>(xv.v[j]) - m) * rs;
    dy[j] = to_acc<A>(gv.v[j]);
    g[j] = dy[j] * w[j];
  }
}

template <int V, typename T, typename A>
__device__ __forceinline__ void store_dx(const BwdParams<T>& p, int64_t off, const A (&xh)[V], const A (&g)[V], A rs,
                                         A c1, A c2) {
  A d[V];
#pragma unroll
  for (int j = 0; j < V; ++j) d[j] = rs * (g[j] - xh[j] * c1 - c2);
  if (p.dsum) {
    const Vec<T, V> sv = load_vec<T, V>(p.dsum + off);
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] += to_acc<A>(sv.v[j]);
  }
  Vec<T, V> o;
#pragma unroll
  for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>(d[j]);
  store_vec<T, V>(p.dx + off, o);
}

template <typename T, bool RMS>
__global__ void __launch_bounds__(1024) norm_block_bwd(BwdParams<T> p) {
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  constexpr int kItems = kBwdCols<T> / V;
  __shared__ A smem[64];
  const int64_t nv = p.N / V;
  A dw[kItems][V], db[kItems][V];
#pragma unroll
  for (int k = 0; k < kItems; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) dw[k][j] = db[k][j] = A(0);
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const A m = RMS ? A(0) : p.mean[r], rs = p.rstd[r];
    A s1 = A(0), s2 = A(0);  // sum(g * xhat), sum(g)
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int64_t idx = int64_t(k) * blockDim.x + threadIdx.x;
      if (idx < nv) {
        A xh[V], dy[V], g[V];
        load_grad<V>(p, r * p.N + idx * V, idx * V, m, rs, xh, dy, g);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          s1 += g[j] * xh[j];
          s2 += g[j];
          dw[k][j] += dy[j] * xh[j];
          if constexpr (!RMS) db[k][j] += dy[j];
        }
      }
    }
    block_reduce_sum2(s1, s2, smem);
    if (!p.dx) continue;
    const A c1 = s1 / A(p.N), c2 = RMS ? A(0) : s2 / A(p.N);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int64_t idx = int64_t(k) * blockDim.x + threadIdx.x;
      if (idx < nv) {
        A xh[V], dy[V], g[V];
        load_grad<V>(p, r * p.N + idx * V, idx * V, m, rs, xh, dy, g);
        store_dx<V>(p, r * p.N + idx * V, xh, g, rs, c1, c2);
      }
    }
  }
  if (!p.partial) return;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int64_t idx = int64_t(k) * blockDim.x + threadIdx.x;
    if (idx < nv) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        p.partial[int64_t(blockIdx.x) * p.N + idx * V + j] = dw[k][j];
        if constexpr (!RMS) p.partial[(p.P + blockIdx.x) * p.N + idx * V + j] = db[k][j];
      }
    }
  }
}

template <typename T, bool RMS, int V>
__global__ void __launch_bounds__(kTwoPassThreads) norm_row_bwd(BwdParams<T> p) {
  using A = acc_t<T>;
  __shared__ A smem[64];
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const int64_t base = r * p.N;
    const A m = RMS ? A(0) : p.mean[r], rs = p.rstd[r];
    A s1 = A(0), s2 = A(0);
    for (int64_t i = int64_t(threadIdx.x) * V; i < p.N; i += int64_t(blockDim.x) * V) {
      A xh[V], dy[V], g[V];
      load_grad<V>(p, base + i, i, m, rs, xh, dy, g);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        s1 += g[j] * xh[j];
        s2 += g[j];
      }
    }
    block_reduce_sum2(s1, s2, smem);
    const A c1 = s1 / A(p.N), c2 = RMS ? A(0) : s2 / A(p.N);
    for (int64_t i = int64_t(threadIdx.x) * V; i < p.N; i += int64_t(blockDim.x) * V) {
      A xh[V], dy[V], g[V];
      load_grad<V>(p, base + i, i, m, rs, xh, dy, g);
      store_dx<V>(p, base + i, xh, g, rs, c1, c2);
    }
  }
}

// dw/db partial sums over the rows of row group blockIdx.y (every gridDim.y-th row), V columns a thread.
constexpr int kColThreads = 256;
template <typename T, bool RMS, int V>
__global__ void __launch_bounds__(kColThreads) norm_col_bwd(BwdParams<T> p) {
  using A = acc_t<T>;
  const int64_t col = (int64_t(blockIdx.x) * kColThreads + threadIdx.x) * V;
  if (col >= p.N) return;
  A dw[V], db[V];
#pragma unroll
  for (int j = 0; j < V; ++j) dw[j] = db[j] = A(0);
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const A m = RMS ? A(0) : p.mean[r], rs = p.rstd[r];
    const Vec<T, V> xv = load_vec<T, V>(p.x + r * p.N + col), gv = load_vec<T, V>(p.dy + r * p.N + col);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const A dy = to_acc<A>(gv.v[j]);
      dw[j] += dy * (to_acc<A>(xv.v[j]) - m) * rs;
      if constexpr (!RMS) db[j] += dy;
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    p.partial[int64_t(blockIdx.y) * p.N + col + j] = dw[j];
    if constexpr (!RMS) p.partial[(p.P + blockIdx.y) * p.N + col + j] = db[j];
  }
}

template <typename T>
bool all_aligned(const BwdParams<T>& p) {
  return aligned16(p.x) && aligned16(p.dy) && (!p.dx || aligned16(p.dx)) && (!p.dsum || aligned16(p.dsum)) &&
         (!p.w || aligned16(p.w));
}

// Blocks of norm_block_bwd: as many as are resident at once (each writes one row of partial sums).
template <typename T, bool RMS>
int64_t block_bwd_grid(int64_t rows, int threads) {
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, norm_block_bwd<T, RMS>, threads, 0);
  const int64_t resident = int64_t(sm_count()) * (per_sm > 0 ? per_sm : 1);
  return std::max<int64_t>(1, std::min(rows, resident));
}

// Row groups of norm_col_bwd: a few blocks per SM, never more than the rows or the grid's y limit.
inline int64_t col_bwd_groups(int64_t rows, int64_t N, int V) {
  const int64_t col_blocks = (N / V + kColThreads - 1) / kColThreads;
  const int64_t want = (int64_t(sm_count()) * 8 + col_blocks - 1) / col_blocks;
  return std::max<int64_t>(1, std::min({want, rows, int64_t(65535)}));
}

// Partial-sum rows the backward writes for this shape (an upper bound over the plans it may take).
template <typename T, bool RMS>
int64_t backward_partial_rows(int64_t rows, int64_t N) {
  constexpr int V = kVec16<T>;
  int64_t P = col_bwd_groups(rows, N, 1);
  if (bwd_block_plan(N, V, true, kBwdCols<T>)) P = std::max(P, block_bwd_grid<T, RMS>(rows, bwd_block_threads(N, kBwdCols<T>)));
  return P;
}

template <typename T, bool RMS>
void run_backward(BwdParams<T> p, T* dw, T* db, cudaStream_t stream) {
  constexpr int V = kVec16<T>;
  const bool vec = all_aligned(p) && p.N % V == 0;
  if (bwd_block_plan(p.N, V, vec, kBwdCols<T>)) {
    const int threads = bwd_block_threads(p.N, kBwdCols<T>);
    const int64_t grid = block_bwd_grid<T, RMS>(p.rows, threads);
    if (p.partial) p.P = grid;
    norm_block_bwd<T, RMS><<<unsigned(grid), threads, 0, stream>>>(p);
  } else {
    if (p.dx) {
      if (vec) norm_row_bwd<T, RMS, V><<<grid_for(p.rows, 1, 4, 4), kTwoPassThreads, 0, stream>>>(p);
      else norm_row_bwd<T, RMS, 1><<<grid_for(p.rows, 1, 4, 4), kTwoPassThreads, 0, stream>>>(p);
    }
    if (p.partial) {
      const int Vu = vec ? V : 1;
      p.P = col_bwd_groups(p.rows, p.N, Vu);
      const dim3 grid(unsigned((p.N / Vu + kColThreads - 1) / kColThreads), unsigned(p.P));
      if (vec) norm_col_bwd<T, RMS, V><<<grid, kColThreads, 0, stream>>>(p);
      else norm_col_bwd<T, RMS, 1><<<grid, kColThreads, 0, stream>>>(p);
    }
  }
  if (dw) launch_column_sum<T>(p.partial, dw, p.P, p.N, stream);
  if (db) launch_column_sum<T>(p.partial + p.P * p.N, db, p.P, p.N, stream);
}

}  // namespace norm
}  // namespace torch_dnn
