// Warp and block reductions (sum, max) in the accumulation type.
#pragma once
#include "common/cuda/types.cuh"

namespace torch_dnn {

struct SumOp {
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct MaxOp {
  // NaN wins, as in PyTorch's max reductions.
  template <typename A> __device__ __forceinline__ A operator()(A a, A b) const {
    return (a != a || a > b) ? a : b;
  }
};

// max that ignores NaN (one instruction). Softmax uses it: a NaN in a row still reaches every output
// through the row's sum of exponentials.
struct FmaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ double operator()(double a, double b) const { return fmax(a, b); }
};

template <typename A, class Op>
__device__ __forceinline__ A warp_reduce(A v, Op op, int width = 32) {
#pragma unroll
  for (int off = width / 2; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off, width));
  return v;
}

// The value that leaves any other unchanged.
template <typename A> __device__ __forceinline__ A identity(SumOp) { return A(0); }
template <typename A> __device__ __forceinline__ A identity(MaxOp) { return A(-INFINITY); }
template <typename A> __device__ __forceinline__ A identity(FmaxOp) { return A(-INFINITY); }

// Every thread of the block gets the result. `smem` holds at least 32 A's. Safe to call back to back.
template <typename A, class Op>
__device__ __forceinline__ A block_reduce(A v, Op op, A* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < nwarps ? smem[lane] : identity<A>(op);
  return warp_reduce(v, op);
}

// Two sums at the price of one block reduction's synchronizations. `smem` holds at least 64 A's.
template <typename A>
__device__ __forceinline__ void block_reduce_sum2(A& a, A& b, A* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  a = warp_reduce(a, SumOp{});
  b = warp_reduce(b, SumOp{});
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) {
    smem[warp] = a;
    smem[32 + warp] = b;
  }
  __syncthreads();
  a = warp_reduce(lane < nwarps ? smem[lane] : A(0), SumOp{});
  b = warp_reduce(lane < nwarps ? smem[32 + lane] : A(0), SumOp{});
}

}  // namespace torch_dnn
