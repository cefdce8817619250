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
    for_each_held_vector<kItems>(nv, [&](int k, int idx) {
      A xh[V], dy[V], g[V];
      load_grad<V>(p, r * p.N + idx * V, idx * V, m, rs, xh, dy, g);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        s1 += g[j] * xh[j];
        s2 += g[j];
        dw[k][j] += dy[j] * xh[j];
        if constexpr (!RMS) db[k][j] += dy[j];
      }
    });
    block_reduce_sum2(s1, s2, smem);
    if (!p.dx) continue;
    const A c1 = s1 / A(p.N), c2 = RMS ? A(0) : s2 / A(p.N);
    for_each_held_vector<kItems>(nv, [&](int, int idx) {
      A xh[V], dy[V], g[V];
      load_grad<V>(p, r * p.N + idx * V, idx * V, m, rs, xh, dy, g);
      store_dx<V>(p, r * p.N + idx * V, xh, g, rs, c1, c2);
    });
  }
  if (!p.partial) return;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int idx = k * int(blockDim.x) + int(threadIdx.x);  // in 32 bits: store_vec's note
    if (idx < nv) {
      store_acc<V>(p.partial + int64_t(blockIdx.x) * p.N + idx * V, dw[k]);
      if constexpr (!RMS) store_acc<V>(p.partial + (p.P + blockIdx.x) * p.N + idx * V, db[k]);
    }
  }
}

// ---- Staged backward: the next row's x and dy stream into shared memory (cp.async) while this row is
// reduced and written, so a block always has a row of loads in flight (the register kernel above has none
// during its block reduction and pass 2, which matters most with one 1024-thread block per SM at 16K).
// Each thread copies, and later reads, only its own 16-byte slots: its own cp.async.wait_group makes them
// visible, no barrier is needed for the data. Shared memory: (2 stages x {x, dy} + the weight for 16-bit
// types) x kItems x blockDim x 16 B.

template <typename T> constexpr bool kStagedWeightSmem = sizeof(T) == 2;
template <typename T>
constexpr int64_t staged_smem_bytes(int threads) {
  return int64_t(2 * 2 + (kStagedWeightSmem<T> ? 1 : 0)) * (kBwdCols<T> / kVec16<T>) * threads * 16;
}

// V weights from `col` (ones without a weight), raw.
template <int V, typename T>
__device__ __forceinline__ Vec<T, V> weight_vec(const T* w, int64_t col) {
  if (w) return load_vec<T, V>(w + col);
  Vec<T, V> one;
#pragma unroll
  for (int j = 0; j < V; ++j) one.v[j] = from_acc<T>(acc_t<T>(1));
  return one;
}

// 16-bit rows up to 16K take 1024 threads (64 registers: no spills); float and double rows that fit the
// shared memory take at most 512, and the LayerNorm kernels need more than 64 registers.
template <typename T> constexpr int kStagedMaxThreads = sizeof(T) == 2 ? 1024 : 512;

template <typename T, bool RMS>
__global__ void __launch_bounds__(kStagedMaxThreads<T>) norm_staged_bwd(BwdParams<T> p) {
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  constexpr int kItems = kBwdCols<T> / V;
  extern __shared__ __align__(16) unsigned char staged_raw[];
  Vec<T, V>* const buf = reinterpret_cast<Vec<T, V>*>(staged_raw);  // [stage][x, dy][k][thread]
  __shared__ A smem[64];
  const int bd = blockDim.x, t = threadIdx.x;
  const int64_t nv = p.N / V;
  // slot of (stage, array, item) for this thread
  const auto slot = [&](int st, int arr, int k) { return buf + ((st * 2 + arr) * kItems + k) * bd + t; };
  const auto issue = [&](int64_t r, int st) {
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * bd + t;  // in 32 bits: store_vec's note
      if (idx < nv) {
        cp_async16(slot(st, 0, k), p.x + r * p.N + idx * V);
        cp_async16(slot(st, 1, k), p.dy + r * p.N + idx * V);
      }
    }
    cp_async_commit();
  };
  // the weight of this thread's columns (the same for every row): 16-bit kernels keep it in their own
  // slots after the stages (no registers, and their 1024-thread form has 64); float and double read it
  // through L1 at each use, leaving the shared memory to more resident blocks
  Vec<T, V>* const wslot = buf + 4 * kItems * bd + t;
  if constexpr (kStagedWeightSmem<T>) {
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * bd + t;  // in 32 bits: store_vec's note
      if (idx < nv) wslot[k * bd] = weight_vec<V>(p.w, idx * V);
    }
  }
  const auto wvec = [&](int k) {
    if constexpr (kStagedWeightSmem<T>) return wslot[k * bd];
    else return weight_vec<V>(p.w, (k * bd + t) * V);
  };
  A dw[kItems][V], db[kItems][V];
#pragma unroll
  for (int k = 0; k < kItems; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) dw[k][j] = db[k][j] = A(0);

  int64_t r = blockIdx.x;
  int st = 0;
  A m = A(0), rs = A(0);
  if (r < p.rows) {
    issue(r, 0);
    if constexpr (!RMS) m = p.mean[r];
    rs = p.rstd[r];
  }
  for (; r < p.rows; r += gridDim.x, st ^= 1) {
    const int64_t next = r + gridDim.x;
    A m_next = A(0), rs_next = A(0);
    if (next < p.rows) {
      issue(next, st ^ 1);  // that stage held row r - grid, which this thread has finished reading
      if constexpr (!RMS) m_next = p.mean[next];
      rs_next = p.rstd[next];
    } else {
      cp_async_commit();  // an empty group keeps "all but the newest" meaning "row r"
    }
    cp_async_wait<1>();
    A s1 = A(0), s2 = A(0);  // sum(g * xhat), sum(g)
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (k * bd + t < nv) {
        const Vec<T, V> xv = *slot(st, 0, k), gv = *slot(st, 1, k), wv = wvec(k);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A xh = (to_acc<A>(xv.v[j]) - m) * rs, dy = to_acc<A>(gv.v[j]), g = dy * to_acc<A>(wv.v[j]);
          s1 += g * xh;
          s2 += g;
          dw[k][j] += dy * xh;
          if constexpr (!RMS) db[k][j] += dy;
        }
      }
    }
    if (p.dx) {
      block_reduce_sum2(s1, s2, smem);
      const A c1 = s1 / A(p.N), c2 = RMS ? A(0) : s2 / A(p.N);
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int idx = k * bd + t;  // in 32 bits: store_vec's note
        if (idx < nv) {
          const Vec<T, V> xv = *slot(st, 0, k), gv = *slot(st, 1, k), wv = wvec(k);
          A xh[V], g[V];
#pragma unroll
          for (int j = 0; j < V; ++j) {
            xh[j] = (to_acc<A>(xv.v[j]) - m) * rs;
            g[j] = to_acc<A>(gv.v[j]) * to_acc<A>(wv.v[j]);
          }
          store_dx<V>(p, r * p.N + idx * V, xh, g, rs, c1, c2);
        }
      }
    }
    m = m_next;
    rs = rs_next;
  }
  if (!p.partial) return;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int idx = k * bd + t;  // in 32 bits: store_vec's note
    if (idx < nv) {
      store_acc<V>(p.partial + int64_t(blockIdx.x) * p.N + idx * V, dw[k]);
      if constexpr (!RMS) store_acc<V>(p.partial + (p.P + blockIdx.x) * p.N + idx * V, db[k]);
    }
  }
}

// Both gradients' column sums in one launch (blockIdx.y picks dw or db), in a fixed order: a block of
// 32 columns x 16 lanes of partial rows; each lane sums every 16th row, four loads in flight, then the
// lanes' sums are added in lane order. More blocks and more loads in flight than the shared column_sum
// (one 256-thread block per 32 columns walking ~P/8 rows one load at a time: latency-bound at P ~ 500).
constexpr int kCsCols = 32, kCsLanes = 16;
template <typename T>
__global__ void __launch_bounds__(kCsCols * kCsLanes) norm_column_sums(const acc_t<T>* partial, T* dw, T* db,
                                                                       int64_t P, int64_t C) {
  using A = acc_t<T>;
  __shared__ A lane_sums[kCsLanes][kCsCols];
  T* const out = blockIdx.y == 0 ? dw : db;
  const A* const src = partial + int64_t(blockIdx.y) * P * C;
  const int tx = threadIdx.x % kCsCols, ty = threadIdx.x / kCsCols;
  const int64_t c = int64_t(blockIdx.x) * kCsCols + tx;
  A s[4] = {A(0), A(0), A(0), A(0)};
  if (c < C && out) {
    int64_t p = ty;
    for (; p + 3 * kCsLanes < P; p += 4 * kCsLanes) {
#pragma unroll
      for (int u = 0; u < 4; ++u) s[u] += src[(p + u * kCsLanes) * C + c];
    }
    for (; p < P; p += kCsLanes) s[0] += src[p * C + c];
  }
  lane_sums[ty][tx] = (s[0] + s[1]) + (s[2] + s[3]);
  __syncthreads();
  if (ty == 0 && c < C && out) {
    A v = A(0);
#pragma unroll
    for (int l = 0; l < kCsLanes; ++l) v += lane_sums[l][tx];
    out[c] = from_acc<T>(v);
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
  return resident_grid<norm_block_bwd<T, RMS>>(rows, threads);
}

// The staged kernel fits when its two stages fit the device's opt-in shared memory per block: 16-bit rows
// up to 16K (128 KB), float up to 8K, double up to 4K. Returns its grid (resident blocks, at most
// TORCH_DNN_NORM_BWD_BLOCKS a SM, balanced: every block the same rows within one), 0 when it does not fit.
template <typename T, bool RMS>
int64_t staged_bwd_grid(int64_t rows, int threads, const Knobs& knobs) {
  if (threads > kStagedMaxThreads<T>) return 0;
  const int64_t bytes = staged_smem_bytes<T>(threads);
  const int avail = allow_max_dynamic_smem<norm_staged_bwd<T, RMS>>();
  int per_sm = avail >= 0 && bytes <= avail ? resident_per_sm<norm_staged_bwd<T, RMS>>(threads, size_t(bytes)) : 0;
  if (per_sm <= 0) return 0;
  // The cap: TORCH_DNN_NORM_BWD_BLOCKS when set; else, for float rows, two blocks or kFloatBwdThreadsPerSm threads
  // an SM, whichever is more (fewer partial rows, and the prefetch of 256-thread blocks keeps enough bytes in flight:
  // faster at 4K; 16K rows fit two anyway; short rows, a warp a block, need more blocks to keep loads in flight);
  // for 16-bit rows of one warp (N <= 512) kHalfWarpBlocksPerSm (fewer blocks than fit: fewer partial rows to sum);
  // none for the other 16-bit rows (at 4K they are slower with two; docs/norm.md).
  constexpr int kFloatBwdThreadsPerSm = 512, kHalfWarpBlocksPerSm = 8;
  const int knob = knobs.bwd_blocks;
  const int cap = knob > 0                        ? knob
                  : std::is_same_v<T, float>      ? std::max(2, kFloatBwdThreadsPerSm / threads)
                  : sizeof(T) == 2 && threads == 32 ? kHalfWarpBlocksPerSm
                                                    : 0;
  if (cap > 0) per_sm = std::min(per_sm, cap);
  return balanced_grid(rows, int64_t(sm_count()) * per_sm);
}

// Row groups of norm_col_bwd: a few blocks per SM, never more than the rows or the grid's y limit.
inline int64_t col_bwd_groups(int64_t rows, int64_t N, int V) {
  const int64_t col_blocks = std::max<int64_t>(1, (N / V + kColThreads - 1) / kColThreads);  // N < V: none
  const int64_t want = (int64_t(sm_count()) * 8 + col_blocks - 1) / col_blocks;
  return std::max<int64_t>(1, std::min({want, rows, int64_t(65535)}));
}

// Partial-sum rows the backward writes for this shape (an upper bound over the plans it may take).
template <typename T, bool RMS>
int64_t backward_partial_rows(int64_t rows, int64_t N, const Knobs& knobs) {
  constexpr int V = kVec16<T>;
  // the column kernel runs with V or 1 columns a thread (wider vectors: fewer column blocks, more row groups)
  int64_t P = std::max(col_bwd_groups(rows, N, 1), col_bwd_groups(rows, N, V));
  if (bwd_block_plan(N, V, true, kBwdCols<T>)) {
    const int threads = bwd_block_threads(N, kBwdCols<T>);
    P = std::max({P, block_bwd_grid<T, RMS>(rows, threads), staged_bwd_grid<T, RMS>(rows, threads, knobs)});
  }
  return P;
}

template <typename T, bool RMS>
void run_backward(BwdParams<T> p, T* dw, T* db, const Knobs& knobs, cudaStream_t stream) {
  constexpr int V = kVec16<T>;
  const bool vec = all_aligned(p) && p.N % V == 0;
  if (bwd_block_plan(p.N, V, vec, kBwdCols<T>)) {
    const int threads = bwd_block_threads(p.N, kBwdCols<T>);
    const int64_t staged = staged_bwd_grid<T, RMS>(p.rows, threads, knobs);
    if (staged > 0) {
      if (p.partial) p.P = staged;
      norm_staged_bwd<T, RMS><<<unsigned(staged), threads, staged_smem_bytes<T>(threads), stream>>>(p);
      if (p.partial) {
        const dim3 grid(unsigned((p.N + kCsCols - 1) / kCsCols), db ? 2u : 1u);
        norm_column_sums<T><<<grid, kCsCols * kCsLanes, 0, stream>>>(p.partial, dw, db, p.P, p.N);
      }
      return;
    }
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
