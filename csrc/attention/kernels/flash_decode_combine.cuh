// flash_decode's second kernel: merges the splits' partial outputs of one query row (flash_decode_split.cuh's
// workspace) into the output, weighting split s by exp2(lse_s - lse), and writes the row's natural-log lse
// (+inf and o = 0 where no split saw a key). One warp a row, each lane D / 32 columns; 4 rows a CTA.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/decode_kernels.h"
#include "attention/kernels/flash_decode_split.cuh"
#include "common/cuda/types.cuh"

namespace torch_dnn {
namespace attention {
namespace decode {

constexpr int kCombineRows = 4;  // warps (rows) a CTA

template <typename A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const A o = __shfl_xor_sync(0xffffffffu, v, off, 32);
    v = o > v ? o : v;
  }
  return v;
}

template <typename T, int D>
__global__ void __launch_bounds__(32 * kCombineRows) flash_decode_combine_kernel(DecodeArgs a, DecodeWork<acc_t<T>> w) {
  using A = acc_t<T>;
  constexpr int E = D / 32;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t rows = a.B * a.Hq * a.Sq;
  const int64_t row = int64_t(blockIdx.x) * kCombineRows + warp;
  const bool valid = row < rows;  // every warp takes part in the shuffles (they are block-uniform)
  const A* lse_s = w.lse_part + (valid ? row : 0) * w.splits;

  A M = -INFINITY;
  for (int64_t s = lane; s < w.splits; s += 32) M = valid && lse_s[s] > M ? lse_s[s] : M;
  M = warp_max(M);
  A sum = A(0);
  for (int64_t s = lane; s < w.splits; s += 32) sum += valid && M != A(-INFINITY) ? exp2_acc(lse_s[s] - M) : A(0);
  sum = group_sum<32>(sum);

  A o[E];
#pragma unroll
  for (int e = 0; e < E; ++e) o[e] = A(0);
  if (valid && sum > A(0)) {
    const A inv = A(1) / sum;
    const A* op = w.o_part + row * w.splits * D + lane * E;
    for (int64_t s = 0; s < w.splits; ++s) {
      const A wgt = exp2_acc(lse_s[s] - M) * inv;
      if (wgt == A(0)) continue;  // a split that saw no key (its o_part is 0 too)
#pragma unroll
      for (int e = 0; e < E; ++e) o[e] += wgt * op[s * D + e];
    }
  }
  if (!valid) return;
  const int64_t i = row % a.Sq, h = (row / a.Sq) % a.Hq, b = row / (a.Sq * a.Hq);
  T* out = static_cast<T*>(a.out) + ((b * a.Sq + i) * a.Hq + h) * D + lane * E;
#pragma unroll
  for (int e = 0; e < E; ++e) out[e] = from_acc<T>(o[e]);
  if (lane == 0) {
    static_cast<A*>(a.lse)[row] = sum > A(0) ? (M + log2_acc(sum)) * A(0.6931471805599453) : A(INFINITY);
  }
}

}  // namespace decode
}  // namespace attention
}  // namespace torch_dnn
