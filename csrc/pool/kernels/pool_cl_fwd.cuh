// Channels-last 2-D window pooling forward: the taps kernels (the host-side choice is in pool/pool_plan.h).
#pragma once
#include "pool/kernels/pool.cuh"
#include "pool/kernels/pool_tile.cuh"

namespace torch_dnn {
namespace pool {

// ---- channels-last forward, 2-D windows of exactly KH x KW taps (dilation 1), trivial depth window ----
// As pool_fwd_cl (pool.cuh) but with every tap's 16-byte load issued before any is used (KH * KW loads in
// flight a thread instead of KW: the row-at-a-time loop keeps ~36 KB in flight per SM, short of what the copy
// ceiling needs), 32-bit in-slice positions and int32 running indices (widened on the store), so that the nine
// loads fit in registers (the 64-bit version took 139). Bounded to 2 blocks per SM (128 registers): with 3
// (80 registers) bf16 3x3 spilled 124 bytes; 512 threads x 9 x 16 B = 72 KB of loads in flight per SM is ample.
// The taps kernels' window reduction (pool_fwd_cl2d, pool_fwd_cl2d32): raw[i][j] holds tap (hs + i, ws + j) where
// it lies inside the H x W slice. Max: m the maxima, mi their in-slice positions (the first maximum, the last NaN,
// as PyTorch; a window of only -inf keeps its first tap); avg: m the sums (the caller divides).
template <typename T, Op OP, int V, int KH, int KW, typename A>
__device__ __forceinline__ void reduce_taps(const Vec<T, V> (&raw)[KH][KW], int hs, int ws, int H, int W, A (&m)[V],
                                            int (&mi)[V]) {
  const int first = imax(hs, 0) * W + imax(ws, 0);
#pragma unroll
  for (int k = 0; k < V; ++k) m[k] = OP == Op::Max ? A(-INFINITY) : A(0), mi[k] = first;
#pragma unroll
  for (int i = 0; i < KH; ++i)
#pragma unroll
    for (int j = 0; j < KW; ++j) {
      const int h = hs + i, w = ws + j;
      if (h < 0 || h >= H || w < 0 || w >= W) continue;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const A v = to_acc<A>(raw[i][j].v[k]);
        if constexpr (OP == Op::Max) {
          if (v > m[k] || v != v) m[k] = v, mi[k] = h * W + w;
        } else {
          m[k] += v;
        }
      }
    }
}

// Max only: avg takes the taps where pool_fwd_cl2d32 applies (the 64-bit kernel lost to the row kernel; docs/pool.md).
template <typename T, int V, int KH, int KW>
__global__ void __launch_bounds__(kThreads, 2) pool_fwd_cl2d(const T* __restrict__ x, T* __restrict__ y,
                                                              int64_t* __restrict__ ind, Args<4> a) {
  using A = acc_t<T>;
  constexpr Op OP = Op::Max;
  const PoolShape& s = a.s;
  const int H = int(s.ax[1].in), W = int(s.ax[2].in), OH = int(s.ax[1].out), OW = int(s.ax[2].out);
  const int sh = int(s.ax[1].s), sw = int(s.ax[2].s), ph = int(s.ax[1].p), pw = int(s.ax[2].p);
  const int64_t C = s.C, D = s.ax[0].in;
  POOL_GRID_LOOP(t, a.items) {
    int64_t q[5];
    split(a.sp, t, q);
    const int64_t c = q[0] * V, n = q[4], d = q[3];
    const int ow = int(q[1]), oh = int(q[2]);
    const int hs = oh * sh - ph, ws = ow * sw - pw;
    const T* xs = x + (n * D + d) * int64_t(H) * W * C + c;  // the (n, d) slice, channel c
    Vec<T, V> raw[KH][KW];
#pragma unroll
    for (int i = 0; i < KH; ++i)
#pragma unroll
      for (int j = 0; j < KW; ++j) {
        const int h = hs + i, w = ws + j;
        if (h >= 0 && h < H && w >= 0 && w < W) raw[i][j] = load_vec<T, V>(xs + int64_t(h * W + w) * C);
      }
    const int64_t o = (((n * D + d) * OH + oh) * int64_t(OW) + ow) * C + c;
    A acc[V];
    int mi[V];
    reduce_taps<T, OP, V, KH, KW>(raw, hs, ws, H, W, acc, mi);
    store_acc<V>(y + o, acc);
    const int64_t base = d * int64_t(H) * W;
    int64_t idx[V];
#pragma unroll
    for (int k = 0; k < V; ++k) idx[k] = base + mi[k];
    store_idx<V>(ind + o, idx);
  }
}


// ---- pool_fwd_cl2d for tensors of fewer than 2^31 elements: all offsets 32-bit ----
// The same taps (every one of the KH x KW 16-byte loads issued before any is used) with 32-bit item and offset
// arithmetic and one item a thread: 126 registers became <= 64 for avg (4 blocks of 256 an SM instead of 2: the
// loads in flight an SM doubled) and <= 85 for max (3 blocks; its running maxima and indices spilled at 64), the
// register budget of torch.compile's kernel of the same form (docs/pool.md).
struct Cl2dArgs {
  FastDivmod32 by_cv, by_ow, by_oh, by_d;
  int items, C, D, H, W, OH, OW, sh, sw, ph, pw;
  int uniform_div, divisor_override;
  bool cip;
};

template <typename T, Op OP, int V, int KH, int KW>
__global__ void __launch_bounds__(kThreads, OP == Op::Max ? 3 : 4) pool_fwd_cl2d32(const T* __restrict__ x, T* __restrict__ y,
                                                                int64_t* __restrict__ ind, Cl2dArgs a) {
  using A = acc_t<T>;
  const int t = int(blockIdx.x) * kThreads + int(threadIdx.x);
  if (t >= a.items) return;
  uint32_t r, cg, ow, oh, nd;
  a.by_cv.divmod(uint32_t(t), r, cg);
  a.by_ow.divmod(r, r, ow);
  a.by_oh.divmod(r, nd, oh);
  const int H = a.H, W = a.W, C = a.C;
  const int hs = int(oh) * a.sh - a.ph, ws = int(ow) * a.sw - a.pw;
  const T* xs = x + int(nd) * (H * W * C) + int(cg) * V;  // the (n, d) slice, channel group cg
  Vec<T, V> raw[KH][KW];
#pragma unroll
  for (int i = 0; i < KH; ++i)
#pragma unroll
    for (int j = 0; j < KW; ++j) {
      const int h = hs + i, w = ws + j;
      if (h >= 0 && h < H && w >= 0 && w < W) raw[i][j] = load_vec<T, V>(xs + (h * W + w) * C);
    }
  const int o = t * V;  // items run in the output's own (channels-last) order
  A acc[V];
  int mi[V];
  reduce_taps<T, OP, V, KH, KW>(raw, hs, ws, H, W, acc, mi);
  if constexpr (OP == Op::Max) {
    store_acc<V>(y + o, acc);
    const int d = a.D == 1 ? 0 : int(nd - a.by_d.div(nd) * uint32_t(a.D));  // max indices count within (n, c)
    const int64_t base = int64_t(d) * H * W;
    int64_t idx[V];
#pragma unroll
    for (int k = 0; k < V; ++k) idx[k] = base + mi[k];
    store_idx<V>(ind + o, idx);
  } else {
    const int div = a.uniform_div > 0 ? a.uniform_div
                    : a.divisor_override ? a.divisor_override
                                         : avg_window_size(hs, ws, KH, KW, H, W, a.ph, a.pw, a.cip);
    const A inv = A(1) / A(div);
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] *= inv;
    store_acc<V>(y + o, acc);
  }
}

}  // namespace pool
}  // namespace torch_dnn
