// The flash backward's first pass (torch-free): D[b][h][i] = rowsum(dO * O) in float, one warp a row, into a
// dense [B][Hq][Sq] workspace (0 for the rows past a variable-length sequence's end).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/kernels/attention_common.cuh"

namespace torch_dnn {
namespace attention {
namespace flash {

constexpr int kPreWarps = 8;

// rowsum(dO * O) of row i of (b, h), summed by the 32 lanes of a warp (every lane gets it); 0 past the sequence.
template <typename T>
__device__ __forceinline__ float rowsum_dout_o(const AttnArgs& a, const AttnGrads& g, const Seq& seq, int64_t b,
                                               int64_t h, int64_t i, int lane) {
  float acc = 0.f;
  if (i < seq.sq) {
    const T* o = static_cast<const T*>(a.o.ptr) + seq.q_off(a.o, b, h, i);
    const T* d = static_cast<const T*>(g.dout.ptr) + seq.q_off(g.dout, b, h, i);
    for (int64_t c = lane; c < a.Dv; c += 32) acc += to_acc<float>(o[c]) * to_acc<float>(d[c]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  return acc;
}

template <typename T>
__global__ void __launch_bounds__(32 * kPreWarps) flash_bwd_dsum_kernel(const AttnArgs a, const AttnGrads g,
                                                                        float* dsum) {
  const int64_t row = int64_t(blockIdx.x) * kPreWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= a.B * a.Hq * a.Sq) return;
  const int64_t i = row % a.Sq, h = (row / a.Sq) % a.Hq, b = row / (a.Sq * a.Hq);
  const float acc = rowsum_dout_o<T>(a, g, make_seq(a, b), b, h, i, lane);
  if (lane == 0) dsum[row] = acc;
}

}  // namespace flash
}  // namespace attention
}  // namespace torch_dnn
