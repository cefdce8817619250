// softmax / log_softmax forward kernels. Ti: input type, To: output type, A: accumulation type.
//   softmax_warp_fwd      rows <= 1024: `width` lanes per row, the row in registers (<= 32 values a lane)
//   softmax_block_fwd     rows <= 256 x kFwdRegElems (10K 16-bit, 8K float, 2K double elements): a block per
//                         row, the row in registers
//   softmax_twopass_fwd   longer rows: a block per row; pass 1 running (max, sum), pass 2 re-reads and writes
//   softmax_split_*       long rows, few of them: several blocks per row, statistics merged through workspace
//   softmax_spatial_fwd   softmax over a dim that is not innermost: a thread per (outer, inner) column
#pragma once
#include "softmax/kernels/softmax_common.cuh"

namespace torch_dnn {
namespace softmax {

template <typename Ti, typename To, bool LOG, int V>
__global__ void __launch_bounds__(kWarpBlock, sizeof(Ti) == 2 && V > 1 ? 8 : 1) softmax_warp_fwd(const Ti* x, To* y, int64_t rows, int64_t D, int width) {
  using A = acc_t<Ti>;
  constexpr int kItems = 32 / V;  // vectors a lane can hold
  const int lane = threadIdx.x & (width - 1);
  const int64_t groups_per_block = kWarpBlock / width;
  const int nv = int(D / V);  // D <= kMaxWarpRow
  // Whole warps iterate together so that every lane reaches every shuffle.
  const int64_t first = int64_t(blockIdx.x) * groups_per_block + threadIdx.x / width;
  const int64_t step = int64_t(gridDim.x) * groups_per_block;
  const int64_t warp_first = int64_t(blockIdx.x) * groups_per_block + (threadIdx.x & ~31) / width;
  for (int64_t r = first, rw = warp_first; rw < rows; r += step, rw += step) {
    const bool valid = r < rows;
    A v[kItems][V];
    A m = A(-INFINITY);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * width + lane;  // < 1024: Warp plan rows are <= kMaxWarpRow
      if (valid && idx < nv) {
        load_acc<V>(x + r * D + idx * V, v[k]);
#pragma unroll
        for (int j = 0; j < V; ++j) m = FmaxOp{}(m, v[k][j]);
      }
    }
    m = warp_reduce(m, FmaxOp{}, width);
    const ShiftedExp<kFastMath<To>, A> exp_shifted(m);
    A s = A(0);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * width + lane;
      if (valid && idx < nv) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A e = exp_shifted(v[k][j]);
          s += e;
          // 16-bit softmax keeps exp(x - max): one exp per element where the exp is what limits the speed
          if constexpr (!LOG && kFastMath<To>) v[k][j] = e;
        }
      }
    }
    s = softmax_scale<LOG>(warp_reduce(s, SumOp{}, width));
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * width + lane;
      if (valid && idx < nv) {
#pragma unroll
        for (int j = 0; j < V; ++j)
          v[k][j] = kFastMath<To> && !LOG ? v[k][j] * s : softmax_out<LOG, A, kFastMath<To>>(v[k][j], m, s);
        store_acc<V>(y + r * D + idx * V, v[k]);
      }
    }
  }
}

// The row in registers as raw vectors (kFwdRegElems<Ti> values a thread): max, then sum of exp, then write.
template <typename Ti, typename To, bool LOG>
__global__ void __launch_bounds__(1024) softmax_block_fwd(const Ti* x, To* y, int64_t rows, int64_t D) {
  using A = acc_t<Ti>;
  constexpr int V = kVec16<Ti>;
  constexpr int kItems = kFwdRegElems<Ti> / V;
  constexpr bool FAST = kFastMath<To>;
  __shared__ A smem[32];
  const int64_t nv = D / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    Vec<Ti, V> raw[kItems];
    A m = A(-INFINITY);
    for_each_held_vector<kItems>(nv, [&](int k, int idx) {
      raw[k] = load_vec<Ti, V>(x + r * D + idx * V);
#pragma unroll
      for (int j = 0; j < V; ++j) m = FmaxOp{}(m, vec_elem<A>(raw[k], j));
    });
    m = block_reduce(m, FmaxOp{}, smem);
    const ShiftedExp<FAST, A> exp_shifted(m);
    A s = A(0);
    for_each_held_vector<kItems>(nv, [&](int k, int) {
#pragma unroll
      for (int j = 0; j < V; ++j) s += exp_shifted(vec_elem<A>(raw[k], j));
    });
    s = softmax_scale<LOG>(block_reduce(s, SumOp{}, smem));
    for_each_held_vector<kItems>(nv, [&](int k, int idx) {
      A o[V];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A xv = vec_elem<A>(raw[k], j);
        o[j] = LOG ? xv - m - s : exp_shifted(xv) * s;
      }
      store_vec<To, V>(y + r * D + idx * V, pack_vec<V, To>(o));
    });
  }
}

// Running (max, sum) of x[begin, end) of one row, reduced over the block. Each vector updates the running
// statistic once: its own max first, then one exp per element.
template <typename Ti, int V, typename A>
__device__ __forceinline__ MaxSum<A> block_row_stats(const Ti* row, int64_t begin, int64_t end, A* smem) {
  A m = A(-INFINITY), s = A(0);
  const int64_t step = int64_t(blockDim.x) * V;
  for (int64_t i0 = begin + int64_t(threadIdx.x) * V; i0 < end; i0 += step * kStreamUnroll) {
    A v[kStreamUnroll][V];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u)
      if (i0 + u * step < end) load_acc<V>(row + i0 + u * step, v[u]);
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (i0 + u * step < end) {
        A mv = A(-INFINITY);
#pragma unroll
        for (int j = 0; j < V; ++j) mv = FmaxOp{}(mv, v[u][j]);
        if (mv > m) {
          s = m == A(-INFINITY) ? A(0) : s * td_exp(m - mv);
          m = mv;
        }
        if (m != A(-INFINITY)) {
#pragma unroll
          for (int j = 0; j < V; ++j) s += td_exp(v[u][j] - m);  // NaN or +inf entries make s NaN
        } else {  // only -inf so far, and NaN (which fmax skips): the NaN must still reach the sum
#pragma unroll
          for (int j = 0; j < V; ++j)
            if (v[u][j] != v[u][j]) s = v[u][j];
        }
      }
    }
  }
  return block_reduce_maxsum(MaxSum<A>{m, s}, smem);
}

template <typename Ti, typename To, bool LOG, int V, typename A>
__device__ __forceinline__ void block_row_write(const Ti* row, To* out, int64_t begin, int64_t end, A m, A scale) {
  const ShiftedExp<kFastMath<To>, A> exp_shifted(m);
  const int64_t step = int64_t(blockDim.x) * V;
  for (int64_t i0 = begin + int64_t(threadIdx.x) * V; i0 < end; i0 += step * kStreamUnroll) {
    A v[kStreamUnroll][V];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u)
      if (i0 + u * step < end) load_acc<V>(row + i0 + u * step, v[u]);
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (i0 + u * step < end) {
#pragma unroll
        for (int j = 0; j < V; ++j) v[u][j] = LOG ? v[u][j] - m - scale : exp_shifted(v[u][j]) * scale;
        store_acc<V>(out + i0 + u * step, v[u]);
      }
    }
  }
}

// A block per row, persistent (a couple of blocks an SM): the rows in flight fit in L2, so the second
// read of each row is served from L2 and DRAM sees one read and one write.
template <typename Ti, typename To, bool LOG, int V>
__global__ void __launch_bounds__(kTwoPassThreads) softmax_twopass_fwd(const Ti* x, To* y, int64_t rows, int64_t D) {
  using A = acc_t<Ti>;
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const MaxSum<A> st = block_row_stats<Ti, V, A>(x + r * D, 0, D, smem);
    block_row_write<Ti, To, LOG, V, A>(x + r * D, y + r * D, 0, D, st.m, softmax_scale<LOG>(st.s));
  }
}

// Split rows: blockIdx.x is the chunk, blockIdx.y (plus a loop) the row. ws holds (max, sum) per chunk.
template <typename Ti, int V>
__global__ void __launch_bounds__(512) softmax_split_stats(const Ti* x, acc_t<Ti>* ws, int64_t rows, int64_t D) {
  using A = acc_t<Ti>;
  __shared__ A smem[32];
  const int64_t begin = int64_t(blockIdx.x) * kSplitChunk;
  const int64_t end = begin + kSplitChunk < D ? begin + kSplitChunk : D;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const MaxSum<A> st = block_row_stats<Ti, V, A>(x + r * D, begin, end, smem);
    if (threadIdx.x == 0) {
      ws[(r * gridDim.x + blockIdx.x) * 2] = st.m;
      ws[(r * gridDim.x + blockIdx.x) * 2 + 1] = st.s;
    }
  }
}

template <typename Ti, typename To, bool LOG, int V>
__global__ void __launch_bounds__(512) softmax_split_write(const Ti* x, To* y, const acc_t<Ti>* ws, int64_t rows, int64_t D) {
  using A = acc_t<Ti>;
  const int64_t begin = int64_t(blockIdx.x) * kSplitChunk;
  const int64_t end = begin + kSplitChunk < D ? begin + kSplitChunk : D;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    // Every thread merges the row's chunk statistics in the same order: identical results, no sync needed.
    MaxSum<A> st{A(-INFINITY), A(0)};
    for (unsigned c = 0; c < gridDim.x; ++c) st = MaxSum<A>::merge(st, {ws[(r * gridDim.x + c) * 2], ws[(r * gridDim.x + c) * 2 + 1]});
    block_row_write<Ti, To, LOG, V, A>(x + r * D, y + r * D, begin, end, st.m, softmax_scale<LOG>(st.s));
  }
}

template <typename Ti, typename To, bool LOG>
__global__ void __launch_bounds__(256) softmax_spatial_fwd(const Ti* x, To* y, int64_t outer, int64_t D, int64_t inner) {
  using A = acc_t<Ti>;
  const int64_t cols = outer * inner;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = c / inner, i = c - o * inner;
    const Ti* xp = x + o * D * inner + i;
    To* yp = y + o * D * inner + i;
    MaxSum<A> st{A(-INFINITY), A(0)};
    for (int64_t d = 0; d < D; ++d) st.add(to_acc<A>(xp[d * inner]));
    const A scale = softmax_scale<LOG>(st.s);
    for (int64_t d = 0; d < D; ++d) yp[d * inner] = from_acc<To>(softmax_out<LOG>(to_acc<A>(xp[d * inner]), st.m, scale));
  }
}

template <typename Ti, typename To, bool LOG>
void run_forward(const Ti* x, To* y, acc_t<Ti>* ws, SoftmaxShape s, const Knobs& knobs, cudaStream_t stream) {
  constexpr int V = kVec16<Ti>;
  const PlanInfo p =
      make_plan(s, V, aligned16(x) && aligned16(y) && sizeof(Ti) == sizeof(To), kFwdRegElems<Ti>, knobs.plan);
  const int64_t rows = s.outer;
  switch (p.plan) {
    case Plan::Warp: {
      const unsigned grid = grid_for(rows, kWarpBlock / p.threads, 4, 16);
      if (p.vec) softmax_warp_fwd<Ti, To, LOG, V><<<grid, kWarpBlock, 0, stream>>>(x, y, rows, s.dim, p.threads);
      else softmax_warp_fwd<Ti, To, LOG, 1><<<grid, kWarpBlock, 0, stream>>>(x, y, rows, s.dim, p.threads);
      break;
    }
    case Plan::BlockRegs:
      softmax_block_fwd<Ti, To, LOG><<<grid_for(rows, 1, 4, 2048 / p.threads), p.threads, 0, stream>>>(x, y, rows, s.dim);
      break;
    case Plan::BlockTwoPass:
    {
      const unsigned grid = grid_for(rows, 1, 1, kTwoPassBlocksPerSm);
      if (p.vec) softmax_twopass_fwd<Ti, To, LOG, V><<<grid, kTwoPassThreads, 0, stream>>>(x, y, rows, s.dim);
      else softmax_twopass_fwd<Ti, To, LOG, 1><<<grid, kTwoPassThreads, 0, stream>>>(x, y, rows, s.dim);
    }
      break;
    case Plan::SplitRow: {
      const dim3 grid(unsigned(p.chunks), unsigned(rows < 65535 ? rows : 65535));
      if (p.vec) {
        softmax_split_stats<Ti, V><<<grid, 512, 0, stream>>>(x, ws, rows, s.dim);
        softmax_split_write<Ti, To, LOG, V><<<grid, 512, 0, stream>>>(x, y, ws, rows, s.dim);
      } else {
        softmax_split_stats<Ti, 1><<<grid, 512, 0, stream>>>(x, ws, rows, s.dim);
        softmax_split_write<Ti, To, LOG, 1><<<grid, 512, 0, stream>>>(x, y, ws, rows, s.dim);
      }
      break;
    }
    case Plan::Spatial:
      softmax_spatial_fwd<Ti, To, LOG><<<grid_for(s.outer * s.inner, 256, 4, 8), 256, 0, stream>>>(x, y, s.outer, s.dim, s.inner);
      break;
  }
}

}  // namespace softmax
}  // namespace torch_dnn
