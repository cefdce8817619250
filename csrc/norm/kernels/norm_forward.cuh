// layer_norm / rms_norm forward kernels (RMS: no mean, rstd = 1/sqrt(mean(x^2) + eps)), with the residual
// add fused in when p.res is set. One row in one pass over memory wherever it fits in registers:
//   norm_warp_fwd     rows <= 1024: `width` lanes per row, <= 32 values a lane, several rows a block
//   norm_block_fwd    vectorizable rows <= 32K (16-bit) / 16K (float) / 8K (double): a block per row,
//                     the row held as raw 16-byte vectors
//   norm_twopass_fwd  anything else: a block per row; pass 1 the mergeable (mean, M2) statistic, pass 2
//                     re-reads (mostly from L2) and writes
#pragma once
#include <algorithm>

#include "norm/kernels/norm_common.cuh"

namespace torch_dnn {
namespace norm {

// The row is kept as raw vectors (16-bit values take half the registers), converted where used.
template <typename T, bool RMS, int V>
__global__ void __launch_bounds__(kWarpBlock) norm_warp_fwd(FwdParams<T> p, int width) {
  using A = acc_t<T>;
  constexpr int kItems = 32 / V;  // vectors a lane can hold
  const int lane = threadIdx.x & (width - 1);
  const int64_t groups_per_block = kWarpBlock / width;
  const int64_t nv = p.N / V;
  // Whole warps iterate together so that every lane reaches every shuffle.
  const int64_t first = int64_t(blockIdx.x) * groups_per_block + threadIdx.x / width;
  const int64_t step = int64_t(gridDim.x) * groups_per_block;
  const int64_t warp_first = int64_t(blockIdx.x) * groups_per_block + (threadIdx.x & ~31) / width;
  for (int64_t r = first, rw = warp_first; rw < p.rows; r += step, rw += step) {
    const bool valid = r < p.rows;
    Vec<T, V> raw[kItems];
    A s = A(0);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * width + lane;
      if (valid && idx < nv) {
        raw[k] = load_input<V>(p, r * p.N + idx * V);
        if constexpr (!RMS) {
#pragma unroll
          for (int j = 0; j < V; ++j) s += to_acc<A>(raw[k].v[j]);
        }
      }
    }
    A m = A(0);
    if constexpr (!RMS) m = warp_reduce(s, SumOp{}, width) / A(p.N);
    A q = A(0);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (valid && k * width + lane < nv) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A d = to_acc<A>(raw[k].v[j]) - m;
          q += d * d;
        }
      }
    }
    const A rs = rstd_of(warp_reduce(q, SumOp{}, width) / A(p.N), p.eps);
    if (valid && lane == 0) {
      if constexpr (!RMS) p.mean[r] = m;
      p.rstd[r] = rs;
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * width + lane;
      if (valid && idx < nv) {
        A v[V];
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = to_acc<A>(raw[k].v[j]);
        store_output<V>(p, r * p.N + idx * V, idx * V, v, m, rs);
      }
    }
  }
}

// LayerNorm's mean and variance come from one block reduction when p.fused_stats is set: each thread's exact
// (count, mean, M2) over its registers, Chan-merged across the block (one reduction: 2 barriers a row
// instead of 4, so LayerNorm waits on no more reductions than RMSNorm). Otherwise the exact two-pass: the
// mean, then the sum of squared deviations (two block reductions).
// bf16 (SHIFT): elements taken from the vectors' 32-bit words (elem_acc), stores converted in pairs, so that ptxas
// keeps the held row two elements a register; the one-by-one conversion (cuda_bf16's) let it unpack the row into
// one element a register (spills; docs/norm.md). half converts without inline asm.
template <typename T, bool RMS>
__global__ void __launch_bounds__(1024) norm_block_fwd(FwdParams<T> p) {
  using A = acc_t<T>;
  constexpr bool SHIFT = std::is_same_v<T, __nv_bfloat16>;
  constexpr int V = kVec16<T>;
  constexpr int kItems = kFwdRegElems<T> / V;
  __shared__ A smem[96];
  const int64_t nv = p.N / V;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    Vec<T, V> raw[kItems];
    A s = A(0);
    int held = 0;  // vectors this thread holds
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * int(blockDim.x) + int(threadIdx.x);  // in 32 bits: store_vec's note
      if (idx < nv) {
        raw[k] = load_input<V, SHIFT>(p, r * p.N + idx * V);
        ++held;
        if constexpr (!RMS) {
#pragma unroll
          for (int j = 0; j < V; ++j) s += elem_acc<SHIFT, A>(raw[k], j);
        }
      }
    }
    A m = A(0), var = A(0);
    if constexpr (!RMS) {
      if (p.fused_stats) {
        const A cnt = A(held * V), lm = held ? s / cnt : A(0);
        A q = A(0);
#pragma unroll
        for (int k = 0; k < kItems; ++k) {
          if (k < held) {
#pragma unroll
            for (int j = 0; j < V; ++j) {
              const A d = elem_acc<SHIFT, A>(raw[k], j) - lm;
              q += d * d;
            }
          }
        }
        const MeanM2<A> st = block_reduce_meanm2_uniform(MeanM2<A>{cnt, lm, q}, smem);
        m = st.mean;
        var = st.m2 / A(p.N);
      } else {
        m = block_reduce(s, SumOp{}, smem) / A(p.N);
      }
    }
    if (RMS || !p.fused_stats) {
      A q = A(0);
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        if (k < held) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const A d = elem_acc<SHIFT, A>(raw[k], j) - m;
            q += d * d;
          }
        }
      }
      var = block_reduce(q, SumOp{}, smem) / A(p.N);
    }
    const A rs = rstd_of(var, p.eps);
    if (threadIdx.x == 0) {
      if constexpr (!RMS) p.mean[r] = m;
      p.rstd[r] = rs;
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int idx = k * int(blockDim.x) + int(threadIdx.x);  // in 32 bits: store_vec's note
      if (k < held) {
        A v[V];
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = elem_acc<SHIFT, A>(raw[k], j);
        store_output<V, SHIFT>(p, r * p.N + idx * V, idx * V, v, m, rs);
      }
    }
  }
}

template <typename T, bool RMS, int V>
__global__ void __launch_bounds__(kTwoPassThreads) norm_twopass_fwd(FwdParams<T> p) {
  using A = acc_t<T>;
  __shared__ A smem[96];
  const T* src = p.res ? p.sum : p.x;  // pass 2 reads what pass 1 normalized (this thread wrote its sum)
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const int64_t base = r * p.N;
    MeanM2<A> st{A(0), A(0), A(0)};
    A q = A(0);
    for (int64_t i = int64_t(threadIdx.x) * V; i < p.N; i += int64_t(blockDim.x) * V) {
      const Vec<T, V> raw = load_input<V>(p, base + i);
      A v[V];
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = to_acc<A>(raw.v[j]);
      if constexpr (RMS) {
#pragma unroll
        for (int j = 0; j < V; ++j) q += v[j] * v[j];
      } else {
        st.add(v);
      }
    }
    A m = A(0), var;
    if constexpr (RMS) {
      var = block_reduce(q, SumOp{}, smem) / A(p.N);
    } else {
      st = block_reduce_meanm2(st, smem);
      m = st.mean;
      var = st.m2 / A(p.N);
    }
    const A rs = rstd_of(var, p.eps);
    if (threadIdx.x == 0) {
      if constexpr (!RMS) p.mean[r] = m;
      p.rstd[r] = rs;
    }
    for (int64_t i = int64_t(threadIdx.x) * V; i < p.N; i += int64_t(blockDim.x) * V) {
      const Vec<T, V> raw = load_vec<T, V>(src + base + i);
      A v[V];
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = to_acc<A>(raw.v[j]);
      store_output<V>(p, base + i, i, v, m, rs);
    }
  }
}

template <typename T>
bool all_aligned(const FwdParams<T>& p) {
  return aligned16(p.x) && aligned16(p.y) && (!p.res || (aligned16(p.res) && aligned16(p.sum))) &&
         (!p.w || aligned16(p.w)) && (!p.b || aligned16(p.b));
}

template <typename T, bool RMS>
void run_forward(FwdParams<T> p, const Knobs& knobs, cudaStream_t stream) {
  constexpr bool kFp16LayerNorm = std::is_same_v<T, __half> && !RMS;
  p.fused_stats = !knobs.twopass_stats(kFp16LayerNorm);
  constexpr int V = kVec16<T>;
  const FwdPlanInfo plan = make_fwd_plan(p.N, V, all_aligned(p), kFwdRegElems<T>);
  switch (plan.plan) {
    case FwdPlan::Warp: {
      const unsigned grid = grid_for(p.rows, kWarpBlock / plan.threads, 4, 16);
      if (plan.vec) norm_warp_fwd<T, RMS, V><<<grid, kWarpBlock, 0, stream>>>(p, plan.threads);
      else norm_warp_fwd<T, RMS, 1><<<grid, kWarpBlock, 0, stream>>>(p, plan.threads);
      break;
    }
    case FwdPlan::BlockRegs: {
      // rows: a block per row, the block scheduler balances the end (a persistent block of ~4 rows left
      // up to 4 rows' time as a tail); waves: the persistent grid of 4 waves (fp16 LayerNorm's default)
      const unsigned grid = knobs.grid_waves(kFp16LayerNorm) ? grid_for(p.rows, 1, 4, 2048 / plan.threads)
                                             : unsigned(std::min<int64_t>(p.rows, 0x7fffffff));
      norm_block_fwd<T, RMS><<<grid, plan.threads, 0, stream>>>(p);
      break;
    }
    case FwdPlan::TwoPass:
      if (plan.vec) norm_twopass_fwd<T, RMS, V><<<grid_for(p.rows, 1, 4, 4), kTwoPassThreads, 0, stream>>>(p);
      else norm_twopass_fwd<T, RMS, 1><<<grid_for(p.rows, 1, 4, 4), kTwoPassThreads, 0, stream>>>(p);
      break;
  }
}

}  // namespace norm
}  // namespace torch_dnn
