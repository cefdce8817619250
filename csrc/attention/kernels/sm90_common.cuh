// What the Hopper (wgmma) attention kernels share: the aligned shared memory, a thread's place in the two
// warpgroups' fragments, named barriers, the barrier setup, the query tile of a forward-like grid and the keys it
// sees, a thread's share of a swizzled tile copy, 16-bit packing of accumulator pairs, and masking an accumulator
// tile's columns by per-row bounds.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/kernels/attention_common.cuh"
#include "common/cuda/bulk_copy.cuh"
#include "common/cuda/cp_async.cuh"
#include "common/cuda/wgmma.cuh"

namespace torch_dnn {
namespace attention {

// The block's dynamic shared memory, aligned up to a 1024-byte swizzle atom (the kernels ask for 1024 bytes more).
#if defined(TORCH_DNN_EMULATE_CUDA)
inline unsigned char* sm90_smem() { return emu_dyn_smem(); }  // the shim aligns it to 256 KB
#else
__device__ __forceinline__ unsigned char* sm90_smem() {
  extern __shared__ __align__(1024) unsigned char sm90_smem_raw[];
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(sm90_smem_raw) + 1023) & ~uintptr_t(1023));
}
#endif

// A thread of a two-warpgroup CTA and its place in the m64 fragments (wgmma.cuh): warpgroup wg, warp within it,
// row group g (lane / 4) and quad (lane % 4).
struct Sm90Thread {
  int tid, wg, warp, g, quad;
  __device__ __forceinline__ Sm90Thread() : Sm90Thread(int(threadIdx.x)) {}
  // t: the thread's index among the MMA threads (a warp-specialised kernel's copy warpgroup comes first)
  __device__ __forceinline__ explicit Sm90Thread(int t)
      : tid(t), wg(t / 128), warp((t % 128) / 32), g((t % 32) / 4), quad(t % 4) {}
  // The tile row (0 .. 127) of this thread's fragment row r (0: g, 1: g + 8).
  __device__ __forceinline__ int row(int r) const { return wg * 64 + warp * 16 + g + 8 * r; }
};

// Hardware barrier `id` (1-15; 0 is __syncthreads') of `threads` threads (a multiple of 32): kWait, bar.sync (arrive
// and wait for the rest); else bar.arrive (count toward them without waiting: the other side bar.syncs).
template <bool kWait>
__device__ __forceinline__ void named_barrier(int id, int threads) {
#ifdef TORCH_DNN_HAS_WGMMA
  if constexpr (kWait)
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
  else
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#elif defined(TORCH_DNN_EMULATE_MBARRIER)
  emu_named_barrier(id, threads, kWait);
#endif
}
__device__ __forceinline__ void named_barrier_sync(int id, int threads) { named_barrier<true>(id, threads); }
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) { named_barrier<false>(id, threads); }

// Thread 0 initialises n barriers of `count` arrivals each; then the whole block waits for it.
__device__ __forceinline__ void sm90_init_barriers(uint64_t* bars, int n, unsigned count) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < n; ++i) mbar_init(&bars[i], count);
    mbar_fence_init();
  }
  __syncthreads();
}

// The copy warp's end of a stage whose tile reaches past its sequence's end in a packed batch (the rows there belong
// to the next sequence): its copies landed on `tail` instead of the stage's `full` barrier; once they have, the warp
// zeroes those rows (`zero_rows(lane)`: their probabilities are zero, but a non-finite value there times zero would
// reach the results), makes the writes visible to the MMAs' async-proxy reads, and completes `full`.
template <class ZeroRows>
__device__ __forceinline__ void sm90_complete_foreign_rows(uint64_t* tail, unsigned& tail_phase, uint64_t* full,
                                                           int lane, ZeroRows&& zero_rows) {
  mbar_wait(tail, tail_phase);
  tail_phase ^= 1;
  zero_rows(lane);
  fence_proxy_async();
  __syncwarp();
  if (lane == 0) mbar_arrive(full);
}

// The query tile of a CTA in a grid of (query tiles x Hq x B) CTAs, query tiles fastest and, when causal or windowed,
// the longest rows first; the keys its rows see, in whole BN-key tiles from the first.
struct Sm90QueryTile {
  int64_t b, h, hk, m0;  // batch, query head, its key/value head, first row
  Seq seq;
  Visibility vis;
  int64_t last_row;           // of the tile within the sequence
  int64_t n_lo;               // first key of the first tile
  int n_tiles;                // key tiles any row sees
  int64_t full_lo, full_hi;   // keys every row sees: tiles inside need no masking
  bool empty;                 // no row of this sequence (a short sequence of a packed batch)

  __device__ __forceinline__ Sm90QueryTile(const AttnArgs& a, int BM, int BN) {
    const int64_t m_tiles = (a.Sq + BM - 1) / BM;
    int64_t bid = blockIdx.x;
    int64_t mt = bid % m_tiles;
    bid /= m_tiles;
    h = bid % a.Hq;
    b = bid / a.Hq;
    if (a.causal || a.window_right >= 0) mt = m_tiles - 1 - mt;
    hk = h / (a.Hq / a.Hkv);
    seq = make_seq(a, b);
    m0 = mt * BM;
    empty = m0 >= seq.sq;
    vis = make_visibility(a, seq);
    last_row = (m0 + BM < seq.sq ? m0 + BM : seq.sq) - 1;
    n_lo = vis.lo(m0) / BN * BN;
    const int64_t n_hi = vis.hi(last_row);
    n_tiles = !empty && n_hi > n_lo ? int((n_hi - n_lo + BN - 1) / BN) : 0;
    full_lo = vis.lo(last_row);
    full_hi = vis.hi(m0);
  }
  // Whether key tile [n0, n0 + BN) needs masking for some row of the tile.
  __device__ __forceinline__ bool needs_mask(int64_t n0, int BN) const {
    return n0 < full_lo || n0 + BN > full_hi || n0 + BN > seq.sk;
  }
};

// One thread's share of copying R rows of D elements into a swizzled tile: its 16-byte chunk column is fixed
// (c = tid % (D / 8)) and its rows are tid / (D / 8) + i * kRowStep, so that the swizzle (row % 8) is the same for
// all of them and each next copy is a constant step in shared memory and a row-stride step in global memory.
template <int D, int R, int NT>
struct Sm90TileLoader {
  static constexpr int kChunks = D / 8;             // 16-byte chunks a row
  static constexpr int kRowStep = NT / kChunks;     // rows apart of one thread's consecutive copies
  static constexpr int kCopies = R * kChunks / NT;  // copies a thread makes
  unsigned smem_off = 0;  // of the first copy, in the tile
  int row = 0;            // first row of the thread
  int64_t gmem_off = 0;   // element offset of (row, c * 8) from the operand's row 0

  __device__ __forceinline__ Sm90TileLoader(int tid, int64_t ss) {
    row = tid / kChunks;
    const int c = tid % kChunks;
    smem_off = sw128_offset(R, row, c * 8);
    gmem_off = int64_t(row) * ss + c * 8;
  }
  // Rows [row0, row0 + R) of `base` (row stride ss) into dst; rows at or past `rows_valid` read as zeros.
  template <typename T>
  __device__ __forceinline__ void load(unsigned char* dst, const T* base, int64_t ss, int64_t row0,
                                       int64_t rows_valid) const {
    const T* src = base + row0 * ss + gmem_off;
    const int64_t step = int64_t(kRowStep) * ss;
    if (row0 + R <= rows_valid) {
#pragma unroll
      for (int i = 0; i < kCopies; ++i) cp_async16(dst + smem_off + i * kRowStep * 128, src + i * step);
    } else {
      const int64_t left = rows_valid - row0 - row;  // this thread's rows before the end
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const bool ok = i * kRowStep < left;
        cp_async16_zfill(dst + smem_off + i * kRowStep * 128, ok ? src + i * step : base, ok ? 16 : 0);
      }
    }
  }
};

__device__ __forceinline__ uint32_t sm90_pack(float lo, float hi, __nv_bfloat16*) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t sm90_pack(float lo, float hi, __half*) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// An m64 x N float accumulator fragment (wgmma.cuh's layout) as the register A operand of a following wgmma over
// those N columns: element pairs packed to T, k-step kk taking elements 8 kk .. 8 kk + 7.
template <int N, typename T>
__device__ __forceinline__ void sm90_acc_to_a(const float (&acc)[N / 2], uint32_t (&a)[N / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) a[kk][i] = sm90_pack(acc[8 * kk + 2 * i], acc[8 * kk + 2 * i + 1], static_cast<T*>(nullptr));
}

// Sets to -inf the elements of an m64 x N accumulator fragment (wgmma.cuh's layout) whose column lies outside
// [lo[r], hi[r]) for the thread's row r (0: row g, 1: row g + 8); col0 is the global column of the thread's first
// element (the tile's first column + 2 (lane % 4)).
template <int N>
__device__ __forceinline__ void sm90_mask_cols(float* acc, const int64_t (&lo)[2], const int64_t (&hi)[2],
                                               int64_t col0) {
  auto clamp = [](int64_t v) { return int(v < -1 ? -1 : (v > N ? N : v)); };  // [-1, N] decides every column
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int clo = clamp(lo[r] - col0), chi = clamp(hi[r] - col0);
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * j + e;
        if (col < clo || col >= chi) acc[4 * j + 2 * r + e] = -INFINITY;
      }
  }
}

}  // namespace attention
}  // namespace torch_dnn
