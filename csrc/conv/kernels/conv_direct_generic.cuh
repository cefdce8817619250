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

// A position of a Grid4 that moves by a fixed step: the step's digits added with carries (each digit stays below
// twice its radix, so one subtraction a digit), instead of three 64-bit divisions a position.
struct Odometer4 {
  int64_t i0 = 0, i1 = 0, i2 = 0, i3 = 0;
  TD_HD void advance(const Odometer4& step, const Grid4& g) {
    int64_t c;
    i3 += step.i3;
    c = i3 >= g.n3;
    if (c) i3 -= g.n3;
    i2 += step.i2 + c;
    c = i2 >= g.n2;
    if (c) i2 -= g.n2;
    i1 += step.i1 + c;
    c = i1 >= g.n1;
    if (c) i1 -= g.n1;
    i0 += step.i0 + c;
  }
};

// One chunk of a block's weights staged in shared memory as A, [tap][row][lane]: `rows` channels of one side from
// row0, tcn taps from tp0, the tile's L channels of the other side from lane0, zero past its `lanes` channels;
// between barriers (the previous chunk is no longer read; this one is complete). The lanes are output channels
// (kLanesAreK, fprop: w[lane0 + lane][row0 + row][tap]) or input channels (dgrad: w[row0 + row][lane0 + lane][tap]).
template <int L, bool kLanesAreK, typename T, typename A>
__device__ __forceinline__ void stage_weights(A* wsm, const T* w, const Operand5& wo, int64_t lane0, int lanes,
                                              int64_t row0, int rows, int64_t tp0, int tcn, int64_t RS, int64_t S) {
  __syncthreads();
  for (int i = threadIdx.x; i < tcn * rows * L; i += kGenericThreads) {
    const int lane = i % L, rest = i / L, row = rest % rows, tl = rest / rows;
    const int64_t tap = tp0 + tl, t = tap / RS, r = (tap - t * RS) / S, s = tap - t * RS - r * S;
    wsm[i] = lane < lanes ? to_acc<A>(w[(kLanesAreK ? lane0 + lane : row0 + row) * wo.stride[0] +
                                        (kLanesAreK ? row0 + row : lane0 + lane) * wo.stride[1] + t * wo.stride[2] +
                                        r * wo.stride[3] + s * wo.stride[4]])
                          : A(0);
  }
  __syncthreads();
}

// y[n][k][p][q][o] for KT output channels k0.. of one group and PT positions a thread (positions mb * 256 PT +
// j * 256 + tid, j < PT: each load instruction of the warp reads neighbouring positions). The block's weights
// (KT channels x a chunk of CB input channels x a chunk of TC taps) are staged in shared memory as float,
// [tap][c][KT], so that a thread's inner step is PT input loads, KT/4 16-byte shared loads and PT KT FMAs; the
// tap's bounds and offsets are worked out once for the chunk's channels. Where all of a tile's weights fit one
// chunk they are staged once for all its position blocks. Blocks: (channel tile) x (position blocks), position
// blocks fastest; `pblocks` position blocks a tile, the grid a multiple of it.
template <typename T, int KT, int PT>
__global__ void __launch_bounds__(kGenericThreads)
    conv_generic_fprop(ConvGeometry g, Operand5 xo, Operand5 wo, Operand5 yo, Epilogue<T> ep, int64_t pblocks, int CB,
                       int TC) {
  using A = acc_t<T>;
  A* wsm = reinterpret_cast<A*>(direct_smem());
  const T* x = static_cast<const T*>(xo.ptr);
  const T* w = static_cast<const T*>(wo.ptr);
  T* y = static_cast<T*>(yo.ptr);
  const int64_t Cg = g.C / g.G, Kg = g.K / g.G;
  const int64_t S = g.ker[2], RS = g.ker[1] * S, TRS = g.ker[0] * RS;
  const int64_t ktiles = (Kg + KT - 1) / KT, tiles = g.G * ktiles;
  const int64_t M = g.N * g.out[0] * g.out[1] * g.out[2];
  const int64_t mblocks = (M + int64_t(kGenericThreads) * PT - 1) / (int64_t(kGenericThreads) * PT);
  const Grid4 pos{g.out[0], g.out[1], g.out[2]};
  const bool single = Cg <= CB && TRS <= TC;  // one chunk: staged once a tile
  const int64_t pb = int64_t(blockIdx.x) % pblocks, tile_step = int64_t(gridDim.x) / pblocks;
  for (int64_t tile = int64_t(blockIdx.x) / pblocks; tile < tiles; tile += tile_step) {
    const int64_t grp = tile / ktiles;
    const int64_t k0 = grp * Kg + (tile - grp * ktiles) * KT;
    const int nk = int((grp + 1) * Kg - k0 < KT ? (grp + 1) * Kg - k0 : KT);
    // wsm[(tap - tp0) cbn + (c - c0)][kk] = w[k0 + kk][c][tap]
    auto stage = [&](int64_t c0, int64_t tp0, int cbn, int tcn) {
      stage_weights<KT, true>(wsm, w, wo, k0, nk, c0, cbn, tp0, tcn, RS, S);
    };
    if (single) stage(0, 0, int(Cg), int(TRS));
    for (int64_t mb = pb; mb < mblocks; mb += pblocks) {
      const T* xb[PT];
      int64_t n[PT], p[PT], q[PT], o[PT];
      bool live[PT];
#pragma unroll
      for (int j = 0; j < PT; ++j) {
        const int64_t m = mb * kGenericThreads * PT + j * kGenericThreads + threadIdx.x;
        live[j] = m < M;
        pos.split(live[j] ? m : 0, n[j], p[j], q[j], o[j]);
        xb[j] = x + n[j] * xo.stride[0] + grp * Cg * xo.stride[1];
      }
      A acc[PT][KT];
      zero(acc);
      for (int64_t c0 = 0; c0 < Cg; c0 += CB) {
        const int cbn = int(Cg - c0 < CB ? Cg - c0 : CB);
        for (int64_t tp0 = 0; tp0 < TRS; tp0 += TC) {
          const int tcn = int(TRS - tp0 < TC ? TRS - tp0 : TC);
          if (!single) stage(c0, tp0, cbn, tcn);
          for (int tl = 0; tl < tcn; ++tl) {
            const int64_t tap = tp0 + tl, t = tap / RS, r = (tap - t * RS) / S, s = tap - t * RS - r * S;
            const T* xp[PT];
            bool ok[PT];
#pragma unroll
            for (int j = 0; j < PT; ++j) {
              const int64_t id = p[j] * g.stride[0] - g.pad[0] + t * g.dil[0];
              const int64_t ih = q[j] * g.stride[1] - g.pad[1] + r * g.dil[1];
              const int64_t iw = o[j] * g.stride[2] - g.pad[2] + s * g.dil[2];
              ok[j] = live[j] && id >= 0 && id < g.in[0] && ih >= 0 && ih < g.in[1] && iw >= 0 && iw < g.in[2];
              xp[j] = xb[j] + c0 * xo.stride[1] + (ok[j] ? id * xo.stride[2] + ih * xo.stride[3] + iw * xo.stride[4] : 0);
            }
            const A* wt = wsm + int64_t(tl) * cbn * KT;
            for (int cc = 0; cc < cbn; ++cc) {
              A wv[KT];
              load_smem_weights<KT>(wt + cc * KT, wv);
#pragma unroll
              for (int j = 0; j < PT; ++j) {
                const A xv = ok[j] ? to_acc<A>(xp[j][cc * xo.stride[1]]) : A(0);
#pragma unroll
                for (int kk = 0; kk < KT; ++kk) acc[j][kk] += xv * wv[kk];
              }
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < PT; ++j) {
        if (!live[j]) continue;
#pragma unroll
        for (int kk = 0; kk < KT; ++kk) {
          if (kk >= nk) break;
          const int64_t k = k0 + kk;
          const int64_t ro = n[j] * ep.rs[0] + k * ep.rs[1] + p[j] * ep.rs[2] + q[j] * ep.rs[3] + o[j] * ep.rs[4];
          y[n[j] * yo.stride[0] + k * yo.stride[1] + p[j] * yo.stride[2] + q[j] * yo.stride[3] + o[j] * yo.stride[4]] =
              from_acc<T>(ep.apply(acc[j][kk], k, ro));
        }
      }
    }
  }
}

// dx[n][c][d][h][w] for CT input channels c0.. of one group and PT positions a thread, the gather form: a tap
// (t, r, s) reaches dx position (d, h, w) from dy position ((d + pad - t dil) / stride, ...) where those are
// whole and in range. The block's weights (a chunk of CB output channels of the group x TC taps x CT) are staged
// in shared memory as float, [tap][k][CT]; blocks as conv_generic_fprop's.
template <typename T, int CT, int PT>
__global__ void __launch_bounds__(kGenericThreads)
    conv_generic_dgrad(ConvGeometry g, Operand5 dyo, Operand5 wo, Operand5 dxo, int64_t pblocks, int CB, int TC) {
  using A = acc_t<T>;
  A* wsm = reinterpret_cast<A*>(direct_smem());
  const T* dy = static_cast<const T*>(dyo.ptr);
  const T* w = static_cast<const T*>(wo.ptr);
  T* dx = static_cast<T*>(dxo.ptr);
  const int64_t Cg = g.C / g.G, Kg = g.K / g.G;
  const int64_t S = g.ker[2], RS = g.ker[1] * S, TRS = g.ker[0] * RS;
  const int64_t ctiles = (Cg + CT - 1) / CT, tiles = g.G * ctiles;
  const int64_t M = g.N * g.in[0] * g.in[1] * g.in[2];
  const int64_t mblocks = (M + int64_t(kGenericThreads) * PT - 1) / (int64_t(kGenericThreads) * PT);
  const Grid4 pos{g.in[0], g.in[1], g.in[2]};
  const bool single = Kg <= CB && TRS <= TC;
  const int64_t pb = int64_t(blockIdx.x) % pblocks, tile_step = int64_t(gridDim.x) / pblocks;
  for (int64_t tile = int64_t(blockIdx.x) / pblocks; tile < tiles; tile += tile_step) {
    const int64_t grp = tile / ctiles;
    const int64_t cl0 = (tile - grp * ctiles) * CT;  // within the group
    const int nc = int(Cg - cl0 < CT ? Cg - cl0 : CT);
    // wsm[(tap - tp0) kbn + (k - k0)][cc] = w[grp Kg + k][cl0 + cc][tap]
    auto stage = [&](int64_t k0, int64_t tp0, int kbn, int tcn) {
      stage_weights<CT, false>(wsm, w, wo, cl0, nc, grp * Kg + k0, kbn, tp0, tcn, RS, S);
    };
    if (single) stage(0, 0, int(Kg), int(TRS));
    for (int64_t mb = pb; mb < mblocks; mb += pblocks) {
      const T* yb[PT];
      int64_t n[PT], d[PT], h[PT], wi[PT];
      bool live[PT];
#pragma unroll
      for (int j = 0; j < PT; ++j) {
        const int64_t m = mb * kGenericThreads * PT + j * kGenericThreads + threadIdx.x;
        live[j] = m < M;
        pos.split(live[j] ? m : 0, n[j], d[j], h[j], wi[j]);
        yb[j] = dy + n[j] * dyo.stride[0] + grp * Kg * dyo.stride[1];
      }
      A acc[PT][CT];
      zero(acc);
      for (int64_t k0 = 0; k0 < Kg; k0 += CB) {
        const int kbn = int(Kg - k0 < CB ? Kg - k0 : CB);
        for (int64_t tp0 = 0; tp0 < TRS; tp0 += TC) {
          const int tcn = int(TRS - tp0 < TC ? TRS - tp0 : TC);
          if (!single) stage(k0, tp0, kbn, tcn);
          for (int tl = 0; tl < tcn; ++tl) {
            const int64_t tap = tp0 + tl, t = tap / RS, r = (tap - t * RS) / S, s = tap - t * RS - r * S;
            const T* yp[PT];
            bool ok[PT];
            bool any = false;
#pragma unroll
            for (int j = 0; j < PT; ++j) {
              const int64_t nd = d[j] + g.pad[0] - t * g.dil[0];
              const int64_t nh = h[j] + g.pad[1] - r * g.dil[1];
              const int64_t nw = wi[j] + g.pad[2] - s * g.dil[2];
              ok[j] = live[j] && nd >= 0 && nh >= 0 && nw >= 0 && nd % g.stride[0] == 0 && nh % g.stride[1] == 0 &&
                      nw % g.stride[2] == 0;
              const int64_t pp = ok[j] ? nd / g.stride[0] : 0, q = ok[j] ? nh / g.stride[1] : 0,
                            o = ok[j] ? nw / g.stride[2] : 0;
              ok[j] = ok[j] && pp < g.out[0] && q < g.out[1] && o < g.out[2];
              yp[j] = yb[j] + k0 * dyo.stride[1] +
                      (ok[j] ? pp * dyo.stride[2] + q * dyo.stride[3] + o * dyo.stride[4] : 0);
              any = any || ok[j];
            }
            if (!any) continue;  // a stride's zero taps (no barrier inside)
            const A* wt = wsm + int64_t(tl) * kbn * CT;
            for (int kl = 0; kl < kbn; ++kl) {
              A wv[CT];
              load_smem_weights<CT>(wt + kl * CT, wv);
#pragma unroll
              for (int j = 0; j < PT; ++j) {
                const A dv = ok[j] ? to_acc<A>(yp[j][kl * dyo.stride[1]]) : A(0);
#pragma unroll
                for (int cc = 0; cc < CT; ++cc) acc[j][cc] += dv * wv[cc];
              }
            }
          }
        }
      }
      const int64_t c0 = grp * Cg + cl0;
#pragma unroll
      for (int j = 0; j < PT; ++j) {
        if (!live[j]) continue;
#pragma unroll
        for (int cc = 0; cc < CT; ++cc) {
          if (cc >= nc) break;
          dx[n[j] * dxo.stride[0] + (c0 + cc) * dxo.stride[1] + d[j] * dxo.stride[2] + h[j] * dxo.stride[3] +
             wi[j] * dxo.stride[4]] = from_acc<T>(acc[j][cc]);
        }
      }
    }
  }
}

// dw for KT output channels (of one group) x one input channel c' x TT taps a block, over the positions of slice
// blockIdx / items (of `splits`): a position's KT dy values and TT input values give KT TT products, so each load
// feeds up to max(KT, TT) FMAs. The threads' sums meet in a fixed tree, one channel's TT at a time. With
// splits > 1 the block's sums go to partial[split][k][c'][tap] (A), else straight to dw.
template <typename T, int KT, int TT>
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
  const int64_t chunks = (TRS + TT - 1) / TT, ktiles = (Kg + KT - 1) / KT;
  const int64_t L = g.N * g.out[0] * g.out[1] * g.out[2];
  const int64_t per_split = (L + splits - 1) / splits;
  const Grid4 pos{g.out[0], g.out[1], g.out[2]};
  for (int64_t b = blockIdx.x; b < items * splits; b += gridDim.x) {
    const int64_t item = b % items, split = b / items;
    const int64_t chunk = item % chunks, rest = item / chunks;
    const int64_t cl = rest % Cg, tile = rest / Cg;
    const int64_t grp = tile / ktiles, k0 = grp * Kg + (tile - grp * ktiles) * KT, c = grp * Cg + cl;
    const int nk = int((grp + 1) * Kg - k0 < KT ? (grp + 1) * Kg - k0 : KT);
    const int64_t tap0 = chunk * TT;
    int tt[TT], tr[TT], ts[TT];
#pragma unroll
    for (int j = 0; j < TT; ++j) {
      const int64_t tap = tap0 + j < TRS ? tap0 + j : TRS - 1;
      tt[j] = int(tap / RS);
      tr[j] = int((tap % RS) / S);
      ts[j] = int(tap % S);
    }
    A acc[KT][TT];
    zero(acc);
    const int64_t l0 = split * per_split, l1 = l0 + per_split < L ? l0 + per_split : L;
    const T* dyk = dy + k0 * dyo.stride[1];
    const T* xc = x + c * xo.stride[1];
    Odometer4 at, step;
    if (l0 + threadIdx.x < l1) {  // (a grid with no positions has no sizes to divide by)
      pos.split(l0 + threadIdx.x, at.i0, at.i1, at.i2, at.i3);
      pos.split(kGenericThreads, step.i0, step.i1, step.i2, step.i3);
    }
    for (int64_t l = l0 + threadIdx.x; l < l1; l += kGenericThreads, at.advance(step, pos)) {
      const int64_t n = at.i0, p = at.i1, q = at.i2, o = at.i3;
      const T* dyp = dyk + n * dyo.stride[0] + p * dyo.stride[2] + q * dyo.stride[3] + o * dyo.stride[4];
      A dv[KT];
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) dv[kk] = kk < nk ? to_acc<A>(dyp[kk * dyo.stride[1]]) : A(0);
      const T* xn = xc + n * xo.stride[0];
      const int64_t d0 = p * g.stride[0] - g.pad[0], h0 = q * g.stride[1] - g.pad[1], w0 = o * g.stride[2] - g.pad[2];
#pragma unroll
      for (int j = 0; j < TT; ++j) {
        const int64_t id = d0 + tt[j] * g.dil[0], ih = h0 + tr[j] * g.dil[1], iw = w0 + ts[j] * g.dil[2];
        if (id >= 0 && id < g.in[0] && ih >= 0 && ih < g.in[1] && iw >= 0 && iw < g.in[2]) {
          const A xv = to_acc<A>(xn[id * xo.stride[2] + ih * xo.stride[3] + iw * xo.stride[4]]);
#pragma unroll
          for (int kk = 0; kk < KT; ++kk) acc[kk][j] += dv[kk] * xv;
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      block_sum_lanes(acc[kk], &red[0][0], 1);
      if (threadIdx.x == 0 && kk < nk) {
        const int64_t k = k0 + kk;
#pragma unroll
        for (int j = 0; j < TT; ++j) {
          if (tap0 + j >= TRS) break;
          if (splits > 1) {
            partial[(split * g.K * Cg + k * Cg + cl) * TRS + tap0 + j] = acc[kk][j];
          } else {
            dw[k * dwo.stride[0] + cl * dwo.stride[1] + tt[j] * dwo.stride[2] + tr[j] * dwo.stride[3] +
               ts[j] * dwo.stride[4]] = from_acc<T>(acc[kk][j]);
          }
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
