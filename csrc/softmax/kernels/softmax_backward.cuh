// softmax / log_softmax backward. From grad g and output y (type To) to grad_input (type Ti):
//   softmax:      dx = y * (g - sum(g * y))
//   log_softmax:  dx = g - exp(y) * sum(g)
// Same plans as the forward (softmax_common.cuh): one row reduction, then an elementwise write.
#pragma once
#include "softmax/kernels/softmax_common.cuh"

namespace torch_dnn {
namespace softmax {

template <bool LOG, typename A>
__device__ __forceinline__ A dot_term(A g, A y) {
  if constexpr (LOG) return g;
  else return g * y;
}
template <bool LOG, typename A>
__device__ __forceinline__ A grad_in(A g, A y, A sum) {
  if constexpr (LOG) return g - td_exp(y) * sum;
  else return y * (g - sum);
}

template <typename Ti, typename To, bool LOG, int V>
__global__ void __launch_bounds__(kWarpBlock)
    softmax_warp_bwd(const To* g, const To* y, Ti* dx, int64_t rows, int64_t D, int width) {
  using A = acc_t<To>;
  constexpr int kItems = 32 / V;
  const int lane = threadIdx.x & (width - 1);
  const int64_t groups_per_block = kWarpBlock / width;
  const int64_t nv = D / V;
  const int64_t first = int64_t(blockIdx.x) * groups_per_block + threadIdx.x / width;
  const int64_t step = int64_t(gridDim.x) * groups_per_block;
  const int64_t warp_first = int64_t(blockIdx.x) * groups_per_block + (threadIdx.x & ~31) / width;
  for (int64_t r = first, rw = warp_first; rw < rows; r += step, rw += step) {
    const bool valid = r < rows;
    A gv[kItems][V], yv[kItems][V];
    A s = A(0);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * width + lane;  // < 1024: Warp plan rows are <= kMaxWarpRow
      if (valid && idx < nv) {
        load_acc<V>(g + r * D + idx * V, gv[k]);
        load_acc<V>(y + r * D + idx * V, yv[k]);
#pragma unroll
        for (int j = 0; j < V; ++j) s += dot_term<LOG>(gv[k][j], yv[k][j]);
      }
    }
    s = warp_reduce(s, SumOp{}, width);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * width + lane;
      if (valid && idx < nv) {
#pragma unroll
        for (int j = 0; j < V; ++j) gv[k][j] = grad_in<LOG>(gv[k][j], yv[k][j], s);
        store_acc<V>(dx + r * D + idx * V, gv[k]);
      }
    }
  }
}

// grad and output of the row in registers as raw vectors (kBwdRegElems<To> values of each a thread).
template <typename Ti, typename To, bool LOG>
__global__ void __launch_bounds__(1024) softmax_block_bwd(const To* g, const To* y, Ti* dx, int64_t rows, int64_t D) {
  using A = acc_t<To>;
  constexpr int V = kVec16<To>;
  constexpr int kItems = kBwdRegElems<To> / V;
  __shared__ A smem[32];
  const int64_t nv = D / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    Vec<To, V> gr[kItems], yr[kItems];
    A s = A(0);
    for_each_held_vector<kItems>(nv, [&](int k, int idx) {
      gr[k] = load_vec<To, V>(g + r * D + idx * V);
      yr[k] = load_vec<To, V>(y + r * D + idx * V);
#pragma unroll
      for (int j = 0; j < V; ++j) s += dot_term<LOG>(vec_elem<A>(gr[k], j), vec_elem<A>(yr[k], j));
    });
    s = block_reduce(s, SumOp{}, smem);
    for_each_held_vector<kItems>(nv, [&](int k, int idx) {
      A o[V];
#pragma unroll
      for (int j = 0; j < V; ++j) o[j] = grad_in<LOG>(vec_elem<A>(gr[k], j), vec_elem<A>(yr[k], j), s);
      store_vec<Ti, V>(dx + r * D + idx * V, pack_vec<V, Ti>(o));
    });
  }
}

// A block's walk over [begin, end) of the rows g and y, kStreamUnroll vectors of V a thread loaded before any is
// used: f(offset, gv, yv) for each vector, its values in the accumulation type (f may change gv).
template <int V, typename A, typename To, class F>
__device__ __forceinline__ void stream_row_pair(const To* g, const To* y, int64_t begin, int64_t end, F&& f) {
  const int64_t step = int64_t(blockDim.x) * V;
  for (int64_t i0 = begin + int64_t(threadIdx.x) * V; i0 < end; i0 += step * kStreamUnroll) {
    A gv[kStreamUnroll][V], yv[kStreamUnroll][V];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (i0 + u * step < end) {
        load_acc<V>(g + i0 + u * step, gv[u]);
        load_acc<V>(y + i0 + u * step, yv[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (i0 + u * step < end) f(i0 + u * step, gv[u], yv[u]);
    }
  }
}

template <typename To, bool LOG, int V, typename A>
__device__ __forceinline__ A block_row_dot(const To* g, const To* y, int64_t begin, int64_t end, A* smem) {
  A s = A(0);
  stream_row_pair<V, A>(g, y, begin, end, [&](int64_t, A(&gv)[V], const A(&yv)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) s += dot_term<LOG>(gv[j], yv[j]);
  });
  return block_reduce(s, SumOp{}, smem);
}

template <typename Ti, typename To, bool LOG, int V, typename A>
__device__ __forceinline__ void block_row_grad(const To* g, const To* y, Ti* dx, int64_t begin, int64_t end, A sum) {
  stream_row_pair<V, A>(g, y, begin, end, [&](int64_t o, A(&gv)[V], const A(&yv)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) gv[j] = grad_in<LOG>(gv[j], yv[j], sum);
    store_acc<V>(dx + o, gv);
  });
}

// Persistent, a couple of blocks an SM, so that the second read of each row comes from L2 (see the forward).
template <typename Ti, typename To, bool LOG, int V>
__global__ void __launch_bounds__(kTwoPassThreads) softmax_twopass_bwd(const To* g, const To* y, Ti* dx, int64_t rows, int64_t D) {
  using A = acc_t<To>;
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const A s = block_row_dot<To, LOG, V, A>(g + r * D, y + r * D, 0, D, smem);
    block_row_grad<Ti, To, LOG, V, A>(g + r * D, y + r * D, dx + r * D, 0, D, s);
  }
}

template <typename To, bool LOG, int V>
__global__ void __launch_bounds__(512) softmax_split_dot(const To* g, const To* y, acc_t<To>* ws, int64_t rows, int64_t D) {
  using A = acc_t<To>;
  __shared__ A smem[32];
  const int64_t begin = int64_t(blockIdx.x) * kSplitChunk;
  const int64_t end = begin + kSplitChunk < D ? begin + kSplitChunk : D;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const A s = block_row_dot<To, LOG, V, A>(g + r * D, y + r * D, begin, end, smem);
    if (threadIdx.x == 0) ws[r * gridDim.x + blockIdx.x] = s;
  }
}

template <typename Ti, typename To, bool LOG, int V>
__global__ void __launch_bounds__(512)
    softmax_split_grad(const To* g, const To* y, Ti* dx, const acc_t<To>* ws, int64_t rows, int64_t D) {
  using A = acc_t<To>;
  const int64_t begin = int64_t(blockIdx.x) * kSplitChunk;
  const int64_t end = begin + kSplitChunk < D ? begin + kSplitChunk : D;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    A s = A(0);
    for (unsigned c = 0; c < gridDim.x; ++c) s += ws[r * gridDim.x + c];
    block_row_grad<Ti, To, LOG, V, A>(g + r * D, y + r * D, dx + r * D, begin, end, s);
  }
}

template <typename Ti, typename To, bool LOG>
__global__ void __launch_bounds__(256)
    softmax_spatial_bwd(const To* g, const To* y, Ti* dx, int64_t outer, int64_t D, int64_t inner) {
  using A = acc_t<To>;
  const int64_t cols = outer * inner;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = c / inner, i = c - o * inner;
    const int64_t base = o * D * inner + i;
    A s = A(0);
    for (int64_t d = 0; d < D; ++d) s += dot_term<LOG>(to_acc<A>(g[base + d * inner]), to_acc<A>(y[base + d * inner]));
    for (int64_t d = 0; d < D; ++d)
      dx[base + d * inner] = from_acc<Ti>(grad_in<LOG>(to_acc<A>(g[base + d * inner]), to_acc<A>(y[base + d * inner]), s));
  }
}

template <typename Ti, typename To, bool LOG>
void run_backward(const To* g, const To* y, Ti* dx, acc_t<To>* ws, SoftmaxShape s, const Knobs& knobs,
                  cudaStream_t stream) {
  constexpr int V = kVec16<To>;
  const PlanInfo p = make_plan(s, V, aligned16(g) && aligned16(y) && aligned16(dx) && sizeof(Ti) == sizeof(To),
                               kBwdRegElems<To>, knobs.plan);
  const int64_t rows = s.outer;
  switch (p.plan) {
    case Plan::Warp: {
      const unsigned grid = grid_for(rows, kWarpBlock / p.threads, 4, 16);
      if (p.vec) softmax_warp_bwd<Ti, To, LOG, V><<<grid, kWarpBlock, 0, stream>>>(g, y, dx, rows, s.dim, p.threads);
      else softmax_warp_bwd<Ti, To, LOG, 1><<<grid, kWarpBlock, 0, stream>>>(g, y, dx, rows, s.dim, p.threads);
      break;
    }
    case Plan::BlockRegs:
      softmax_block_bwd<Ti, To, LOG><<<grid_for(rows, 1, 4, 2048 / p.threads), p.threads, 0, stream>>>(g, y, dx, rows, s.dim);
      break;
    case Plan::BlockTwoPass:
    {
      const unsigned grid = grid_for(rows, 1, 1, kTwoPassBlocksPerSm);
      if (p.vec) softmax_twopass_bwd<Ti, To, LOG, V><<<grid, kTwoPassThreads, 0, stream>>>(g, y, dx, rows, s.dim);
      else softmax_twopass_bwd<Ti, To, LOG, 1><<<grid, kTwoPassThreads, 0, stream>>>(g, y, dx, rows, s.dim);
    }
      break;
    case Plan::SplitRow: {
      const dim3 grid(unsigned(p.chunks), unsigned(rows < 65535 ? rows : 65535));
      if (p.vec) {
        softmax_split_dot<To, LOG, V><<<grid, 512, 0, stream>>>(g, y, ws, rows, s.dim);
        softmax_split_grad<Ti, To, LOG, V><<<grid, 512, 0, stream>>>(g, y, dx, ws, rows, s.dim);
      } else {
        softmax_split_dot<To, LOG, 1><<<grid, 512, 0, stream>>>(g, y, ws, rows, s.dim);
        softmax_split_grad<Ti, To, LOG, 1><<<grid, 512, 0, stream>>>(g, y, dx, ws, rows, s.dim);
      }
      break;
    }
    case Plan::Spatial:
      softmax_spatial_bwd<Ti, To, LOG><<<grid_for(s.outer * s.inner, 256, 4, 8), 256, 0, stream>>>(g, y, dx, s.outer, s.dim, s.inner);
      break;
  }
}

}  // namespace softmax
}  // namespace torch_dnn
