// The generic direct kernels: every geometry, groups, dtype and operand strides, on CUDA cores. The fallback
// that takes every problem no faster path takes (float32 without TF32, float64, 3-D depthwise, odd layouts),
// written to be right first and sensible second:
//   fprop  output-stationary: a thread owns one output position and KT output channels of one group, so each
//          input value it loads feeds KT FMAs; the weights are the same for every thread of the block (its
//          channel tile), loads the hardware broadcasts.
//   dgrad  the gather form: a thread owns one dx position and CT input channels and sums, over the taps whose
//          output position p = (i + pad - t dil) / stride is whole and in range, the dy values of its group times
//          the weights; no atomics, no wasted zero taps.
//   wgrad  a block owns one (k, c') pair and TT taps of it and reduces over its slice of the N P Q O positions
//          in a fixed tree; slices (splits) land in a float workspace that a second kernel sums in split order.
// Every index is 64-bit: a tensor may pass 2^31 elements.
#pragma once
#include "conv/kernels/conv_direct_common.cuh"

namespace torch_dnn {
namespace conv {

constexpr int kGenericThreads = 256;

// The positions of a [N][P][Q][O] (or [N][D][H][W]) grid, the last fastest.
struct Grid4 {
  int64_t n1, n2, n3;  // the sizes of the three inner dims
  TD_HD void split(int64_t m, int64_t& i0, int64_t& i1, int64_t& i2, int64_t& i3) const {
    i3 = m % n3;
    m /= n3;
    i2 = m % n2;
    m /= n2;
    i1 = m % n1;
    i0 = m / n1;
  }
};

// y[n][k][p][q][o] for KT channels k0.. of one group. Blocks: (channel tile) x (position blocks), position
// blocks fastest; `pblocks` position blocks a tile, the grid a multiple of it.
template <typename T, int KT>
__global__ void __launch_bounds__(kGenericThreads)
    conv_generic_fprop(ConvGeometry g, Operand5 xo, Operand5 wo, Operand5 yo, Epilogue<T> ep, int64_t pblocks) {
  using A = acc_t<T>;
  const T* x = static_cast<const T*>(xo.ptr);
  const T* w = static_cast<const T*>(wo.ptr);
  T* y = static_cast<T*>(yo.ptr);
  const int64_t Cg = g.C / g.G, Kg = g.K / g.G;
  const int64_t ktiles = (Kg + KT - 1) / KT, tiles = g.G * ktiles;
  const int64_t M = g.N * g.out[0] * g.out[1] * g.out[2];
  const Grid4 pos{g.out[0], g.out[1], g.out[2]};
  const int64_t pb = int64_t(blockIdx.x) % pblocks, tile_step = int64_t(gridDim.x) / pblocks;
  for (int64_t tile = int64_t(blockIdx.x) / pblocks; tile < tiles; tile += tile_step) {
    const int64_t grp = tile / ktiles;
    const int64_t k0 = grp * Kg + (tile - grp * ktiles) * KT;
    const int64_t nk = (grp + 1) * Kg - k0 < KT ? (grp + 1) * Kg - k0 : KT;
    const T* wk = w + k0 * wo.stride[0];
    for (int64_t m = pb * kGenericThreads + threadIdx.x; m < M; m += pblocks * kGenericThreads) {
      int64_t n, p, q, o;
      pos.split(m, n, p, q, o);
      A acc[KT];
#pragma unroll
      for (int j = 0; j < KT; ++j) acc[j] = A(0);
      const T* xn = x + n * xo.stride[0] + grp * Cg * xo.stride[1];
      for (int64_t t = 0; t < g.ker[0]; ++t) {
        const int64_t id = p * g.stride[0] - g.pad[0] + t * g.dil[0];
        if (id < 0 || id >= g.in[0]) continue;
        for (int64_t r = 0; r < g.ker[1]; ++r) {
          const int64_t ih = q * g.stride[1] - g.pad[1] + r * g.dil[1];
          if (ih < 0 || ih >= g.in[1]) continue;
          for (int64_t s = 0; s < g.ker[2]; ++s) {
            const int64_t iw = o * g.stride[2] - g.pad[2] + s * g.dil[2];
            if (iw < 0 || iw >= g.in[2]) continue;
            const T* xp = xn + id * xo.stride[2] + ih * xo.stride[3] + iw * xo.stride[4];
            const T* wp = wk + t * wo.stride[2] + r * wo.stride[3] + s * wo.stride[4];
            for (int64_t c = 0; c < Cg; ++c) {
              const A xv = to_acc<A>(xp[c * xo.stride[1]]);
              const T* wc = wp + c * wo.stride[1];
#pragma unroll
              for (int j = 0; j < KT; ++j)
                if (j < nk) acc[j] += xv * to_acc<A>(wc[j * wo.stride[0]]);
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < KT; ++j) {
        if (j >= nk) break;
        const int64_t k = k0 + j;
        const int64_t ro = n * ep.rs[0] + k * ep.rs[1] + p * ep.rs[2] + q * ep.rs[3] + o * ep.rs[4];
        y[n * yo.stride[0] + k * yo.stride[1] + p * yo.stride[2] + q * yo.stride[3] + o * yo.stride[4]] =
            from_acc<T>(ep.apply(acc[j], k, ro));
      }
    }
  }
}

// dx[n][c][d][h][w] for CT channels c0.. of one group; blocks as conv_generic_fprop's.
template <typename T, int CT>
__global__ void __launch_bounds__(kGenericThreads)
    conv_generic_dgrad(ConvGeometry g, Operand5 dyo, Operand5 wo, Operand5 dxo, int64_t pblocks) {
  using A = acc_t<T>;
  const T* dy = static_cast<const T*>(dyo.ptr);
  const T* w = static_cast<const T*>(wo.ptr);
  T* dx = static_cast<T*>(dxo.ptr);
  const int64_t Cg = g.C / g.G, Kg = g.K / g.G;
  const int64_t ctiles = (Cg + CT - 1) / CT, tiles = g.G * ctiles;
  const int64_t M = g.N * g.in[0] * g.in[1] * g.in[2];
  const Grid4 pos{g.in[0], g.in[1], g.in[2]};
  const int64_t pb = int64_t(blockIdx.x) % pblocks, tile_step = int64_t(gridDim.x) / pblocks;
  for (int64_t tile = int64_t(blockIdx.x) / pblocks; tile < tiles; tile += tile_step) {
    const int64_t grp = tile / ctiles;
    const int64_t cl0 = (tile - grp * ctiles) * CT;  // within the group
    const int64_t nc = Cg - cl0 < CT ? Cg - cl0 : CT;
    const T* wc = w + grp * Kg * wo.stride[0] + cl0 * wo.stride[1];
    for (int64_t m = pb * kGenericThreads + threadIdx.x; m < M; m += pblocks * kGenericThreads) {
      int64_t n, d, h, wi;
      pos.split(m, n, d, h, wi);
      A acc[CT];
#pragma unroll
      for (int j = 0; j < CT; ++j) acc[j] = A(0);
      const T* dyn = dy + n * dyo.stride[0] + grp * Kg * dyo.stride[1];
      for (int64_t t = 0; t < g.ker[0]; ++t) {
        const int64_t nd = d + g.pad[0] - t * g.dil[0];
        if (nd < 0 || nd % g.stride[0] != 0) continue;
        const int64_t p = nd / g.stride[0];
        if (p >= g.out[0]) continue;
        for (int64_t r = 0; r < g.ker[1]; ++r) {
          const int64_t nh = h + g.pad[1] - r * g.dil[1];
          if (nh < 0 || nh % g.stride[1] != 0) continue;
          const int64_t q = nh / g.stride[1];
          if (q >= g.out[1]) continue;
          for (int64_t s = 0; s < g.ker[2]; ++s) {
            const int64_t nw = wi + g.pad[2] - s * g.dil[2];
            if (nw < 0 || nw % g.stride[2] != 0) continue;
            const int64_t o = nw / g.stride[2];
            if (o >= g.out[2]) continue;
            const T* dyp = dyn + p * dyo.stride[2] + q * dyo.stride[3] + o * dyo.stride[4];
            const T* wp = wc + t * wo.stride[2] + r * wo.stride[3] + s * wo.stride[4];
            for (int64_t k = 0; k < Kg; ++k) {
              const A dv = to_acc<A>(dyp[k * dyo.stride[1]]);
              const T* wk = wp + k * wo.stride[0];
#pragma unroll
              for (int j = 0; j < CT; ++j)
                if (j < nc) acc[j] += dv * to_acc<A>(wk[j * wo.stride[1]]);
            }
          }
        }
      }
      const int64_t c0 = grp * Cg + cl0;
#pragma unroll
      for (int j = 0; j < CT; ++j) {
        if (j >= nc) break;
        dx[n * dxo.stride[0] + (c0 + j) * dxo.stride[1] + d * dxo.stride[2] + h * dxo.stride[3] + wi * dxo.stride[4]] =
            from_acc<T>(acc[j]);
      }
    }
  }
}

// dw for TT taps of one (k, c') pair a block; the positions of slice blockIdx / items (of `splits`). With
// splits > 1 the block's sums go to partial[split][k][c'][tap] (A), else straight to dw.
template <typename T, int TT>
__global__ void __launch_bounds__(kGenericThreads)
    conv_generic_wgrad(ConvGeometry g, Operand5 dyo, Operand5 xo, Operand5 dwo, acc_t<T>* partial, int64_t items,
                       int64_t splits) {
  using A = acc_t<T>;
  __shared__ A red[TT][kGenericThreads];
  const T* dy = static_cast<const T*>(dyo.ptr);
  const T* x = static_cast<const T*>(xo.ptr);
  T* dw = static_cast<T*>(dwo.ptr);
  const int64_t Cg = g.C / g.G, Kg = g.K / g.G;
  const int64_t S = g.ker[2], RS = g.ker[1] * S, TRS = g.ker[0] * RS;
  const int64_t chunks = (TRS + TT - 1) / TT;
  const int64_t L = g.N * g.out[0] * g.out[1] * g.out[2];
  const int64_t per_split = (L + splits - 1) / splits;
  const Grid4 pos{g.out[0], g.out[1], g.out[2]};
  for (int64_t b = blockIdx.x; b < items * splits; b += gridDim.x) {
    const int64_t item = b % items, split = b / items;
    const int64_t chunk = item % chunks, kc = item / chunks;
    const int64_t cl = kc % Cg, k = kc / Cg, grp = k / Kg, c = grp * Cg + cl;
    const int64_t tap0 = chunk * TT;
    int tt[TT], tr[TT], ts[TT];
#pragma unroll
    for (int j = 0; j < TT; ++j) {
      const int64_t tap = tap0 + j < TRS ? tap0 + j : TRS - 1;
      tt[j] = int(tap / RS);
      tr[j] = int((tap % RS) / S);
      ts[j] = int(tap % S);
    }
    A acc[TT];
#pragma unroll
    for (int j = 0; j < TT; ++j) acc[j] = A(0);
    const int64_t l0 = split * per_split, l1 = l0 + per_split < L ? l0 + per_split : L;
    const T* dyk = dy + k * dyo.stride[1];
    const T* xc = x + c * xo.stride[1];
    for (int64_t l = l0 + threadIdx.x; l < l1; l += kGenericThreads) {
      int64_t n, p, q, o;
      pos.split(l, n, p, q, o);
      const A dv = to_acc<A>(dyk[n * dyo.stride[0] + p * dyo.stride[2] + q * dyo.stride[3] + o * dyo.stride[4]]);
      const T* xn = xc + n * xo.stride[0];
      const int64_t d0 = p * g.stride[0] - g.pad[0], h0 = q * g.stride[1] - g.pad[1], w0 = o * g.stride[2] - g.pad[2];
#pragma unroll
      for (int j = 0; j < TT; ++j) {
        const int64_t id = d0 + tt[j] * g.dil[0], ih = h0 + tr[j] * g.dil[1], iw = w0 + ts[j] * g.dil[2];
        if (id >= 0 && id < g.in[0] && ih >= 0 && ih < g.in[1] && iw >= 0 && iw < g.in[2])
          acc[j] += dv * to_acc<A>(xn[id * xo.stride[2] + ih * xo.stride[3] + iw * xo.stride[4]]);
      }
    }
    block_sum_lanes(acc, &red[0][0], 1);
    if (threadIdx.x == 0) {
#pragma unroll
      for (int j = 0; j < TT; ++j) {
        if (tap0 + j >= TRS) break;
        if (splits > 1) {
          partial[(split * g.K * Cg + kc) * TRS + tap0 + j] = acc[j];
        } else {
          dw[k * dwo.stride[0] + cl * dwo.stride[1] + tt[j] * dwo.stride[2] + tr[j] * dwo.stride[3] +
             ts[j] * dwo.stride[4]] = from_acc<T>(acc[j]);
        }
      }
    }
  }
}

// dw[k][c'][t][r][s] = sum over splits of partial[split][k][c'][tap], in split order.
template <typename T>
__global__ void __launch_bounds__(kGenericThreads)
    conv_wgrad_sum_splits(const acc_t<T>* partial, int64_t splits, int64_t Kc, int64_t Cg, int64_t R, int64_t S,
                          int64_t TRS, Operand5 dwo) {
  using A = acc_t<T>;
  T* dw = static_cast<T*>(dwo.ptr);
  const int64_t count = Kc * Cg * TRS;
  for (int64_t i = int64_t(blockIdx.x) * kGenericThreads + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * kGenericThreads) {
    A s = A(0);
    for (int64_t sp = 0; sp < splits; ++sp) s += partial[sp * count + i];
    const int64_t tap = i % TRS, kc = i / TRS, cl = kc % Cg, k = kc / Cg;
    const int64_t t = tap / (R * S), r = (tap / S) % R, ss = tap % S;
    dw[k * dwo.stride[0] + cl * dwo.stride[1] + t * dwo.stride[2] + r * dwo.stride[3] + ss * dwo.stride[4]] =
        from_acc<T>(s);
  }
}

}  // namespace conv
}  // namespace torch_dnn
