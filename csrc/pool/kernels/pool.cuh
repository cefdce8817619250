// Pooling kernels over the 5-D problem [N, C, D, H, W] (pool_kernels.h), grid-stride loops over items:
//   channels-last (NDHWC): an item is one output (input, backward) position and V channels; consecutive
//     threads run along C, V = 16 bytes when C and the pointers allow, so every window read, every store and
//     every index access is a coalesced 16-byte vector.
//   NCDHW: an item is kRows positions one above the other (along H) in one column; consecutive threads run
//     along W. A warp's loads of one window tap are then 32 neighbouring columns (stride s along W: one or two
//     128-byte lines), its stores 32 consecutive outputs; the rows share index arithmetic, and the windows of
//     vertically adjacent outputs overlap (kernel > stride), so their second reads hit L1.
// Item numbers split into coordinates with 32-bit multiply-shift division when they fit in 31 bits, 64-bit
// division otherwise; addresses are 64-bit. Forward items are output positions; backward items are input
// positions that gather from the output windows covering them (no atomics: deterministic, no zero fill).
// Adaptive pooling to a single output per volume (global average) has its own reductions at the end.
#pragma once
#include <cmath>
#include <type_traits>

#include "common/cuda/device.cuh"
#include "common/cuda/divmod.cuh"
#include "common/cuda/reduce.cuh"
#include "common/cuda/vec.cuh"
#include "pool/pool_kernels.h"

namespace torch_dnn {
namespace pool {

constexpr int kThreads = 256;
constexpr int kRows = 2;  // NCDHW: positions along H per item

enum class Op { Max, Avg, Lp };

// ---- item numbers -> coordinates ----

// q[0] = t mod div[0], q[1] = (t / div[0]) mod div[1], ..., q[K] = the rest.
template <int K>
struct Splitter {
  FastDivmod32 fast[K];
  int64_t div[K];
  bool use32;
};

template <int K>
Splitter<K> make_splitter(const int64_t (&div)[K], int64_t items) {
  Splitter<K> sp;
  sp.use32 = items < (int64_t(1) << 31);
  for (int k = 0; k < K; ++k) {
    sp.div[k] = div[k];
    if (sp.use32) sp.fast[k] = FastDivmod32(uint32_t(div[k]));
  }
  return sp;
}

template <int K>
__device__ __forceinline__ void split(const Splitter<K>& sp, int64_t t, int64_t (&q)[K + 1]) {
  if (sp.use32) {
    uint32_t u = uint32_t(t);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      uint32_t quot, rem;
      sp.fast[k].divmod(u, quot, rem);
      q[k] = rem;
      u = quot;
    }
    q[K] = u;
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      q[k] = t % sp.div[k];
      t /= sp.div[k];
    }
    q[K] = t;
  }
}

// What every kernel takes: the shape, the item count and its splitter, and each axis's stride as a 32-bit
// divisor (`small`: every input position plus padding fits in 31 bits, so covering_outputs can use them).
template <int K>
struct Args {
  PoolShape s;
  Splitter<K> sp;
  int64_t items;
  FastDivmod32 by_stride[3];
  bool small;
};

// covering_outputs (pool_kernels.h) of a window (not adaptive) axis, with the stride's 32-bit divisor.
__device__ __forceinline__ Range covering(int64_t i, const Axis& a, bool adaptive, const FastDivmod32& by_s,
                                          bool small) {
  if (adaptive || !small) return covering_outputs(i, a, adaptive);
  const uint32_t span = uint32_t((a.k - 1) * a.d + 1), ip = uint32_t(i + a.p);
  const int64_t b = ip < span ? 0 : int64_t(by_s.div(ip - span)) + 1;
  const int64_t e = int64_t(by_s.div(ip)) + 1;
  return {b, e < a.out ? e : a.out};
}

// Every kernel launch of the family goes through here; tests/emulation/ compiles these sources for the host
// (TORCH_DNN_EMULATE_CUDA), where it runs the kernel's threads on the CPU instead.
template <typename... P, typename... Args>
void launch(void (*kernel)(P...), unsigned grid, unsigned block, cudaStream_t stream, Args... args) {
#if defined(TORCH_DNN_EMULATE_CUDA)
  emulate_launch(kernel, grid, block, args...);
#else
  kernel<<<grid, block, 0, stream>>>(args...);
#endif
}

#define POOL_GRID_LOOP(t, items) \
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < (items); t += int64_t(gridDim.x) * blockDim.x)

// ---- V-wide index loads and stores (values: load_acc/store_acc in common/cuda/vec.cuh) ----

// int64 indices: V of them as 16-byte pairs
template <int V>
__device__ __forceinline__ void load_idx(const int64_t* p, int64_t (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = *p;
  } else {
#pragma unroll
    for (int j = 0; j < V; j += 2) {
      const Vec<int64_t, 2> v = load_vec<int64_t, 2>(p + j);
      out[j] = v.v[0], out[j + 1] = v.v[1];
    }
  }
}
template <int V>
__device__ __forceinline__ void store_idx(int64_t* p, const int64_t (&in)[V]) {
  if constexpr (V == 1) {
    *p = in[0];
  } else {
#pragma unroll
    for (int j = 0; j < V; j += 2) store_vec<int64_t, 2>(p + j, Vec<int64_t, 2>{{in[j], in[j + 1]}});
  }
}

// ---- one output position (forward) ----
// xv: the (n, c) volume of the input (its first channel for V > 1); element (d, h, w) lies at
// xv[((d * H + h) * W + w) * step]. yo, io: the output (and index) slot. KH = KW = 0: any window (loops with
// run-time bounds); KH x KW > 0: a window of exactly KH x KW taps along H and W, dilation 1 there (any depth
// window), whose loads of one depth slice are all issued before any is used, so that a thread keeps KH * KW
// loads in flight instead of one.

template <typename T, int V>
struct MaxAcc {
  using A = acc_t<T>;
  A m[V];
  int64_t mi[V];
  __device__ __forceinline__ explicit MaxAcc(int64_t first) {
#pragma unroll
    for (int j = 0; j < V; ++j) m[j] = A(-INFINITY), mi[j] = first;
  }
  // As PyTorch: the first element's index when nothing beats -inf; a NaN wins (the last NaN seen).
  __device__ __forceinline__ void add(const Vec<T, V>& raw, int64_t i) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const A v = to_acc<A>(raw.v[j]);
      if (v > m[j] || v != v) m[j] = v, mi[j] = i;
    }
  }
};

template <typename T, int V>
struct SumAcc {
  using A = acc_t<T>;
  A acc[V];
  __device__ __forceinline__ SumAcc() {
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = A(0);
  }
  template <Op OP>
  __device__ __forceinline__ void add(const Vec<T, V>& raw, A p) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const A v = to_acc<A>(raw.v[j]);
      acc[j] += OP == Op::Lp ? lp_pre(v, p) : v;
    }
  }
};

template <typename T, Op OP, int V, int KH, int KW>
__device__ __forceinline__ void fwd_one(const T* xv, int64_t step, T* yo, int64_t* io, const PoolShape& s,
                                        int64_t od, int64_t oh, int64_t ow) {
  using A = acc_t<T>;
  const Axis &aD = s.ax[0], &aH = s.ax[1], &aW = s.ax[2];
  const int64_t H = aH.in, W = aW.in;
  // the window: [begin, end) with steps along each axis (max: dilation; avg and lp: 1), and avg's divisor
  Range r[3];
  int64_t step_d = 1, step_h = 1, step_w = 1, divisor = 1;
  if constexpr (OP == Op::Max) {
    r[0] = max_window(od, aD, s.adaptive), r[1] = max_window(oh, aH, s.adaptive), r[2] = max_window(ow, aW, s.adaptive);
    if (!s.adaptive) step_d = aD.d, step_h = aH.d, step_w = aW.d;
  } else {
    const AvgWindow win = avg_window3(s, od, oh, ow);
    r[0] = win.r[0], r[1] = win.r[1], r[2] = win.r[2];
    divisor = win.divisor;
  }
  MaxAcc<T, V> mx((r[0].begin * H + r[1].begin) * W + r[2].begin);
  SumAcc<T, V> sum;
  const A p = A(s.norm_type);
  for (int64_t d = r[0].begin; d < r[0].end; d += step_d) {
    const T* slice = xv + d * H * W * step;
    if constexpr (KH > 0) {
      // taps (h0 + i, w0 + j): the window before clipping; those outside the input are skipped
      // one window row's KW loads in flight at a time: all KH * KW of them took 139 registers (one block of
      // 256 threads an SM) for 16-byte max pooling, which halved the bandwidth
      const int64_t h0 = oh * aH.s - aH.p, w0 = ow * aW.s - aW.p;
#pragma unroll 1
      for (int i = 0; i < KH; ++i) {
        const int64_t h = h0 + i;
        if (h < 0 || h >= H) continue;
        Vec<T, V> raw[KW];
        bool in[KW];
#pragma unroll
        for (int j = 0; j < KW; ++j) {
          const int64_t w = w0 + j;
          in[j] = w >= 0 && w < W;
          if (in[j]) raw[j] = load_vec<T, V>(slice + (h * W + w) * step);
        }
#pragma unroll
        for (int j = 0; j < KW; ++j) {
          if (!in[j]) continue;
          if constexpr (OP == Op::Max) mx.add(raw[j], (d * H + h) * W + w0 + j);
          else sum.template add<OP>(raw[j], p);
        }
      }
    } else {
      for (int64_t h = r[1].begin; h < r[1].end; h += step_h) {
        const T* row = slice + h * W * step;
        for (int64_t w = r[2].begin; w < r[2].end; w += step_w) {
          const Vec<T, V> raw = load_vec<T, V>(row + w * step);
          if constexpr (OP == Op::Max) mx.add(raw, (d * H + h) * W + w);
          else sum.template add<OP>(raw, p);
        }
      }
    }
  }
  if constexpr (OP == Op::Max) {
    store_acc<V>(yo, mx.m);
    store_idx<V>(io, mx.mi);
  } else {
    const A inv = A(1) / A(divisor);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      sum.acc[j] *= inv;
      if constexpr (OP == Op::Lp) sum.acc[j] = lp_post(sum.acc[j], A(s.kernel_volume()), p);
    }
    store_acc<V>(yo, sum.acc);
  }
}

// channels-last: items (channel group, ow, oh, od, n)
template <typename T, Op OP, int V, int KH, int KW>
__global__ void __launch_bounds__(kThreads, 3) pool_fwd_cl(const T* __restrict__ x, T* __restrict__ y,
                                                         int64_t* __restrict__ ind, Args<4> a) {
  const PoolShape& s = a.s;
  POOL_GRID_LOOP(t, a.items) {
    int64_t q[5];
    split(a.sp, t, q);
    const int64_t c = q[0] * V, ow = q[1], oh = q[2], od = q[3], n = q[4];
    const int64_t o = (((n * s.ax[0].out + od) * s.ax[1].out + oh) * s.ax[2].out + ow) * s.C + c;
    fwd_one<T, OP, V, KH, KW>(x + n * s.in_volume() * s.C + c, s.C, y + o, ind + (OP == Op::Max ? o : 0), s, od,
                              oh, ow);
  }
}

// NCDHW: items (ow, block of kRows output rows, od, n * C + c)
template <typename T, Op OP, int KH, int KW>
__global__ void __launch_bounds__(kThreads) pool_fwd_nc(const T* __restrict__ x, T* __restrict__ y,
                                                         int64_t* __restrict__ ind, Args<3> a) {
  const PoolShape& s = a.s;
  const int64_t OH = s.ax[1].out, OW = s.ax[2].out;
  POOL_GRID_LOOP(t, a.items) {
    int64_t q[4];
    split(a.sp, t, q);
    const int64_t ow = q[0], oh0 = q[1] * kRows, od = q[2], nc = q[3];
    const T* xv = x + nc * s.in_volume();
    const int64_t o0 = (nc * s.ax[0].out + od) * OH * OW + ow;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t oh = oh0 + r;
      if (oh < OH) {
        const int64_t o = o0 + oh * OW;
        fwd_one<T, OP, 1, KH, KW>(xv, 1, y + o, ind + (OP == Op::Max ? o : 0), s, od, oh, ow);
      }
    }
  }
}

// ---- one input position (backward, gather) ----
// gv, iv, yv: the (n, c) volume of grad_output, indices (max) and the forward's output (lp); element
// (od, oh, ow) at [((od * OH + oh) * OW + ow) * step]. xi: the input element (lp); dxo: the grad_input slot.
// CH = CW = 0: covering ranges of any length; CH x CW > 0: at most CH (CW) outputs cover a position along H
// (W), so the reads of one depth slice are unrolled and all in flight together.

template <typename T, Op OP, int V, int CH, int CW, int K>
__device__ __forceinline__ void bwd_item(const T* gv, const int64_t* iv, const T* yv, int64_t step, const T* xi,
                                         T* dxo, const Args<K>& a, int64_t d, int64_t h, int64_t w) {
  using A = acc_t<T>;
  const PoolShape& s = a.s;
  const Axis &aD = s.ax[0], &aH = s.ax[1], &aW = s.ax[2];
  const Range cd = covering(d, aD, s.adaptive, a.by_stride[0], a.small),
              ch = covering(h, aH, s.adaptive, a.by_stride[1], a.small),
              cw = covering(w, aW, s.adaptive, a.by_stride[2], a.small);
  const int64_t i = (d * aH.in + h) * aW.in + w;
  const A p = A(s.norm_type), K_ = A(s.kernel_volume());
  A acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = A(0);
  // one covering output o (flat offset), with avg's divisor (0 when the window does not hold the position)
  auto add = [&](int64_t o, const Vec<T, V>& g, const int64_t (&idx)[V], int64_t div) {
    if constexpr (OP == Op::Max) {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (idx[j] == i) acc[j] += to_acc<A>(g.v[j]);
    } else {
      if (div == 0) return;
      const A inv = A(1) / A(div);
      if constexpr (OP == Op::Lp) {
        const Vec<T, V> y = load_vec<T, V>(yv + o);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += to_acc<A>(g.v[j]) * lp_out_grad_scale(to_acc<A>(y.v[j]), K_, p) * inv;
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += to_acc<A>(g.v[j]) * inv;
      }
    }
  };
  // avg's window along one axis at output o, and whether it holds position x: its length for the divisor
  auto axis_len = [&](int64_t o, const Axis& ax, int64_t x, int64_t& clipped) -> int64_t {
    int64_t padded;
    const Range r = avg_window(o, ax, s.adaptive, padded);
    clipped = r.end - r.begin;
    return x >= r.begin && x < r.end ? padded : 0;
  };
  auto divisor = [&](int64_t pd, int64_t cld, int64_t ph, int64_t clh, int64_t pw, int64_t clw) -> int64_t {
    if (pd == 0 || ph == 0 || pw == 0) return 0;
    if (s.adaptive) return pd * ph * pw;
    if (s.divisor_override) return s.divisor_override;
    return s.count_include_pad ? pd * ph * pw : cld * clh * clw;
  };
  for (int64_t od = cd.begin; od < cd.end; ++od) {
    int64_t cld = 1, pd = 1;
    if constexpr (OP != Op::Max) pd = axis_len(od, aD, d, cld);
    if constexpr (CH > 0) {
      Vec<T, V> g[CH * CW];
      int64_t idx[CH * CW][V];
      int64_t div[CH * CW];
      int64_t o[CH * CW];
#pragma unroll
      for (int u = 0; u < CH; ++u)
#pragma unroll
        for (int v = 0; v < CW; ++v) {
          const int t = u * CW + v;
          const int64_t oh = ch.begin + u, ow = cw.begin + v;
          const bool ok = oh < ch.end && ow < cw.end;
          o[t] = ((od * aH.out + oh) * aW.out + ow) * step;
          div[t] = 0;
          if (ok) {
            g[t] = load_vec<T, V>(gv + o[t]);
            if constexpr (OP == Op::Max) {
              load_idx<V>(iv + o[t], idx[t]);
            } else {
              int64_t clh, clw;
              const int64_t ph = axis_len(oh, aH, h, clh), pw = axis_len(ow, aW, w, clw);
              div[t] = divisor(pd, cld, ph, clh, pw, clw);
            }
          } else if constexpr (OP == Op::Max) {
#pragma unroll
            for (int j = 0; j < V; ++j) idx[t][j] = -1;  // matches no position
          }
        }
#pragma unroll
      for (int t = 0; t < CH * CW; ++t)
        if (OP == Op::Max || div[t] != 0) add(o[t], g[t], idx[t], div[t]);
    } else {
      for (int64_t oh = ch.begin; oh < ch.end; ++oh) {
        int64_t clh = 1, ph = 1;
        if constexpr (OP != Op::Max) {
          ph = axis_len(oh, aH, h, clh);
          if (ph == 0) continue;
        }
        for (int64_t ow = cw.begin; ow < cw.end; ++ow) {
          const int64_t o = ((od * aH.out + oh) * aW.out + ow) * step;
          int64_t idx[V];
          int64_t div = 0;
          if constexpr (OP == Op::Max) {
            load_idx<V>(iv + o, idx);
            bool any = false;
#pragma unroll
            for (int j = 0; j < V; ++j) any = any || idx[j] == i;
            if (!any) continue;  // no grad_output read for windows whose maximum lies elsewhere
          } else {
            int64_t clw;
            const int64_t pw = axis_len(ow, aW, w, clw);
            div = divisor(pd, cld, ph, clh, pw, clw);
            if (div == 0) continue;
          }
          add(o, load_vec<T, V>(gv + o), idx, div);
        }
      }
    }
  }
  if constexpr (OP == Op::Lp) {
    A xv[V];
    load_acc<V>(xi, xv);
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] *= lp_in_grad_scale(xv[j], p);
  }
  store_acc<V>(dxo, acc);
}

// channels-last: items (channel group, w, h, d, n)
template <typename T, Op OP, int V, int CH, int CW>
__global__ void __launch_bounds__(kThreads) pool_bwd_cl(const T* __restrict__ g, const int64_t* __restrict__ ind,
                                                         const T* __restrict__ x, const T* __restrict__ y,
                                                         T* __restrict__ dx, Args<4> a) {
  const PoolShape& s = a.s;
  POOL_GRID_LOOP(t, a.items) {
    int64_t q[5];
    split(a.sp, t, q);
    const int64_t c = q[0] * V, w = q[1], h = q[2], d = q[3], n = q[4];
    const int64_t ov = n * s.out_volume() * s.C + c;
    const int64_t i = (((n * s.ax[0].in + d) * s.ax[1].in + h) * s.ax[2].in + w) * s.C + c;
    bwd_item<T, OP, V, CH, CW>(g + ov, OP == Op::Max ? ind + ov : nullptr, OP == Op::Lp ? y + ov : nullptr, s.C,
                               OP == Op::Lp ? x + i : nullptr, dx + i, a, d, h, w);
  }
}

// NCDHW: items (w, block of kRows input rows, d, n * C + c)
template <typename T, Op OP, int CH, int CW>
__global__ void __launch_bounds__(kThreads) pool_bwd_nc(const T* __restrict__ g, const int64_t* __restrict__ ind,
                                                         const T* __restrict__ x, const T* __restrict__ y,
                                                         T* __restrict__ dx, Args<3> a) {
  const PoolShape& s = a.s;
  const int64_t H = s.ax[1].in, W = s.ax[2].in;
  POOL_GRID_LOOP(t, a.items) {
    int64_t q[4];
    split(a.sp, t, q);
    const int64_t w = q[0], h0 = q[1] * kRows, d = q[2], nc = q[3];
    const int64_t ov = nc * s.out_volume();
    const int64_t i0 = (nc * s.ax[0].in + d) * H * W + w;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t h = h0 + r;
      if (h < H) {
        const int64_t i = i0 + h * W;
        bwd_item<T, OP, 1, CH, CW>(g + ov, OP == Op::Max ? ind + ov : nullptr, OP == Op::Lp ? y + ov : nullptr, 1,
                                   OP == Op::Lp ? x + i : nullptr, dx + i, a, d, h, w);
      }
    }
  }
}

// ---- global average (adaptive, one output per volume) ----

// channels-last: x is [N, P, C] with P = D * H * W. A block sums `groups` channel groups of V channels over
// all P rows: (256 / groups) row lanes each take every lanes-th row, then lane sums are added in lane order.
// U = 4 rows in flight a lane, held to 64 registers: 4 blocks an SM instead of 3 (at 74), worth more than its 20
// bytes of spills (loop invariants; 8 rows took 128 registers and measured slower; docs/pool.md).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads, 4) global_avg_cl(const T* x, T* y, int64_t N, int64_t P, int64_t C,
                                                          int groups) {
  using A = acc_t<T>;
  constexpr int U = 4;
  __shared__ A part[kThreads][V];
  const int lanes = kThreads / groups;
  const int gi = threadIdx.x % groups, lane = threadIdx.x / groups;
  const int64_t G = C / V, chunks = (G + groups - 1) / groups;
  const A inv = A(1) / A(P);
  const bool small = N * chunks < (int64_t(1) << 31);  // 32-bit block arithmetic (a 64-bit division costs registers)
  for (int64_t b = blockIdx.x; b < N * chunks; b += gridDim.x) {
    int64_t n, cg;
    if (small) {
      const uint32_t q = uint32_t(b) / uint32_t(chunks);
      n = q, cg = int64_t(uint32_t(b) - q * uint32_t(chunks)) * groups + gi;
    } else {
      n = b / chunks, cg = (b % chunks) * groups + gi;
    }
    A acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = A(0);
    if (cg < G && lane < lanes) {
      const T* xp = x + n * P * C + cg * V;
      // U rows' loads in flight before their adds, kept as raw vectors (4 registers each; converted on load they
      // took more registers and measured slower). U = 8 (a lane's 6-7 rows in one round at 7x7) takes 128
      // registers, 2 blocks an SM, and measured slower (docs/pool.md).
      for (int64_t r0 = lane; r0 < P; r0 += U * lanes) {
        Vec<T, V> v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t r = r0 + int64_t(u) * lanes;
          if (r < P) v[u] = load_vec<T, V>(xp + r * C);
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (r0 + int64_t(u) * lanes < P)
#pragma unroll
            for (int j = 0; j < V; ++j) acc[j] += to_acc<A>(v[u].v[j]);
      }
    }
    __syncthreads();  // part may still be read for the previous b
#pragma unroll
    for (int j = 0; j < V; ++j) part[threadIdx.x][j] = acc[j];
    __syncthreads();
    if (lane == 0 && cg < G) {
      for (int l = 1; l < lanes; ++l)
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += part[l * groups + gi][j];
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] *= inv;
      store_acc<V>(y + n * C + cg * V, acc);
    }
  }
}

// NCDHW: one warp (TPP = 32) or one block (TPP = 256) per (n, c) volume of P contiguous elements, V-wide
// loads when P and the pointer allow.
template <typename T, int V, int TPP>
__global__ void __launch_bounds__(kThreads) global_avg_nc(const T* x, T* y, int64_t planes, int64_t P) {
  using A = acc_t<T>;
  __shared__ A smem[32];
  constexpr int per_block = kThreads / TPP;
  const int lane = threadIdx.x % TPP;
  const A inv = A(1) / A(P);
  for (int64_t base = int64_t(blockIdx.x) * per_block; base < planes; base += int64_t(gridDim.x) * per_block) {
    const int64_t plane = base + threadIdx.x / TPP;
    A acc = A(0);
    if (plane < planes) {
      const T* xp = x + plane * P;
      for (int64_t i = int64_t(lane) * V; i < P; i += int64_t(TPP) * V) {
        A v[V];
        load_acc<V>(xp + i, v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc += v[j];
      }
    }
    if constexpr (TPP == 32) {
      acc = warp_reduce(acc, SumOp{});
    } else {
      acc = block_reduce(acc, SumOp{}, smem);
    }
    if (lane == 0 && plane < planes) y[plane] = from_acc<T>(acc * inv);
  }
}

// ---- dispatch ----

template <int N>
using int_c = std::integral_constant<int, N>;

// Calls f(T{}, bool_constant<CL>, int_c<V>): 16-byte vectors along C in channels-last when C and every pointer
// allow, one channel a thread otherwise.
template <class F>
void dispatch_layout(DType t, const PoolShape& s, bool aligned, F&& f) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    if (!s.channels_last) f(tag, std::false_type{}, int_c<1>{});
    else if (s.C % V == 0 && aligned) f(tag, std::true_type{}, int_c<V>{});
    else f(tag, std::true_type{}, int_c<1>{});
  });
}

// Forward: calls f(int_c<KH>, int_c<KW>), the unrolled taps for windows of exactly 3x3, 2x2 (2-D, 3-D) or 1x3
// (1-D) along H and W with dilation 1 there (max and avg), loops (0, 0) for any other window.
template <Op OP, bool SPECIALISE, class F>
void dispatch_taps(const PoolShape& s, F&& f) {
  if constexpr (OP == Op::Lp || !SPECIALISE) {
    f(int_c<0>{}, int_c<0>{});
  } else {
    const Axis &h = s.ax[1], &w = s.ax[2];
    const bool plain = !s.adaptive && h.d == 1 && w.d == 1;
    if (plain && h.k == 3 && w.k == 3) f(int_c<3>{}, int_c<3>{});
    else if (plain && h.k == 2 && w.k == 2) f(int_c<2>{}, int_c<2>{});
    else if (plain && h.k == 1 && w.k == 3) f(int_c<1>{}, int_c<3>{});
    else f(int_c<0>{}, int_c<0>{});
  }
}

// Backward: calls f(int_c<2>, int_c<2>) when at most 2 outputs cover a position along H and along W (windows
// with dilation 1 there and kernel <= 2 * stride: 3x3/2, 2x2/2, any 1-D window of kernel <= 2 * stride), the
// loops (0, 0) otherwise.
template <Op OP, bool SPECIALISE, class F>
void dispatch_cover(const PoolShape& s, F&& f) {
  if constexpr (OP == Op::Lp || !SPECIALISE) {
    f(int_c<0>{}, int_c<0>{});
  } else {
    const Axis &h = s.ax[1], &w = s.ax[2];
    const bool plain = !s.adaptive && h.d == 1 && w.d == 1 && h.k <= 2 * h.s && w.k <= 2 * w.s;
    if (plain) f(int_c<2>{}, int_c<2>{});
    else f(int_c<0>{}, int_c<0>{});
  }
}

// The stride divisors and the item splitters of the two layouts over positions [D, H, W] (output positions
// forward, input positions backward).
template <int K>
void fill_strides(Args<K>& a, const PoolShape& s) {
  a.small = true;
  for (int i = 0; i < 3; ++i) {
    a.small = a.small && s.ax[i].in + s.ax[i].p < (int64_t(1) << 31) && s.ax[i].s < (int64_t(1) << 31);
    a.by_stride[i] = FastDivmod32(uint32_t(s.ax[i].s));
  }
}
inline Args<4> cl_args(const PoolShape& s, int V, const int64_t (&pos)[3]) {
  Args<4> a;
  a.s = s;
  const int64_t div[4] = {s.C / V, pos[2], pos[1], pos[0]};
  a.items = s.N * pos[0] * pos[1] * pos[2] * (s.C / V);
  a.sp = make_splitter(div, a.items);
  fill_strides(a, s);
  return a;
}
inline Args<3> nc_args(const PoolShape& s, const int64_t (&pos)[3]) {
  Args<3> a;
  a.s = s;
  const int64_t blocks = (pos[1] + kRows - 1) / kRows;
  const int64_t div[3] = {pos[2], blocks, pos[0]};
  a.items = s.N * s.C * pos[0] * blocks * pos[2];
  a.sp = make_splitter(div, a.items);
  fill_strides(a, s);
  return a;
}

}  // namespace pool
}  // namespace torch_dnn
