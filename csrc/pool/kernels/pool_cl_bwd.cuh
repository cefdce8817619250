// Channels-last window pooling backward by owner blocks (the host-side choice is in pool/pool_plan.h).
#pragma once
#include "pool/kernels/pool.cuh"
#include "pool/kernels/pool_tile.cuh"

namespace torch_dnn {
namespace pool {

// ---- channels-last backward by owner blocks ----
// With windows of span <= 2 * stride along H and W (3x3/2, 2x2/2, ...), input position h along an axis is
// covered only by outputs o - 1 and o, o = (h + p) / s its "owner": the inputs [o * s - p, o * s - p + s).
// An item is one owner (oh, ow) and V channels: it loads the (at most) 2 x 2 outputs o - 1, o along each
// axis (grad vectors; max: index vectors as int32, avg: the divisors) ONCE and writes the s x s inputs it
// owns. Each output's grad and indices are read by 4 items instead of by every input it covers (4x fewer
// index bytes through L1/L2 at 3x3/2: the per-input gather re-read 64-byte index vectors 9 times per output),
// and the window arithmetic is per output, not per (input, covering output).

struct OwnerArgs {
  Splitter<4> sp;  // items (channel vector, owner w, owner h, depth slice, n)
  int64_t items, C;
  int D, H, W, OH, OW;
  int kh, kw, sh, sw, ph, pw;
  bool cip;
  int divisor_override;
  int uniform_div;  // avg: every window's divisor, or 0 (uniform_avg_divisor)
  int own_h, strip;  // pool_bwd_cl_k3_strip: owner rows, owner rows an item
};

// Max: the V indices of output element `ind` narrowed to the (n, d) slice of `slice` inputs that starts at ibase
// (-1 outside it: matches no input of the slice).
template <int V>
__device__ __forceinline__ void load_slice_idx(const int64_t* ind, int64_t ibase, int64_t slice, int (&idx)[V]) {
  int64_t raw[V];
  load_idx<V>(ind, raw);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int64_t rel = raw[j] - ibase;
    idx[j] = rel >= 0 && rel < slice ? int(rel) : -1;
  }
}

template <typename T, Op OP, int V>
__global__ void __launch_bounds__(kThreads) pool_bwd_cl_owner(const T* __restrict__ g,
                                                               const int64_t* __restrict__ ind,
                                                               T* __restrict__ dx, OwnerArgs a) {
  using A = acc_t<T>;
  const int H = a.H, W = a.W, OH = a.OH, OW = a.OW;
  const A inv_uniform = a.uniform_div > 0 ? A(1) / A(a.uniform_div) : A(0);
  POOL_GRID_LOOP(t, a.items) {
    int64_t q[5];
    split(a.sp, t, q);
    const int64_t c = q[0] * V, n = q[4];
    const int ow_own = int(q[1]), oh_own = int(q[2]), d = int(q[3]);
    const int64_t gplane = (n * a.D + d) * OH;  // first output row of this (n, d) slice
    // the 2 x 2 covering outputs: (oh_own - 1 + u, ow_own - 1 + v)
    Vec<T, V> gv[2][2];
    int idx[2][2][V];
    A inv[2][2];
    bool ok[2][2];
    const int64_t ibase = int64_t(d) * H * W;
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        const int oh = oh_own - 1 + u, ow = ow_own - 1 + v;
        ok[u][v] = oh >= 0 && oh < OH && ow >= 0 && ow < OW;
        inv[u][v] = A(0);
        if (ok[u][v]) {
          const int64_t o = ((gplane + oh) * OW + ow) * a.C + c;
          gv[u][v] = load_vec<T, V>(g + o);
          if constexpr (OP == Op::Max) {
            load_slice_idx<V>(ind + o, ibase, int64_t(H) * W, idx[u][v]);
          } else if (a.uniform_div > 0) {
            inv[u][v] = inv_uniform;
          } else {
            const int hs = oh * a.sh - a.ph, ws = ow * a.sw - a.pw;
            const int div = a.divisor_override ? a.divisor_override
                                               : avg_window_size(hs, ws, a.kh, a.kw, H, W, a.ph, a.pw, a.cip);
            inv[u][v] = A(1) / A(div);
          }
        }
      }
#pragma unroll 2
    for (int r = 0; r < a.sh; ++r) {
      const int h = oh_own * a.sh - a.ph + r;
      if (h < 0 || h >= H) continue;
#pragma unroll 2
      for (int e = 0; e < a.sw; ++e) {
        const int w = ow_own * a.sw - a.pw + e;
        if (w < 0 || w >= W) continue;
        const int i = h * W + w;
        A acc[V];
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = A(0);
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
          for (int v = 0; v < 2; ++v) {
            if (!ok[u][v]) continue;
            if constexpr (OP == Op::Max) {
#pragma unroll
              for (int j = 0; j < V; ++j)
                if (idx[u][v][j] == i) acc[j] += to_acc<A>(gv[u][v].v[j]);
            } else {
              // the output's window starts at or before h (its owner is not after h's); does it reach h?
              const int oh = oh_own - 1 + u, ow = ow_own - 1 + v;
              if (h < oh * a.sh - a.ph + a.kh && w < ow * a.sw - a.pw + a.kw) {
#pragma unroll
                for (int j = 0; j < V; ++j) acc[j] += to_acc<A>(gv[u][v].v[j]) * inv[u][v];
              }
            }
          }
        store_acc<V>(dx + (((n * a.D + d) * H + h) * int64_t(W) + w) * a.C + c, acc);
      }
    }
  }
}

// 3x3/2 owner items as strips. The covering is fixed: owned input (r, e) of owner (a, b) lies in output a's
// window always and in output a - 1's only for r == 0 (its window ends at 2a - p + 1), the same along W, so each
// input adds 4, 2, 2 or 1 of the 2 x 2 outputs by a pattern known at compile time instead of testing all four
// (max: their indices; avg: their window ends) as pool_bwd_cl_owner does. An item walks a.strip owner rows down
// one owner column (same channels), keeping the two outputs of row a that owner row a + 1 shares with row a: per
// owner row it loads 2 outputs instead of 4, and max narrows half as many int64 indices (the items are
// issue-bound: with one owner an item the narrowing was about a third of a bf16 max item's instructions).
// a.strip == 1 is one owner an item (TORCH_DNN_POOL_CL_BWD_STRIP=1, A/B runs).
template <typename T, Op OP, int V>
__global__ void __launch_bounds__(kThreads) pool_bwd_cl_k3_strip(const T* __restrict__ g,
                                                                  const int64_t* __restrict__ ind,
                                                                  T* __restrict__ dx, OwnerArgs a) {
  using A = acc_t<T>;
  const int H = a.H, W = a.W, OH = a.OH, OW = a.OW;
  const A inv_uniform = a.uniform_div > 0 ? A(1) / A(a.uniform_div) : A(0);
  POOL_GRID_LOOP(t, a.items) {
    int64_t q[5];
    split(a.sp, t, q);
    const int64_t c = q[0] * V, n = q[4];
    const int b = int(q[1]), a0 = int(q[2]) * a.strip, d = int(q[3]);
    const int a1 = imin(a0 + a.strip, a.own_h);
    const int64_t gplane = (n * a.D + d) * OH;        // first output row of this (n, d) slice
    const int64_t xplane = (n * a.D + d) * int64_t(H);  // its first input row
    const int64_t ibase = int64_t(d) * H * W;
    // outputs (row, b - 1 + v), u = 0: the row above the owner row, u = 1: the owner row. Grads (avg: zero where
    // missing), max: indices narrowed to the slice (-1: missing or outside it), avg: 1 / divisor.
    Vec<T, V> gv[2][2];
    int idx[2][2][V];
    A inv[2][2];
    auto load_row = [&](int u, int oh) {
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        const int ow = b - 1 + v;
        const bool ok = oh >= 0 && oh < OH && ow >= 0 && ow < OW;
        inv[u][v] = A(0);
        if constexpr (OP == Op::Avg) {
#pragma unroll
          for (int j = 0; j < V; ++j) gv[u][v].v[j] = from_acc<T>(A(0));
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) idx[u][v][j] = -1;
        }
        if (!ok) continue;
        const int64_t o = ((gplane + oh) * OW + ow) * a.C + c;
        gv[u][v] = load_vec<T, V>(g + o);
        if constexpr (OP == Op::Max) {
          load_slice_idx<V>(ind + o, ibase, int64_t(H) * W, idx[u][v]);
        } else if (a.uniform_div > 0) {
          inv[u][v] = inv_uniform;
        } else {
          const int div = a.divisor_override
                              ? a.divisor_override
                              : avg_window_size(oh * 2 - a.ph, ow * 2 - a.pw, 3, 3, H, W, a.ph, a.pw, a.cip);
          inv[u][v] = A(1) / A(div);
        }
      }
    };
    load_row(0, a0 - 1);
    for (int oa = a0; oa < a1; ++oa) {
      load_row(1, oa);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int h = oa * 2 - a.ph + r;
        if (h < 0 || h >= H) continue;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int w = b * 2 - a.pw + e;
          if (w < 0 || w >= W) continue;
          const int i = h * W + w;
          A acc[V];
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] = A(0);
#pragma unroll
          for (int u = 0; u < 2; ++u)
#pragma unroll
            for (int v = 0; v < 2; ++v) {
              if ((u == 0 && r != 0) || (v == 0 && e != 0)) continue;  // output (a - 1, .) ends before row r
#pragma unroll
              for (int j = 0; j < V; ++j) {
                if constexpr (OP == Op::Max) {
                  if (idx[u][v][j] == i) acc[j] += to_acc<A>(gv[u][v].v[j]);
                } else {
                  acc[j] += to_acc<A>(gv[u][v].v[j]) * inv[u][v];
                }
              }
            }
          store_acc<V>(dx + ((xplane + h) * int64_t(W) + w) * a.C + c, acc);
        }
      }
#pragma unroll
      for (int v = 0; v < 2; ++v) {  // this owner row's outputs are the next one's upper neighbours
        gv[0][v] = gv[1][v];
        inv[0][v] = inv[1][v];
#pragma unroll
        for (int j = 0; j < V; ++j) idx[0][v][j] = idx[1][v][j];
      }
    }
  }
}

}  // namespace pool
}  // namespace torch_dnn
