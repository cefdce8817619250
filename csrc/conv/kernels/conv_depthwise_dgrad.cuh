// Depthwise backward data, the gather form: dx[n][c][h][w] = sum_{j < m} sum_{r,s} dy[n][c m + j][p][q] w[c m + j][r][s]
// over the taps with h + ph - r dh = p sh and w + pw - s dw = q sw (whole, in range): no atomics, and a strided
// convolution visits only the taps that reach each dx element.
//
// Blocks and threads as the forward's (conv_depthwise_fprop.cuh) over dx: bx channel lanes x item lanes, an
// item a strip of kDwStrip dx columns of one row; the chunk's weights (m of them a channel) in shared memory as
// float, [j][r][s][channel]. With a compile-time width KS and stride STR, a strip starts at a column w0 with
// w0 + pw a multiple of STR: then dy column (w0 + pw) / STR + e meets dx column w0 + o through tap
// s = o - e STR, known at compile time, and each dy vector is loaded once a filter row for the whole strip.
#pragma once
#include "conv/kernels/conv_depthwise_common.cuh"

namespace torch_dnn {
namespace conv {

template <typename T, int V, int KS, int STR>
__global__ void __launch_bounds__(kDwThreads, kDwMinBlocks)
    conv_depthwise_dgrad(DwParams p, const T* __restrict__ dy, const T* __restrict__ w, T* __restrict__ dx) {
  using A = acc_t<T>;
  constexpr int OTW = kDwStrip;
  A* wsm = reinterpret_cast<A*>(direct_smem());
  const int bx = p.bx, tx = int(threadIdx.x) % bx, ty = int(threadIdx.x) / bx, by = kDwThreads / bx;
  const int cbv = bx * V, RS = p.R * p.S;
  const int chunk = int(blockIdx.x % uint32_t(p.chunks));
  const uint32_t item_blocks = gridDim.x / uint32_t(p.chunks);
  const int cbase = chunk * cbv;
  for (int i = threadIdx.x; i < p.m * RS * cbv; i += kDwThreads) {
    const int jrs = i / cbv, cl = i - jrs * cbv, c = cbase + cl;
    const int j = jrs / RS, rs = jrs - j * RS;
    const int r = rs / p.S, s = rs - r * p.S;
    wsm[i] = c < p.C ? to_acc<A>(w[int64_t(c * p.m + j) * p.ws[0] + r * p.ws[3] + s * p.ws[4]]) : A(0);
  }
  __syncthreads();
  const int c0 = cbase + tx * V;
  if (c0 >= p.C) return;  // past the block's one barrier; V divides C where V > 1
  const A* wt = wsm + tx * V;
  for (uint32_t item = (blockIdx.x / uint32_t(p.chunks)) * by + ty; item < p.items; item += item_blocks * by) {
    uint32_t n, h, strip;
    split_item(p, item, n, h, strip);
    const int w0 = int(strip) * OTW - p.wshift;
    A acc[OTW][V];
    zero(acc);
    const T* dyn = dy + int64_t(n) * p.ys[0];
    for (int j = 0; j < p.m; ++j) {
      // the thread's dy channels in a pixel: c0.. (V > 1 only where m == 1), else channel c0 m + j
      const int64_t yoff = V > 1 ? int64_t(c0) : int64_t(c0 * p.m + j) * p.ys[1];
      for (int r = 0; r < p.R; ++r) {
        const int num = int(h) + p.ph - r * p.dh;
        if (num < 0 || num % p.sh != 0) continue;
        const int pq = num / p.sh;
        if (pq >= p.Q) continue;
        const T* dyrow = dyn + int64_t(pq) * p.ys[3];
        const A* wrow = wt + (j * RS + r * p.S) * cbv;
        if constexpr (KS > 0) {
          A wr[KS][V];
#pragma unroll
          for (int s = 0; s < KS; ++s) load_smem_weights<V>(wrow + s * cbv, wr[s]);
          const int qbase = (w0 + p.pw) / STR;  // exact: the plan aligned the strips
          constexpr int E0 = -((KS - 1) / STR), E1 = (OTW - 1) / STR;
          Vec<T, V> dv[E1 - E0 + 1];
#pragma unroll
          for (int e = E0; e <= E1; ++e) {
            const int qq = qbase + e;
            const bool in = qq >= 0 && qq < p.O;
            dv[e - E0] = load_pixel_raw<V>(dyrow + int64_t(qq) * p.ys[4], in, yoff);
          }
#pragma unroll
          for (int e = E0; e <= E1; ++e) {
#pragma unroll
            for (int o = 0; o < OTW; ++o) {
              const int s = o - e * STR;
              if (s >= 0 && s < KS) {
#pragma unroll
                for (int v = 0; v < V; ++v) acc[o][v] += vec_elem<A>(dv[e - E0], v) * wr[s][v];
              }
            }
          }
        } else {
          for (int s = 0; s < p.S; ++s) {
            A wv[V];
            load_smem_weights<V>(wrow + s * cbv, wv);
#pragma unroll
            for (int o = 0; o < OTW; ++o) {
              const int num2 = w0 + o + p.pw - s * p.dw;
              if (num2 < 0 || num2 % p.sw != 0) continue;
              const int qq = num2 / p.sw;
              if (qq >= p.O) continue;
              const Vec<T, V> dv = load_pixel_raw<V>(dyrow + int64_t(qq) * p.ys[4], true, yoff);
#pragma unroll
              for (int v = 0; v < V; ++v) acc[o][v] += vec_elem<A>(dv, v) * wv[v];
            }
          }
        }
      }
    }
    T* dxrow = dx + int64_t(n) * p.xs[0] + int64_t(c0) * p.xs[1] + int64_t(h) * p.xs[3];
#pragma unroll
    for (int o = 0; o < OTW; ++o) {
      const int wc = w0 + o;
      if (wc >= 0 && wc < p.W) store_channels<V>(dxrow + int64_t(wc) * p.xs[4], acc[o]);
    }
  }
}

}  // namespace conv
}  // namespace torch_dnn
