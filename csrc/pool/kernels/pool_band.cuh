// Channels-last 2-D window pooling (trivial depth window) by segments of whole rows streamed through a ring of
// shared-memory row slots, sm_90. In NDHWC one row of an (n, d) slice is ONE contiguous run of W * C elements
// (OW * C for grad_output): thread 0 copies each row into a slot with a 1-D bulk copy (common/cuda/bulk_copy.cuh)
// completing on the slot's mbarrier, and refills a slot as soon as the block is done with its row, so the
// copies of the next rows are in flight while the block computes from the current ones. A block streams one
// segment of rows of one slice; segments are sized so that the grid is about one wave (the KH - sh halo rows at
// a segment's edges are read twice).
//   forward : a step is one output row: wait for its KH input rows, compute its OW * C / V items (KH x KW taps,
//             16-byte shared-memory vectors), one __syncthreads, refill the slots of rows no longer needed.
//   backward: windows of span <= 2 * stride (pool_bwd_cl_owner's items): a step is one owner row a, whose inputs
//             only output rows a - 1 and a cover; a slot holds one grad row (and max's int64 index row); an
//             item reads its 2 x 2 covering outputs from shared memory and writes the sh x sw inputs it owns.
// The per-item kernels (pool_fwd_cl2d, pool_bwd_cl_owner) read each input 2.25 times (3x3/2) and each output's
// 64 index bytes 4 times through L1/L2; these read them once. The ring keeps copies in flight during the compute:
// a whole band staged in one copy and computed after it would leave the copy and the compute serial (docs/pool.md
// has the measurements).
// Sizes inside a slice are 32-bit (the host checks); slice offsets are 64-bit.
#pragma once
#include "common/cuda/bulk_copy.cuh"
#include "pool/pool_plan.h"

namespace torch_dnn {
namespace pool {

constexpr int kRingSlots = 16;       // most slots a ring may have (one mbarrier each)
constexpr int kBandThreadsMax = 512;  // threads a block: 256 or 512 (band_threads())

struct BandArgs {
  int64_t slices;  // N * D
  int C, D, H, W, OH, OW;
  int kh, kw, sh, sw, ph, pw;
  int rows;   // rows a segment: output rows (forward), owner rows (backward)
  int bands;  // segments a slice
  int own_h, own_w;    // backward: owners along H and W
  int slots;           // ring slots (<= kRingSlots)
  unsigned slot_bytes;  // bytes of a slot (16-byte multiple)
  unsigned idx_offset;  // backward, max: byte offset of the index row inside a slot (16-byte aligned)
  FastDivmod32 by_cv;   // C / V
  bool cip;
  int divisor_override;
  int uniform_div;  // avg: every window's divisor, or 0 (uniform_avg_divisor)
};

// The ring of one block: rows [0, n) of a segment (relative numbers) through a.slots slots; row r lives in slot
// r % slots, its copy completing phase r / slots of that slot's barrier. Thread 0 issues; everyone waits.
struct Ring {
  uint64_t* bars;
  unsigned char* base;
  int slots, n, next;  // next: the first row not yet issued (thread 0's count)
  __device__ __forceinline__ unsigned char* slot(int r) const { return base + size_t(r % slots) * slot_bytes; }
  unsigned slot_bytes;
  __device__ __forceinline__ void wait(int r) const { mbar_wait(&bars[r % slots], unsigned(r / slots) & 1u); }
};

// Thread 0: copies rows while their slots are free (row r's slot is free once row r - slots is no longer read:
// r - slots < first_needed). issue(r, dst, bar) announces and starts row r's copies.
template <class Issue>
__device__ __forceinline__ void ring_refill(Ring& q, int first_needed, Issue&& issue) {
  if (threadIdx.x == 0)
    while (q.next < q.n && q.next - q.slots < first_needed) {
      issue(q.next, q.slot(q.next), &q.bars[q.next % q.slots]);
      ++q.next;
    }
  emu_sync_after_copies();
}

// Thread 0 waits for the copies still in flight (rows that no step reads, when the stride exceeds the window), so
// that none lands after the block has left its shared memory.
__device__ __forceinline__ void ring_drain(const Ring& q) {
  if (threadIdx.x == 0)
    for (int r = q.next - q.slots < 0 ? 0 : q.next - q.slots; r < q.next; ++r) q.wait(r);
}

__device__ __forceinline__ Ring ring_start(uint64_t* bars, int slots, unsigned slot_bytes, int n) {
  Ring q{bars, tile_smem(), slots, n, 0, slot_bytes};
  if (threadIdx.x == 0) {
    for (int k = 0; k < slots; ++k) mbar_init(&bars[k], 1);
    mbar_fence_init();
  }
  __syncthreads();  // the barriers are initialised
  return q;
}

// PAIR (avg, stride 2 along H, KH > 2): a step is two output rows oh, oh + 1, whose windows share input row
// 2 oh + 2 - ph: each of the KH + 2 rows' KW-tap sums is formed once and added to the outputs covering it (a
// third fewer shared-memory reads and conversions at 3x3/2, and one barrier a two rows).
// (PAIR is held to 64 registers: two blocks of 512 threads an SM, as the one-row form; unbounded it took 99.)
template <typename T, Op OP, int V, int KH, int KW, bool PAIR = false>
__global__ void __launch_bounds__(kBandThreadsMax, PAIR ? 2 : 1) pool_fwd_cl_band(const T* __restrict__ x, T* __restrict__ y,
                                                              int64_t* __restrict__ ind, BandArgs a) {
  static_assert(!PAIR || (OP == Op::Avg && KH > 2), "row pairs: avg, windows taller than the stride 2");
  constexpr int STEP = PAIR ? 2 : 1;        // output rows a step
  constexpr int NR = PAIR ? KH + 2 : KH;    // input rows a step reads
  using A = acc_t<T>;
  __shared__ uint64_t bars[kRingSlots];
  const int H = a.H, W = a.W, C = a.C;
  const int64_t slice = int64_t(blockIdx.x) / a.bands;
  const int band = int(int64_t(blockIdx.x) - slice * a.bands);
  const int o0 = band * a.rows, o1 = imin(a.OH, o0 + a.rows);
  const int r_lo = imax(0, o0 * a.sh - a.ph), r_hi = imin(H, (o1 - 1) * a.sh - a.ph + KH);
  const int64_t row_elems = int64_t(W) * C;
  const unsigned row_bytes = unsigned(row_elems * int64_t(sizeof(T)));
  const T* src = x + (slice * H + r_lo) * row_elems;
  const uint64_t pol = l2_policy_evict_first();  // read once (the segments' halo rows twice, close in time)
  auto issue = [&](int r, unsigned char* dst, uint64_t* bar) {
    mbar_arrive_expect_tx(bar, row_bytes);
    bulk_copy_g2s(dst, src + int64_t(r) * row_elems, row_bytes, bar, pol);
  };
  Ring q = ring_start(bars, a.slots, a.slot_bytes, r_hi - r_lo);
  ring_refill(q, 0, issue);
  const int cv = C / V;
  const unsigned items = unsigned(a.OW * cv);
  const int64_t ibase = (slice % a.D) * int64_t(H) * W;  // max indices count within the (n, c) volume
  const A inv_uniform = a.uniform_div > 0 ? A(1) / A(a.uniform_div) : A(0);
  for (int oh = o0; oh < o1; oh += STEP) {
    const int hs = oh * a.sh - a.ph;
    const bool second = PAIR && oh + 1 < o1;  // the step's second output row exists
    const T* rowp[NR];  // the step's input rows in their slots (null: padding, or past the segment's last window)
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const int h = hs + i;
      rowp[i] = nullptr;
      if (h >= 0 && h < H && (i < KH || second)) {
        q.wait(h - r_lo);
        rowp[i] = reinterpret_cast<const T*>(q.slot(h - r_lo));
      }
    }
    const int64_t ybase = ((slice * a.OH + oh) * int64_t(a.OW)) * C;
    for (unsigned it = threadIdx.x; it < items; it += blockDim.x) {
      uint32_t ow, cg;
      a.by_cv.divmod(it, ow, cg);
      const int ws = int(ow) * a.sw - a.pw;
      const int coff = ws * C + int(cg) * V;  // tap (i, 0)'s element in its row, possibly left of it
      const int64_t o = ybase + int64_t(it) * V;  // item it's V channels are the row's outputs it * V ...
      if constexpr (PAIR) {
        A acc[2][V];
#pragma unroll
        for (int k = 0; k < V; ++k) acc[0][k] = acc[1][k] = A(0);
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          if (!rowp[i]) continue;
          A rs[V];  // row i's KW-tap sum
#pragma unroll
          for (int k = 0; k < V; ++k) rs[k] = A(0);
#pragma unroll
          for (int j = 0; j < KW; ++j) {
            const int w = ws + j;
            if (w < 0 || w >= W) continue;
            const Vec<T, V> r = *reinterpret_cast<const Vec<T, V>*>(rowp[i] + coff + j * C);
#pragma unroll
            for (int k = 0; k < V; ++k) rs[k] += to_acc<A>(r.v[k]);
          }
#pragma unroll
          for (int k = 0; k < V; ++k) {
            if (i < KH) acc[0][k] += rs[k];
            if (i >= 2) acc[1][k] += rs[k];
          }
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          if (u == 1 && !second) break;
          A inv = inv_uniform;
          if (a.uniform_div <= 0) {
            const int div = a.divisor_override ? a.divisor_override
                                               : avg_window_size(hs + 2 * u, ws, KH, KW, H, W, a.ph, a.pw, a.cip);
            inv = A(1) / A(div);
          }
#pragma unroll
          for (int k = 0; k < V; ++k) acc[u][k] *= inv;
          store_acc<V>(y + o + int64_t(u) * a.OW * C, acc[u]);
        }
      } else if constexpr (OP == Op::Max) {
        A m[V];
        int mi[V];
        const int first = imax(hs, 0) * W + imax(ws, 0);  // the index of a window of only -inf
#pragma unroll
        for (int k = 0; k < V; ++k) m[k] = A(-INFINITY), mi[k] = first;
#pragma unroll
        for (int i = 0; i < KH; ++i) {
          if (!rowp[i]) continue;
#pragma unroll
          for (int j = 0; j < KW; ++j) {
            const int w = ws + j;
            if (w < 0 || w >= W) continue;
            const Vec<T, V> r = *reinterpret_cast<const Vec<T, V>*>(rowp[i] + coff + j * C);
#pragma unroll
            for (int k = 0; k < V; ++k) {
              const A v = to_acc<A>(r.v[k]);
              if (v > m[k] || v != v) m[k] = v, mi[k] = (hs + i) * W + w;  // a NaN wins (the last one), as PyTorch
            }
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
        for (int i = 0; i < KH; ++i) {
          if (!rowp[i]) continue;
#pragma unroll
          for (int j = 0; j < KW; ++j) {
            const int w = ws + j;
            if (w < 0 || w >= W) continue;
            const Vec<T, V> r = *reinterpret_cast<const Vec<T, V>*>(rowp[i] + coff + j * C);
#pragma unroll
            for (int k = 0; k < V; ++k) acc[k] += to_acc<A>(r.v[k]);
          }
        }
        A inv = inv_uniform;
        if (a.uniform_div <= 0) {
          const int div =
              a.divisor_override ? a.divisor_override : avg_window_size(hs, ws, KH, KW, H, W, a.ph, a.pw, a.cip);
          inv = A(1) / A(div);
        }
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] *= inv;
        store_acc<V>(y + o, acc);
      }
    }
    __syncthreads();  // every thread is done with this step's input rows
    ring_refill(q, imax((oh + STEP) * a.sh - a.ph, 0) - r_lo, issue);
  }
  ring_drain(q);
}

template <typename T, Op OP, int V>
__global__ void __launch_bounds__(kBandThreadsMax) pool_bwd_cl_band(const T* __restrict__ g, const int64_t* __restrict__ ind,
                                                              T* __restrict__ dx, BandArgs a) {
  using A = acc_t<T>;
  __shared__ uint64_t bars[kRingSlots];
  const int H = a.H, W = a.W, C = a.C, OH = a.OH, OW = a.OW;
  const int64_t slice = int64_t(blockIdx.x) / a.bands;
  const int band = int(int64_t(blockIdx.x) - slice * a.bands);
  const int a0 = band * a.rows, a1 = imin(a.own_h, a0 + a.rows);
  const int g_lo = imax(0, a0 - 1), g_hi = imin(OH, a1);  // streamed grad rows (none: the inputs get zeros)
  const int64_t row_elems = int64_t(OW) * C;
  const unsigned g_bytes = unsigned(row_elems * int64_t(sizeof(T)));
  const int64_t gfirst = (slice * OH + g_lo) * row_elems;
  const uint64_t pol = l2_policy_evict_first();
  auto issue = [&](int r, unsigned char* dst, uint64_t* bar) {
    mbar_arrive_expect_tx(bar, g_bytes + (OP == Op::Max ? unsigned(row_elems * 8) : 0u));
    bulk_copy_g2s(dst, g + gfirst + int64_t(r) * row_elems, g_bytes, bar, pol);
    if constexpr (OP == Op::Max)
      bulk_copy_g2s(dst + a.idx_offset, ind + gfirst + int64_t(r) * row_elems, unsigned(row_elems * 8), bar, pol);
  };
  Ring q = ring_start(bars, a.slots, a.slot_bytes, imax(g_hi - g_lo, 0));
  ring_refill(q, 0, issue);
  const int cv = C / V;
  const unsigned items = unsigned(a.own_w * cv);
  const int64_t ibase = (slice % a.D) * int64_t(H) * W;
  const int64_t xbase = slice * int64_t(H) * W * C;
  for (int oh_own = a0; oh_own < a1; ++oh_own) {
    const T* grow[2];        // grad rows oh_own - 1 + u in their slots (null: outside the output)
    const int64_t* irow[2];  // their index rows (max)
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int oh = oh_own - 1 + u;
      grow[u] = nullptr, irow[u] = nullptr;
      if (oh >= 0 && oh < OH) {
        q.wait(oh - g_lo);
        const unsigned char* sp = q.slot(oh - g_lo);
        grow[u] = reinterpret_cast<const T*>(sp);
        irow[u] = reinterpret_cast<const int64_t*>(sp + a.idx_offset);
      }
    }
    for (unsigned it = threadIdx.x; it < items; it += blockDim.x) {
      uint32_t ow_own, cg;
      a.by_cv.divmod(it, ow_own, cg);
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
          ok[u][v] = grow[u] != nullptr && ow >= 0 && ow < OW;
          inv[u][v] = A(0);
          if (ok[u][v]) {
            const int e = ow * C + int(cg) * V;  // element of the row
            gv[u][v] = *reinterpret_cast<const Vec<T, V>*>(grow[u] + e);
            if constexpr (OP == Op::Max) {
#pragma unroll
              for (int j = 0; j < V; j += 2) {
                const Vec<int64_t, 2> r = *reinterpret_cast<const Vec<int64_t, 2>*>(irow[u] + e + j);
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
    __syncthreads();  // every thread is done with grad row oh_own - 1
    ring_refill(q, oh_own - g_lo, issue);
  }
  ring_drain(q);
}

// ---- host side ----

// TORCH_DNN_POOL_CL_BAND=0: the per-item channels-last kernels instead of the bands (A/B runs and tests); so do
// the older knobs that force one of those kernels (TORCH_DNN_POOL_CL_FWD=item, TORCH_DNN_POOL_CL_BWD=item).
// TORCH_DNN_POOL_CL_BAND=1: the bands for every case they apply to. Unset: average pooling's forward only, and
// only where the 32-bit taps kernel does not apply (tensors of 2^31 elements or more): the taps kernel, and for the
// other cases the per-item kernels, measured faster (docs/pool.md).
enum class BandUse { Off, Auto, All };
inline BandUse cl_band_use() {
  if (env::is("TORCH_DNN_POOL_CL_BAND", "0")) return BandUse::Off;
  if (env::is("TORCH_DNN_POOL_CL_BAND", "1")) return BandUse::All;
  return BandUse::Auto;
}
inline bool cl_band_enabled() { return cl_band_use() != BandUse::Off; }

// Threads a band block: TORCH_DNN_POOL_BAND_THREADS=256|512 (A/B runs), else 512.
inline int band_threads() { return env::get_int("TORCH_DNN_POOL_BAND_THREADS", 512) == 256 ? 256 : 512; }

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
  a.uniform_div = uniform_avg_divisor(s);
  return a;
}

// Segments of `total` rows: as many a slice as keep the grid within one wave of `per_sm` blocks an SM (at least
// one a slice), balanced; false when the grid would not fit one launch.
inline bool set_segments(BandArgs& a, int total, int per_sm) {
  const int64_t wave = int64_t(sm_count()) * per_sm;
  int64_t seg = a.slices >= wave ? 1 : wave / a.slices;
  const int cap = env::get_int("TORCH_DNN_POOL_BAND_SEGMENTS", 0);  // A/B runs: segments a slice
  if (cap > 0) seg = cap;
  seg = std::max<int64_t>(1, std::min<int64_t>(seg, total));
  a.rows = int((total + seg - 1) / seg);
  a.bands = (total + a.rows - 1) / a.rows;
  return a.slices * a.bands < (int64_t(1) << 31);
}

// Ring slots of slot_bytes in `budget` bytes: at least `need` (the rows one step reads), at most kRingSlots and
// no more than the rows streamed.
inline bool set_slots(BandArgs& a, int64_t slot_bytes, int64_t budget, int need, int rows_streamed) {
  int64_t n = budget / slot_bytes;
  n = std::min<int64_t>(std::min<int64_t>(n, kRingSlots), std::max(rows_streamed, need));
  const int cap = env::get_int("TORCH_DNN_POOL_BAND_SLOTS", 0);  // tests: the fewest slots, every refill path
  if (cap > 0) n = std::max<int64_t>(std::min<int64_t>(n, cap), need);
  if (n < need) return false;
  a.slots = int(n);
  a.slot_bytes = unsigned(slot_bytes);
  return true;
}

inline int blocks_per_sm(int64_t smem) {
  const int64_t by_threads = 2048 / band_threads();
  return int(std::max<int64_t>(1, std::min<int64_t>(by_threads, smem_per_sm() / (smem + 1024))));
}

// Forward, windows of exactly KH x KW taps with dilation 1 along H and W; false: the caller takes another path.
template <typename T, Op OP, int V, int KH, int KW>
bool launch_band_fwd(const T* x, T* y, int64_t* ind, const PoolShape& s, cudaStream_t stream) {
  if constexpr (V == 1) {  // the rows are copied as 16-byte channel vectors
    return false;
  } else {
    // by default the bands take avg only where the 32-bit taps kernel does not (it measured faster; docs/pool.md);
    // TORCH_DNN_POOL_CL_BAND=1 forces them
    const bool want = cl_band_use() == BandUse::All ||
                      (OP == Op::Avg && cl_band_use() == BandUse::Auto && !cl2d32_applies(s, V));
    if (!want || !band_applies(s) || s.ax[1].d != 1 || s.ax[2].d != 1 || s.ax[1].k != KH || s.ax[2].k != KW ||
        env::is("TORCH_DNN_POOL_CL_FWD", "item"))
      return false;
    BandArgs a = band_shape(s, V);
    // avg at stride 2 along H: two output rows a step (one a step measured slower; docs/pool.md)
    constexpr bool kPairable = OP == Op::Avg && KH > 2;
    const bool pair = kPairable && a.sh == 2;
    const int64_t row_bytes = int64_t(a.W) * a.C * int64_t(sizeof(T));
    // 7 rows of 14 KB: 2 blocks an SM
    if (!set_slots(a, row_bytes, band_budget(100), pair ? KH + 2 : KH, a.H)) return false;
    const int64_t smem = int64_t(a.slots) * row_bytes;
    if (!band_device_ok(smem) || !set_segments(a, a.OH, blocks_per_sm(smem))) return false;
    if constexpr (kPairable) {
      if (pair) {
        launch_smem_over48k<pool_fwd_cl_band<T, OP, V, KH, KW, true>>(unsigned(a.slices * a.bands), band_threads(),
                                                                       size_t(smem), size_t(200 * 1024), stream, x, y,
                                                                       ind, a);
        return true;
      }
    }
    launch_smem_over48k<pool_fwd_cl_band<T, OP, V, KH, KW>>(unsigned(a.slices * a.bands), band_threads(), size_t(smem),
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
    if (!band_applies(s) || cl_bwd_item() || cl_band_use() != BandUse::All) return false;
    for (int i = 1; i < 3; ++i)
      if ((s.ax[i].k - 1) * s.ax[i].d + 1 > 2 * s.ax[i].s) return false;
    BandArgs a = band_shape(s, V);
    const int64_t row_elems = int64_t(a.OW) * a.C;
    const int64_t g_row = (row_elems * int64_t(sizeof(T)) + 15) / 16 * 16;
    a.idx_offset = unsigned(g_row);
    const int64_t slot = g_row + (OP == Op::Max ? row_elems * 8 : 0);
    // max: 3 slots of 36 KB (2 blocks an SM); avg: 10 slots of 7 KB
    if (!set_slots(a, slot, band_budget(OP == Op::Max ? 108 : 72), 2, a.OH)) return false;
    const int64_t smem = int64_t(a.slots) * slot;
    if (!band_device_ok(smem) || !set_segments(a, a.own_h, blocks_per_sm(smem))) return false;
    launch_smem_over48k<pool_bwd_cl_band<T, OP, V>>(unsigned(a.slices * a.bands), band_threads(), size_t(smem),
                                                     size_t(200 * 1024), stream, g, ind, dx, a);
    return true;
  }
}

}  // namespace pool
}  // namespace torch_dnn
