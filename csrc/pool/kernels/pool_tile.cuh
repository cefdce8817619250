// NCDHW plane-tile kernels for window pooling whose depth window is trivial (2-D and 1-D pooling, 3-D with
// a 1x1x1-deep window): a block takes a band of rows of one (n, c, d) plane, copies the rows it reads from
// global memory into shared memory ONCE with coalesced (16-byte when rows allow) loads, then computes from
// shared memory. For NCDHW they run instead of the per-element path (pool.cuh: one output or input per thread,
// strided loads, windows and divisors recomputed per covering output):
//   forward : band of output rows; the input rows it covers are staged (halo rows are read twice, from L2);
//             every window tap is a shared-memory read, outputs are stored coalesced.
//   backward: band of input rows; the grad_output rows covering it are staged as float, avg's already
//             divided by their window's divisor (once per output, not once per covering input); max's
//             indices staged as int32 relative to the plane. Each input gathers its covering outputs
//             (fixed order: deterministic, no atomics, no zero fill).
// Sizes inside a plane are 32-bit (the host checks H * W, OH * OW and their paddings < 2^31); plane offsets are
// 64-bit. Row/column walking inside a band is incremental (no division per element).
#pragma once
#include <cstdlib>
#include <cstring>

#include "common/cuda/bulk_copy.cuh"
#include "common/cuda/cp_async.cuh"
#include "common/env.h"
#include "pool/kernels/pool.cuh"

namespace torch_dnn {
namespace pool {

TD_HD int imin(int a, int b) { return a < b ? a : b; }
TD_HD int imax(int a, int b) { return a > b ? a : b; }

// Band t's plane: bands == 1 (a band a plane, the common case) needs no 64-bit division, which costs ~60
// instructions a warp in these issue-bound kernels.
TD_HD int64_t band_plane(int64_t t, int bands) { return bands == 1 ? t : t / bands; }

// avg pooling's divisor (no divisor_override) for the kh x kw window at (hs, ws): its size clamped to the padded
// input (count_include_pad) or to the input itself, as PyTorch.
TD_HD int avg_window_size(int hs, int ws, int kh, int kw, int H, int W, int ph, int pw, bool cip) {
  const int he_p = imin(hs + kh, H + ph), we_p = imin(ws + kw, W + pw);
  return cip ? (he_p - hs) * (we_p - ws) : (imin(he_p, H) - imax(hs, 0)) * (imin(we_p, W) - imax(ws, 0));
}

// Dynamic shared memory of the running block (the emulation hands out a host buffer instead).
#if defined(TORCH_DNN_EMULATE_CUDA)
inline unsigned char* tile_smem() { return emu_dyn_smem(); }
#else
__device__ __forceinline__ unsigned char* tile_smem() {
  extern __shared__ __align__(16) unsigned char pool_tile_smem[];
  return pool_tile_smem;
}
#endif

template <typename... P, typename... Args>
void launch_smem(void (*kernel)(P...), unsigned grid, unsigned block, size_t smem, cudaStream_t stream,
                 Args... args) {
#if defined(TORCH_DNN_EMULATE_CUDA)
  emulate_launch_smem(kernel, grid, block, smem, args...);
#else
  kernel<<<grid, block, smem, stream>>>(args...);
#endif
}

// launch_smem for kernels that may take more than the default 48 KB: the limit is raised once to max_smem.
template <auto Kernel, typename... Args>
void launch_smem_over48k(unsigned grid, unsigned block, size_t smem, size_t max_smem, cudaStream_t stream,
                         Args... args) {
#if defined(TORCH_DNN_EMULATE_CUDA)
  (void)max_smem;
  emulate_launch_smem(Kernel, grid, block, smem, args...);
#else
  raise_smem_limit_once<Kernel>(int(max_smem));
  Kernel<<<grid, block, smem, stream>>>(args...);
#endif
}

struct TileArgs {
  int64_t planes;  // N * C * D
  int64_t tiles;   // planes * bands
  int D, H, W, OH, OW;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int rows;   // rows per band: output rows (forward), input rows (backward)
  int bands;  // bands per plane
  int step_r, step_c;  // kThreads = step_r * cols + step_c: the walk of one thread over a band's elements
  bool cip;
  int divisor_override;
  FastDivmod32 by_sh, by_sw;
};

// Copies n elements from global src to shared dst (both 16-byte aligned and n % V == 0 when V > 1), U loads
// in flight per thread before their stores.
template <typename T, int V>
__device__ __forceinline__ void stage_rows(T* dst, const T* src, int n) {
  constexpr int U = V > 1 ? 4 : 8;
  const int nv = n / V;
  for (int i0 = threadIdx.x; i0 < nv; i0 += U * kThreads) {
    Vec<T, V> r[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * kThreads < nv) r[u] = load_vec<T, V>(src + int64_t(i0 + u * kThreads) * V);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * kThreads < nv) store_vec<T, V>(dst + (i0 + u * kThreads) * V, r[u]);
  }
}

// Reads the n elements src[0, n) of one contiguous run (src need only be element-aligned) as the 16-byte vectors
// covering it, U in flight a thread, and hands each element to put(row, col, value), (row, col) its place in
// rows of `width` elements (by_width divides by width). The vectors' elements outside the run are read but not
// handed on: they share a 16-byte granule with the run's first or last element, so the reads stay inside the
// allocation.
template <typename T, int V, typename Put>
__device__ __forceinline__ void stage_run(const T* src, int n, int width, const FastDivmod32& by_width, Put put) {
  constexpr int U = 4;
  const int lead = int((reinterpret_cast<uintptr_t>(src) & 15) / sizeof(T));
  const T* base = src - lead;
  const int nv = (lead + n + V - 1) / V;
  for (int i0 = threadIdx.x; i0 < nv; i0 += U * kThreads) {
    Vec<T, V> r[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * kThreads < nv) r[u] = load_vec<T, V>(base + (i0 + u * kThreads) * V);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = (i0 + u * kThreads) * V - lead;  // run index of the vector's first element
      if (k >= n) continue;
      int row, col;
      if (k < 0) {  // the first vector: elements before the run, then (0, 0) at the wrap below
        row = -1, col = k + width;
      } else {
        uint32_t q, c;
        by_width.divmod(uint32_t(k), q, c);
        row = int(q), col = int(c);
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (k + j >= 0 && k + j < n) put(row, col, r[u].v[j]);
        if (++col == width) col = 0, ++row;
      }
    }
  }
}

// ---- forward ----
// KH x KW > 0: a window of exactly that many taps (dilation 1); 0: run-time window (any dilation).
template <typename T, Op OP, int V, int KH, int KW>
__global__ void __launch_bounds__(kThreads) pool_fwd_tile(const T* __restrict__ x, T* __restrict__ y,
                                                           int64_t* __restrict__ ind, TileArgs a) {
  using A = acc_t<T>;
  T* tile = reinterpret_cast<T*>(tile_smem());
  const int H = a.H, W = a.W, OW = a.OW;
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int64_t plane = band_plane(t, a.bands);
    const int oh0 = int(t - plane * a.bands) * a.rows;
    const int oh1 = imin(oh0 + a.rows, a.OH);
    const int h_lo = imax(oh0 * a.sh - a.ph, 0);
    const int h_hi = imin((oh1 - 1) * a.sh - a.ph + (a.kh - 1) * a.dh + 1, H);
    __syncthreads();  // the previous band's readers are done with the tile
    if (h_hi > h_lo) stage_rows<T, V>(tile, x + (plane * H + h_lo) * W, (h_hi - h_lo) * W);
    __syncthreads();
    const int64_t obase = plane * a.OH * OW;
    const int64_t ibase = (a.D == 1 ? int64_t(0) : plane % a.D) * H * W;  // indices are flat in the (n, c) volume
    int r = threadIdx.x / OW, c = threadIdx.x % OW;
    for (; r < oh1 - oh0; r += a.step_r) {
      const int oh = oh0 + r, ow = c;
      const int hs = oh * a.sh - a.ph, ws = ow * a.sw - a.pw;
      const int64_t o = obase + int64_t(oh) * OW + ow;
      if constexpr (OP == Op::Max) {
        A m = A(-INFINITY);
        int hb = hs, wb = ws;  // the first position inside the input: the index of a window of only -inf
        if (hb < 0) hb += ((-hb + a.dh - 1) / a.dh) * a.dh;
        if (wb < 0) wb += ((-wb + a.dw - 1) / a.dw) * a.dw;
        int mi = hb * W + wb;
        auto tap = [&](int h, int w) {
          const A v = to_acc<A>(tile[(h - h_lo) * W + w]);
          if (v > m || v != v) m = v, mi = h * W + w;  // a NaN wins (the last one seen), as PyTorch
        };
        if constexpr (KH > 0) {
#pragma unroll
          for (int i = 0; i < KH; ++i) {
            const int h = hs + i;
            if (h < 0 || h >= H) continue;
#pragma unroll
            for (int j = 0; j < KW; ++j) {
              const int w = ws + j;
              if (w >= 0 && w < W) tap(h, w);
            }
          }
        } else {
          const int he = imin(hs + (a.kh - 1) * a.dh + 1, H), we = imin(ws + (a.kw - 1) * a.dw + 1, W);
          for (int h = hb; h < he; h += a.dh)
            for (int w = wb; w < we; w += a.dw) tap(h, w);
        }
        y[o] = from_acc<T>(m);
        ind[o] = ibase + mi;
      } else {
        // avg: window [hs, he) clamped to the padded input, divisor from its padded or clipped size
        const int he_p = imin(hs + a.kh, H + a.ph), we_p = imin(ws + a.kw, W + a.pw);
        const int hb = imax(hs, 0), wb = imax(ws, 0), he = imin(he_p, H), we = imin(we_p, W);
        A acc = A(0);
        if constexpr (KH > 0) {
#pragma unroll
          for (int i = 0; i < KH; ++i) {
            const int h = hs + i;
            if (h < 0 || h >= H) continue;
#pragma unroll
            for (int j = 0; j < KW; ++j) {
              const int w = ws + j;
              if (w >= 0 && w < W) acc += to_acc<A>(tile[(h - h_lo) * W + w]);
            }
          }
        } else {
          for (int h = hb; h < he; ++h)
            for (int w = wb; w < we; ++w) acc += to_acc<A>(tile[(h - h_lo) * W + w]);
        }
        const int div = a.divisor_override ? a.divisor_override
                        : a.cip            ? (he_p - hs) * (we_p - ws)
                                           : (he - hb) * (we - wb);
        y[o] = from_acc<T>(acc * (A(1) / A(div)));
      }
      c += a.step_c;
      if (c >= OW) c -= OW, ++r;
    }
  }
}

// ---- forward, padded tiles ----
// Windows of exactly KH x KW taps (dilation 1). The band's input rows are staged WITH the padding around them
// (-inf for max, 0 for avg; rows above / below the input as whole padding rows), the real columns starting at
// tile column LP = pw rounded up to the vector (so the staging stores stay 16-byte vectors): every tap is then
// an unconditional shared-memory read at a fixed offset from the window's corner. pool_fwd_tile's per-tap
// bounds checks and index arithmetic made it issue-bound (ncu: SM throughput well above DRAM throughput).
// Max: a -inf padding tap never wins (strict >), so the winner and the all--inf fallback (the first in-bounds
// tap) are PyTorch's; NaN taps win as they come (the last NaN). Avg: padding adds zeros; the divisor is as before.
struct PadGeo {
  int LP, P;           // left padding columns of the tile, tile row pitch (elements; both multiples of V)
  int64_t buf_elems;   // elements of one of the two tile buffers (16-byte multiple)
  FastDivmod32 by_pv;  // P / V vectors a tile row
};

// Persistent blocks, two tile buffers: the next band's rows are copied in (cp.async for 16-byte vectors, so
// without registers) while this band's outputs are computed. One buffer a block left the block's DRAM
// reads idle for its whole compute phase.
// How pool_fwd_tile_pad's threads take a band's outputs: one output an item; two neighbours along W (avg,
// stride 2); or a column strip (3x3 windows at stride 2 x 2): a thread per output column walking down a
// group of output rows, each input row's 3 taps reduced once (sum, or max with its column) and shared by the
// two output rows that cover it: ~2x fewer shared-memory reads and conversions an output than the pairs.
enum PadMode { kPadSingle = 0, kPadPair = 1, kPadStrip = 2 };

// The strip's three taps of one tile row from `rp` (its left tap): a 2-vector and a single read, the pair
// first where `rp` is even (the same for every thread of a launch).
template <typename A, typename T>
__device__ __forceinline__ void row_taps(const T* rp, bool even, A& t0, A& t1, A& t2) {
  if (even) {
    const Vec<T, 2> q = load_vec<T, 2>(rp);
    t0 = to_acc<A>(q.v[0]), t1 = to_acc<A>(q.v[1]), t2 = to_acc<A>(rp[2]);
  } else {
    const Vec<T, 2> q = load_vec<T, 2>(rp + 1);
    t0 = to_acc<A>(rp[0]), t1 = to_acc<A>(q.v[0]), t2 = to_acc<A>(q.v[1]);
  }
}
template <typename A, typename T>
__device__ __forceinline__ A row_sum(const T* rp, bool even) {
  A t0, t1, t2;
  row_taps(rp, even, t0, t1, t2);
  return t0 + t1 + t2;
}
// The row's maximum and its column j (-1: nothing above -inf), with max pooling's rule: the first maximum,
// or the last NaN.
template <typename A, typename T>
__device__ __forceinline__ A row_max(const T* rp, bool even, int& j) {
  A t0, t1, t2;
  row_taps(rp, even, t0, t1, t2);
  A m = A(-INFINITY);
  j = -1;
  if (t0 > m || t0 != t0) m = t0, j = 0;
  if (t1 > m || t1 != t1) m = t1, j = 1;
  if (t2 > m || t2 != t2) m = t2, j = 2;
  return m;
}

template <typename T, Op OP, int V, int KH, int KW, int MODE>
__global__ void __launch_bounds__(kThreads) pool_fwd_tile_pad(const T* __restrict__ x, T* __restrict__ y,
                                                               int64_t* __restrict__ ind, TileArgs a, PadGeo pg) {
  using A = acc_t<T>;
  T* const bufs = reinterpret_cast<T*>(tile_smem());
  const int H = a.H, W = a.W, OW = a.OW, P = pg.P, LP = pg.LP;
  // avg: 1 / divisor from a table (divisors of a KH x KW window are 1..KH * KW), the same correctly rounded
  // values the division gave, without a division an output (the kernel is issue-bound)
  __shared__ A rcp[KH * KW + 1];
  if (OP == Op::Avg && threadIdx.x <= KH * KW) rcp[threadIdx.x] = threadIdx.x ? A(1) / A(int(threadIdx.x)) : A(0);
  const A rcp_override = a.divisor_override ? A(1) / A(a.divisor_override) : A(0);
  Vec<T, V> padv;
#pragma unroll
  for (int j = 0; j < V; ++j) padv.v[j] = from_acc<T>(OP == Op::Max ? A(-INFINITY) : A(0));
  // the band's tile rows: input rows [hs0, hs0 + R) with padding, the real columns from LP
  const uint32_t pv = uint32_t(P / V);
  uint32_t step_row, step_j;  // kThreads vectors = step_row rows and step_j vectors
  pg.by_pv.divmod(kThreads, step_row, step_j);
  auto stage_vectors = [&](int64_t t, T* tile) {
    const int64_t plane = band_plane(t, a.bands);
    const int oh0 = int(t - plane * a.bands) * a.rows;
    const int oh1 = imin(oh0 + a.rows, a.OH);
    const int hs0 = oh0 * a.sh - a.ph;
    const int nvec = ((oh1 - oh0 - 1) * a.sh + KH) * (P / V);
    const T* xplane = x + plane * H * W;
    // the thread's (row, vector) walks by the block's stride: one division a band, not one a vector (the
    // kernel is issue-bound)
    uint32_t row, j;
    pg.by_pv.divmod(threadIdx.x, row, j);
    for (int e = threadIdx.x; e < nvec; e += kThreads) {
      const int h = hs0 + int(row), col = int(j) * V - LP;  // vectors lie wholly inside or outside a row
      if (h >= 0 && h < H && col >= 0 && col < W) {
        if constexpr (V * sizeof(T) == 16) cp_async16(tile + e * V, xplane + int64_t(h) * W + col);
        else store_vec<T, V>(tile + e * V, load_vec<T, V>(xplane + int64_t(h) * W + col));
      } else {
        store_vec<T, V>(tile + e * V, padv);
      }
      row += step_row, j += step_j;
      if (j >= pv) j -= pv, ++row;
    }
  };
  // sm_90 (and the host emulation), rows of whole 16-byte vectors: a bulk copy a real row (issued by as many
  // threads as rows: a few instructions a band-warp instead of dozens a vector, where staging by vector loads
  // takes a large share of the issue slots), completing on `bar`; the padding (rows outside the input, columns
  // [0, LP) and [LP + W, P)) by stores
#if defined(TORCH_DNN_HAS_BULK_COPY) || defined(TORCH_DNN_EMULATE_CUDA)
  // avg only: it made avg faster and max slower (not profiled; docs/pool.md)
  constexpr bool kBulk = V * sizeof(T) == 16 && OP == Op::Avg;
#else
  constexpr bool kBulk = false;
#endif
  __shared__ __align__(8) uint64_t bars[2];
  const uint64_t pol = l2_policy_evict_first();  // read once (a band's halo rows twice, close in time)
  auto stage_rows = [&](int64_t t, T* tile, uint64_t* bar) {
    const int64_t plane = band_plane(t, a.bands);
    const int oh0 = int(t - plane * a.bands) * a.rows;
    const int oh1 = imin(oh0 + a.rows, a.OH);
    const int hs0 = oh0 * a.sh - a.ph;
    const int R = (oh1 - oh0 - 1) * a.sh + KH;
    const int rlo = imin(R, imax(0, -hs0)), rhi = imax(rlo, imin(R, H - hs0));  // tile rows of input rows
    const T* xplane = x + plane * H * W;
    const unsigned row_bytes = unsigned(W) * unsigned(sizeof(T));
    if (threadIdx.x == 0) mbar_arrive_expect_tx(bar, unsigned(rhi - rlo) * row_bytes);
    for (int r = rlo + int(threadIdx.x); r < rhi; r += kThreads)
      bulk_copy_g2s(tile + r * P + LP, xplane + int64_t(hs0 + r) * W, row_bytes, bar, pol);
    const int lv = LP / V, rv = (P - LP - W) / V;  // padding vectors left and right of a real row
    if (lv + rv > 0)
      for (int e = threadIdx.x; e < (rhi - rlo) * (lv + rv); e += kThreads) {
        const int r = rlo + e / (lv + rv), k = e % (lv + rv);
        store_vec<T, V>(tile + r * P + (k < lv ? k * V : LP + W + (k - lv) * V), padv);
      }
    for (int e = threadIdx.x; e < (R - (rhi - rlo)) * int(pv); e += kThreads) {  // rows wholly padding
      int r = e / int(pv);
      const int j = e - r * int(pv);
      if (r >= rlo) r += rhi - rlo;
      store_vec<T, V>(tile + r * P + j * V, padv);
    }
  };
  if constexpr (kBulk) {
    if (threadIdx.x == 0) {
      mbar_init(&bars[0], 1);
      mbar_init(&bars[1], 1);
      mbar_fence_init();
    }
    __syncthreads();
  }
  auto stage = [&](int64_t t, int b) {
    if constexpr (kBulk) stage_rows(t, bufs + b * pg.buf_elems, &bars[b]);
    else stage_vectors(t, bufs + b * pg.buf_elems);
  };
  // strips: thread -> (row group g, first column c), groups of OW threads each taking a run of a band's rows
  struct {
    int G, g, c, cstep;
  } sg{1, 0, int(threadIdx.x), kThreads};
  if (MODE == kPadStrip && OW <= kThreads) {
    sg.G = kThreads / OW, sg.g = int(threadIdx.x) / OW, sg.c = int(threadIdx.x) - sg.g * OW, sg.cstep = OW;
  }
  int buf = 0;
  if (blockIdx.x < a.tiles) stage(blockIdx.x, 0);
  if constexpr (!kBulk) cp_async_commit();
  for (int64_t t = blockIdx.x, k = 0; t < a.tiles; t += gridDim.x, buf ^= 1, ++k) {
    const T* tile = bufs + buf * pg.buf_elems;
    if (t + gridDim.x < a.tiles) stage(t + gridDim.x, buf ^ 1);
    if constexpr (kBulk) {
      emu_sync_after_copies();
      mbar_wait(&bars[buf], unsigned(k >> 1) & 1u);  // buffer buf's (k / 2)-th band
    } else {
      cp_async_commit();  // possibly empty: "all but the newest group" is then this band's
      cp_async_wait<1>();
    }
    __syncthreads();  // every thread's copies and padding of this band are in
    const int64_t plane = band_plane(t, a.bands);
    const int oh0 = int(t - plane * a.bands) * a.rows;
    const int oh1 = imin(oh0 + a.rows, a.OH);
    const int64_t obase = plane * a.OH * OW;
    const int64_t ibase = (a.D == 1 ? int64_t(0) : plane % a.D) * H * W;  // indices are flat in the (n, c) volume
    if constexpr (MODE == kPadStrip) {
      static_assert(KH == 3 && KW == 3, "the strip walks 3x3 windows at stride 2");
      const int nrows = oh1 - oh0;
      const int rpg = int(unsigned(nrows + sg.G - 1) / unsigned(sg.G)), r0 = sg.g * rpg, r1 = imin(nrows, r0 + rpg);
      int c = sg.c;
      const int g = sg.g, G = sg.G, cstep = sg.cstep;
      // the taps' parity is the same for every thread (ws = 2 ow - pw, LP and P even): pairs read as 2-vectors
      const bool even = ((LP - a.pw) & 1) == 0;
      for (; g < G && r0 < r1 && c < OW; c += cstep) {
        const int ws = c * 2 - a.pw;
        const T* rp = tile + 2 * r0 * P + ws + LP;  // the thread's left tap in its first window's top row
        T* yc = y + obase + int64_t(oh0 + r0) * OW + c;
        int hs = (oh0 + r0) * 2 - a.ph;
        if constexpr (OP == Op::Avg) {
          const int we_p = imin(ws + 3, W + a.pw);
          const int cf = a.cip ? we_p - ws : imin(we_p, W) - imax(ws, 0);  // the window's columns
          // rows wholly inside the input have 3 rows either way: their scale is the thread's; others' by the rule
          const A inner = a.divisor_override ? rcp_override : rcp[3 * cf];
          A top = row_sum<A>(rp, even);
          for (int r = r0; r < r1; ++r, yc += OW, hs += 2) {
            const A mid = row_sum<A>(rp + P, even), bot = row_sum<A>(rp + 2 * P, even);
            rp += 2 * P;
            const A acc = top + mid + bot;
            top = bot;
            A scale = inner;
            if (hs < 0 || hs > H - 3) {
              const int he_p = imin(hs + 3, H + a.ph);
              const int rf = a.cip ? he_p - hs : imin(he_p, H) - imax(hs, 0);
              scale = a.divisor_override ? rcp_override : rcp[rf * cf];
            }
            *yc = from_acc<T>(acc * scale);
          }
        } else {
          // a row's max and its column, then rows top to bottom by the same rule (row_max): the row-major
          // scan's answer, the first maximum or the last NaN
          int64_t* ic = ind + obase + int64_t(oh0 + r0) * OW + c;
          int jt;
          A mt = row_max<A>(rp, even, jt);
          for (int r = r0; r < r1; ++r, yc += OW, ic += OW, hs += 2) {
            int jm, jb;
            const A mm = row_max<A>(rp + P, even, jm), mb = row_max<A>(rp + 2 * P, even, jb);
            rp += 2 * P;
            A m = mt;
            int i = jt >= 0 ? 0 : -1, j = jt;
            if (mm > m || mm != mm) m = mm, i = 1, j = jm;
            if (mb > m || mb != mb) m = mb, i = 2, j = jb;
            mt = mb, jt = jb;
            *yc = from_acc<T>(m);
            *ic = ibase + (j >= 0 ? (hs + i) * W + ws + j : imax(hs, 0) * W + imax(ws, 0));
          }
        }
      }
    } else {
      // PAIR (stride 2 along W, KW = 3): a thread takes two neighbouring outputs, whose windows share a column:
      // 3 x 5 taps read as 2-element vectors where aligned, instead of 2 x 3 x 3 single reads
      constexpr bool PAIR = MODE == kPadPair;
      constexpr int NO = PAIR ? 2 : 1, SPAN = PAIR ? 2 * 2 + KW - 2 : KW;
      const int cols = (OW + NO - 1) / NO;
      int r = threadIdx.x / cols, c = threadIdx.x % cols;
      for (; r < oh1 - oh0; r += a.step_r) {
        const int oh = oh0 + r, ow0 = c * NO;
        const int hs = oh * a.sh - a.ph, ws0 = ow0 * a.sw - a.pw;
        const T* tp = tile + r * a.sh * P + ws0 + LP;  // the first window's corner
        A v[KH][SPAN];
        if constexpr (PAIR) {
          const bool even = ((ws0 + LP) & 1) == 0;  // the same for every thread (P is even)
#pragma unroll
          for (int i = 0; i < KH; ++i) {
            const T* rp = tp + i * P;
            if (even) {
              const Vec<T, 2> p0 = load_vec<T, 2>(rp), p1 = load_vec<T, 2>(rp + 2);
              v[i][0] = to_acc<A>(p0.v[0]), v[i][1] = to_acc<A>(p0.v[1]);
              v[i][2] = to_acc<A>(p1.v[0]), v[i][3] = to_acc<A>(p1.v[1]);
              v[i][4] = to_acc<A>(rp[4]);
            } else {
              const Vec<T, 2> p0 = load_vec<T, 2>(rp + 1), p1 = load_vec<T, 2>(rp + 3);
              v[i][0] = to_acc<A>(rp[0]);
              v[i][1] = to_acc<A>(p0.v[0]), v[i][2] = to_acc<A>(p0.v[1]);
              v[i][3] = to_acc<A>(p1.v[0]), v[i][4] = to_acc<A>(p1.v[1]);
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < KH; ++i)
#pragma unroll
            for (int j = 0; j < KW; ++j) v[i][j] = to_acc<A>(tp[i * P + j]);
        }
#pragma unroll
        for (int u = 0; u < NO; ++u) {
          const int ow = ow0 + u, ws = ws0 + u * 2;  // (PAIR: stride 2)
          if (u > 0 && ow >= OW) break;
          const int64_t o = obase + int64_t(oh) * OW + ow;
          if constexpr (OP == Op::Max) {
            A m = A(-INFINITY);
            int k = -1;
#pragma unroll
            for (int i = 0; i < KH; ++i)
#pragma unroll
              for (int j = 0; j < KW; ++j) {
                const A x_ij = v[i][u * 2 + j];
                if (x_ij > m || x_ij != x_ij) m = x_ij, k = i * KW + j;  // a NaN wins (the last one), as PyTorch
              }
            const int mi = k >= 0 ? (hs + k / KW) * W + ws + k % KW : imax(hs, 0) * W + imax(ws, 0);
            y[o] = from_acc<T>(m);
            ind[o] = ibase + mi;
          } else {
            A acc = A(0);
#pragma unroll
            for (int i = 0; i < KH; ++i)
#pragma unroll
              for (int j = 0; j < KW; ++j) acc += v[i][u * 2 + j];
            const int div = avg_window_size(hs, ws, KH, KW, H, W, a.ph, a.pw, a.cip);
            y[o] = from_acc<T>(acc * (a.divisor_override ? rcp_override : rcp[div]));
          }
        }
        c += a.step_c;
        if (c >= cols) c -= cols, ++r;
      }
    }
    __syncthreads();  // this buffer is read: the next iteration stages into it
  }
}

// ---- backward ----

// Outputs whose window may cover input position i along one axis: [lo, hi) (pool_kernels.h's
// covering_outputs with the stride's 32-bit divisor; a superset for dilated max windows).
__device__ __forceinline__ void cover(int i, int k, int d, int p, int out, const FastDivmod32& by_s, int& lo,
                                      int& hi) {
  const int span = (k - 1) * d + 1, ip = i + p;
  lo = ip < span ? 0 : int(by_s.div(uint32_t(ip - span))) + 1;
  hi = imin(int(by_s.div(uint32_t(ip))) + 1, out);
}

// Stages a band's grad rows [oh_lo, oh_hi) (n_out outputs from g + gbase) in shared memory as the accumulation
// type: avg's divided by their window's divisor; max's with their indices made relative to the plane (ibase; -1
// where an index lies outside it, which matches no input).
template <typename T, Op OP>
__device__ __forceinline__ void stage_grad_rows(const T* g, const int64_t* ind,
                                                acc_t<T>* sg, int* sidx, int64_t gbase, int64_t ibase, int n_out,
                                                int oh_lo, const TileArgs& a) {
  using A = acc_t<T>;
  const int H = a.H, W = a.W, OW = a.OW;
  constexpr int U = 4;
  // walk over the staged outputs (a.step_* walk the band's inputs or owners, not these)
  const int step_r = kThreads / OW, step_c = kThreads % OW;
  int r = threadIdx.x / OW, c = threadIdx.x % OW;
  for (int e0 = threadIdx.x; e0 < n_out; e0 += U * kThreads) {
    T gv[U];
    int64_t iv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int e = e0 + u * kThreads;
      if (e < n_out) {
        gv[u] = g[gbase + e];
        if constexpr (OP == Op::Max) iv[u] = ind[gbase + e];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int e = e0 + u * kThreads;
      if (e < n_out) {
        if constexpr (OP == Op::Max) {
          const int64_t rel = iv[u] - ibase;
          sidx[e] = rel >= 0 && rel < int64_t(H) * W ? int(rel) : -1;
          sg[e] = to_acc<A>(gv[u]);
        } else {
          const int hs = (oh_lo + r) * a.sh - a.ph, ws = c * a.sw - a.pw;
          const int div = a.divisor_override ? a.divisor_override
                                             : avg_window_size(hs, ws, a.kh, a.kw, H, W, a.ph, a.pw, a.cip);
          sg[e] = to_acc<A>(gv[u]) / A(div);
        }
      }
      c += step_c, r += step_r;
      if (c >= OW) c -= OW, ++r;
    }
  }
}

// C > 0: at most C outputs cover a position along each axis (unrolled); 0: run-time loops.
template <typename T, Op OP, int C>
__global__ void __launch_bounds__(kThreads) pool_bwd_tile(const T* __restrict__ g, const int64_t* __restrict__ ind,
                                                           T* __restrict__ dx, TileArgs a) {
  using A = acc_t<T>;
  A* sg = reinterpret_cast<A*>(tile_smem());
  const int H = a.H, W = a.W, OH = a.OH, OW = a.OW;
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int64_t plane = band_plane(t, a.bands);
    const int h0 = int(t - plane * a.bands) * a.rows;
    const int h1 = imin(h0 + a.rows, H);
    int oh_lo, oh_hi, unused;
    cover(h0, a.kh, a.dh, a.ph, OH, a.by_sh, oh_lo, unused);
    cover(h1 - 1, a.kh, a.dh, a.ph, OH, a.by_sh, unused, oh_hi);
    const int n_out = imax(oh_hi - oh_lo, 0) * OW;
    int* sidx = reinterpret_cast<int*>(sg + n_out);  // max only
    const int64_t gbase = plane * OH * OW + int64_t(oh_lo) * OW;
    const int64_t ibase = (a.D == 1 ? int64_t(0) : plane % a.D) * H * W;
    __syncthreads();  // the previous band's readers are done
    stage_grad_rows<T, OP>(g, ind, sg, sidx, gbase, ibase, n_out, oh_lo, a);
    __syncthreads();
    const int64_t xbase = plane * H * W;
    int r = threadIdx.x / W, w = threadIdx.x % W;
    for (; r < h1 - h0; r += a.step_r) {
      const int h = h0 + r;
      int hl, hh, wl, wh;
      cover(h, a.kh, a.dh, a.ph, OH, a.by_sh, hl, hh);
      cover(w, a.kw, a.dw, a.pw, OW, a.by_sw, wl, wh);
      const int i = h * W + w;
      A acc = A(0);
      // one covering output: max adds it where its index is this input, avg always (its window holds
      // the input: dilation 1 and the covering range is exact)
      auto add = [&](int oh, int ow) {
        const int e = (oh - oh_lo) * OW + ow;
        if constexpr (OP == Op::Max) {
          if (sidx[e] == i) acc += sg[e];
        } else {
          acc += sg[e];
        }
      };
      if constexpr (C > 0) {
#pragma unroll
        for (int u = 0; u < C; ++u)
#pragma unroll
          for (int v = 0; v < C; ++v)
            if (hl + u < hh && wl + v < wh) add(hl + u, wl + v);
      } else {
        for (int oh = hl; oh < hh; ++oh)
          for (int ow = wl; ow < wh; ++ow) add(oh, ow);
      }
      dx[xbase + i] = from_acc<T>(acc);
      w += a.step_c;
      if (w >= W) w -= W, ++r;
    }
  }
}

// Backward by owner blocks (span <= 2 * stride along H and W): input h is covered only by outputs o - 1 and
// o, o = (h + p) / s its owner. A band is a range of owner rows [o0, o1); the staged grad rows are
// [o0 - 1, o1). A thread takes one owner (oh, ow): it reads the 2 x 2 outputs (o - 1, o) x (o - 1, o) from
// shared memory once and writes the s x s inputs it owns, so the covering arithmetic is per owner, not per
// input (the per-input gather above spends ~60 instructions an input on it: instruction-bound).
template <typename T, Op OP>
__global__ void __launch_bounds__(kThreads) pool_bwd_tile_owner(const T* __restrict__ g,
                                                                 const int64_t* __restrict__ ind,
                                                                 T* __restrict__ dx, TileArgs a) {
  using A = acc_t<T>;
  A* sg = reinterpret_cast<A*>(tile_smem());
  const int H = a.H, W = a.W, OH = a.OH, OW = a.OW;
  const int own_h = (H - 1 + a.ph) / a.sh + 1, own_w = (W - 1 + a.pw) / a.sw + 1;
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int64_t plane = band_plane(t, a.bands);
    const int o0 = int(t - plane * a.bands) * a.rows;
    const int o1 = imin(o0 + a.rows, own_h);
    const int oh_lo = imax(o0 - 1, 0), oh_hi = imin(o1, OH);
    const int n_out = imax(oh_hi - oh_lo, 0) * OW;
    int* sidx = reinterpret_cast<int*>(sg + n_out);  // max only
    const int64_t gbase = plane * OH * OW + int64_t(oh_lo) * OW;
    const int64_t ibase = (a.D == 1 ? int64_t(0) : plane % a.D) * H * W;
    __syncthreads();  // the previous band's readers are done
    stage_grad_rows<T, OP>(g, ind, sg, sidx, gbase, ibase, n_out, oh_lo, a);
    __syncthreads();
    const int64_t xbase = plane * H * W;
    int r = threadIdx.x / own_w, q = threadIdx.x % own_w;
    for (; r < o1 - o0; r += a.step_r) {
      const int oh_own = o0 + r, ow_own = q;
      A gv[2][2];
      int iv[2][2];
      int hend[2], wend[2];  // avg: the windows' ends (their starts are at or before every owned input)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        hend[u] = (oh_own - 1 + u) * a.sh - a.ph + a.kh;
        wend[u] = (ow_own - 1 + u) * a.sw - a.pw + a.kw;
      }
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          const int oh = oh_own - 1 + u, ow = ow_own - 1 + v;
          const bool ok = oh >= 0 && oh < OH && ow >= 0 && ow < OW;
          const int e = (oh - oh_lo) * OW + ow;
          gv[u][v] = ok ? sg[e] : A(0);  // a missing output contributes zero
          if constexpr (OP == Op::Max) iv[u][v] = ok ? sidx[e] : -1;
        }
      for (int rr = 0; rr < a.sh; ++rr) {
        const int h = oh_own * a.sh - a.ph + rr;
        if (h < 0 || h >= H) continue;
        for (int ee = 0; ee < a.sw; ++ee) {
          const int w = ow_own * a.sw - a.pw + ee;
          if (w < 0 || w >= W) continue;
          A acc = A(0);
#pragma unroll
          for (int u = 0; u < 2; ++u)
#pragma unroll
            for (int v = 0; v < 2; ++v) {
              if constexpr (OP == Op::Max) {
                if (iv[u][v] == h * W + w) acc += gv[u][v];
              } else {
                if (h < hend[u] && w < wend[v]) acc += gv[u][v];
              }
            }
          dx[xbase + int64_t(h) * W + w] = from_acc<T>(acc);
        }
      }
      q += a.step_c;
      if (q >= own_w) q -= own_w, ++r;
    }
  }
}

// Backward of 3x3 windows with stride 2 (dilation 1), vectors of V inputs a thread. Along an axis input
// position h is covered by output o = (h + p) / 2 and, when (h + p) is even, by o - 1 too (3 = 2 + 1). The
// band's grad rows are staged with a zero (max: index -1) border, one row above and one column left, so
// that every covering output is an unconditional shared-memory read; a thread writes V consecutive inputs
// of a row with one 16-byte store. Avg: the covering rows are added first (6 column values), then each input
// adds its 1 or 2 columns (a fixed pattern for the compile-time column padding PW). Max: each input compares
// its (at most) 2 x 2 covering outputs' indices, in PyTorch's (row, column) order. The owner kernel above
// writes 2-byte elements and re-derives the covering per input: issue-bound, far below the copy ceiling for avg.
//
// Avg: the band's grad rows are one contiguous run of g, read as 16-byte vectors (stage_run) instead of element by
// element with 64-bit indices (such a loop would be about half of the kernel's instructions; max stages element by
// element, an index with each grad). With one divisor for every window (uniform_div > 0: a divisor_override, or no window clipped)
// the stage holds raw grads and the dx pass multiplies each input's sum once; otherwise each staged grad is
// divided by its window's size.
template <typename T, Op OP, int V, int PW>
__global__ void __launch_bounds__(kThreads) pool_bwd_tile_k3s2(const T* __restrict__ g,
                                                                const int64_t* __restrict__ ind,
                                                                T* __restrict__ dx, TileArgs a, int n_cols,
                                                                int uniform_div, FastDivmod32 by_ow) {
  using A = acc_t<T>;
  constexpr bool RUN = OP == Op::Avg;  // avg stages g as a run of 16-byte vectors, max element by element
  constexpr int NC = V / 2 + 1 + PW;  // staged columns a thread reads
  A* sg = reinterpret_cast<A*>(tile_smem());
  const A post = RUN && uniform_div > 0 ? A(1) / A(uniform_div) : A(1);  // applied to each input's sum
  // avg: grad / divisor as grad * (1 / divisor) from a table (divisors of a 3x3 window are 1..9): no division
  // an output (within an ulp of the division)
  __shared__ A rcp[10];
  if (OP == Op::Avg && threadIdx.x < 10) rcp[threadIdx.x] = threadIdx.x ? A(1) / A(int(threadIdx.x)) : A(0);
  const int H = a.H, W = a.W, OH = a.OH, OW = a.OW, ph = a.ph;
  const int cols = W / V;
  for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    const int64_t plane = band_plane(t, a.bands);
    const int h0 = int(t - plane * a.bands) * a.rows;
    const int h1 = imin(h0 + a.rows, H);
    const int oh_lo = ((h0 + ph) >> 1) - 1;  // output row of staged row 0
    const int n_rows = ((h1 - 1 + ph) >> 1) - oh_lo + 1;
    const int n_st = n_rows * n_cols;
    int* sidx = reinterpret_cast<int*>(sg + n_st);  // max only
    const int64_t gplane = plane * OH * OW;
    const int64_t ibase = (a.D == 1 ? int64_t(0) : plane % a.D) * H * W;
    __syncthreads();  // the previous band's readers are done
    if constexpr (RUN) {
      // staged rows [ra, rb) hold output rows oh_lo + ra ...; the rest of the stage is the zero border
      const int ra = imax(0, -oh_lo), rb = imin(n_rows, OH - oh_lo);
      for (int r = threadIdx.x; r < n_rows; r += kThreads) {
        A* row = sg + r * n_cols;
        if (r >= ra && r < rb) {
          row[0] = A(0);
          for (int c = OW + 1; c < n_cols; ++c) row[c] = A(0);
        } else {
          for (int c = 0; c < n_cols; ++c) row[c] = A(0);
        }
      }
      if (rb > ra) {
        const int oh_a = oh_lo + ra;
        A* st = sg + ra * n_cols + 1;  // staged cell of (oh_a, 0)
        stage_run<T, V>(g + gplane + int64_t(oh_a) * OW, (rb - ra) * OW, OW, by_ow, [&](int r, int c, T v) {
          if (c + 1 >= n_cols) return;  // its window starts past the input: it covers nothing
          A x = to_acc<A>(v);
          if (uniform_div <= 0) {
            const int div = avg_window_size((oh_a + r) * 2 - ph, c * 2 - a.pw, 3, 3, H, W, ph, a.pw, a.cip);
            x *= rcp[div];
          }
          st[r * n_cols + c] = x;
        });
      }
    } else {  // max: each grad staged with its index, element by element
      constexpr int U = 4;
      const int step_r = kThreads / n_cols, step_c = kThreads % n_cols;
      int r = threadIdx.x / n_cols, c = threadIdx.x % n_cols;
      for (int e0 = threadIdx.x; e0 < n_st; e0 += U * kThreads) {
        T gv[U];
        int64_t iv[U];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int oh = oh_lo + r, ow = c - 1;
          ok[u] = e0 + u * kThreads < n_st && oh >= 0 && oh < OH && ow >= 0 && ow < OW;
          if (ok[u]) {
            gv[u] = g[gplane + int64_t(oh) * OW + ow];
            iv[u] = ind[gplane + int64_t(oh) * OW + ow];
          }
          c += step_c, r += step_r;
          if (c >= n_cols) c -= n_cols, ++r;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int e = e0 + u * kThreads;
          if (e >= n_st) continue;
          const int64_t rel = ok[u] ? iv[u] - ibase : -1;  // outside the plane: matches no input
          sidx[e] = rel >= 0 && rel < int64_t(H) * W ? int(rel) : -1;
          sg[e] = ok[u] ? to_acc<A>(gv[u]) : A(0);
        }
      }
    }
    __syncthreads();
    const int64_t xbase = plane * H * W;
    int r = threadIdx.x / cols, q = threadIdx.x % cols;
    for (; r < h1 - h0; r += a.step_r) {
      const int h = h0 + r;
      const int r1 = ((h + ph) >> 1) - oh_lo, r0 = r1 - 1;  // staged rows of outputs o and o - 1
      const bool both_rows = ((h + ph) & 1) == 0;
      const int cb = q * (V / 2);  // staged column of output o_w(first input) - 1
      A out[V];
      if constexpr (OP == Op::Max) {
        A g0[NC], g1[NC];
        int i0[NC], i1[NC];
#pragma unroll
        for (int k = 0; k < NC; ++k) {
          g1[k] = sg[r1 * n_cols + cb + k];
          i1[k] = sidx[r1 * n_cols + cb + k];
          g0[k] = both_rows ? sg[r0 * n_cols + cb + k] : A(0);
          i0[k] = both_rows ? sidx[r0 * n_cols + cb + k] : -1;
        }
        const int pos0 = h * W + q * V;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const int k1 = ((j + PW) >> 1) + 1;  // staged column (relative) of output o_w
          const bool both_cols = ((j + PW) & 1) == 0;
          const int pos = pos0 + j;
          A acc = A(0);
          if (both_cols && i0[k1 - 1] == pos) acc += g0[k1 - 1];
          if (i0[k1] == pos) acc += g0[k1];
          if (both_cols && i1[k1 - 1] == pos) acc += g1[k1 - 1];
          if (i1[k1] == pos) acc += g1[k1];
          out[j] = acc;
        }
      } else {
        A gc[NC];
#pragma unroll
        for (int k = 0; k < NC; ++k)
          gc[k] = sg[r1 * n_cols + cb + k] + (both_rows ? sg[r0 * n_cols + cb + k] : A(0));
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const int k1 = ((j + PW) >> 1) + 1;
          out[j] = (((j + PW) & 1) == 0 ? gc[k1 - 1] + gc[k1] : gc[k1]) * post;
        }
      }
      Vec<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>(out[j]);
      store_vec<T, V>(dx + xbase + int64_t(h) * W + q * V, o);
      q += a.step_c;
      if (q >= cols) q -= cols, ++r;
    }
  }
}

}  // namespace pool
}  // namespace torch_dnn
