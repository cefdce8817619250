// batch_norm CUDA kernels. Two walks over a dense [outer][C][inner] tensor:
//   rows   (inner == 1, e.g. channels_last): [R = outer][C] rows; a block is TX threads across channel vectors
//          (V channels each, 16-byte accesses when C allows) times TY rows, each thread keeping its own
//          channels' parameters or partial sums in registers while it strides down the rows.
//   planes (inner > 1, e.g. NCHW): planes of `inner` contiguous elements, one channel each, cut into pieces
//          of at most kPiece accesses; a warp walks a piece with 16-byte accesses when inner allows.
// Reductions (stats, backward sums) write per-block partials, then a finalize kernel merges them per channel
// in a fixed order: no atomics, deterministic. Statistics are per-thread shifted sums (shift = the channel's
// first element, folded every 64 accesses) merged with Chan's parallel formula, so large means do not cancel.
//
// This header: the block shape, the partials layout, the activations and Welford moments shared by the kernels.
#pragma once
#include "batch_norm/batch_norm_kernels.h"

#include "common/cuda/reduce.cuh"
#include "common/cuda/types.cuh"
#include "common/cuda/vec.cuh"

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

// The block's moments from each thread's: merged across each warp, then warp by warp in a fixed order (sm: kWarps
// slots of shared memory); valid in thread 0.
template <typename A>
__device__ __forceinline__ Moments<A> block_moments(Moments<A> m, Moments<A>* sm) {
  m = warp_merge(m);
  if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    m = sm[0];
    for (int w = 1; w < kWarps; ++w) m = merge(m, sm[w]);
  }
  return m;
}

// The block's sums of each thread's a and b, likewise (sm: two rows of kWarps slots); valid in thread 0.
template <typename A>
__device__ __forceinline__ void block_sums(A& a, A& b, A (*sm)[kWarps]) {
  a = warp_reduce(a, SumOp{});
  b = warp_reduce(b, SumOp{});
  if (threadIdx.x % 32 == 0) {
    sm[0][threadIdx.x / 32] = a;
    sm[1][threadIdx.x / 32] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      a += sm[0][w];
      b += sm[1][w];
    }
  }
}

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn
