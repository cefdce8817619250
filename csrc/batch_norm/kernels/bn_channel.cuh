// batch_norm's training passes with whole channels a block (planes walk, inner > 1: NCHW): a block owns each of
// its channels entirely, so a channel's statistics (backward: sums), its coefficients and its elementwise pass
// run in one launch, with no exchange between blocks. The separate passes take three launches each way and a
// workspace; for layers whose channels are small (a few hundred KB), whose calls are host-bound, one launch each
// way is what counts (docs/batch_norm.md). Results equal the separate passes' up to the order of the reduction.
#pragma once
#include "batch_norm/kernels/bn_coeffs.cuh"
#include "batch_norm/kernels/bn_common.cuh"
#include "batch_norm/kernels/bn_reduce.cuh"
#include "batch_norm/kernels/bn_stats.cuh"

namespace torch_dnn {
namespace batch_norm {
namespace {

// Training forward: for each channel c of the block, its moments (the warps take its (image, piece) units in
// turn, merged in a fixed order), then mean, invstd, the running statistics and (scale, shift) by thread 0, then
// y = x * scale + shift over the channel (still in L2).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) channel_forward(const T* __restrict__ x, T* __restrict__ y, int64_t N,
                                                            int64_t C, int64_t S, int64_t pieces, FwdCoeffPtrs p) {
  using A = acc_t<T>;
  __shared__ Moments<A> sm[kWarps];
  __shared__ A coef[2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t sv = S / V;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const Moments<A> t =
        block_moments(plane_moments<T, V>(x, N, C, S, pieces, c, warp, kWarps, to_acc<A>(x[c * S])), sm);
    if (threadIdx.x == 0) {
      double scale, shift;
      fwd_coeffs_one(p, c, double(t.mean), double(t.m2), &scale, &shift);
      coef[0] = A(scale);  // rounded as the separate passes' scale / shift vectors
      coef[1] = A(shift);
    }
    __syncthreads();
    const A sc = coef[0], sh = coef[1];
    for (int64_t u = warp; u < N * pieces; u += kWarps) {
      const int64_t n = u / pieces, i0 = (u - n * pieces) * kPiece, end = min(sv, i0 + kPiece);
      const int64_t base = (n * C + c) * S;
#pragma unroll 4
      for (int64_t i = i0 + lane; i < end; i += 32) {
        A v[V];
        load_acc<V>(x + base + i * V, v);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = fma(v[j], sc, sh);
        store_acc<V>(y + base + i * V, v);
      }
    }
    __syncthreads();  // sm and coef are the next channel's
  }
}

// Training backward of plain batch_norm: for each channel c of the block, sum(dy) and sum(dy (x - mean)), then
// d_weight, d_bias and (k, a, b) by thread 0, then dx = k (dy - a - (x - mean) b) over the channel.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) channel_backward(const T* __restrict__ dy, const T* __restrict__ x,
                                                             const acc_t<T>* __restrict__ mean, T* __restrict__ dx,
                                                             int64_t N, int64_t C, int64_t S, int64_t pieces,
                                                             BwdCoeffPtrs p) {
  using A = acc_t<T>;
  __shared__ A sm[2][kWarps];
  __shared__ A coef[3];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t sv = S / V;
  const GradArgs<T> g{dy, x, nullptr, nullptr, nullptr, mean, nullptr, 0};
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    A a, b;
    plane_grad_sums<T, V, false>(g, N, C, S, pieces, c, warp, kWarps, a, b);
    block_sums(a, b, sm);
    if (threadIdx.x == 0) {
      const BwdCoeffs r = bwd_coeffs_one(p, c, double(a), double(b));
      coef[0] = A(r.k);  // rounded as the separate passes' k, a, b vectors
      coef[1] = A(r.a);
      coef[2] = A(r.b);
    }
    __syncthreads();
    const A k = coef[0], ca = coef[1], cb = coef[2], m = mean[c];
    for (int64_t u = warp; u < N * pieces; u += kWarps) {
      const int64_t n = u / pieces, i0 = (u - n * pieces) * kPiece, end = min(sv, i0 + kPiece);
      const int64_t base = (n * C + c) * S;
#pragma unroll 4
      for (int64_t i = i0 + lane; i < end; i += 32) {
        A d[V], v[V];
        load_acc<V>(dy + base + i * V, d);
        load_acc<V>(x + base + i * V, v);
#pragma unroll
        for (int j = 0; j < V; ++j) d[j] = k * (d[j] - ca - (v[j] - m) * cb);
        store_acc<V>(dx + base + i * V, d);
      }
    }
    __syncthreads();  // sm and coef are the next channel's
  }
}

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn
