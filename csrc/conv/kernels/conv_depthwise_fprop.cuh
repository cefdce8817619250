// Depthwise forward: y[n][k][q][o] = act(sum_{r,s} x[n][k/m][q sh - ph + r dh][o sw - pw + s dw] w[k][r][s]
// + bias[k] + residual).
//
// A block: bx channel lanes (V channels each) x 256/bx item lanes; an item is a strip of kDwStrip outputs along a
// row. The block's chunk of bx V output channels has its R x S weights in shared memory as float, [r][s][channel]
// (a 16-byte row read a tap); a filter row's S weights are held in registers while the strip's span of
// (OTW - 1) stride + S input pixels streams past them. With KS = 0 (other kernel widths, dilation along W) the
// taps are run-time loops over the same layout.
//   channels-last: bx up to 8 threads of 16-byte vectors: a warp reads 128 contiguous bytes of 4 pixels.
//   NCHW (bx = 1): the 256 threads take 256 neighbouring strips of one channel's plane(s).
#pragma once
#include "conv/kernels/conv_depthwise_common.cuh"

namespace torch_dnn {
namespace conv {

template <typename T, int V, int KS, int STR>
__global__ void __launch_bounds__(kDwThreads, kDwMinBlocks)
    conv_depthwise_fprop(DwParams p, const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                         Epilogue<T> ep) {
  using A = acc_t<T>;
  constexpr int OTW = kDwStrip;
  A* wsm = reinterpret_cast<A*>(direct_smem());
  const int bx = p.bx, tx = int(threadIdx.x) % bx, ty = int(threadIdx.x) / bx, by = kDwThreads / bx;
  const int cbv = bx * V, RS = p.R * p.S;
  const int chunk = int(blockIdx.x % uint32_t(p.chunks));
  const uint32_t item_blocks = gridDim.x / uint32_t(p.chunks);
  const int kbase = chunk * cbv;
  for (int i = threadIdx.x; i < RS * cbv; i += kDwThreads) {
    const int rs = i / cbv, cl = i - rs * cbv, k = kbase + cl;
    const int r = rs / p.S, s = rs - r * p.S;
    wsm[i] = k < p.K ? to_acc<A>(w[k * p.ws[0] + r * p.ws[3] + s * p.ws[4]]) : A(0);
  }
  __syncthreads();
  const int k0 = kbase + tx * V;
  if (k0 >= p.K) return;  // past the block's one barrier; V divides K where V > 1
  A bias[V];
#pragma unroll
  for (int v = 0; v < V; ++v) bias[v] = ep.bias != nullptr ? to_acc<A>(ep.bias[k0 + v]) : A(0);
  const A* wt = wsm + tx * V;
  const int64_t xoff = input_channel_offset<V>(p, k0);
  for (uint32_t item = (blockIdx.x / uint32_t(p.chunks)) * by + ty; item < p.items; item += item_blocks * by) {
    uint32_t n, q, strip;
    split_item(p, item, n, q, strip);
    const int o0 = int(strip) * OTW;
    A acc[OTW][V];
    zero(acc);
    const T* xn = x + int64_t(n) * p.xs[0];
    for (int r = 0; r < p.R; ++r) {
      const int ih = int(q) * p.sh - p.ph + r * p.dh;
      if (ih < 0 || ih >= p.H) continue;
      const T* xrow = xn + int64_t(ih) * p.xs[3];
      const A* wrow = wt + r * p.S * cbv;
      if constexpr (KS > 0) {
        A wr[KS][V];
#pragma unroll
        for (int s = 0; s < KS; ++s) load_smem_weights<V>(wrow + s * cbv, wr[s]);
        constexpr int SPAN = (OTW - 1) * STR + KS;
        const int iw0 = o0 * STR - p.pw;
        Vec<T, V> xs[SPAN];
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
              for (int v = 0; v < V; ++v) acc[o][v] += vec_elem<A>(xs[i], v) * wr[s][v];
            }
          }
        }
      } else {
        for (int s = 0; s < p.S; ++s) {
          A wv[V];
          load_smem_weights<V>(wrow + s * cbv, wv);
#pragma unroll
          for (int o = 0; o < OTW; ++o) {
            const int iw = (o0 + o) * p.sw - p.pw + s * p.dw;
            const bool in = iw >= 0 && iw < p.W;
            const Vec<T, V> xv = load_pixel_raw<V>(xrow + int64_t(iw) * p.xs[4], in, xoff);
#pragma unroll
            for (int v = 0; v < V; ++v) acc[o][v] += vec_elem<A>(xv, v) * wv[v];
          }
        }
      }
    }
#pragma unroll
    for (int o = 0; o < OTW; ++o) {
      const int ow = o0 + o;
      if (ow >= p.O) break;
      A out[V];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        A val = acc[o][v] + bias[v];
        if (ep.res != nullptr)
          val += to_acc<A>(ep.res[int64_t(n) * ep.rs[0] + int64_t(k0 + v) * ep.rs[1] + int64_t(q) * ep.rs[3] +
                                  int64_t(ow) * ep.rs[4]]);
        if (ep.act != 0) val = apply_act_runtime<A, kFastMath<T>>(ep.act, val, ep.a, ep.b);
        out[v] = val;
      }
      store_channels<V>(y + int64_t(n) * p.ys[0] + int64_t(k0) * p.ys[1] + int64_t(q) * p.ys[3] + int64_t(ow) * p.ys[4],
                        out);
    }
  }
}

}  // namespace conv
}  // namespace torch_dnn
