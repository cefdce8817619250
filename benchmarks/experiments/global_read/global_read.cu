// EXPERIMENT (not part of the extension; benchmarks/NOTES.md, twenty-third session): how fast can a kernel read
// 256x2048x7x7 bf16 (51.4 MB, channels-last [N][P][C]) once and write its 256x2048 means? Issue 3's target for the
// global average pooling forward is 2.7 TB/s (19.4 us for the 52.4 MB counted); the extension's kernels measure
// 2.62-2.64 TB/s. Variants, timed like the harness (a CUDA graph of 20 calls rotating 4 inputs, per-call time):
//   col       the form of the extension's global_avg_cl_col (a thread a column of 8 channels, 7 rows in flight) with every
//             shape a compile-time constant
//   col hint  the same with L1 / L2 cache hints on the loads (no_allocate, L2::256B prefetch): k_col<U, H>
//   col2      two threads a column (rows split in halves, a shuffle)
//   ext       the same with the extension's runtime shapes, 64-bit offsets and predicated rows; split: whole
//             groups of U rows unpredicated, then the remainder rows one at a time
//   ext2      P compiled in, with 32-bit element offsets and / or the column count compiled in
//   bulk<CS>  a block per (image, slice of CS channels): its 49 rows of CS channels by 1-D bulk copies (the TMA
//             unit, issued by one warp's lanes) into shared memory, one mbarrier, then the column sums
//   flat      the read ceiling of plain 16-byte loads: every thread sums its grid-stride vectors (not a pool)
//   ring      the read ceiling of bulk copies: one or two blocks an SM stream 16 KB chunks through a ring of slots
//   ring_nc   the NCHW form (planes of 49): 128-plane chunks through a ring, contiguous ranges or round-robin
//             chunks a block, the extension's plane-mean consumer or a token sum
//   nc block  the NCHW form, a block per 64-256 planes: the extension's chunk kernel, or one bulk copy a block
//   bwd       the NCHW backward's write stream: store ceiling, the extension's bcast, a block per 128 / 256 planes
//   memset    cudaMemsetAsync of the same bytes (the write stream); empty kernel: the cost of a graph node
// Build and run: run.sh beside this file (nvcc -arch=sm_90a).
// Result (H100, twenty-third session; results/h100-pool-global-23.md): col with every shape compiled in 19.0 us a
// call (2.75 TB/s), U = 7 to 25 alike, cache hints no better; the extension's form 19.55, with P compiled in 19.2-19.25
// (adopted: 93e4176; the harness then 0.0198 -> 0.0195 ms); two threads a column 19.35; bulk copies a block
// 21.3-23.8; read ceilings: flat with 8 blocks an SM and the 16 KB ring 18.1 (2.84); the NCHW ring of 128-plane
// chunks 20.7-21.2 with the plane sums, 19.7-20.1 with a token sum (the chunk kernel: 19.8 in the harness).
// Later: P compiled in plus 32-bit offsets 19.2-19.3, plus the column count 19.15 (ext2); NCHW a block per 128 planes
// by one bulk copy 19.2 against 19.47 for the extension's loads (nc block), but in the extension (32 registers, 8
// blocks an SM) 0.0199 ms against 0.0198 by loads: not kept.
// The NCHW backward (bwd): store ceiling 16.7 us (3.14 TB/s, 8448 blocks); the extension's global_bcast_nc 19.7; a
// block per 256 planes with g / 49 staged in shared memory 19.0 (128 planes: 19.2). Built into the extension (with
// st.global.v4 stores: ptxas had split store_vec's into 2-byte stores, 78 us) the harness gave 0.0200 ms against
// the flat walk's 0.0200: not kept.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <string>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "common/cuda/bulk_copy.cuh"

using bf16 = __nv_bfloat16;
using torch_dnn::bulk_copy_g2s;
using torch_dnn::l2_policy_evict_first;
using torch_dnn::mbar_arrive_expect_tx;
using torch_dnn::mbar_fence_init;
using torch_dnn::mbar_init;
using torch_dnn::mbar_wait;

#define CK(x)                                                                                        \
  do {                                                                                               \
    cudaError_t e = (x);                                                                             \
    if (e != cudaSuccess) {                                                                          \
      printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__);                \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

constexpr int kN = 256, kP = 49, kC = 2048;
constexpr size_t kElems = size_t(kN) * kP * kC;

__device__ __forceinline__ void add8(float* acc, uint4 v) {
  const bf16* h = reinterpret_cast<const bf16*>(&v);
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] += __bfloat162float(h[j]);
}
__device__ __forceinline__ void store8(bf16* y, const float* acc, float s) {
  uint4 o;
  bf16* h = reinterpret_cast<bf16*>(&o);
#pragma unroll
  for (int j = 0; j < 8; ++j) h[j] = __float2bfloat16(acc[j] * s);
  *reinterpret_cast<uint4*>(y) = o;
}

// k_col's loads: H = 0 __ldg (ld.global.nc), 1 ld.global.nc.L1::no_allocate.L2::256B (L2 fetches 256-byte blocks),
// H = 2 ld.global.nc.L2::256B, H = 3 ld.global.nc.L1::no_allocate
template <int H>
__device__ __forceinline__ uint4 ld_hint(const void* p) {
  uint4 v;
  if constexpr (H == 0)
    v = __ldg(reinterpret_cast<const uint4*>(p));
  else if constexpr (H == 1)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if constexpr (H == 2)
    asm volatile("ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
// the extension's form: a thread a column (n, 8 channels), U rows in flight, loads with hint H (ld_hint)
template <int U, int H = 0>
__global__ void __launch_bounds__(256, 2) k_col(const bf16* __restrict__ x, bf16* __restrict__ y) {
  constexpr int G = kC / 8;
  const int t = blockIdx.x * 256 + threadIdx.x;
  if (t >= kN * G) return;
  const int n = t / G, g = t - n * G;
  const bf16* xp = x + size_t(n) * kP * kC + g * 8;
  float acc[8] = {};
  for (int r0 = 0; r0 < kP; r0 += U, xp += U * kC) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r0 + u < kP) v[u] = ld_hint<H>(xp + u * kC);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r0 + u < kP) add8(acc, v[u]);
  }
  store8(y + size_t(t) * 8, acc, 1.f / kP);
}

// two threads a column (adjacent lanes): rows 0-24 and 25-48, U rows in flight each, sums added by a shuffle
template <int U>
__global__ void __launch_bounds__(256) k_col2(const bf16* __restrict__ x, bf16* __restrict__ y) {
  constexpr int G = kC / 8, H = (kP + 1) / 2;
  const int t = blockIdx.x * 128 + threadIdx.x / 2, half = threadIdx.x & 1;
  const int n = t / G, g = t - n * G;
  const int r_begin = half ? H : 0, r_end = half ? kP : H;
  const bf16* xp = x + size_t(n) * kP * kC + size_t(r_begin) * kC + g * 8;
  float acc[8] = {};
  for (int r0 = r_begin; r0 < r_end; r0 += U, xp += U * kC) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r0 + u < r_end) v[u] = __ldg(reinterpret_cast<const uint4*>(xp + u * kC));
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r0 + u < r_end) add8(acc, v[u]);
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], 1);
  if (half == 0) store8(y + size_t(t) * 8, acc, 1.f / kP);
}

// the extension's global_avg_cl_col as compiled there: runtime N, P, G; 64-bit column offsets (32-bit division
// where the columns allow); the row loop's loads and adds predicated on r0 + u < P; a grid-stride loop
__device__ __forceinline__ int64_t column_start(int64_t t, int64_t G, int64_t P, int64_t C, bool small) {
  int64_t n;
  if (small) n = uint32_t(t) / uint32_t(G);
  else n = t / G;
  return n * P * C + (t - n * G) * 8;
}
template <int U, bool SPLIT, int PS = 0>
__global__ void __launch_bounds__(256, 2) k_ext(const bf16* __restrict__ x, bf16* __restrict__ y, int64_t N,
                                                int64_t P_, int64_t G) {
  const int64_t P = PS ? PS : P_;  // PS: the row count known at compile time
  const float inv = 1.f / float(P);
  const int64_t C = G * 8, cols = N * G;
  const bool small = cols < (int64_t(1) << 31);
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < cols; t += int64_t(gridDim.x) * blockDim.x) {
    const bf16* xp = x + column_start(t, G, P, C, small);
    float acc[8] = {};
    if constexpr (SPLIT) {
      // whole groups of U rows without predicates, then the last P % U rows one at a time
      int64_t r0 = 0;
      for (; r0 + U <= P; r0 += U, xp += U * C) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = __ldg(reinterpret_cast<const uint4*>(xp + u * C));
#pragma unroll
        for (int u = 0; u < U; ++u) add8(acc, v[u]);
      }
      for (; r0 < P; ++r0, xp += C) add8(acc, __ldg(reinterpret_cast<const uint4*>(xp)));
    } else {
      for (int64_t r0 = 0; r0 < P; r0 += U, xp += U * C) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (r0 + u < P) v[u] = __ldg(reinterpret_cast<const uint4*>(xp + u * C));
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (r0 + u < P) add8(acc, v[u]);
      }
    }
    store8(y + t * 8, acc, inv);
  }
}

// ext with P compiled in, and: O32 = element offsets in 32 bits (each row's address one IMAD.WIDE.U32 from x,
// no chained 64-bit adds; the tensor under 2^31 elements), GS = the column count G compiled in too (0: runtime)
template <bool O32, int GS>
__global__ void __launch_bounds__(256, 2) k_ext2(const bf16* __restrict__ x, bf16* __restrict__ y, int64_t N,
                                                 int64_t G_) {
  constexpr int U = 7, P = kP;
  const int64_t G = GS ? GS : G_;
  const int64_t C = G * 8, cols = N * G;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < cols; t += int64_t(gridDim.x) * blockDim.x) {
    float acc[8] = {};
    if constexpr (O32) {
      const uint32_t n = uint32_t(t) / uint32_t(G), c8 = uint32_t(t) - n * uint32_t(G);
      const uint32_t base = n * uint32_t(P) * uint32_t(C) + c8 * 8u, Cu = uint32_t(C);
#pragma unroll
      for (int r0 = 0; r0 < P; r0 += U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = __ldg(reinterpret_cast<const uint4*>(x + (base + uint32_t(r0 + u) * Cu)));
#pragma unroll
        for (int u = 0; u < U; ++u) add8(acc, v[u]);
      }
    } else {
      const int64_t n = int64_t(uint32_t(t) / uint32_t(G));
      const bf16* xp = x + n * P * C + (t - n * G) * 8;
#pragma unroll 1
      for (int r0 = 0; r0 < P; r0 += U, xp += U * C) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = __ldg(reinterpret_cast<const uint4*>(xp + u * C));
#pragma unroll
        for (int u = 0; u < U; ++u) add8(acc, v[u]);
      }
    }
    store8(y + t * 8, acc, 1.f / P);
  }
}

// a block per (n, slice of CS channels): 49 bulk copies of CS * 2 bytes (one per row) on one mbarrier; 256 threads
// = CV column vectors x R row groups, the row groups' sums added through shared memory in a fixed order
template <int CS>
__global__ void __launch_bounds__(256) k_bulk(const bf16* __restrict__ x, bf16* __restrict__ y) {
  constexpr int CV = CS / 8, R = 256 / CV, slices = kC / CS;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bar;
  bf16* tile = reinterpret_cast<bf16*>(smem);
  const int n = blockIdx.x / slices, s = blockIdx.x - n * slices;
  const bf16* src = x + size_t(n) * kP * kC + s * CS;
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const uint64_t pol = l2_policy_evict_first();
    if (threadIdx.x == 0) mbar_arrive_expect_tx(&bar, kP * CS * 2);
    __syncwarp();
    for (int r = threadIdx.x; r < kP; r += 32) bulk_copy_g2s(tile + r * CS, src + size_t(r) * kC, CS * 2, &bar, pol);
  }
  mbar_wait(&bar, 0);
  const int cv = threadIdx.x % CV, rg = threadIdx.x / CV;
  float acc[8] = {};
  for (int r = rg; r < kP; r += R) add8(acc, *reinterpret_cast<const uint4*>(tile + r * CS + cv * 8));
  if constexpr (R > 1) {
    __syncthreads();  // the tile is no longer read: reuse it for the partial sums
    float* part = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int j = 0; j < 8; ++j) part[(rg * CV + cv) * 8 + j] = acc[j];
    __syncthreads();
    if (rg == 0) {
      for (int q = 1; q < R; ++q)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += part[(q * CV + cv) * 8 + j];
    }
  }
  if (rg == 0) store8(y + size_t(n) * kC + s * CS + cv * 8, acc, 1.f / kP);
}

// read ceiling, plain loads: grid-stride 16-byte vectors, U in flight a thread
template <int U>
__global__ void __launch_bounds__(256) k_flat(const uint4* __restrict__ x, size_t nv, float* __restrict__ out) {
  float acc[8] = {};
  const size_t stride = size_t(gridDim.x) * 256;
  size_t i = size_t(blockIdx.x) * 256 + threadIdx.x;
  for (; i + (U - 1) * stride < nv; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldg(x + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) add8(acc, v[u]);
  }
  for (; i < nv; i += stride) add8(acc, __ldg(x + i));
  float s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += acc[j];
  if (s == 12345.f) out[0] = s;  // keeps the loads
}

// read ceiling, bulk copies: a block an SM, chunks of kChunk bytes through a ring of kSlots; thread 0 issues, all
// 256 threads sum each chunk (one 16-byte vector ... per thread per step) and release the slot by a barrier
constexpr int kChunk = 16384;
template <int kSlots>
__global__ void __launch_bounds__(256) k_ring(const unsigned char* __restrict__ x, size_t bytes, float* __restrict__ out) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[kSlots];
  const size_t chunks = bytes / kChunk;  // the tail (bytes % kChunk) is not read: fine for a ceiling
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) mbar_init(&bars[s], 1);
    mbar_fence_init();
  }
  __syncthreads();
  const uint64_t pol = l2_policy_evict_first();
  auto issue = [&](size_t c, int slot) {
    mbar_arrive_expect_tx(&bars[slot], kChunk);
    bulk_copy_g2s(smem + slot * kChunk, x + c * kChunk, kChunk, &bars[slot], pol);
  };
  size_t mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  if (threadIdx.x == 0)
    for (int s = 0; s < kSlots && size_t(s) < mine; ++s) issue(blockIdx.x + size_t(s) * gridDim.x, s);
  float acc[8] = {};
  for (size_t k = 0; k < mine; ++k) {
    const int slot = int(k % kSlots);
    mbar_wait(&bars[slot], unsigned((k / kSlots) & 1));
#pragma unroll
    for (int q = 0; q < kChunk / 16 / 256; ++q)
      add8(acc, reinterpret_cast<const uint4*>(smem + slot * kChunk)[q * 256 + threadIdx.x]);
    __syncthreads();
    if (threadIdx.x == 0 && k + kSlots < mine) issue(blockIdx.x + (k + kSlots) * gridDim.x, slot);
  }
  float s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += acc[j];
  if (s == 12345.f) out[0] = s;
}

__global__ void empty_kernel() {}

// NCHW form: planes of 49 bf16 (98 bytes), chunks of 128 planes (12544 bytes) through a ring of SLOTS slots.
// CONTIG: block b takes a contiguous range of chunks (else chunks b, b + grid, ...); MEAN: the consumer writes the
// 128 planes' means (two threads a plane, 2-byte shared loads, a shuffle: the extension's mean_planes) instead of
// a token sum of 16-byte vectors.
constexpr int kPlanes = kN * kC, kPB = 128, kChunkNC = kPB * kP * 2, kChunksNC = kPlanes / kPB;
template <int SLOTS, bool CONTIG, bool MEAN>
__global__ void __launch_bounds__(256) k_ring_nc(const bf16* __restrict__ x, bf16* __restrict__ y,
                                                 float* __restrict__ out) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[SLOTS];
  const int c0 = CONTIG ? int(int64_t(kChunksNC) * blockIdx.x / gridDim.x) : blockIdx.x;
  const int c1 = CONTIG ? int(int64_t(kChunksNC) * (blockIdx.x + 1) / gridDim.x) : kChunksNC;
  const int step = CONTIG ? 1 : gridDim.x;
  const int mine = c1 > c0 ? (c1 - c0 + step - 1) / step : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < SLOTS; ++s) mbar_init(&bars[s], 1);
    mbar_fence_init();
  }
  __syncthreads();
  const uint64_t pol = l2_policy_evict_first();
  auto issue = [&](int k) {
    const int slot = k % SLOTS;
    mbar_arrive_expect_tx(&bars[slot], kChunkNC);
    bulk_copy_g2s(smem + slot * kChunkNC, reinterpret_cast<const unsigned char*>(x) + size_t(c0 + k * step) * kChunkNC,
                  kChunkNC, &bars[slot], pol);
  };
  if (threadIdx.x == 0)
    for (int k = 0; k < SLOTS && k < mine; ++k) issue(k);
  float tok = 0;
  for (int k = 0; k < mine; ++k) {
    const int slot = k % SLOTS;
    mbar_wait(&bars[slot], unsigned((k / SLOTS) & 1));
    const bf16* buf = reinterpret_cast<const bf16*>(smem + slot * kChunkNC);
    if constexpr (MEAN) {
      const int pl = threadIdx.x / 2, lane = threadIdx.x & 1;
      float acc = 0;
#pragma unroll 4
      for (int i = lane; i < kP; i += 2) acc += __bfloat162float(buf[pl * kP + i]);
      acc += __shfl_xor_sync(0xffffffffu, acc, 1);
      if (lane == 0) y[size_t(c0 + k * step) * kPB + pl] = __float2bfloat16(acc * (1.f / kP));
    } else {
      float a[8] = {};
      for (int q = threadIdx.x; q < kChunkNC / 16; q += 256) add8(a, reinterpret_cast<const uint4*>(buf)[q]);
      for (int j = 0; j < 8; ++j) tok += a[j];
    }
    __syncthreads();
    if (threadIdx.x == 0 && k + SLOTS < mine) issue(k + SLOTS);
  }
  if (tok == 12345.f) out[0] = tok;
}

// NCHW, a block per PBB planes (not persistent): the extension's chunk kernel (16-byte loads through registers into
// shared memory, U = 4 a thread) or one 1-D bulk copy of the block's PBB * 98 bytes; then TPP = 256 / PBB threads
// a plane sum it from shared memory (the extension's plane sums), a shuffle, the mean
template <int PBB, bool BULK>
__global__ void __launch_bounds__(256) k_nc_block(const bf16* __restrict__ x, bf16* __restrict__ y) {
  constexpr int TPP = 256 / PBB, n = PBB * kP, nv = n / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bar;
  bf16* buf = reinterpret_cast<bf16*>(smem);
  const bf16* src = x + size_t(blockIdx.x) * n;
  if constexpr (BULK) {
    if (threadIdx.x == 0) {
      mbar_init(&bar, 1);
      mbar_fence_init();
      mbar_arrive_expect_tx(&bar, n * 2);
      bulk_copy_g2s(buf, src, n * 2, &bar, l2_policy_evict_first());
    }
    __syncthreads();  // the barrier is initialised before anyone waits on it
    mbar_wait(&bar, 0);
  } else {
    constexpr int U = 4;
#pragma unroll 1
    for (int i0 = threadIdx.x; i0 < nv; i0 += U * 256) {
      uint4 r[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i0 + u * 256 < nv) r[u] = __ldg(reinterpret_cast<const uint4*>(src) + i0 + u * 256);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i0 + u * 256 < nv) reinterpret_cast<uint4*>(buf)[i0 + u * 256] = r[u];
    }
    __syncthreads();
  }
  const int pl = threadIdx.x / TPP, lane = threadIdx.x % TPP;
  float acc = 0;
#pragma unroll 4
  for (int i = lane; i < kP; i += TPP) acc += __bfloat162float(buf[pl * kP + i]);
#pragma unroll
  for (int o = TPP / 2; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) y[size_t(blockIdx.x) * PBB + pl] = __float2bfloat16(acc * (1.f / kP));
}

// The NCHW backward: dx[plane * 49 + p] = g[plane] / 49, a write stream of 51.4 MB (g: 1 MB, L2-resident).
// store: the write ceiling of plain 16-byte stores (a constant), grid-stride; bcast: the extension's global_bcast_nc
// (an item = 8 elements: plane and offset by a multiply-high, g loaded for the one or two planes it spans);
// bchunk: a block per 128 planes, their g / 49 staged in shared memory first (one load a thread), then the chunk's
// 784 vectors stored with the plane of each element from a constant division by 49.
__global__ void __launch_bounds__(256) k_store_flat(uint4* __restrict__ y, size_t nv) {
  const uint4 v = make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);
  for (size_t i = size_t(blockIdx.x) * 256 + threadIdx.x; i < nv; i += size_t(gridDim.x) * 256) y[i] = v;
}
struct Div32 {
  uint32_t d, m, s;
  explicit Div32(uint32_t dv) : d(dv) {
    for (s = 0; s < 32; ++s)
      if ((uint64_t(1) << s) >= d) break;
    m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << s) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};
__global__ void __launch_bounds__(256) k_bcast_nc(const bf16* __restrict__ g, bf16* __restrict__ dx, int64_t total,
                                                  int64_t P, Div32 by_p) {
  const float inv = 1.f / float(P);
  const int64_t items = total / 8;
  for (int64_t t = int64_t(blockIdx.x) * 256 + threadIdx.x; t < items; t += int64_t(gridDim.x) * 256) {
    const int64_t e0 = t * 8;
    const uint32_t q = by_p.div(uint32_t(e0)), r = uint32_t(e0) - q * uint32_t(P);
    const float g0 = __bfloat162float(g[q]) * inv;
    const float g1 = r + 8 > P ? __bfloat162float(g[q + 1]) * inv : g0;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = r + j < P ? g0 : g1;
    store8(dx + e0, v, 1.f);
  }
}
template <int PBB>
__global__ void __launch_bounds__(256) k_bcast_chunk(const bf16* __restrict__ g, bf16* __restrict__ dx) {
  constexpr int n = PBB * kP, nv = n / 8;
  __shared__ float gs[PBB + 1];
  const size_t p0 = size_t(blockIdx.x) * PBB;
  if (threadIdx.x < PBB) gs[threadIdx.x] = __bfloat162float(g[p0 + threadIdx.x]) * (1.f / kP);
  __syncthreads();
  bf16* dst = dx + p0 * kP;
  for (int i = threadIdx.x; i < nv; i += 256) {
    const int e = i * 8, pl = e / kP, r = e - pl * kP;
    const float g0 = gs[pl], g1 = gs[pl + 1 < PBB ? pl + 1 : pl];
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = r + j < kP ? g0 : g1;
    store8(dst + e, v, 1.f);
  }
}

struct Bufs {
  std::vector<bf16*> x;
  std::vector<bf16*> y;
  float* junk;
};

template <typename Launch>
void time_graph(const char* name, Launch launch, const Bufs& b, double counted_bytes, int reps = 40) {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  constexpr int kCalls = 20;
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kCalls; ++i) launch(b.x[i % b.x.size()], b.y[i % b.y.size()], st);
  CK(cudaStreamEndCapture(st, &g));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 5; ++i) CK(cudaGraphLaunch(ge, st));
  std::vector<float> ts;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms * 1000.f / kCalls);
  }
  CK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  const float med = ts[ts.size() / 2];
  printf("| %-22s | %7.2f | %7.2f | %5.3f |\n", name, med, ts[ts.size() / 10], counted_bytes / (med * 1e-6) / 1e12);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(st));
}

// Inputs: uniform in [-scale / 2, scale / 2) (scale 1 by default; `global_read wide` takes 8: the harness's
// uniform(-4, 4), to see whether the values move the times)
__global__ void init(bf16* x, size_t n, uint32_t seed, float scale) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    x[i] = __float2bfloat16((float(h & 0xffff) / 65536.f - 0.5f) * scale);
  }
}

int main(int argc, char** argv) {
  const float scale = argc > 1 && std::string(argv[1]) == "wide" ? 8.f : 1.f;
  printf("inputs: uniform with width %g\n", scale);
  int sms;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Bufs b;
  for (int i = 0; i < 4; ++i) {
    bf16* p;
    CK(cudaMalloc(&p, kElems * 2));
    init<<<1024, 256>>>(p, kElems, 77u + i, scale);
    b.x.push_back(p);
    bf16* q;
    CK(cudaMalloc(&q, size_t(kN) * kC * 2));
    b.y.push_back(q);
  }
  CK(cudaMalloc(&b.junk, 64));
  CK(cudaDeviceSynchronize());
  const double counted = double(kElems) * 2 + double(kN) * kC * 2;

  // correctness: every pooling variant against col<7> on input 0 (sums in a different order: compare loosely)
  std::vector<bf16> ref(size_t(kN) * kC), got(size_t(kN) * kC);
  auto check = [&](const char* name) {
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), b.y[0], got.size() * 2, cudaMemcpyDeviceToHost));
    double maxd = 0;
    for (size_t i = 0; i < got.size(); ++i)
      maxd = std::max(maxd, double(std::abs(__bfloat162float(got[i]) - __bfloat162float(ref[i]))));
    printf("check %-10s max |diff| vs col: %.3g\n", name, maxd);
    CK(cudaMemset(b.y[0], 0xff, got.size() * 2));  // poison for the next variant
  };
  k_col<7><<<kN * kC / 8 / 256, 256>>>(b.x[0], b.y[0]);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(ref.data(), b.y[0], ref.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemset(b.y[0], 0xff, ref.size() * 2));

  auto bulk_launch = [&](auto cs) {
    constexpr int CS = decltype(cs)::value;
    const int smem = std::max(kP * CS * 2, 256 * 8 * 4);
    CK(cudaFuncSetAttribute(k_bulk<CS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return [smem](const bf16* x, bf16* y, cudaStream_t st) { k_bulk<CS><<<kN * (kC / CS), 256, smem, st>>>(x, y); };
  };
  auto b128 = bulk_launch(std::integral_constant<int, 128>{});
  auto b256 = bulk_launch(std::integral_constant<int, 256>{});
  auto b512 = bulk_launch(std::integral_constant<int, 512>{});
  auto b1024 = bulk_launch(std::integral_constant<int, 1024>{});
  auto b2048 = bulk_launch(std::integral_constant<int, 2048>{});
  k_ext<7, false><<<kN * kC / 8 / 256, 256>>>(b.x[0], b.y[0], kN, kP, kC / 8); check("ext7");
  k_ext<7, true><<<kN * kC / 8 / 256, 256>>>(b.x[0], b.y[0], kN, kP, kC / 8); check("ext7split");
  k_ext<8, true><<<kN * kC / 8 / 256, 256>>>(b.x[0], b.y[0], kN, kP, kC / 8); check("ext8split");
  k_col<17><<<kN * kC / 8 / 256, 256>>>(b.x[0], b.y[0]); check("col17");
  k_col2<13><<<kN * kC / 8 / 128, 256>>>(b.x[0], b.y[0]); check("col2_13");
  k_col<7, 1><<<kN * kC / 8 / 256, 256>>>(b.x[0], b.y[0]); check("colhint1");
  k_ext2<false, 0><<<kN * kC / 8 / 256, 256>>>(b.x[0], b.y[0], kN, kC / 8); check("ext2_64");
  k_ext2<true, 0><<<kN * kC / 8 / 256, 256>>>(b.x[0], b.y[0], kN, kC / 8); check("ext2_32");
  k_col<7, 2><<<kN * kC / 8 / 256, 256>>>(b.x[0], b.y[0]); check("colhint2");
  b128(b.x[0], b.y[0], 0); check("bulk128");
  b256(b.x[0], b.y[0], 0); check("bulk256");
  b512(b.x[0], b.y[0], 0); check("bulk512");
  b1024(b.x[0], b.y[0], 0); check("bulk1024");
  b2048(b.x[0], b.y[0], 0); check("bulk2048");
  CK(cudaFuncSetAttribute(k_ring_nc<8, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * kChunkNC));
  CK(cudaFuncSetAttribute(k_ring_nc<8, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * kChunkNC));
  CK(cudaFuncSetAttribute(k_ring_nc<7, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 7 * kChunkNC));
  CK(cudaFuncSetAttribute(k_ring_nc<7, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 7 * kChunkNC));
  CK(cudaFuncSetAttribute(k_ring_nc<5, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 5 * kChunkNC));
  CK(cudaFuncSetAttribute(k_ring_nc<5, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 5 * kChunkNC));
  CK(cudaFuncSetAttribute(k_ring_nc<8, true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * kChunkNC));
  CK(cudaFuncSetAttribute(k_ring_nc<8, false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * kChunkNC));
  CK(cudaFuncSetAttribute(k_ring_nc<7, true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 7 * kChunkNC));
  CK(cudaFuncSetAttribute(k_ring_nc<7, false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 7 * kChunkNC));
  CK(cudaFuncSetAttribute(k_ring<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, kChunk * 8));
  CK(cudaFuncSetAttribute(k_ring<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, kChunk * 6));

  CK(cudaFuncSetAttribute(k_nc_block<256, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 256 * kP * 2));
  CK(cudaFuncSetAttribute(k_nc_block<256, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 256 * kP * 2));
  {  // the NCHW ring's means against the host's (input 0 seen as 524288 planes of 49)
    std::vector<bf16> hx(kElems);
    CK(cudaMemcpy(hx.data(), b.x[0], kElems * 2, cudaMemcpyDeviceToHost));
    std::vector<float> hm(kPlanes);
    for (int pl = 0; pl < kPlanes; ++pl) {
      float a = 0;
      for (int i = 0; i < kP; ++i) a += __bfloat162float(hx[size_t(pl) * kP + i]);
      hm[pl] = a / kP;
    }
    auto check_nc = [&](const char* name) {
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(got.data(), b.y[0], got.size() * 2, cudaMemcpyDeviceToHost));
      double maxd = 0;
      for (int i = 0; i < kPlanes; ++i) maxd = std::max(maxd, double(std::abs(__bfloat162float(got[i]) - hm[i])));
      printf("check %-10s max |diff| vs host: %.3g\n", name, maxd);
      CK(cudaMemset(b.y[0], 0xff, got.size() * 2));
    };
    k_ring_nc<8, true, true><<<sms, 256, 8 * kChunkNC>>>(b.x[0], b.y[0], b.junk); check_nc("nc contig");
    k_ring_nc<7, false, true><<<2 * sms, 256, 7 * kChunkNC>>>(b.x[0], b.y[0], b.junk); check_nc("nc rr");
    {  // the backward forms: dx from g = the means just computed (b.y[0] holds plane means of x[0])
      k_nc_block<128, false><<<kPlanes / 128, 256, 128 * kP * 2>>>(b.x[0], b.y[0]);
      CK(cudaDeviceSynchronize());
      std::vector<bf16> hg(kPlanes), hdx(kElems);
      CK(cudaMemcpy(hg.data(), b.y[0], kPlanes * 2, cudaMemcpyDeviceToHost));
      auto check_bwd = [&](const char* name) {
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hdx.data(), b.x[3], kElems * 2, cudaMemcpyDeviceToHost));
        double maxd = 0;
        for (size_t e = 0; e < kElems; ++e)
          maxd = std::max(maxd, double(std::abs(__bfloat162float(hdx[e]) - __bfloat162float(hg[e / kP]) / kP)));
        printf("check %-10s max |diff| vs host: %.3g\n", name, maxd);
        CK(cudaMemset(b.x[3], 0xff, kElems * 2));
      };
      k_bcast_nc<<<132 * 64, 256>>>(b.y[0], b.x[3], int64_t(kElems), kP, Div32(kP)); check_bwd("bcast");
      k_bcast_chunk<128><<<kPlanes / 128, 256>>>(b.y[0], b.x[3]); check_bwd("bchunk128");
      k_bcast_chunk<256><<<kPlanes / 256, 256>>>(b.y[0], b.x[3]); check_bwd("bchunk256");
      init<<<1024, 256>>>(b.x[3], kElems, 77u + 3, scale);
    }
    k_nc_block<128, false><<<kPlanes / 128, 256, 128 * kP * 2>>>(b.x[0], b.y[0]); check_nc("ncblk128");
    k_nc_block<128, true><<<kPlanes / 128, 256, 128 * kP * 2>>>(b.x[0], b.y[0]); check_nc("ncbulk128");
    k_nc_block<64, true><<<kPlanes / 64, 256, 64 * kP * 2>>>(b.x[0], b.y[0]); check_nc("ncbulk64");
    k_nc_block<256, true><<<kPlanes / 256, 256, 256 * kP * 2>>>(b.x[0], b.y[0]); check_nc("ncbulk256");
  }
  printf("\n| variant | us a call (median) | p10 | TB/s (52.4 MB counted) |\n|---|---|---|---|\n");
  for (int round = 0; round < 2; ++round) {
    time_graph("col U=7 (all static)", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col<7><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("col U=4", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col<4><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("col U=7 nc.L1::no_allocate.L2::256B", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col<7, 1><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("col U=7 nc.L2::256B", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col<7, 2><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("col U=7 nc.L1::no_allocate", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col<7, 3><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("col U=10", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col<10><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("col U=13", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col<13><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("col U=17", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col<17><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("col U=25", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col<25><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("col2 U=13 (2 thr/col)", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col2<13><<<kN * kC / 8 / 128, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("col2 U=7 (2 thr/col)", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_col2<7><<<kN * kC / 8 / 128, 256, 0, st>>>(x, y); }, b, counted);
    time_graph("ext U=7 (predicated)", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_ext<7, false><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y, kN, kP, kC / 8); }, b, counted);
    time_graph("ext U=7 split", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_ext<7, true><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y, kN, kP, kC / 8); }, b, counted);
    time_graph("ext U=7 split, P static", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_ext<7, true, kP><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y, kN, kP, kC / 8); }, b, counted);
    time_graph("ext U=7 pred, P static", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_ext<7, false, kP><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y, kN, kP, kC / 8); }, b, counted);
    time_graph("ext2 64-bit, G runtime", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_ext2<false, 0><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y, kN, kC / 8); }, b, counted);
    time_graph("ext2 64-bit, G static", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_ext2<false, kC / 8><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y, kN, kC / 8); }, b, counted);
    time_graph("ext2 32-bit, G runtime", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_ext2<true, 0><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y, kN, kC / 8); }, b, counted);
    time_graph("ext2 32-bit, G static", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_ext2<true, kC / 8><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y, kN, kC / 8); }, b, counted);
    time_graph("ext U=8 split", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_ext<8, true><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y, kN, kP, kC / 8); }, b, counted);
    time_graph("ext U=4 split", [](const bf16* x, bf16* y, cudaStream_t st) {
      k_ext<4, true><<<kN * kC / 8 / 256, 256, 0, st>>>(x, y, kN, kP, kC / 8); }, b, counted);
    time_graph("bulk CS=128", b128, b, counted);
    time_graph("bulk CS=256", b256, b, counted);
    time_graph("bulk CS=512", b512, b, counted);
    time_graph("bulk CS=1024", b1024, b, counted);
    time_graph("bulk CS=2048", b2048, b, counted);
    for (int mult : {1, 2, 4, 8}) {
      char nm[64];
      snprintf(nm, sizeof nm, "flat U=8 grid %dxSM", mult);
      const int grid = sms * mult;
      float* junk = b.junk;
      time_graph(nm, [grid, junk](const bf16* x, bf16*, cudaStream_t st) {
        k_flat<8><<<grid, 256, 0, st>>>(reinterpret_cast<const uint4*>(x), kElems / 8, junk); }, b, double(kElems) * 2);
    }
    {
      const int g1 = sms, g2 = 2 * sms;
      float* junk = b.junk;
      time_graph("ring 8x16KB, 1 block/SM", [g1, junk](const bf16* x, bf16*, cudaStream_t st) {
        k_ring<8><<<g1, 256, kChunk * 8, st>>>(reinterpret_cast<const unsigned char*>(x), kElems * 2, junk); },
        b, double(kElems) * 2);
      time_graph("ring 6x16KB, 2 blocks/SM", [g2, junk](const bf16* x, bf16*, cudaStream_t st) {
        k_ring<6><<<g2, 256, kChunk * 6, st>>>(reinterpret_cast<const unsigned char*>(x), kElems * 2, junk); },
        b, double(kElems) * 2);
    }
    {
      float* junk = b.junk;
      const int g1 = sms, g2 = 2 * sms, g3 = 3 * sms;
#define RING_NC(SL, CT, MN, G, NAME)                                                                         \
  time_graph(NAME, [G, junk](const bf16* x, bf16* y, cudaStream_t st) {                                        \
    k_ring_nc<SL, CT, MN><<<G, 256, SL * kChunkNC, st>>>(x, y, junk); }, b, counted);
      RING_NC(8, true, true, g1, "nc ring contig mean 1/SM")
      RING_NC(8, false, true, g1, "nc ring rr mean 1/SM")
      RING_NC(7, true, true, g2, "nc ring contig mean 2/SM")
      RING_NC(7, false, true, g2, "nc ring rr mean 2/SM")
      RING_NC(5, true, true, g3, "nc ring contig mean 3/SM")
      RING_NC(5, false, true, g3, "nc ring rr mean 3/SM")
      RING_NC(8, true, false, g1, "nc ring contig token 1/SM")
      RING_NC(8, false, false, g1, "nc ring rr token 1/SM")
      RING_NC(7, true, false, g2, "nc ring contig token 2/SM")
      RING_NC(7, false, false, g2, "nc ring rr token 2/SM")
    }
#define NC_BLOCK(PBB, BULK, NAME)                                                                              \
  time_graph(NAME, [](const bf16* x, bf16* y, cudaStream_t st) {                                                 \
    k_nc_block<PBB, BULK><<<kPlanes / PBB, 256, PBB * kP * 2, st>>>(x, y); }, b, counted);
    NC_BLOCK(128, false, "nc block 128 planes, loads (extension)")
    NC_BLOCK(128, true, "nc block 128 planes, one bulk copy")
    NC_BLOCK(64, true, "nc block 64 planes, one bulk copy")
    NC_BLOCK(256, true, "nc block 256 planes, one bulk copy")
    NC_BLOCK(256, false, "nc block 256 planes, loads")
    {
      const int gA = 132 * 64, g4 = sms * 4;
      time_graph("bwd store ceiling, grid 8448x256", [gA](const bf16* x, bf16*, cudaStream_t st) {
        k_store_flat<<<gA, 256, 0, st>>>(reinterpret_cast<uint4*>(const_cast<bf16*>(x)), kElems / 8); }, b, counted);
      time_graph("bwd store ceiling, grid 4xSM", [g4](const bf16* x, bf16*, cudaStream_t st) {
        k_store_flat<<<g4, 256, 0, st>>>(reinterpret_cast<uint4*>(const_cast<bf16*>(x)), kElems / 8); }, b, counted);
      const Div32 by_p(kP);
      time_graph("bwd bcast (extension)", [gA, by_p](const bf16* x, bf16* y, cudaStream_t st) {
        k_bcast_nc<<<gA, 256, 0, st>>>(y, const_cast<bf16*>(x), int64_t(kElems), kP, by_p); }, b, counted);
      time_graph("bwd chunk 128 planes", [](const bf16* x, bf16* y, cudaStream_t st) {
        k_bcast_chunk<128><<<kPlanes / 128, 256, 0, st>>>(y, const_cast<bf16*>(x)); }, b, counted);
      time_graph("bwd chunk 256 planes", [](const bf16* x, bf16* y, cudaStream_t st) {
        k_bcast_chunk<256><<<kPlanes / 256, 256, 0, st>>>(y, const_cast<bf16*>(x)); }, b, counted);
    }
    time_graph("empty kernel (node cost)", [](const bf16*, bf16*, cudaStream_t st) {
      empty_kernel<<<1, 32, 0, st>>>(); }, b, 0);
  }
  // the write stream: memset of 51.4 MB through the graph
  {
    std::vector<bf16*> big;
    for (int i = 0; i < 4; ++i) big.push_back(b.x[i]);
    time_graph("memset 51.4 MB", [](const bf16* x, bf16*, cudaStream_t st) {
      CK(cudaMemsetAsync(const_cast<bf16*>(x), 0, kElems * 2, st)); }, b, double(kElems) * 2);
  }
  printf("done\n");
  return 0;
}
