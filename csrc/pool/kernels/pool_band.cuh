// Channels-last 2-D window pooling (trivial depth window) by bands of whole rows staged in shared memory,
// sm_90. In NDHWC the rows [r0, r1) of one (n, d) slice are ONE contiguous run of (r1 - r0) * W * C elements:
// thread 0 copies it into shared memory with one 1-D bulk copy (common/cuda/bulk_copy.cuh), and the block
// computes from there. A block takes one band (no grid loop); several blocks an SM overlap one's copy with
// another's compute.
//   forward : a band of R output rows; its (R - 1) * sh + KH input rows are staged (the KH - sh halo rows are
//             copied by the neighbouring band too, from L2: neighbours run together). Each item (output, V
//             channels) reads its KH x KW taps as 16-byte shared-memory vectors, all issued before use.
//   backward: windows of span <= 2 * stride (pool_bwd_cl_owner's items): a band of R owner rows stages the grad
//             rows (and max's int64 index rows) [a0 - 1, a0 + R); an item reads its 2 x 2 covering outputs
//             from shared memory and writes the sh x sw inputs it owns.
// The per-item kernels (pool_fwd_cl2d, pool_bwd_cl_owner) read each input 2.25 times (3x3/2) and each output's
// 64 index bytes 4 times through L1/L2; these read them once from DRAM (plus the halo rows from L2).
// Sizes inside a slice are 32-bit (the host checks); slice offsets are 64-bit.
#pragma once
#include "common/cuda/bulk_copy.cuh"
#include "pool/kernels/pool_tile.cuh"

namespace torch_dnn {
namespace pool {

struct BandArgs {
  int64_t slices;  // N * D
  int C, D, H, W, OH, OW;
  int kh, kw, sh, sw, ph, pw;
  int rows;   // rows a band: output rows (forward), owner rows (backward)
  int bands;  // bands a slice
  int own_h, own_w;           // backward: owners along H and W
  unsigned idx_offset;        // backward, max: byte offset of the staged index rows (16-byte aligned)
  FastDivmod32 by_cv, by_cols;  // C / V; items of one row along W (OW forward, own_w backward)
  bool cip;
  int divisor_override;
};

// Thread 0 copies `bytes` from global src (and bytes2 from src2, when nonzero) into shared memory at dst (dst2);
// every thread returns once they have landed. The barrier is used once (one band a block).
__device__ __forceinline__ void stage_band(void* dst, const void* src, unsigned bytes, uint64_t* bar,
                                           void* dst2 = nullptr, const void* src2 = nullptr, unsigned bytes2 = 0) {
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    mbar_fence_init();
    mbar_arrive_expect_tx(bar, bytes + bytes2);
    const uint64_t pol = l2_policy_evict_normal();  // halo rows are read again by the neighbouring band
    if (bytes) bulk_copy_g2s(dst, src, bytes, bar, pol);
    if (bytes2) bulk_copy_g2s(dst2, src2, bytes2, bar, pol);
  }
  __syncthreads();  // the barrier is initialised (in the host emulation: the copies are done)
  mbar_wait(bar, 0);
}

template <typename T, Op OP, int V, int KH, int KW>
__global__ void __launch_bounds__(kThreads, 3) pool_fwd_cl_band(const T* __restrict__ x, T* __restrict__ y,
                                                              int64_t* __restrict__ ind, BandArgs a) {
  using A = acc_t<T>;
  __shared__ uint64_t bar;
  const T* tile = reinterpret_cast<const T*>(tile_smem());
  const int H = a.H, W = a.W, C = a.C;
  const int64_t slice = int64_t(blockIdx.x) / a.bands;
  const int band = int(int64_t(blockIdx.x) - slice * a.bands);
  const int o0 = band * a.rows, o1 = imin(a.OH, o0 + a.rows);
  const int r0 = imax(0, o0 * a.sh - a.ph), r1 = imin(H, (o1 - 1) * a.sh - a.ph + KH);
  const int64_t row_elems = int64_t(W) * C;
  stage_band(tile_smem(), x + (slice * H + r0) * row_elems,
             r1 > r0 ? unsigned((r1 - r0) * row_elems * int64_t(sizeof(T))) : 0u, &bar);
  const int cv = C / V;
  const unsigned items = unsigned((o1 - o0) * a.OW * cv);
  const int64_t ybase = (slice * a.OH + o0) * int64_t(a.OW) * C;  // the band's first output
  const int64_t ibase = (slice % a.D) * int64_t(H) * W;              // max indices count within the (n, c) volume
  for (unsigned it = threadIdx.x; it < items; it += kThreads) {
    uint32_t q, cg, orow, ow;
    a.by_cv.divmod(it, q, cg);
    a.by_cols.divmod(q, orow, ow);
    const int hs = (o0 + int(orow)) * a.sh - a.ph, ws = int(ow) * a.sw - a.pw;
    const T* tp = tile + (hs - r0) * W * C + ws * C + int(cg) * V;  // tap (0, 0), possibly outside the tile
    auto tap = [&](int i, int j) { return *reinterpret_cast<const Vec<T, V>*>(tp + (i * W + j) * C); };
    const int64_t o = ybase + int64_t(it) * V;  // item it's V channels are the band's outputs it * V ...
    if constexpr (OP == Op::Max) {
      A m[V];
      int mi[V];
      const int first = imax(hs, 0) * W + imax(ws, 0);  // the index of a window of only -inf
#pragma unroll
      for (int k = 0; k < V; ++k) m[k] = A(-INFINITY), mi[k] = first;
#pragma unroll
      for (int i = 0; i < KH; ++i)
#pragma unroll
        for (int j = 0; j < KW; ++j) {
          const int h = hs + i, w = ws + j;
          if (h < 0 || h >= H || w < 0 || w >= W) continue;
          const Vec<T, V> r = tap(i, j);
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const A v = to_acc<A>(r.v[k]);
            if (v > m[k] || v != v) m[k] = v, mi[k] = h * W + w;  // a NaN wins (the last one), as PyTorch
          }
        }
      store_acc<V>(y + o, m);
      int64_t idx[V];
#pragma unroll
      for (int k = 0; k < V; ++k) idx[k] = ibase + mi[k];
      store_idx<V>(ind + o, idx);
    } else {
      A acc[V];
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] = A(0);
#pragma unroll
      for (int i = 0; i < KH; ++i)
#pragma unroll
        for (int j = 0; j < KW; ++j) {
          const int h = hs + i, w = ws + j;
          if (h < 0 || h >= H || w < 0 || w >= W) continue;
          const Vec<T, V> r = tap(i, j);
#pragma unroll
          for (int k = 0; k < V; ++k) acc[k] += to_acc<A>(r.v[k]);
        }
      const int div =
          a.divisor_override ? a.divisor_override : avg_window_size(hs, ws, KH, KW, H, W, a.ph, a.pw, a.cip);
      const A inv = A(1) / A(div);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] *= inv;
      store_acc<V>(y + o, acc);
    }
  }
}

template <typename T, Op OP, int V>
__global__ void __launch_bounds__(kThreads, 2) pool_bwd_cl_band(const T* __restrict__ g, const int64_t* __restrict__ ind,
                                                              T* __restrict__ dx, BandArgs a) {
  using A = acc_t<T>;
  __shared__ uint64_t bar;
  unsigned char* smem = tile_smem();
  const T* sg = reinterpret_cast<const T*>(smem);
  const int64_t* si = reinterpret_cast<const int64_t*>(smem + a.idx_offset);
  const int H = a.H, W = a.W, C = a.C, OH = a.OH, OW = a.OW;
  const int64_t slice = int64_t(blockIdx.x) / a.bands;
  const int band = int(int64_t(blockIdx.x) - slice * a.bands);
  const int a0 = band * a.rows, a1 = imin(a.own_h, a0 + a.rows);
  const int g0 = imax(0, a0 - 1), g1 = imin(OH, a1);  // staged grad rows (none: the band's inputs get zeros)
  const int64_t row_elems = int64_t(OW) * C;
  const int64_t gfirst = (slice * OH + g0) * row_elems;
  const unsigned n_rows = unsigned(g1 > g0 ? g1 - g0 : 0);
  stage_band(smem, g + gfirst, unsigned(n_rows * row_elems * int64_t(sizeof(T))), &bar, smem + a.idx_offset,
             OP == Op::Max ? static_cast<const void*>(ind + gfirst) : nullptr,
             OP == Op::Max ? unsigned(n_rows * row_elems * 8) : 0u);
  const int cv = C / V;
  const unsigned items = unsigned((a1 - a0) * a.own_w * cv);
  const int64_t ibase = (slice % a.D) * int64_t(H) * W;
  const int64_t xbase = slice * int64_t(H) * W * C;
  for (unsigned it = threadIdx.x; it < items; it += kThreads) {
    uint32_t q, cg, arow, ow_own;
    a.by_cv.divmod(it, q, cg);
    a.by_cols.divmod(q, arow, ow_own);
    const int oh_own = a0 + int(arow);
    // the 2 x 2 covering outputs (oh_own - 1 + u, ow_own - 1 + v)
    Vec<T, V> gv[2][2];
    int idx[2][2][V];
    A inv[2][2];
    bool ok[2][2];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        const int oh = oh_own - 1 + u, ow = int(ow_own) - 1 + v;
        ok[u][v] = oh >= 0 && oh < OH && ow >= 0 && ow < OW;
        inv[u][v] = A(0);
        if (ok[u][v]) {
          const int e = ((oh - g0) * OW + ow) * C + int(cg) * V;  // element of the staged rows
          gv[u][v] = *reinterpret_cast<const Vec<T, V>*>(sg + e);
          if constexpr (OP == Op::Max) {
#pragma unroll
            for (int j = 0; j < V; j += 2) {
              const Vec<int64_t, 2> r = *reinterpret_cast<const Vec<int64_t, 2>*>(si + e + j);
#pragma unroll
              for (int k = 0; k < 2; ++k) {  // relative to the slice; outside it: matches no input
                const int64_t rel = r.v[k] - ibase;
                idx[u][v][j + k] = rel >= 0 && rel < int64_t(H) * W ? int(rel) : -1;
              }
            }
          } else {
            const int hs = oh * a.sh - a.ph, ws = ow * a.sw - a.pw;
            const int div = a.divisor_override ? a.divisor_override
                                               : avg_window_size(hs, ws, a.kh, a.kw, H, W, a.ph, a.pw, a.cip);
            inv[u][v] = A(1) / A(div);
          }
        }
      }
    for (int r = 0; r < a.sh; ++r) {
      const int h = oh_own * a.sh - a.ph + r;
      if (h < 0 || h >= H) continue;
      for (int e = 0; e < a.sw; ++e) {
        const int w = int(ow_own) * a.sw - a.pw + e;
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
              const int oh = oh_own - 1 + u, ow = int(ow_own) - 1 + v;
              if (h < oh * a.sh - a.ph + a.kh && w < ow * a.sw - a.pw + a.kw) {
#pragma unroll
                for (int j = 0; j < V; ++j) acc[j] += to_acc<A>(gv[u][v].v[j]) * inv[u][v];
              }
            }
          }
        store_acc<V>(dx + xbase + int64_t(i) * C + int(cg) * V, acc);
      }
    }
  }
}

// ---- host side ----

// TORCH_DNN_POOL_CL_BAND=0: the per-item channels-last kernels instead of the bands (A/B runs and tests); so do
// the older knobs that force one of those kernels (TORCH_DNN_POOL_CL_FWD=item|taps, TORCH_DNN_POOL_CL_BWD=item).
inline bool cl_band_enabled() { return !env::is("TORCH_DNN_POOL_CL_BAND", "0"); }

// Shared memory a band may take (bytes): TORCH_DNN_POOL_BAND_KB (16..200) for A/B runs, else `dflt` KB.
inline int64_t band_budget(int dflt_kb) {
  const int kb = env::get_int("TORCH_DNN_POOL_BAND_KB", dflt_kb);
  return int64_t(kb < 16 ? 16 : kb > 200 ? 200 : kb) * 1024;
}

// The device can run the bulk copies (sm_90+); the host emulation always can.
inline bool band_device_ok(int64_t smem) {
#if defined(TORCH_DNN_EMULATE_CUDA)
  (void)smem;
  return true;
#else
  return cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(0) >= 9 && smem + 1024 <= max_smem_optin();
#endif
}

// The band kernels apply: channels-last window max/avg, trivial depth window, 16-byte channel vectors (the
// caller: C % V == 0 and aligned pointers), 32-bit positions in a slice.
inline bool band_applies(const PoolShape& s) {
  if (!s.channels_last || s.adaptive || s.lp() || !cl_band_enabled()) return false;
  const Axis& d = s.ax[0];
  if (d.k != 1 || d.s != 1 || d.p != 0 || d.d != 1 || d.out != d.in) return false;
  const int64_t lim = int64_t(1) << 30;
  for (int i = 1; i < 3; ++i) {
    const Axis& a = s.ax[i];
    if (a.in + 2 * a.p + a.k + a.s >= lim || a.out * a.s >= lim) return false;
  }
  return s.ax[1].in * s.ax[2].in * s.C < lim && s.ax[1].out * s.ax[2].out * s.C < lim && s.C < lim;
}

inline BandArgs band_shape(const PoolShape& s, int V) {
  BandArgs a;
  const Axis &h = s.ax[1], &w = s.ax[2];
  a.D = int(s.ax[0].in);
  a.slices = s.N * a.D;
  a.C = int(s.C);
  a.H = int(h.in), a.W = int(w.in), a.OH = int(h.out), a.OW = int(w.out);
  a.kh = int(h.k), a.kw = int(w.k), a.sh = int(h.s), a.sw = int(w.s), a.ph = int(h.p), a.pw = int(w.p);
  a.own_h = int((h.in - 1 + h.p) / h.s + 1), a.own_w = int((w.in - 1 + w.p) / w.s + 1);
  a.idx_offset = 0;
  a.by_cv = FastDivmod32(uint32_t(s.C / V));
  a.cip = s.count_include_pad;
  a.divisor_override = int(s.divisor_override);
  return a;
}

// `total` rows in balanced bands of at most max_rows; false when the grid would not fit one launch.
inline bool set_band_rows(BandArgs& a, int total, int64_t max_rows) {
  if (max_rows < 1) return false;
  a.bands = int((total + max_rows - 1) / max_rows);
  a.rows = (total + a.bands - 1) / a.bands;
  return a.slices * a.bands < (int64_t(1) << 31);
}

// Forward, windows of exactly KH x KW taps with dilation 1 along H and W; false: the caller takes another path.
template <typename T, Op OP, int V, int KH, int KW>
bool launch_band_fwd(const T* x, T* y, int64_t* ind, const PoolShape& s, cudaStream_t stream) {
  if constexpr (V == 1) {  // the bands copy whole rows of 16-byte channel vectors
    return false;
  } else {
    if (!band_applies(s) || s.ax[1].d != 1 || s.ax[2].d != 1 || s.ax[1].k != KH || s.ax[2].k != KW ||
        env::is("TORCH_DNN_POOL_CL_FWD", "item") || env::is("TORCH_DNN_POOL_CL_FWD", "taps"))
      return false;
    BandArgs a = band_shape(s, V);
    const int64_t row_bytes = int64_t(a.W) * a.C * int64_t(sizeof(T));
    const int64_t budget = band_budget(72);  // 3 blocks an SM
    const int64_t fit = budget / row_bytes;  // input rows
    if (fit < KH || !set_band_rows(a, a.OH, (fit - KH) / a.sh + 1)) return false;
    const int64_t in_rows = std::min<int64_t>(int64_t(a.rows - 1) * a.sh + KH, a.H);
    const int64_t smem = in_rows * row_bytes;
    if (!band_device_ok(smem)) return false;
    a.by_cols = FastDivmod32(uint32_t(a.OW));
    launch_smem_over48k<pool_fwd_cl_band<T, OP, V, KH, KW>>(unsigned(a.slices * a.bands), kThreads, size_t(smem),
                                                             size_t(200 * 1024), stream, x, y, ind, a);
    return true;
  }
}

// Backward (max / avg), windows of span <= 2 * stride; false: the caller takes another path.
template <typename T, Op OP, int V>
bool launch_band_bwd(const T* g, const int64_t* ind, T* dx, const PoolShape& s, cudaStream_t stream) {
  if constexpr (V == 1) {
    return false;
  } else {
    if (!band_applies(s) || cl_bwd_item()) return false;
    for (int i = 1; i < 3; ++i)
      if ((s.ax[i].k - 1) * s.ax[i].d + 1 > 2 * s.ax[i].s) return false;
    BandArgs a = band_shape(s, V);
    const int64_t row_elems = int64_t(a.OW) * a.C;
    const int64_t g_row = row_elems * int64_t(sizeof(T)), i_row = OP == Op::Max ? row_elems * 8 : 0;
    const int64_t budget = band_budget(OP == Op::Max ? 108 : 72);  // max: 2 blocks an SM
    const int64_t fit = budget / (g_row + i_row);                    // grad rows: R owner rows stage R + 1
    if (fit < 2 || !set_band_rows(a, a.own_h, fit - 1)) return false;
    const int64_t g_rows = std::min<int64_t>(a.rows + 1, a.OH);
    const int64_t g_bytes = (g_rows * g_row + 15) / 16 * 16;
    a.idx_offset = unsigned(g_bytes);
    const int64_t smem = g_bytes + g_rows * i_row;
    if (!band_device_ok(smem)) return false;
    a.by_cols = FastDivmod32(uint32_t(a.own_w));
    launch_smem_over48k<pool_bwd_cl_band<T, OP, V>>(unsigned(a.slices * a.bands), kThreads, size_t(std::max<int64_t>(smem, 16)),
                                                     size_t(200 * 1024), stream, g, ind, dx, a);
    return true;
  }
}

}  // namespace pool
}  // namespace torch_dnn
