// Depthwise backward weight: dw[k][r][s] = sum over n, q, o of dy[n][k][q][o] x[n][k/m][q sh - ph + r dh][o sw - pw + s]
// (compile-time width KS and stride STR along W, no dilation there).
//
// A block owns one filter row r, a chunk of bx V output channels and a slice (split) of the items (strips of
// kDwStrip outputs along a row); its threads, bx channel lanes x 256/bx item lanes, hold the row's KS x V sums
// in registers while the items stream past: a strip's dy vectors once, then the input span of its filter row.
// The R blocks of one (chunk, slice) are neighbours in the grid, so dy comes from L2 after the first. The item
// lanes' sums meet in a fixed tree (shared memory), then go to dw, or with several slices to a float workspace
// [split][k][r][s] that conv_wgrad_sum_splits adds up in slice order: deterministic, no atomics.
#pragma once
#include "conv/kernels/conv_depthwise_common.cuh"

namespace torch_dnn {
namespace conv {

template <typename T, int V, int KS, int STR>
__global__ void __launch_bounds__(kDwThreads, dw_wgrad_min_blocks(KS, STR))
    conv_depthwise_wgrad(DwParams p, const T* __restrict__ dy, const T* __restrict__ x, acc_t<T>* __restrict__ partial,
                         T* __restrict__ dw, int splits) {
  using A = acc_t<T>;
  constexpr int OTW = kDwStrip;
  __shared__ A red[V * kDwThreads];
  const int bx = p.bx, tx = int(threadIdx.x) % bx, ty = int(threadIdx.x) / bx, by = kDwThreads / bx;
  const int cbv = bx * V;
  const uint32_t per_split = (p.items + uint32_t(splits) - 1) / uint32_t(splits);
  const uint32_t blocks = uint32_t(p.R) * uint32_t(p.chunks) * uint32_t(splits);
  for (uint32_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int r = int(b % uint32_t(p.R));
    const uint32_t rest = b / uint32_t(p.R);
    const int chunk = int(rest % uint32_t(p.chunks)), split = int(rest / uint32_t(p.chunks));
    const int k0 = chunk * cbv + tx * V;
    const bool active = k0 < p.K;  // V divides K where V > 1
    const int64_t xoff = input_channel_offset<V>(p, k0);
    A acc[KS][V];
    zero(acc);
    const uint32_t i0 = uint32_t(split) * per_split;
    const uint32_t i1 = i0 + per_split < p.items ? i0 + per_split : p.items;
    for (uint32_t item = i0 + ty; active && item < i1; item += by) {
      uint32_t n, q, strip;
      split_item(p, item, n, q, strip);
      const int ih = int(q) * p.sh - p.ph + r * p.dh;
      if (ih < 0 || ih >= p.H) continue;
      const int o0 = int(strip) * OTW;
      constexpr int SPAN = (OTW - 1) * STR + KS;
      Vec<T, V> g[OTW], xs[SPAN];
      const T* dyrow = dy + int64_t(n) * p.ys[0] + int64_t(k0) * p.ys[1] + int64_t(q) * p.ys[3];
#pragma unroll
      for (int o = 0; o < OTW; ++o) {
        const bool in = o0 + o < p.O;
        g[o] = zero_vec<T, V>();
        if (in) g[o] = load_vec<T, V>(dyrow + int64_t(o0 + o) * p.ys[4]);
      }
      const T* xrow = x + int64_t(n) * p.xs[0] + int64_t(ih) * p.xs[3];
      const int iw0 = o0 * STR - p.pw;
#pragma unroll
      for (int i = 0; i < SPAN; ++i) {
        const int iw = iw0 + i;
        const bool in = iw >= 0 && iw < p.W;
        xs[i] = load_pixel_raw<V>(xrow + int64_t(iw) * p.xs[4], in, xoff);
      }
#pragma unroll
      for (int i = 0; i < SPAN; ++i) {
#pragma unroll
        for (int o = 0; o < OTW; ++o) {
          const int s = i - o * STR;
          if (s >= 0 && s < KS) {
#pragma unroll
            for (int v = 0; v < V; ++v) acc[s][v] += vec_elem<A>(xs[i], v) * vec_elem<A>(g[o], v);
          }
        }
      }
    }
#pragma unroll
    for (int s = 0; s < KS; ++s) {
      block_sum_lanes(acc[s], red, bx);
      if (ty == 0 && active) {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const int k = k0 + v;
          if (splits > 1) partial[(int64_t(split) * p.K + k) * (p.R * KS) + r * KS + s] = acc[s][v];
          else dw[int64_t(k) * p.ws[0] + int64_t(r) * p.ws[3] + int64_t(s) * p.ws[4]] = from_acc<T>(acc[s][v]);
        }
      }
    }
  }
}

}  // namespace conv
}  // namespace torch_dnn
