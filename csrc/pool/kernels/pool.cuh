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

// What every kernel takes: the shape, the item count and its splitter, and the constants of the op.
template <int K>
struct Args {
  PoolShape s;
  Splitter<K> sp;
  int64_t items;
};

#define POOL_GRID_LOOP(t, items) \
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < (items); t += int64_t(gridDim.x) * blockDim.x)

// ---- V-wide loads and stores (V = 1: one element) ----

template <int V, typename T, typename A>
__device__ __forceinline__ void load_v(const T* p, A (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = to_acc<A>(*p);
  } else {
    const Vec<T, V> v = load_vec<T, V>(p);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_acc<A>(v.v[j]);
  }
}
template <int V, typename T, typename A>
__device__ __forceinline__ void store_v(T* p, const A (&in)[V]) {
  if constexpr (V == 1) {
    *p = from_acc<T>(in[0]);
  } else {
    Vec<T, V> v;
#pragma unroll
    for (int j = 0; j < V; ++j) v.v[j] = from_acc<T>(in[j]);
    store_vec<T, V>(p, v);
  }
}
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
// xv[((d * H + h) * W + w) * step]. yo, io: the output (and index) slot.

template <typename T, int V>
__device__ __forceinline__ void max_one(const T* xv, int64_t step, T* yo, int64_t* io, const PoolShape& s,
                                        int64_t od, int64_t oh, int64_t ow) {
  using A = acc_t<T>;
  const Axis &aD = s.ax[0], &aH = s.ax[1], &aW = s.ax[2];
  const Range rd = max_window(od, aD, s.adaptive), rh = max_window(oh, aH, s.adaptive),
              rw = max_window(ow, aW, s.adaptive);
  const int64_t dd = s.adaptive ? 1 : aD.d, dh = s.adaptive ? 1 : aH.d, dw = s.adaptive ? 1 : aW.d;
  // As PyTorch: the first element's index when nothing beats -inf; a NaN wins (the last NaN seen).
  A m[V];
  int64_t mi[V];
  const int64_t first = (rd.begin * aH.in + rh.begin) * aW.in + rw.begin;
#pragma unroll
  for (int j = 0; j < V; ++j) m[j] = A(-INFINITY), mi[j] = first;
  for (int64_t d = rd.begin; d < rd.end; d += dd)
    for (int64_t h = rh.begin; h < rh.end; h += dh) {
      const int64_t row = (d * aH.in + h) * aW.in;
      for (int64_t w = rw.begin; w < rw.end; w += dw) {
        A v[V];
        load_v<V>(xv + (row + w) * step, v);
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (v[j] > m[j] || v[j] != v[j]) m[j] = v[j], mi[j] = row + w;
      }
    }
  store_v<V>(yo, m);
  store_idx<V>(io, mi);
}

template <typename T, Op OP, int V>
__device__ __forceinline__ void avg_one(const T* xv, int64_t step, T* yo, const PoolShape& s, int64_t od,
                                        int64_t oh, int64_t ow) {
  using A = acc_t<T>;
  const int64_t H = s.ax[1].in, W = s.ax[2].in;
  const AvgWindow win = avg_window3(s, od, oh, ow);
  const A p = A(s.norm_type);
  A acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = A(0);
  for (int64_t d = win.r[0].begin; d < win.r[0].end; ++d)
    for (int64_t h = win.r[1].begin; h < win.r[1].end; ++h) {
      const T* row = xv + (d * H + h) * W * step;
      for (int64_t w = win.r[2].begin; w < win.r[2].end; ++w) {
        A v[V];
        load_v<V>(row + w * step, v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += OP == Op::Lp ? lp_pre(v[j], p) : v[j];
      }
    }
  const A inv = A(1) / A(win.divisor);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    acc[j] *= inv;
    if constexpr (OP == Op::Lp) acc[j] = lp_post(acc[j], A(s.kernel_volume()), p);
  }
  store_v<V>(yo, acc);
}

template <typename T, Op OP, int V>
__device__ __forceinline__ void fwd_one(const T* xv, int64_t step, T* yo, int64_t* io, const PoolShape& s,
                                        int64_t od, int64_t oh, int64_t ow) {
  if constexpr (OP == Op::Max) max_one<T, V>(xv, step, yo, io, s, od, oh, ow);
  else avg_one<T, OP, V>(xv, step, yo, s, od, oh, ow);
}

// channels-last: items (channel group, ow, oh, od, n)
template <typename T, Op OP, int V>
__global__ void __launch_bounds__(kThreads) pool_fwd_cl(const T* x, T* y, int64_t* ind, Args<4> a) {
  const PoolShape& s = a.s;
  POOL_GRID_LOOP(t, a.items) {
    int64_t q[5];
    split(a.sp, t, q);
    const int64_t c = q[0] * V, ow = q[1], oh = q[2], od = q[3], n = q[4];
    const int64_t o = (((n * s.ax[0].out + od) * s.ax[1].out + oh) * s.ax[2].out + ow) * s.C + c;
    fwd_one<T, OP, V>(x + n * s.in_volume() * s.C + c, s.C, y + o, ind + (OP == Op::Max ? o : 0), s, od, oh, ow);
  }
}

// NCDHW: items (ow, block of kRows output rows, od, n * C + c)
template <typename T, Op OP>
__global__ void __launch_bounds__(kThreads) pool_fwd_nc(const T* x, T* y, int64_t* ind, Args<3> a) {
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
        fwd_one<T, OP, 1>(xv, 1, y + o, ind + (OP == Op::Max ? o : 0), s, od, oh, ow);
      }
    }
  }
}

// ---- one input position (backward, gather) ----
// gv, iv: the (n, c) volume of grad_output (indices; for lp the output y); element (od, oh, ow) at
// [((od * OH + oh) * OW + ow) * step]. xi: the input element (lp only); dxo: the grad_input slot.

template <typename T, int V>
__device__ __forceinline__ void max_bwd_one(const T* gv, const int64_t* iv, int64_t step, T* dxo,
                                            const PoolShape& s, int64_t d, int64_t h, int64_t w) {
  using A = acc_t<T>;
  const Axis &aD = s.ax[0], &aH = s.ax[1], &aW = s.ax[2];
  const Range cd = covering_outputs(d, aD, s.adaptive), ch = covering_outputs(h, aH, s.adaptive),
              cw = covering_outputs(w, aW, s.adaptive);
  const int64_t i = (d * aH.in + h) * aW.in + w;
  A acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = A(0);
  for (int64_t od = cd.begin; od < cd.end; ++od)
    for (int64_t oh = ch.begin; oh < ch.end; ++oh)
      for (int64_t ow = cw.begin; ow < cw.end; ++ow) {
        const int64_t o = ((od * aH.out + oh) * aW.out + ow) * step;
        int64_t idx[V];
        load_idx<V>(iv + o, idx);
        if constexpr (V == 1) {
          if (idx[0] == i) acc[0] += to_acc<A>(gv[o]);
        } else {
          A g[V];
          load_v<V>(gv + o, g);
#pragma unroll
          for (int j = 0; j < V; ++j)
            if (idx[j] == i) acc[j] += g[j];
        }
      }
  store_v<V>(dxo, acc);
}

template <typename T, Op OP, int V>
__device__ __forceinline__ void avg_bwd_one(const T* gv, const T* yv, int64_t step, const T* xi, T* dxo,
                                            const PoolShape& s, int64_t d, int64_t h, int64_t w) {
  using A = acc_t<T>;
  const Axis &aD = s.ax[0], &aH = s.ax[1], &aW = s.ax[2];
  const Range cd = covering_outputs(d, aD, s.adaptive), ch = covering_outputs(h, aH, s.adaptive),
              cw = covering_outputs(w, aW, s.adaptive);
  const A p = A(s.norm_type), K = A(s.kernel_volume());
  A acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = A(0);
  for (int64_t od = cd.begin; od < cd.end; ++od) {
    int64_t ld;
    const Range rd = avg_window(od, aD, s.adaptive, ld);
    if (d < rd.begin || d >= rd.end) continue;
    for (int64_t oh = ch.begin; oh < ch.end; ++oh) {
      int64_t lh;
      const Range rh = avg_window(oh, aH, s.adaptive, lh);
      if (h < rh.begin || h >= rh.end) continue;
      for (int64_t ow = cw.begin; ow < cw.end; ++ow) {
        int64_t lw;
        const Range rw = avg_window(ow, aW, s.adaptive, lw);
        if (w < rw.begin || w >= rw.end) continue;
        int64_t div;
        if (s.adaptive) div = ld * lh * lw;
        else if (s.divisor_override) div = s.divisor_override;
        else if (s.count_include_pad) div = ld * lh * lw;
        else div = (rd.end - rd.begin) * (rh.end - rh.begin) * (rw.end - rw.begin);
        const A inv = A(1) / A(div);
        const int64_t o = ((od * aH.out + oh) * aW.out + ow) * step;
        A g[V];
        load_v<V>(gv + o, g);
        if constexpr (OP == Op::Lp) {
          A y[V];
          load_v<V>(yv + o, y);
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] += g[j] * lp_out_grad_scale(y[j], K, p) * inv;
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] += g[j] * inv;
        }
      }
    }
  }
  if constexpr (OP == Op::Lp) {
    A xv[V];
    load_v<V>(xi, xv);
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] *= lp_in_grad_scale(xv[j], p);
  }
  store_v<V>(dxo, acc);
}

template <typename T, Op OP, int V>
__device__ __forceinline__ void bwd_one(const T* gv, const int64_t* iv, const T* yv, int64_t step, const T* xi,
                                        T* dxo, const PoolShape& s, int64_t d, int64_t h, int64_t w) {
  if constexpr (OP == Op::Max) max_bwd_one<T, V>(gv, iv, step, dxo, s, d, h, w);
  else avg_bwd_one<T, OP, V>(gv, yv, step, xi, dxo, s, d, h, w);
}

// channels-last: items (channel group, w, h, d, n)
template <typename T, Op OP, int V>
__global__ void __launch_bounds__(kThreads) pool_bwd_cl(const T* g, const int64_t* ind, const T* x, const T* y,
                                                         T* dx, Args<4> a) {
  const PoolShape& s = a.s;
  POOL_GRID_LOOP(t, a.items) {
    int64_t q[5];
    split(a.sp, t, q);
    const int64_t c = q[0] * V, w = q[1], h = q[2], d = q[3], n = q[4];
    const int64_t ov = n * s.out_volume() * s.C + c;
    const int64_t i = (((n * s.ax[0].in + d) * s.ax[1].in + h) * s.ax[2].in + w) * s.C + c;
    bwd_one<T, OP, V>(g + ov, OP == Op::Max ? ind + ov : nullptr, OP == Op::Lp ? y + ov : nullptr, s.C,
                      OP == Op::Lp ? x + i : nullptr, dx + i, s, d, h, w);
  }
}

// NCDHW: items (w, block of kRows input rows, d, n * C + c)
template <typename T, Op OP>
__global__ void __launch_bounds__(kThreads) pool_bwd_nc(const T* g, const int64_t* ind, const T* x, const T* y,
                                                         T* dx, Args<3> a) {
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
        bwd_one<T, OP, 1>(g + ov, OP == Op::Max ? ind + ov : nullptr, OP == Op::Lp ? y + ov : nullptr, 1,
                          OP == Op::Lp ? x + i : nullptr, dx + i, s, d, h, w);
      }
    }
  }
}

// ---- global average (adaptive, one output per volume) ----

// channels-last: x is [N, P, C] with P = D * H * W. A block sums `groups` channel groups of V channels over
// all P rows: (256 / groups) row lanes each take every lanes-th row, then lane sums are added in lane order.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) global_avg_cl(const T* x, T* y, int64_t N, int64_t P, int64_t C,
                                                          int groups) {
  using A = acc_t<T>;
  __shared__ A part[kThreads][V];
  const int lanes = kThreads / groups;
  const int gi = threadIdx.x % groups, lane = threadIdx.x / groups;
  const int64_t G = C / V, chunks = (G + groups - 1) / groups;
  const A inv = A(1) / A(P);
  for (int64_t b = blockIdx.x; b < N * chunks; b += gridDim.x) {
    const int64_t n = b / chunks, cg = (b % chunks) * groups + gi;
    A acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = A(0);
    if (cg < G && lane < lanes) {
      const T* xp = x + n * P * C + cg * V;
      for (int64_t r = lane; r < P; r += lanes) {
        A v[V];
        load_v<V>(xp + r * C, v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += v[j];
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
      store_v<V>(y + n * C + cg * V, acc);
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
        load_v<V>(xp + i, v);
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

// Calls f(T{}, bool_constant<CL>, int_constant<V>): 16-byte vectors along C in channels-last when C and every
// pointer allow, one channel a thread otherwise.
template <class F>
void dispatch_layout(DType t, const PoolShape& s, bool aligned, F&& f) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    if (!s.channels_last) f(tag, std::false_type{}, std::integral_constant<int, 1>{});
    else if (s.C % V == 0 && aligned) f(tag, std::true_type{}, std::integral_constant<int, V>{});
    else f(tag, std::true_type{}, std::integral_constant<int, 1>{});
  });
}

// Item counts and splitters of the two layouts over positions [D, H, W] (output positions forward, input
// positions backward).
inline Args<4> cl_args(const PoolShape& s, int V, const int64_t (&pos)[3]) {
  Args<4> a;
  a.s = s;
  const int64_t div[4] = {s.C / V, pos[2], pos[1], pos[0]};
  a.items = s.N * pos[0] * pos[1] * pos[2] * (s.C / V);
  a.sp = make_splitter(div, a.items);
  return a;
}
inline Args<3> nc_args(const PoolShape& s, const int64_t (&pos)[3]) {
  Args<3> a;
  a.s = s;
  const int64_t blocks = (pos[1] + kRows - 1) / kRows;
  const int64_t div[3] = {pos[2], blocks, pos[0]};
  a.items = s.N * s.C * pos[0] * blocks * pos[2];
  a.sp = make_splitter(div, a.items);
  return a;
}

}  // namespace pool
}  // namespace torch_dnn
