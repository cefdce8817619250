// batch_norm persistent training passes (sm_90, rows walk): statistics and the elementwise pass in one kernel.
#pragma once
#include <cooperative_groups.h>

#include "common/cuda/bulk_copy.cuh"
#include "batch_norm/kernels/bn_coeffs.cuh"
#include "batch_norm/kernels/bn_common.cuh"

namespace torch_dnn {
namespace batch_norm {
namespace {

// ---- persistent training passes (rows walk): statistics and the elementwise pass in one kernel ----
//
// The separate passes above read x twice in the forward (statistics, then apply) and dy and x twice in the
// backward (sums, then dx). Here one co-resident grid (cooperative launch, one 512-thread block per SM, sm_90)
// does a whole direction, each block owning a contiguous range of rows cut into chunks of ~16 KB (all
// tensors of the direction together). Chunks move by 1-D bulk copies (common/cuda/bulk_copy.cuh): one thread
// issues them, an mbarrier says when they landed, so a block keeps ~100 KB in flight for a few instructions.
//   pass 1  the first chunks of the range are copied into shared memory to stay there (the "cache"); the
//           others stream through a ring of slots (6 x 16 KB) (the last ones with an L2 evict_last hint);
//           each thread adds its rows' values into per-channel sums; a fixed tree gives the block's sums.
//   merge   after a grid barrier, a warp per channel adds the blocks' sums in a fixed order (deterministic) and
//           writes the per-channel outputs (fwd_coeffs_one / bwd_coeffs_one) and pass 2's coefficients.
//   pass 2  after a second barrier: the cached chunks from shared memory, the others streamed again, newest
//           first (L2 hits). batch_norm_add_act's backward writes dz = dy * act'(z) in pass 1 (over the cached
//           chunks' dy too) and streams dz instead of dy here; its residual rides in the chunks as a third tensor.
// The ring occupies the top slots of the shared-memory area; cached chunks there are copied in after pass 1's
// stream and used first in pass 2, before the ring streams again. 227 KB x 132 SMs keeps ~30 MB of the 103 MB
// of a 64x256x56x56 bf16 tensor on chip: the forward reads 176 MB instead of 206, the backward 382 instead of 412.

constexpr int kPersistThreads = 512;
constexpr int kPersistWarps = kPersistThreads / 32;
// Ring slots and chunk size: 6 x 16 KB by default (knobs TORCH_DNN_BN_RING, TORCH_DNN_BN_CHUNK_KB for A/B).
constexpr int kMaxRingStages = 8;
constexpr int kRingStagesDefault = 6;
constexpr int kChunkKbDefault = 16;
constexpr int kBarBytes = 128;  // the mbarriers: the ring's slots, the cache's two copy groups

// Phase timestamps of a persistent launch (TORCH_DNN_BN_TRACE=1, a measurement aid): thread 0 of each block
// writes the global timer at kernel start, end of pass 1, after each grid barrier, and at the end.
constexpr int kTracePoints = 5;
__device__ __forceinline__ void trace_point(unsigned long long* trace, int k) {
  if (trace != nullptr && threadIdx.x == 0) {
    unsigned long long t = 0;
#if defined(__CUDA_ARCH__)
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
#endif
    trace[blockIdx.x * kTracePoints + k] = t;
  }
}

// All blocks of the co-resident grid meet here, the writes before visible to all after: cooperative groups'
// grid barrier, whose counter the cooperative launch provides (an own counter needed a memset before every
// launch, which cost more host time than the launch itself).
__device__ __forceinline__ void grid_barrier() { cooperative_groups::this_grid().sync(); }

// Per-thread sums s += a, q += a * b over V channels, folded into (S, Q) every kFold rows (two-level
// summation: the error of a long per-thread run stays that of 64-term sums).
template <int V>
struct FoldedSums {
  float s[V], q[V], S[V], Q[V];
  int cnt;
  __device__ __forceinline__ void init() {
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = q[j] = S[j] = Q[j] = 0.f;
    cnt = 0;
  }
  __device__ __forceinline__ void fold() {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      S[j] += s[j];
      Q[j] += q[j];
      s[j] = q[j] = 0.f;
    }
    cnt = 0;
  }
  __device__ __forceinline__ void add(const float (&a)[V], const float (&b)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      s[j] += a[j];
      q[j] = fma(a[j], b[j], q[j]);
    }
    if (++cnt == kFold) fold();
  }
};

// The block's (S, Q) per channel: a fixed tree over the TY thread rows through `red` ([red_h][2][C] floats);
// thread row 0 then writes them to part[k][c][block].
template <int V>
__device__ void block_sums_to_partials(FoldedSums<V>& acc, bool active, int tx, int ty, int TY, int red_h,
                                       int64_t C, float* red, float* __restrict__ part) {
  const int64_t c0 = int64_t(tx) * V;
  for (int h = red_h; h >= 1; h >>= 1) {
    if (active && ty >= h && ty < 2 * h) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        red[(int64_t(ty - h) * 2) * C + c0 + j] = acc.S[j];
        red[(int64_t(ty - h) * 2 + 1) * C + c0 + j] = acc.Q[j];
      }
    }
    __syncthreads();
    if (active && ty < h && ty + h < TY) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        acc.S[j] += red[(int64_t(ty) * 2) * C + c0 + j];
        acc.Q[j] += red[(int64_t(ty) * 2 + 1) * C + c0 + j];
      }
    }
    __syncthreads();
  }
  if (active && ty == 0) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      part[(c0 + j) * gridDim.x + blockIdx.x] = acc.S[j];
      part[(C + c0 + j) * gridDim.x + blockIdx.x] = acc.Q[j];
    }
  }
}

// Channel c's sums over all blocks, in double, in a fixed order (lane-strided, then a butterfly): every lane of
// the warp gets them.
__device__ __forceinline__ void merge_partials(const float* part, int64_t c, int64_t C, double& S, double& Q) {
  const int lane = threadIdx.x % 32;
  const int G = int(gridDim.x);
  S = 0.0;
  Q = 0.0;
  // eight blocks' partials a lane in flight before they are added (one L2 round trip for up to 256 blocks)
  for (int j0 = 0; j0 < G; j0 += 256) {
    float s[8], q[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int j = j0 + 32 * u + lane;
      s[u] = j < G ? __ldcg(part + c * G + j) : 0.f;
      q[u] = j < G ? __ldcg(part + (C + c) * G + j) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      S += double(s[u]);
      Q += double(q[u]);
    }
  }
  S = warp_reduce(S, SumOp{});
  Q = warp_reduce(Q, SumOp{});
}

// V consecutive floats written in this launch (by other blocks): 16-byte loads that skip L1.
template <int V>
__device__ __forceinline__ void load_coefs(const float* p, float (&out)[V]) {
#pragma unroll
  for (int j = 0; j < V; j += 4) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(p + j));
    out[j] = v.x;
    out[j + 1] = v.y;
    out[j + 2] = v.z;
    out[j + 3] = v.w;
  }
}

// A block's rows as chunks of NT tensors' rows, and where they live in shared memory. Chunk k covers rows
// [k * SR, k * SR + rows(k)) of the block; its image in a slot is NT row-blocks of SR rows (tensor t at
// t * SR * rowb). Chunks [0, ncc) are cached in slots [0, ncc): [0, lo) below the ring, [lo, ncc) inside it.
struct NoPre {
  __device__ __forceinline__ void operator()(int, int) const {}
};

template <int NT>
struct ChunkPlan {
  const char* src[NT];  // the block's first row of each tensor
  int64_t r0, nb, rowb;
  int SR, nchunks, ncc, lo, ring_base;
  int live = NT;  // the tensors a copy brings (the first `live`; the backward with a residual drops it for pass 2)
  char* slots;
  size_t slot_bytes;

  __device__ ChunkPlan(const void* const (&base)[NT], int64_t R, int64_t row_bytes, const PersistGeom& g, char* area) {
    const int64_t G = gridDim.x, b = blockIdx.x;
    r0 = R * b / G;
    nb = R * (b + 1) / G - r0;
    rowb = row_bytes;
#pragma unroll
    for (int t = 0; t < NT; ++t) src[t] = static_cast<const char*>(base[t]) + r0 * rowb;
    SR = g.chunk_rows;
    nchunks = int((nb + SR - 1) / SR);
    ring_base = g.slots - g.stages;
    ncc = min(nchunks, min(g.slots, g.cache_cap));
    lo = min(ncc, ring_base);
    slots = area;
    slot_bytes = size_t(NT) * SR * rowb;
  }
  __device__ int rows(int k) const { return int(min(int64_t(SR), nb - int64_t(k) * SR)); }
  __device__ char* slot(int s) const { return slots + size_t(s) * slot_bytes; }
  // thread 0: chunks [k0, k1) into slots [s0, s0 + k1 - k0) as one phase of `bar`
  __device__ void issue(int k0, int k1, int s0, uint64_t* bar, uint64_t pol) const {
    if (k1 <= k0) return;
    const int64_t r_end = min(nb, int64_t(k1) * SR), nrows = r_end - int64_t(k0) * SR;
    mbar_arrive_expect_tx(bar, unsigned(live * nrows * rowb));
    for (int k = k0; k < k1; ++k) {
      const unsigned bytes = unsigned(rows(k) * rowb);
#pragma unroll
      for (int t = 0; t < NT; ++t)
        if (t < live)
          bulk_copy_g2s(slot(s0 + k - k0) + size_t(t) * SR * rowb, src[t] + int64_t(k) * SR * rowb, bytes, bar, pol);
    }
  }
  // pass 2's order (persist_pass2): the cached chunks inside the ring, those below it, then the streamed ones
  // newest first; pass2_index inverts pass2_chunk
  __device__ int pass2_chunk(int j) const {
    if (j < ncc - lo) return lo + j;
    return j < ncc ? j - (ncc - lo) : nchunks - 1 - (j - ncc);
  }
  __device__ int pass2_index(int k) const {
    if (k >= ncc) return ncc + (nchunks - 1 - k);
    return k >= lo ? k - lo : (ncc - lo) + k;
  }
  // a hint to the L2 for chunk k's rows of a tensor laid out as the plan's (first: the block's first row)
  __device__ void prefetch_l2(const char* first, int k) const {
    bulk_prefetch_l2(first + int64_t(k) * SR * rowb, unsigned(rows(k) * rowb));
  }
  // the rows of chunk k in slot s that thread row ty handles, with the thread's vectors of each tensor; pre(k, n)
  // first (n: the chunk's rows)
  template <class F, class P = NoPre>
  __device__ __forceinline__ void for_rows(int k, int s, int ty, int TY, int64_t vec_off, F&& f, P&& pre = P{}) const {
    const char* base = slot(s) + vec_off;
    const int n = rows(k);
    pre(k, n);
    for (int i = ty; i < n; i += TY) {
      const char* p[NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) p[t] = base + (size_t(t) * SR + i) * rowb;
      f(p, int64_t(k) * SR + i);
    }
  }
};

// Shared-memory layout of a persistent block: mbarriers, the reduction tree's buffer, the chunk slots.
struct PersistSmem {
  uint64_t* ring_bar;   // [kMaxRingStages]
  uint64_t* lo_bar;     // cached chunks below the ring
  uint64_t* hi_bar;     // cached chunks inside the ring
  float* red;
  char* area;
  __device__ PersistSmem(char* smem, const PersistGeom& g) {
    ring_bar = reinterpret_cast<uint64_t*>(smem);
    lo_bar = ring_bar + kMaxRingStages;
    hi_bar = lo_bar + 1;
    red = reinterpret_cast<float*>(smem + kBarBytes);
    area = smem + kBarBytes + g.red_bytes;
    static_assert((kMaxRingStages + 2) * 8 <= kBarBytes, "mbarriers fit");
  }
};

// Pass 1 of a block: copies the cached chunks, streams the others through the ring, calls use(p, row) on every
// row of the thread's (pointers to its 16-byte vectors, one per tensor). q counts ring copies (slot q %
// stages, parity (q / stages) & 1) across both passes.
template <int NT, class F>
__device__ void persist_pass1(const ChunkPlan<NT>& cp, const PersistSmem& sm, const PersistGeom& g, int ty, int TY,
                              int64_t vec_off, bool active, F&& use) {
  const bool lead = threadIdx.x == 0;
  const int S = g.stages;
  if (lead) {
    for (int s = 0; s < S; ++s) mbar_init(&sm.ring_bar[s], 1);
    mbar_init(sm.lo_bar, 1);
    mbar_init(sm.hi_bar, 1);
    mbar_fence_init();
  }
  __syncthreads();
  const uint64_t keep = l2_policy_evict_last(), drop = l2_policy_evict_first();
  const int n1 = cp.nchunks - cp.ncc;
  const auto pol1 = [&](int k) { return k >= cp.nchunks - g.l2_chunks ? keep : drop; };
  if (lead) {
    cp.issue(0, cp.lo, 0, sm.lo_bar, drop);
    for (int q = 0; q < S && q < n1; ++q)
      cp.issue(cp.ncc + q, cp.ncc + q + 1, cp.ring_base + q, &sm.ring_bar[q], pol1(cp.ncc + q));
  }
  for (int q = 0; q < n1; ++q) {
    const int s = q % S;
    mbar_wait(&sm.ring_bar[s], (q / S) & 1);
    if (active) cp.for_rows(cp.ncc + q, cp.ring_base + s, ty, TY, vec_off, use);
    __syncthreads();  // the slot is free again
    const int k = cp.ncc + q + S;
    if (lead && k < cp.nchunks) cp.issue(k, k + 1, cp.ring_base + s, &sm.ring_bar[s], pol1(k));
  }
  // the cached chunks inside the ring now that the ring is idle (the loop's last barrier)
  if (lead) cp.issue(cp.lo, cp.ncc, cp.lo, sm.hi_bar, drop);
  if (cp.lo > 0) {
    mbar_wait(sm.lo_bar, 0);
    if (active)
      for (int k = 0; k < cp.lo; ++k) cp.for_rows(k, k, ty, TY, vec_off, use);
  }
  if (cp.ncc > cp.lo) {
    mbar_wait(sm.hi_bar, 0);
    if (active)
      for (int k = cp.lo; k < cp.ncc; ++k) cp.for_rows(k, k, ty, TY, vec_off, use);
  }
}

// Pass 2 of a block: out(p, row) on every row of the thread's: the cached chunks inside the ring first, then
// the others streamed again newest first (the L2 holds the latest) while the cached chunks below the ring run.
template <int NT, class F, class P>
__device__ void persist_pass2(const ChunkPlan<NT>& cp, const PersistSmem& sm, const PersistGeom& g, int ty, int TY,
                              int64_t vec_off, bool active, F&& out, P&& pre) {
  const bool lead = threadIdx.x == 0;
  const int S = g.stages;
  if (active)
    for (int k = cp.lo; k < cp.ncc; ++k) cp.for_rows(k, k, ty, TY, vec_off, out, pre);
  __syncthreads();  // the ring's slots are free
  const uint64_t drop = l2_policy_evict_first();
  const int n1 = cp.nchunks - cp.ncc, n2 = n1;
  const auto chunk = [&](int p) { return cp.nchunks - 1 - p; };
  if (lead)
    for (int p = 0; p < S && p < n2; ++p) {
      const int s = (n1 + p) % S;
      cp.issue(chunk(p), chunk(p) + 1, cp.ring_base + s, &sm.ring_bar[s], drop);
    }
  if (active)
    for (int k = 0; k < cp.lo; ++k) cp.for_rows(k, k, ty, TY, vec_off, out, pre);
  for (int p = 0; p < n2; ++p) {
    const int q = n1 + p, s = q % S;
    mbar_wait(&sm.ring_bar[s], (q / S) & 1);
    if (active) cp.for_rows(chunk(p), cp.ring_base + s, ty, TY, vec_off, out, pre);
    __syncthreads();
    if (lead && p + S < n2) {
      const int k = chunk(p + S);
      cp.issue(k, k + 1, cp.ring_base + s, &sm.ring_bar[s], drop);
    }
  }
}

// What both directions' kernels share: a block's thread layout over its rows, its chunk plan and shared memory,
// and the phases around their own math: pass 1 (rows into per-thread sums), the exchange (block partials, grid
// barrier, a warp per channel merging every block's sums in a fixed order, grid barrier) and pass 2.
template <typename T, int NT>
struct PersistBlock {
  static constexpr int V = kVec16<T>;
  const PersistGeom& g;
  int TX, TY, tx, ty;
  bool active;
  int64_t C, c0, vec_off;
  PersistSmem sm;
  ChunkPlan<NT> cp;
  unsigned long long* trace;

  __device__ PersistBlock(const PersistGeom& geo, const void* const (&base)[NT], int64_t R, int64_t C_, char* smem,
                          unsigned long long* trace_)
      : g(geo),
        TX(geo.TX),
        TY(kPersistThreads / geo.TX),
        tx(int(threadIdx.x) % geo.TX),
        ty(int(threadIdx.x) / geo.TX),
        active(ty < TY),
        C(C_),
        c0(int64_t(tx) * V),
        vec_off(int64_t(tx) * V * int64_t(sizeof(T))),
        sm(smem, geo),
        cp(base, R, C_ * int64_t(sizeof(T)), geo, sm.area),
        trace(trace_) {
    trace_point(trace, 0);
  }

  template <class F>
  __device__ void pass1(FoldedSums<V>& acc, F&& use) {
    persist_pass1(cp, sm, g, ty, TY, vec_off, active, use);
    acc.fold();
    trace_point(trace, 1);
  }
  // merge(c, S, Q) on lane 0 of channel c's warp, with the channel's sums over all blocks (double)
  template <class F>
  __device__ void exchange(FoldedSums<V>& acc, float* part, F&& merge) {
    block_sums_to_partials<V>(acc, active, tx, ty, TY, g.red_h, C, sm.red, part);
    grid_barrier();
    trace_point(trace, 2);
    for (int64_t c = int64_t(blockIdx.x) * kPersistWarps + threadIdx.x / 32; c < C;
         c += int64_t(gridDim.x) * kPersistWarps) {
      double S, Q;
      merge_partials(part, c, C, S, Q);
      if (threadIdx.x % 32 == 0) merge(c, S, Q);
    }
    grid_barrier();
    trace_point(trace, 3);
  }
  template <class F, class P = NoPre>
  __device__ void pass2(F&& out, P&& pre = P{}) {
    persist_pass2(cp, sm, g, ty, TY, vec_off, active, out, pre);
    __syncthreads();
    trace_point(trace, 4);
  }
};

// A row vector of the chunk image: 16 bytes of T in shared memory, as floats.
template <typename T, int V>
__device__ __forceinline__ void row_vec(const char* p, float (&out)[V]) {
  load_acc<V>(reinterpret_cast<const T*>(p), out);
}

template <typename T>
struct PersistFwdArgs {
  const T* x;
  const T* res;
  T* y;
  int act;
  bool prefetch;  // the residual's rows a chunk at a time (TORCH_DNN_BN_RES_PREFETCH)
  int res_ahead;  // pass 2 asks the L2 for the residual of the chunk this many ahead (TORCH_DNN_BN_RES_AHEAD)
  int64_t R, C;
  PersistGeom geo;
  float* part;   // [2][C][G]
  float* coef;   // [2][C]: scale, shift
  FwdCoeffPtrs p;
  unsigned long long* trace;  // null unless TORCH_DNN_BN_TRACE=1
};

// ACT: an activation and/or a residual in pass 2 (batch_norm_add_act); false: plain batch_norm.
template <typename T, bool ACT>
__global__ void __launch_bounds__(kPersistThreads, 1) bn_persist_fwd(PersistFwdArgs<T> a) {
  // (compiled for every architecture, launched on sm_90+ only: the bulk copies are no-ops below)
  constexpr int V = kVec16<T>;
  extern __shared__ __align__(16) char persist_smem[];
  const void* const base[1] = {a.x};
  PersistBlock<T, 1> b(a.geo, base, a.R, a.C, persist_smem, a.trace);
  const int64_t C = a.C, c0 = b.c0;

  // pass 1: shifted sums (shift: the channel's first element, the same for every block)
  FoldedSums<V> acc;
  acc.init();
  float sh[V];
  if (b.active) load_acc<V>(a.x + c0, sh);
  b.pass1(acc, [&](const char* const (&p)[1], int64_t) {
    float v[V];
    row_vec<T, V>(p[0], v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] -= sh[j];
    acc.add(v, v);
  });
  // the residual of pass 2's first res_ahead chunks is asked of the L2 now, while the grid waits at the barriers
  const char* res_rows = ACT && a.res ? reinterpret_cast<const char*>(a.res + b.cp.r0 * a.C) : nullptr;
  if (res_rows && threadIdx.x == 0)
    for (int j = 0; j < min(a.res_ahead, b.cp.nchunks); ++j) b.cp.prefetch_l2(res_rows, b.cp.pass2_chunk(j));
  b.exchange(acc, a.part, [&](int64_t c, double S, double Q) {
    const double n = double(a.R), d = S / n;
    double m2 = Q - S * d;
    m2 = m2 < 0.0 ? 0.0 : m2;  // rounding may go below 0; NaN stays NaN
    double scale, shift;
    fwd_coeffs_one(a.p, c, double(to_acc<float>(a.x[c])) + d, m2, &scale, &shift);
    a.coef[c] = float(scale);
    a.coef[C + c] = float(shift);
  });

  // pass 2: y = act(x * scale + shift + res)
  float sc[V], sf[V];
  if (b.active) {
    load_coefs<V>(a.coef + c0, sc);
    load_coefs<V>(a.coef + C + c0, sf);
  }
  T* yb = a.y + b.cp.r0 * C + c0;
  const T* rb = ACT && a.res ? a.res + b.cp.r0 * C + c0 : nullptr;
  // the residual is read from global memory (x alone fills the chunk images): a chunk's two rows of the thread
  // (16 KB chunks: two rows a thread at any C) are loaded together when the chunk starts, so that their latencies
  // overlap; other rows are loaded where used. TORCH_DNN_BN_RES_PREFETCH=0: every row where used (A/B). And when a
  // chunk starts, the residual of the chunk res_ahead later in pass 2's order is asked of the L2 (a bulk prefetch;
  // one chunk ahead measured best, deeper prefetches compete with the stream: docs/batch_norm.md;
  // TORCH_DNN_BN_RES_AHEAD).
  Vec<T, V> r0v, r1v;
  int64_t rbase = -1;
  const auto pre = [&](int k, int n) {
    if (!ACT || !rb) return;
    if (threadIdx.x == 0 && a.res_ahead > 0) {
      const int j = b.cp.pass2_index(k) + a.res_ahead;
      if (j < b.cp.nchunks) b.cp.prefetch_l2(res_rows, b.cp.pass2_chunk(j));
    }
    if (!a.prefetch) return;
    rbase = int64_t(k) * b.cp.SR + b.ty;
    if (b.ty < n) r0v = load_vec<T, V>(rb + rbase * C);
    if (b.ty + b.TY < n) r1v = load_vec<T, V>(rb + (rbase + b.TY) * C);
  };
  b.pass2([&](const char* const (&p)[1], int64_t i) {
    float v[V];
    row_vec<T, V>(p[0], v);
    if constexpr (ACT) {
      float r[V];
      if (rb) {
        const int64_t d = i - rbase;
        const Vec<T, V> rv = d == 0 ? r0v : (d == b.TY ? r1v : load_vec<T, V>(rb + i * C));
#pragma unroll
        for (int j = 0; j < V; ++j) r[j] = vec_elem<float>(rv, j);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) r[j] = 0.f;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = act_fwd(fma(v[j], sc[j], sf[j]) + r[j], a.act);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = fma(v[j], sc[j], sf[j]);
    }
    store_acc<V>(yb + i * C, v);
  }, pre);
}

template <typename T>
struct PersistBwdArgs {
  const T* dy;
  const T* x;
  const float* mean;
  T* dx;
  // batch_norm_add_act (the ACT kernels): the residual (RES), the forward's affine map z = x * scale + shift (+ res)
  // for the activation's derivative (read when act != 0), and dz = dy * act'(z), written in pass 1 (d_residual, or
  // a scratch tensor): pass 2 streams dz instead of dy
  const T* res;
  const float* scale;
  const float* shift;
  int act;
  T* dz;
  int64_t R, C;
  PersistGeom geo;
  float* part;   // [2][C][G]
  float* coef;   // [3][C]: k, a, b
  BwdCoeffPtrs p;
  unsigned long long* trace;  // null unless TORCH_DNN_BN_TRACE=1
};

// ACT: batch_norm_add_act's backward (an activation and/or a residual), whose pass 1 turns dy into dz = dy * act'(z)
// and writes it (global, and over dy's image in the cached chunks), so that pass 2 is plain batch_norm's on dz;
// RES: the residual comes through the chunk images too (a third tensor), so that no row waits on a global load.
template <typename T, bool ACT = false, bool RES = false>
__global__ void __launch_bounds__(kPersistThreads, 1) bn_persist_bwd(PersistBwdArgs<T> a) {
  // (compiled for every architecture, launched on sm_90+ only: the bulk copies are no-ops below)
  constexpr int V = kVec16<T>;
  constexpr int NT = RES ? 3 : 2;
  static_assert(ACT || !RES, "a residual comes with the ACT kernel");
  extern __shared__ __align__(16) char persist_smem[];
  const void* base[NT];
  base[0] = a.dy;
  base[1] = a.x;
  if constexpr (RES) base[NT - 1] = a.res;
  PersistBlock<T, NT> b(a.geo, base, a.R, a.C, persist_smem, a.trace);
  const int64_t C = a.C, c0 = b.c0;

  // pass 1: sum dz and sum dz * (x - mean), dz = dy (plain batch_norm) or dy * act'(z)
  FoldedSums<V> acc;
  acc.init();
  float mu[V], sc[V], sf[V];
  if (b.active) load_coefs<V>(a.mean + c0, mu);
  if (ACT && a.act != 0 && b.active) {
    load_coefs<V>(a.scale + c0, sc);
    load_coefs<V>(a.shift + c0, sf);
  }
  T* zb = ACT ? a.dz + b.cp.r0 * C + c0 : nullptr;
  const int64_t cached_rows = int64_t(b.cp.ncc) * b.cp.SR;  // rows below this stay in shared memory for pass 2
  b.pass1(acc, [&](const char* const (&p)[NT], int64_t i) {
    float d[V], v[V];
    row_vec<T, V>(p[0], d);
    row_vec<T, V>(p[1], v);
    if constexpr (ACT) {
      if (a.act != 0) {
        float r[V];
        if constexpr (RES) {
          row_vec<T, V>(p[NT - 1], r);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) r[j] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < V; ++j) d[j] *= act_grad(fma(v[j], sc[j], sf[j]) + r[j], a.act);
      }
      store_acc<V>(zb + i * C, d);
      // a cached chunk's dy image becomes dz (as stored, the rounding pass 2 would read back from global memory)
      if (i < cached_rows) store_acc<V>(reinterpret_cast<T*>(const_cast<char*>(p[0])), d);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] -= mu[j];
    acc.add(d, v);
  });
  if constexpr (ACT) {
    // dz was written by the generic proxy, to global memory and over the cached images; pass 2's bulk copies
    // (async proxy) read the former and refill some of the latter's slots: order the writes before them (the
    // exchange's barriers follow)
    fence_proxy_async();
    b.cp.src[0] = reinterpret_cast<const char*>(a.dz + b.cp.r0 * C);
    b.cp.live = 2;  // pass 2 streams dz and x; the residual is done with
  }
  b.exchange(acc, a.part, [&](int64_t c, double S1, double S2) {
    const BwdCoeffs k = bwd_coeffs_one(a.p, c, S1, S2);
    a.coef[c] = float(k.k);
    a.coef[C + c] = float(k.a);
    a.coef[2 * C + c] = float(k.b);
  });

  // pass 2: dx = k * (dy - a - (x - mean) * b)
  float kk[V], ka[V], kb[V];
  if (b.active) {
    load_coefs<V>(a.coef + c0, kk);
    load_coefs<V>(a.coef + C + c0, ka);
    load_coefs<V>(a.coef + 2 * C + c0, kb);
  }
  T* dxb = a.dx + b.cp.r0 * C + c0;
  b.pass2([&](const char* const (&p)[NT], int64_t i) {
    float d[V], v[V];
    row_vec<T, V>(p[0], d);
    row_vec<T, V>(p[1], v);
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] = kk[j] * (d[j] - ka[j] - (v[j] - mu[j]) * kb[j]);
    store_acc<V>(dxb + i * C, d);
  });
}

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn
