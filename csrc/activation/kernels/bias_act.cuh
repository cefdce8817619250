// y = act(x + bias[c]) and its backward, with x seen in memory as [outer, C, inner].
//   inner == 1 ("last": bias along the innermost dim, the GEMM epilogue case): the forward is the flat
//     elementwise loop of elementwise.cuh with the column of each 16-byte vector found by a multiply-high
//     divmod and its bias read through L1; the backward is a 2-D grid of column chunks by row groups, each
//     thread keeping its bias and its dbias partial sums in registers.
//   inner > 1 ("rows": NCHW-style, one channel per row of `inner` elements): a warp per row.
// dbias is reduced in two deterministic stages: partial sums into a [P, C] workspace, then a column sum.
#pragma once
#include "activation/activation_kernels.h"
#include "activation/kernels/elementwise.cuh"
#include "common/cuda/column_sum.cuh"
#include "common/cuda/device.cuh"
#include "common/cuda/divmod.cuh"
#include "common/cuda/reduce.cuh"
#include "common/cuda/vec.cuh"

namespace torch_dnn {
namespace activation {

constexpr int kBiasThreads = 256;

constexpr int kRowUnroll = 4;  // rows a "last" thread loads before it computes: bytes in flight

// Row groups of the "last" kernels (gridDim.y): `blocks_per_sm` blocks of every SM busy, each walking its
// rows kRowUnroll at a time. The backward keeps fewer (its dbias partials are one row per group).
inline int64_t last_row_groups(int64_t outer, int64_t col_blocks, int blocks_per_sm) {
  if (col_blocks < 1) col_blocks = 1;
  int64_t want = (int64_t(sm_count()) * blocks_per_sm + col_blocks - 1) / col_blocks;
  const int64_t row_steps = (outer + kRowUnroll - 1) / kRowUnroll;
  if (want > row_steps) want = row_steps;
  if (want > 65535) want = 65535;
  return want < 1 ? 1 : want;
}
constexpr int kFwdBlocksPerSm = 8, kBwdBlocksPerSm = 4;

template <typename T, Act K, int V>
__global__ void __launch_bounds__(kBiasThreads)
    bias_act_fwd_last(const T* x, const T* bias, T* y, int64_t outer, int64_t C, acc_t<T> a, acc_t<T> b) {
  using A = acc_t<T>;
  const int64_t col = (int64_t(blockIdx.x) * kBiasThreads + threadIdx.x) * V;
  if (col >= C) return;
  A bv[V];
  if (bias) {
    const Vec<T, V> raw = load_vec<T, V>(bias + col);
#pragma unroll
    for (int j = 0; j < V; ++j) bv[j] = to_acc<A>(raw.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) bv[j] = A(0);
  }
  for (int64_t r0 = int64_t(blockIdx.y) * kRowUnroll; r0 < outer; r0 += int64_t(gridDim.y) * kRowUnroll) {
    Vec<T, V> v[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      if (r0 + u < outer) v[u] = load_vec<T, V>(x + (r0 + u) * C + col);
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      if (r0 + u < outer) {
#pragma unroll
        for (int j = 0; j < V; ++j)
          v[u].v[j] = from_acc<T>(act_forward<K, A, kFastMath<T>>(to_acc<A>(v[u].v[j]) + bv[j], a, b));
        store_vec<T, V>(y + (r0 + u) * C + col, v[u]);
      }
    }
  }
}

// Forward, "last", vectorized: vector i covers columns (i mod C/V) * V ... + V - 1. Needs n / V < 2^31.
template <typename T, Act K, int V>
__global__ void __launch_bounds__(kThreads)
    bias_act_fwd_flat(const T* x, const T* bias, T* y, int64_t nvec, FastDivmod32 cols, acc_t<T> a, acc_t<T> b) {
  using A = acc_t<T>;
  Vec<T, V> v[kUnroll], bv[kUnroll];
  for_each_vector_unrolled(
      nvec,
      [&](int u, int64_t i) {
        uint32_t row, col;
        cols.divmod(uint32_t(i), row, col);
        v[u] = load_vec<T, V>(x + i * V);
        bv[u] = load_vec<T, V>(bias + int64_t(col) * V);
      },
      [&](int u, int64_t i) {
#pragma unroll
        for (int j = 0; j < V; ++j)
          v[u].v[j] = from_acc<T>(act_forward<K, A, kFastMath<T>>(to_acc<A>(v[u].v[j]) + to_acc<A>(bv[u].v[j]), a, b));
        store_vec<T, V>(y + i * V, v[u]);
      });
}

template <typename T, Act K, int V>
__global__ void __launch_bounds__(kBiasThreads)
    bias_act_fwd_rows(const T* x, const T* bias, T* y, int64_t rows, int64_t C, int64_t inner, acc_t<T> a, acc_t<T> b) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (kBiasThreads / 32);
  for (int64_t r = int64_t(blockIdx.x) * (kBiasThreads / 32) + (threadIdx.x >> 5); r < rows; r += warps) {
    const A bv = bias ? to_acc<A>(bias[r % C]) : A(0);
    const T* xr = x + r * inner;
    T* yr = y + r * inner;
    for (int64_t i = int64_t(lane) * V; i < inner; i += 32 * V) {
      Vec<T, V> v = load_vec<T, V>(xr + i);
#pragma unroll
      for (int j = 0; j < V; ++j) v.v[j] = from_acc<T>(act_forward<K, A, kFastMath<T>>(to_acc<A>(v.v[j]) + bv, a, b));
      store_vec<T, V>(yr + i, v);
    }
  }
}

// Backward, "last": partial[y][col] = sum over this block's rows of dx.
template <typename T, Act K, int V>
__global__ void __launch_bounds__(kBiasThreads)
    bias_act_bwd_last(const T* g, const T* x, const T* bias, T* dx, acc_t<T>* partial, int64_t outer, int64_t C,
                      acc_t<T> a, acc_t<T> b) {
  using A = acc_t<T>;
  const int64_t col = (int64_t(blockIdx.x) * kBiasThreads + threadIdx.x) * V;
  if (col >= C) return;
  A bv[V], sum[V];
  if (bias) {
    const Vec<T, V> raw = load_vec<T, V>(bias + col);
#pragma unroll
    for (int j = 0; j < V; ++j) bv[j] = to_acc<A>(raw.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) bv[j] = A(0);
  }
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = A(0);
  for (int64_t r0 = int64_t(blockIdx.y) * kRowUnroll; r0 < outer; r0 += int64_t(gridDim.y) * kRowUnroll) {
    Vec<T, V> gv[kRowUnroll], xv[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      if (r0 + u < outer) {
        gv[u] = load_vec<T, V>(g + (r0 + u) * C + col);
        xv[u] = load_vec<T, V>(x + (r0 + u) * C + col);
      }
    }
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      if (r0 + u < outer) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A d = act_backward_at_input<K, A, kFastMath<T>>(to_acc<A>(gv[u].v[j]), to_acc<A>(xv[u].v[j]) + bv[j], a, b);
          xv[u].v[j] = from_acc<T>(d);
          sum[j] += d;  // dbias from the unrounded values: one rounding, at the end
        }
        store_vec_global_v4<T, V>(dx + (r0 + u) * C + col, xv[u]);  // its ordering: vec.cuh
      }
    }
  }
  if (partial) {
#pragma unroll
    for (int j = 0; j < V; ++j) partial[int64_t(blockIdx.y) * C + col + j] = sum[j];
  }
}

// Backward, "rows": partial[r] = sum of dx over row r (r = o * C + c).
template <typename T, Act K, int V>
__global__ void __launch_bounds__(kBiasThreads)
    bias_act_bwd_rows(const T* g, const T* x, const T* bias, T* dx, acc_t<T>* partial, int64_t rows, int64_t C,
                      int64_t inner, acc_t<T> a, acc_t<T> b) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (kBiasThreads / 32);
  for (int64_t r = int64_t(blockIdx.x) * (kBiasThreads / 32) + (threadIdx.x >> 5); r < rows; r += warps) {
    const A bv = bias ? to_acc<A>(bias[r % C]) : A(0);
    A sum = A(0);
    for (int64_t i = int64_t(lane) * V; i < inner; i += 32 * V) {
      const Vec<T, V> gv = load_vec<T, V>(g + r * inner + i);
      Vec<T, V> xv = load_vec<T, V>(x + r * inner + i);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A d = act_backward_at_input<K, A, kFastMath<T>>(to_acc<A>(gv.v[j]), to_acc<A>(xv.v[j]) + bv, a, b);
        xv.v[j] = from_acc<T>(d);
        sum += d;
      }
      store_vec<T, V>(dx + r * inner + i, xv);
    }
    sum = warp_reduce(sum, SumOp{});
    if (partial && lane == 0) partial[r] = sum;
  }
}

template <typename T>
bool last_vectorizable(const void* a, const void* b, const void* c, const void* d, int64_t C) {
  return C % kVec16<T> == 0 && aligned16(a) && aligned16(b) && (!c || aligned16(c)) && (!d || aligned16(d));
}

template <typename T, Act K>
void run_bias_act_forward(const T* x, const T* bias, T* y, BiasActShape s, ActParams p, cudaStream_t stream) {
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  if (s.inner == 1) {
    const bool vec = last_vectorizable<T>(x, y, bias, nullptr, s.C);
    if (vec && bias && s.numel() / V < (int64_t(1) << 31)) {
      const int64_t nvec = s.numel() / V;
      bias_act_fwd_flat<T, K, V><<<grid_for(nvec, kThreads * kUnroll), kThreads, 0, stream>>>(
          x, bias, y, nvec, FastDivmod32(uint32_t(s.C / V)), A(p.a), A(p.b));
      return;
    }
    const int64_t cols = vec ? s.C / V : s.C;
    const int64_t col_blocks = (cols + kBiasThreads - 1) / kBiasThreads;
    const dim3 grid(unsigned(col_blocks), unsigned(last_row_groups(s.outer, col_blocks, kFwdBlocksPerSm)));
    if (vec) bias_act_fwd_last<T, K, V><<<grid, kBiasThreads, 0, stream>>>(x, bias, y, s.outer, s.C, A(p.a), A(p.b));
    else bias_act_fwd_last<T, K, 1><<<grid, kBiasThreads, 0, stream>>>(x, bias, y, s.outer, s.C, A(p.a), A(p.b));
  } else {
    const int64_t rows = s.outer * s.C;
    const unsigned grid = grid_for(rows, kBiasThreads / 32);
    if (s.inner % V == 0 && aligned16(x) && aligned16(y))
      bias_act_fwd_rows<T, K, V><<<grid, kBiasThreads, 0, stream>>>(x, bias, y, rows, s.C, s.inner, A(p.a), A(p.b));
    else
      bias_act_fwd_rows<T, K, 1><<<grid, kBiasThreads, 0, stream>>>(x, bias, y, rows, s.C, s.inner, A(p.a), A(p.b));
  }
}

// Rows of the partial-sum workspace that the backward writes: row groups ("last") or outer ("rows").
template <typename T>
int64_t backward_partial_rows(BiasActShape s, bool vec) {
  if (s.inner != 1) return s.outer;
  const int64_t cols = vec && s.C % kVec16<T> == 0 ? s.C / kVec16<T> : s.C;
  return last_row_groups(s.outer, (cols + kBiasThreads - 1) / kBiasThreads, kBwdBlocksPerSm);
}

template <typename T, Act K>
void run_bias_act_backward(const T* g, const T* x, const T* bias, T* dx, T* dbias, acc_t<T>* ws, BiasActShape s,
                           ActParams p, cudaStream_t stream) {
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  acc_t<T>* partial = dbias ? ws : nullptr;
  if (s.inner == 1) {
    const bool vec = last_vectorizable<T>(g, x, dx, bias, s.C);
    const int64_t cols = vec ? s.C / V : s.C;
    const int64_t col_blocks = (cols + kBiasThreads - 1) / kBiasThreads;
    const dim3 grid(unsigned(col_blocks), unsigned(backward_partial_rows<T>(s, vec)));
    if (vec)
      bias_act_bwd_last<T, K, V><<<grid, kBiasThreads, 0, stream>>>(g, x, bias, dx, partial, s.outer, s.C, A(p.a), A(p.b));
    else
      bias_act_bwd_last<T, K, 1><<<grid, kBiasThreads, 0, stream>>>(g, x, bias, dx, partial, s.outer, s.C, A(p.a), A(p.b));
  } else {
    const int64_t rows = s.outer * s.C;
    const unsigned grid = grid_for(rows, kBiasThreads / 32);
    if (s.inner % V == 0 && aligned16(g) && aligned16(x) && aligned16(dx))
      bias_act_bwd_rows<T, K, V><<<grid, kBiasThreads, 0, stream>>>(g, x, bias, dx, partial, rows, s.C, s.inner, A(p.a), A(p.b));
    else
      bias_act_bwd_rows<T, K, 1><<<grid, kBiasThreads, 0, stream>>>(g, x, bias, dx, partial, rows, s.C, s.inner, A(p.a), A(p.b));
  }
  if (dbias) {
    const bool vec = s.inner == 1 && last_vectorizable<T>(g, x, dx, bias, s.C);
    const int64_t P = backward_partial_rows<T>(s, vec);
    launch_column_sum<T>(ws, dbias, P, s.C, stream);
  }
}

}  // namespace activation
}  // namespace torch_dnn
