// EXPERIMENT (not part of the extension; benchmarks/NOTES.md, twenty-first session): skinny x @ w.T on Hopper
// with K split across the two consumer warpgroups of a CTA ("K2"), written in PTX without CUTLASS, to test what
// separates CUTLASS's cooperative 128x64 kernel (our Narrow, M = 256, K = N = 4096: 21.0-21.4 us) from cuBLAS's
// nvjet_sm90_tst_128x64_64x8_1x2 (17.8-19.0 us) on the H100. Result: K2 runs 20.9-21.4 us, level with Narrow;
// not adopted. Build and run: see run.sh beside this file.
//
// Design (nvjet's, as read from its SASS and launch): 128x64 tiles (128 rows of x by 64 weight rows), K tiles
// of 64, TD_K2_STAGES stages of 24 KB, one producer thread, two consumer warpgroups. Warpgroup c takes the K tiles
// c, c + 2, ... and multiplies the whole 128-row tile: per 16-wide K step, two m64n64k16 into acc0 (rows 0-63)
// and acc1 (rows 64-127) that share the B descriptor (TD_K2_GROUPED: four on acc0, then four on acc1, nvjet's
// order). Afterwards they add their partial tiles through shared memory (the consumed stages): warpgroup 0 keeps
// rows 0-63, warpgroup 1 rows 64-127, and each stores its half from registers (alpha, bias, activation,
// residual). Non-persistent: one tile a CTA.
// TD_K2_SHARE: 2 = a cluster of the two row tiles of one weight tile, which each CTA multicasts half of (nvjet's
// launch: cluster (2,1,1) on a (2, 64) grid); 1 = a cluster of two weight tiles sharing x's tile (Narrow's);
// 0 = no cluster; 3 = a 2x2 cluster (two row tiles by two weight tiles): x's tile multicast across the two weight
// tiles and w's across the two row tiles (each CTA loads a quarter of the stage). A stage is freed when the consuming
// warpgroup of every CTA of the cluster is done with it (lane 0 of its 4 warps arrives on every CTA's empty barrier).
// TD_K2_SWAP = 1 builds K2S instead (below): the swap-AB form, one m64n128k16 a 16-wide step.
// Twenty-second session (H100, same launch loop, M = 256, K = N = 4096): K2 21.3 us, K2S 22.3 (cuBLAS 19.6-19.7):
// 14% fewer shared-memory bytes a K tile bought nothing, so K2 is not bound by shared memory. The 2x2 cluster
// (TD_K2_SHARE = 3): 34.6 us, cudaOccupancyMaxActiveClusters 30 (also with 6 stages, 149 KB): two waves.
#pragma once
#include <cstdint>
#include <type_traits>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "activation/activation_math.h"
#include "sm90_wgmma.cuh"

namespace torch_dnn {
namespace matmul {
namespace sm90 {

struct K2Epilogue {
  void* D = nullptr;
  int64_t ldd = 0;
  const void* bias = nullptr;      // [N] or null
  const void* residual = nullptr;  // [M][ldr] or null
  int64_t ldr = 0;
  float alpha = 1.f, pa = 0.f, pb = 0.f;
};

namespace k2 {
#ifndef TD_K2_STAGES
#define TD_K2_STAGES 9
#endif
#ifndef TD_K2_SHARE  // 0: no cluster, 1: the pair shares x's tile, 2: the pair (both row tiles) shares w's tile
#define TD_K2_SHARE 2
#endif
#ifndef TD_K2_XBOX128
#define TD_K2_XBOX128 1
#endif
#ifndef TD_K2_WFIRST
#define TD_K2_WFIRST 0
#endif
#ifndef TD_K2_PROMO
#define TD_K2_PROMO 2
#endif
#ifndef TD_K2_GROUPED
#define TD_K2_GROUPED 0
#endif
#ifndef TD_K2_WAIT
#define TD_K2_WAIT 0
#endif
#ifndef TD_K2_SWAP
#define TD_K2_SWAP 0
#endif
constexpr int kClusterCtas = TD_K2_SHARE == 0 ? 1 : TD_K2_SHARE == 3 ? 4 : 2;
constexpr int kStages = TD_K2_STAGES;
constexpr int kThreads = 384;
constexpr int kTileM = 128, kTileN = 64, kTileK = 64;
constexpr int kBytesA = kTileM * kTileK * 2, kBytesB = kTileN * kTileK * 2, kBytesStage = kBytesA + kBytesB;
constexpr int kBytesRed = 2 * 32 * 128 * 4;  // one 64x64 float tile a consumer warpgroup hands over
static_assert(kBytesRed <= 2 * kBytesStage, "the handover reuses the first two stages");
constexpr int kSmem = 1024 + kStages * kBytesStage + 2 * kStages * 8;

template <typename T>
__device__ __forceinline__ float to_f(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return __half2float(v);
}

// Rows [row0, row0 + 64) x columns [n0, n0 + 64) of D from one warpgroup's accumulator (wgmma's m64n64 layout:
// register i of thread t holds row 16 (t / 32) + (t % 32) / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (t % 4) + i % 2).
template <typename T, activation::Act K>
__device__ __forceinline__ void store_tile(const float (&acc)[32], int t, int row0, int n0, int M, int N,
                                          const K2Epilogue& e) {
  constexpr bool kFast = true;
  const int r0 = row0 + 16 * (t / 32) + (t % 32) / 4;
  const int cq = n0 + 2 * (t % 4);
  T* D = static_cast<T*>(e.D);
  const T* bias = static_cast<const T*>(e.bias);
  const T* res = static_cast<const T*>(e.residual);
  const bool pairs = (e.ldd % 2 == 0) && (reinterpret_cast<uintptr_t>(D) % 4 == 0) &&
                     (res == nullptr || ((e.ldr % 2 == 0) && (reinterpret_cast<uintptr_t>(res) % 4 == 0)));
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int col = cq + 8 * j;
    float b0 = 0.f, b1 = 0.f;
    if (bias != nullptr) {
      if (col < N) b0 = to_f(bias[col]);
      if (col + 1 < N) b1 = to_f(bias[col + 1]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + 8 * h;
      if (row >= M) continue;
      float v0 = e.alpha * acc[4 * j + 2 * h] + b0, v1 = e.alpha * acc[4 * j + 2 * h + 1] + b1;
      v0 = activation::act_forward<K, float, kFast>(v0, e.pa, e.pb);
      v1 = activation::act_forward<K, float, kFast>(v1, e.pa, e.pb);
      const int64_t o = int64_t(row) * e.ldd + col;
      if (pairs && col + 1 < N) {
        if (res != nullptr) {
          const int64_t ro = int64_t(row) * e.ldr + col;
          v0 += to_f(res[ro]);
          v1 += to_f(res[ro + 1]);
        }
        if constexpr (std::is_same_v<T, __nv_bfloat16>)
          *reinterpret_cast<__nv_bfloat162*>(D + o) = __floats2bfloat162_rn(v0, v1);
        else
          *reinterpret_cast<__half2*>(D + o) = __floats2half2_rn(v0, v1);
      } else {
        if (col < N) D[o] = T(v0 + (res != nullptr ? to_f(res[int64_t(row) * e.ldr + col]) : 0.f));
        if (col + 1 < N) D[o + 1] = T(v1 + (res != nullptr ? to_f(res[int64_t(row) * e.ldr + col + 1]) : 0.f));
      }
    }
  }
}

__device__ __forceinline__ void release(uint64_t* empty, int lane) {
  // lane 0 of each warp of the consuming warpgroup, to every CTA of the cluster
#pragma unroll
  for (int r = 0; r < kClusterCtas; ++r) ptx::mbar_arrive_cluster(empty, uint32_t(r), lane == 0);
}

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// What both kernels (K2 and K2S) set up the same way: the 1024-aligned stages, the stage barriers (full: the
// producer's arrival and TMA's bytes; empty: lane 0 of each warp of the consuming warpgroup of every CTA of the
// cluster), the warpgroup index (broadcast from lane 0, so that ptxas knows it is warp-uniform: otherwise the
// consumers' branch is a divergent path to it, and it serialises the wgmma pipeline, C7520), and the tile.
struct K2Cta {
  uint8_t* smem;
  uint64_t* full;
  uint64_t* empty;
  int wg, t, m0, n0, ktiles;
  uint32_t rank;
};

__device__ __forceinline__ K2Cta k2_setup(uint8_t* smem_raw, int Kdim) {
  K2Cta c;
  c.smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  c.full = reinterpret_cast<uint64_t*>(c.smem + kStages * kBytesStage);
  c.empty = c.full + kStages;
  c.wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  c.t = threadIdx.x % 128;
  c.rank = TD_K2_SHARE != 0 ? ptx::cluster_ctarank() : 0;
  c.n0 = (TD_K2_SHARE >= 2 ? blockIdx.y : blockIdx.x) * kTileN;
  c.m0 = (TD_K2_SHARE >= 2 ? blockIdx.x : blockIdx.y) * kTileM;
  c.ktiles = (Kdim + kTileK - 1) / kTileK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(&c.full[s], 1);
      ptx::mbar_init(&c.empty[s], 4 * kClusterCtas);
    }
    ptx::fence_barrier_init();
  }
  ptx::cluster_sync();
  return c;
}

// The producer's turn at K tile kt: wait until its stage is free, announce the stage's bytes; the stage's address.
__device__ __forceinline__ uint8_t* k2_acquire_stage(const K2Cta& c, int kt) {
  const int s = kt % kStages, u = kt / kStages;
  if (u > 0) ptx::mbar_wait(&c.empty[s], (u - 1) & 1);
  ptx::mbar_expect_tx(&c.full[s], kBytesStage);
  return c.smem + s * kBytesStage;
}

template <typename T, activation::Act K>
__global__ void __launch_bounds__(kThreads, 1)
    skinny_k2_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw, int M, int N,
                     int Kdim, const K2Epilogue e) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const K2Cta cta = k2_setup(smem_raw, Kdim);
  uint8_t* smem = cta.smem;
  float* red = reinterpret_cast<float*>(smem);  // the handover, once every stage has been consumed
  uint64_t* full = cta.full;
  uint64_t* empty = cta.empty;
  const int wg = cta.wg, t = cta.t, m0 = cta.m0, n0 = cta.n0, ktiles = cta.ktiles;
  const uint32_t rank = cta.rank;

  if (wg == 0) {
    if (t == 0) {
      ptx::prefetch_tmap(&tx);
      ptx::prefetch_tmap(&tw);
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % kStages;
        uint8_t* stage = k2_acquire_stage(cta, kt);
        if (TD_K2_SHARE == 3) {  // rank = mi + 2 ni: mi the row tile, ni the weight tile inside the cluster
          const int mi = int(rank) % 2, ni = int(rank) / 2;
          ptx::tma_load_2d_multicast(&tx, &full[s], stage + ni * (kBytesA / 2), kt * kTileK, m0 + ni * 64,
                                     uint16_t((1 << mi) | (1 << (mi + 2))));
          ptx::tma_load_2d_multicast(&tw, &full[s], stage + kBytesA + mi * (kBytesB / 2), kt * kTileK, n0 + mi * 32,
                                     uint16_t(0x3 << (2 * ni)));
          continue;
        }
        auto load_w = [&] {
          if (TD_K2_SHARE == 2)
            ptx::tma_load_2d_multicast(&tw, &full[s], stage + kBytesA + rank * (kBytesB / 2), kt * kTileK,
                                       n0 + int(rank) * 32, uint16_t(0x3));
          else
            ptx::tma_load_2d(&tw, &full[s], stage + kBytesA, kt * kTileK, n0);
        };
        if (TD_K2_WFIRST) load_w();
        if (TD_K2_SHARE == 1) {
          ptx::tma_load_2d_multicast(&tx, &full[s], stage + rank * (kBytesA / 2), kt * kTileK, m0 + int(rank) * 64,
                                     uint16_t(0x3));
        } else if (TD_K2_XBOX128) {
          ptx::tma_load_2d(&tx, &full[s], stage, kt * kTileK, m0);
        } else {
          ptx::tma_load_2d(&tx, &full[s], stage, kt * kTileK, m0);
          ptx::tma_load_2d(&tx, &full[s], stage + kBytesA / 2, kt * kTileK, m0 + 64);
        }
        if (!TD_K2_WFIRST) load_w();
      }
    }
    __syncwarp();  // the warp meets the cluster barrier converged
  } else {
    const int c = wg - 1, lane = t % 32;
    float acc0[32], acc1[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) acc0[i] = acc1[i] = 0.f;
    ptx::fence_regs(acc0);  // zeroed before the first wgmma_fence, not between it and the MMAs
    ptx::fence_regs(acc1);
    int prev = -1;
    for (int kt = c; kt < ktiles; kt += 2) {
      const int s = kt % kStages;
      ptx::mbar_wait(&full[s], (kt / kStages) & 1);
      const uint32_t a = ptx::smem_addr(smem + s * kBytesStage);
      const uint64_t da = ptx::desc_k128(a), db = ptx::desc_k128(a + kBytesA);
      ptx::wgmma_fence();
#if TD_K2_GROUPED
#pragma unroll
      for (int k = 0; k < kTileK / 16; ++k)  // 32 bytes of each 128-byte row a step: +2 in the descriptor
        ptx::wgmma_m64n64k16<std::is_same_v<T, __nv_bfloat16>>(acc0, da + 2 * k, db + 2 * k, 1);
#pragma unroll
      for (int k = 0; k < kTileK / 16; ++k)
        ptx::wgmma_m64n64k16<std::is_same_v<T, __nv_bfloat16>>(acc1, da + (kBytesA / 2 >> 4) + 2 * k, db + 2 * k, 1);
#else
#pragma unroll
      for (int k = 0; k < kTileK / 16; ++k) {  // 32 bytes of each 128-byte row a step: +2 in the descriptor
        ptx::wgmma_m64n64k16<std::is_same_v<T, __nv_bfloat16>>(acc0, da + 2 * k, db + 2 * k, 1);
        ptx::wgmma_m64n64k16<std::is_same_v<T, __nv_bfloat16>>(acc1, da + (kBytesA / 2 >> 4) + 2 * k, db + 2 * k, 1);
      }
#endif
      ptx::wgmma_commit();
      ptx::wgmma_wait<TD_K2_WAIT>();
      ptx::fence_regs(acc0);
      ptx::fence_regs(acc1);
      if (TD_K2_WAIT == 0) {
        release(&empty[s], lane);
      } else {
        if (prev >= 0) release(&empty[prev], lane);
        prev = s;
      }
    }
    ptx::wgmma_wait<0>();
    ptx::fence_regs(acc0);
    ptx::fence_regs(acc1);
    if (prev >= 0) release(&empty[prev], lane);
    // Every K tile has now landed in this CTA and been read (by both warpgroups after this barrier), so no TMA
    // write, ours or the peer's multicast, is left to come into the stages: the handover can use them.
    named_sync(1, 256);

    // Warpgroup 0 keeps rows 0-63 and hands over acc1; warpgroup 1 keeps rows 64-127 and hands over acc0.
    float* mine = red + c * 32 * 128;
    float* theirs = red + (1 - c) * 32 * 128;
    if (c == 0) {
#pragma unroll
      for (int i = 0; i < 32; ++i) mine[i * 128 + t] = acc1[i];
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i) mine[i * 128 + t] = acc0[i];
    }
    named_sync(1, 256);
    if (c == 0) {
#pragma unroll
      for (int i = 0; i < 32; ++i) acc0[i] += theirs[i * 128 + t];
      store_tile<T, K>(acc0, t, m0, n0, M, N, e);
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i) acc1[i] += theirs[i * 128 + t];
      store_tile<T, K>(acc1, t, m0 + 64, n0, M, N, e);
    }
  }
  ptx::cluster_sync();  // the peer may still arrive on our barriers
#endif
}

// K2S: the swap-AB form of K2 (D^T = w x^T). A tile is 64 weight rows (wgmma's M) by 128 rows of x (its N): per
// 16-wide K step one m64n128k16 reads 2 KB of w and 4 KB of x (6 KB, against K2's two m64n64k16 at 8 KB), so a K
// tile moves 24 + 24 KB of shared memory instead of 24 + 32 KB. Stage: w's 64x64 box (A) then x's 128x64 box (B).
// Warpgroup c takes the K tiles c, c + 2, ... into one 64-register accumulator; at the end both write their
// partial tiles to shared memory as [x row][w row] floats and all 256 threads add them and store D's rows.
// TD_K2_SHARE 2: the pair is the two row tiles of x over one weight tile (w multicast, as K2); 0: no cluster.
constexpr int kSwPitch = 65;  // floats a row of the handover tile [128 x rows][64 w rows] (+1: fewer bank conflicts)
static_assert(!TD_K2_SWAP || 2 * 128 * kSwPitch * 4 <= kStages * kBytesStage, "the handover reuses the stages");
static_assert(!TD_K2_SWAP || TD_K2_SHARE == 0 || TD_K2_SHARE == 2, "K2S: no cluster, or the pair sharing w");

template <typename T, activation::Act K>
__global__ void __launch_bounds__(kThreads, 1)
    skinny_k2s_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw, int M, int N,
                      int Kdim, const K2Epilogue e) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kBytesW = 64 * kTileK * 2;  // 8 KB: A
  extern __shared__ uint8_t smem_raw[];
  const K2Cta cta = k2_setup(smem_raw, Kdim);  // the grid's order and tile as K2's
  uint8_t* smem = cta.smem;
  float* red = reinterpret_cast<float*>(smem);
  uint64_t* full = cta.full;
  uint64_t* empty = cta.empty;
  const int wg = cta.wg, t = cta.t, m0 = cta.m0, n0 = cta.n0, ktiles = cta.ktiles;
  const uint32_t rank = cta.rank;

  if (wg == 0) {
    if (t == 0) {
      ptx::prefetch_tmap(&tx);
      ptx::prefetch_tmap(&tw);
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % kStages;
        uint8_t* stage = k2_acquire_stage(cta, kt);
        if (TD_K2_SHARE == 2)
          ptx::tma_load_2d_multicast(&tw, &full[s], stage + rank * (kBytesW / 2), kt * kTileK, n0 + int(rank) * 32,
                                     uint16_t(0x3));
        else
          ptx::tma_load_2d(&tw, &full[s], stage, kt * kTileK, n0);
        ptx::tma_load_2d(&tx, &full[s], stage + kBytesW, kt * kTileK, m0);
      }
    }
    __syncwarp();
  } else {
    const int c = wg - 1, lane = t % 32;
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    ptx::fence_regs64(acc);
    for (int kt = c; kt < ktiles; kt += 2) {
      const int s = kt % kStages;
      ptx::mbar_wait(&full[s], (kt / kStages) & 1);
      const uint32_t a = ptx::smem_addr(smem + s * kBytesStage);
      const uint64_t da = ptx::desc_k128(a), db = ptx::desc_k128(a + kBytesW);
      ptx::wgmma_fence();
#pragma unroll
      for (int k = 0; k < kTileK / 16; ++k)
        ptx::wgmma_m64n128k16<std::is_same_v<T, __nv_bfloat16>>(acc, da + 2 * k, db + 2 * k, 1);
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      ptx::fence_regs64(acc);
      release(&empty[s], lane);
    }
    named_sync(1, 256);  // every stage consumed: the handover may overwrite them
    float* mine = red + c * 128 * kSwPitch;
    const int wr = 16 * (t / 32) + (t % 32) / 4;
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      const int w_row = wr + 8 * ((i / 2) % 2), x_row = 8 * (i / 4) + 2 * (t % 4) + i % 2;
      mine[x_row * kSwPitch + w_row] = acc[i];
    }
    named_sync(1, 256);
    const int tid = threadIdx.x - 128;
    T* D = static_cast<T*>(e.D);
    const T* bias = static_cast<const T*>(e.bias);
    const T* res = static_cast<const T*>(e.residual);
#pragma unroll 4
    for (int it = 0; it < 16; ++it) {
      const int idx = it * 256 + tid, xr = idx / 32, wc = 2 * (idx % 32);
      const int row = m0 + xr, col = n0 + wc;
      if (row >= M) continue;
      float v[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float x = e.alpha * (red[xr * kSwPitch + wc + h] + red[128 * kSwPitch + xr * kSwPitch + wc + h]);
        if (bias != nullptr && col + h < N) x += to_f(bias[col + h]);
        x = activation::act_forward<K, float, true>(x, e.pa, e.pb);
        if (res != nullptr && col + h < N) x += to_f(res[int64_t(row) * e.ldr + col + h]);
        v[h] = x;
      }
      const int64_t o = int64_t(row) * e.ldd + col;
      if (col + 1 < N && e.ldd % 2 == 0) {
        if constexpr (std::is_same_v<T, __nv_bfloat16>)
          *reinterpret_cast<__nv_bfloat162*>(D + o) = __floats2bfloat162_rn(v[0], v[1]);
        else
          *reinterpret_cast<__half2*>(D + o) = __floats2half2_rn(v[0], v[1]);
      } else {
        if (col < N) D[o] = T(v[0]);
        if (col + 1 < N) D[o + 1] = T(v[1]);
      }
    }
  }
  ptx::cluster_sync();
#endif
}

// Box rows of the two maps for the variant built.
constexpr unsigned kXBox = TD_K2_SWAP ? 128 : (TD_K2_SHARE == 1 || TD_K2_SHARE == 3) ? 64 : (TD_K2_XBOX128 ? 128 : 64);
constexpr unsigned kWBox = (TD_K2_SHARE == 2 || TD_K2_SHARE == 3) ? 32 : 64;

// 2-D map of a K-contiguous [rows][K] operand (row stride ld elements), 64x64 boxes in the 128-byte swizzle.
inline CUresult make_k2_map(CUtensorMap* map, const void* ptr, int64_t rows, int64_t K, int64_t ld, bool bf16,
                            unsigned box_rows = 64) {
  const cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * 2};
  const cuuint32_t box[2] = {64, box_rows};
  const cuuint32_t estr[2] = {1, 1};
  return cuTensorMapEncodeTiled(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
                                const_cast<void*>(ptr), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                CU_TENSOR_MAP_SWIZZLE_128B,
                                TD_K2_PROMO == 2 ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : TD_K2_PROMO == 1 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

}  // namespace k2

// D[M][N] = act(alpha x w^T + bias) + residual; x: [M][K] (row stride ldx), w: [N][K] (row stride ldw), both
// 16-byte aligned with ld * 2 a multiple of 16 (TMA's rules; the caller checks).
template <typename T, activation::Act K>
cudaError_t launch_skinny_k2_maps(const CUtensorMap& tx, const CUtensorMap& tw, int M, int N, int Kdim,
                                  const K2Epilogue& e, cudaStream_t stream) {
  auto kernel = TD_K2_SWAP ? k2::skinny_k2s_kernel<T, K> : k2::skinny_k2_kernel<T, K>;
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, k2::kSmem);
  if (attr != cudaSuccess) return attr;
  const int ntiles = (N + 63) / 64;
  cudaLaunchConfig_t cfg = {};
  const int mtiles = (M + 127) / 128;
  cfg.gridDim = TD_K2_SHARE >= 2 ? dim3(unsigned((mtiles + 1) / 2 * 2),
                                        unsigned(TD_K2_SHARE == 3 ? (ntiles + 1) / 2 * 2 : ntiles), 1)
                                 : dim3(unsigned((ntiles + 1) / 2 * 2), unsigned(mtiles), 1);
  cfg.blockDim = dim3(k2::kThreads, 1, 1);
  cfg.dynamicSmemBytes = k2::kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = TD_K2_SHARE != 0 ? 2 : 1;
  at[0].val.clusterDim.y = TD_K2_SHARE == 3 ? 2 : 1;
  at[0].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, tx, tw, M, N, Kdim, e);
}

// How many clusters of this launch's shape can be resident at once (cudaOccupancyMaxActiveClusters).
template <typename T, activation::Act K>
int k2_max_active_clusters() {
  auto kernel = TD_K2_SWAP ? k2::skinny_k2s_kernel<T, K> : k2::skinny_k2_kernel<T, K>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, k2::kSmem);
  if (TD_K2_SHARE != 0) cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(2, TD_K2_SHARE == 3 ? 2 : 1, 1);
  cfg.blockDim = dim3(k2::kThreads, 1, 1);
  cfg.dynamicSmemBytes = k2::kSmem;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = TD_K2_SHARE != 0 ? 2 : 1;
  at[0].val.clusterDim.y = TD_K2_SHARE == 3 ? 2 : 1;
  at[0].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  int n = -1;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) n = -1;
  return n;
}

template <typename T, activation::Act K>
cudaError_t launch_skinny_k2(const T* x, int64_t ldx, const T* w, int64_t ldw, int M, int N, int Kdim,
                             const K2Epilogue& e, cudaStream_t stream) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  CUtensorMap tx, tw;
  if (k2::make_k2_map(&tx, x, M, Kdim, ldx, kBf16, k2::kXBox) != CUDA_SUCCESS ||
      k2::make_k2_map(&tw, w, N, Kdim, ldw, kBf16, k2::kWBox) != CUDA_SUCCESS)
    return cudaErrorNotSupported;
  return launch_skinny_k2_maps<T, K>(tx, tw, M, N, Kdim, e, stream);
}

}  // namespace sm90
}  // namespace matmul
}  // namespace torch_dnn
