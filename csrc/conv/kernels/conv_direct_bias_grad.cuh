// The bias gradient db[k] = sum of dy[n][k][p][q][o] over n and the positions, deterministic: a block sums a
// tile of channels over its slice (split) of the rows in a fixed order (each thread every lanes_r-th row, then
// a fixed tree over the threads); with several slices the block sums go to a float workspace that a second
// kernel adds up in slice order. The thread layout follows dy's: 32 channels x 8 rows where channels are
// innermost (channels-last), 256 rows of one channel where the rows are (NCHW), so that a warp reads
// neighbouring elements either way.
#pragma once
#include "conv/kernels/conv_direct_common.cuh"

namespace torch_dnn {
namespace conv {

constexpr int kBiasThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kBiasThreads)
    conv_bias_grad_rows(const T* dy, int64_t kstride, int64_t K, RowDims rows, int lanes_k, int64_t kblocks,
                        int64_t splits, acc_t<T>* partial, T* db) {
  using A = acc_t<T>;
  __shared__ A red[kBiasThreads];
  const int tx = int(threadIdx.x) % lanes_k, ty = int(threadIdx.x) / lanes_k, lanes_r = kBiasThreads / lanes_k;
  const int64_t per_split = (rows.total + splits - 1) / splits;
  for (int64_t b = blockIdx.x; b < kblocks * splits; b += gridDim.x) {
    const int64_t kb = b % kblocks, split = b / kblocks;
    const int64_t k = kb * lanes_k + tx;
    const int64_t l0 = split * per_split, l1 = l0 + per_split < rows.total ? l0 + per_split : rows.total;
    A acc[1] = {A(0)};
    if (k < K && l0 + ty < l1) {
      const T* dyk = dy + k * kstride;
      int64_t d[4] = {0, 0, 0, 0}, step[4] = {0, 0, 0, 0};
      rows.digits(l0 + ty, d);
      rows.digits(lanes_r, step);
      for (int64_t l = l0 + ty; l < l1; l += lanes_r, rows.advance(d, step)) acc[0] += to_acc<A>(dyk[rows.offset(d)]);
    }
    block_sum_lanes(acc, red, lanes_k);
    if (ty == 0 && k < K) {
      if (splits > 1) partial[split * K + k] = acc[0];
      else db[k] = from_acc<T>(acc[0]);
    }
  }
}

// db[k] = sum over splits of partial[split][k], in split order.
template <typename T>
__global__ void __launch_bounds__(kBiasThreads)
    conv_bias_grad_sum_splits(const acc_t<T>* partial, int64_t splits, int64_t K, T* db) {
  using A = acc_t<T>;
  for (int64_t k = int64_t(blockIdx.x) * kBiasThreads + threadIdx.x; k < K; k += int64_t(gridDim.x) * kBiasThreads) {
    A s = A(0);
    for (int64_t sp = 0; sp < splits; ++sp) s += partial[sp * K + k];
    db[k] = from_acc<T>(s);
  }
}

}  // namespace conv
}  // namespace torch_dnn
