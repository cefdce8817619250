// Deterministic column sums of a [P, C] partial-sum workspace: the second stage of every reduction over rows
// (bias and norm weight gradients), so that results never depend on atomics' order.
#pragma once
#include <cstdint>

#include "common/cuda/types.cuh"

namespace torch_dnn {

// out[c] = sum over p of partial[p][c], in a fixed order: a block of 32 columns x 8 lanes of rows, each
// lane summing every 8th row, then the 8 lane sums added in lane order.
constexpr int kSumCols = 32, kSumLanes = 8;
template <typename T>
__global__ void __launch_bounds__(kSumCols * kSumLanes) column_sum_kernel(const acc_t<T>* partial, T* out, int64_t P, int64_t C) {
  using A = acc_t<T>;
  __shared__ A lane_sums[kSumLanes][kSumCols];
  const int tx = threadIdx.x % kSumCols, ty = threadIdx.x / kSumCols;
  const int64_t c = int64_t(blockIdx.x) * kSumCols + tx;
  A s = A(0);
  if (c < C)
    for (int64_t p = ty; p < P; p += kSumLanes) s += partial[p * C + c];
  lane_sums[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && c < C) {
    A t = A(0);
#pragma unroll
    for (int l = 0; l < kSumLanes; ++l) t += lane_sums[l][tx];
    out[c] = from_acc<T>(t);
  }
}

template <typename T>
void launch_column_sum(const acc_t<T>* partial, T* out, int64_t P, int64_t C, cudaStream_t stream) {
  column_sum_kernel<T><<<unsigned((C + kSumCols - 1) / kSumCols), kSumCols * kSumLanes, 0, stream>>>(partial, out, P, C);
}

}  // namespace torch_dnn
