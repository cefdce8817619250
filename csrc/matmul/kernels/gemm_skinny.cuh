// The skinny GEMM (decode-like: a few rows of x against a long weight), D = x @ W^T with both operands
// K-contiguous, computed as D^T = W x^T ("swap-AB"): the weight's rows fill the 16-row side of mma.sync
// m16n8k16 and x's few rows its 8-wide side, so no MMA work goes to padding rows past the next multiple of 16.
//
// A CTA streams a panel of kRows weight rows over one K range (split-K), so that the grid covers every SM even
// when N / kRows is small; the weight is read once from DRAM and that read is the floor of the problem. The
// split CTAs of one output tile then sum their partial tiles in split order (deterministic) and apply the fused
// epilogue, in one of two ways:
//   CLUSTER (sm_90): the splits are one thread-block cluster; each CTA sums its share of the tile from every
//     split's shared memory (DSMEM). No workspace, no counter to zero, no partial tile through L2.
//   otherwise: each CTA stores its partial tile (float) in the workspace and bumps an arrival counter; the
//     last to arrive sums all partials. Tiles: W [kRows][kBK] and x [BX][kBK] per stage, 128-byte rows with
// 16-byte chunks XOR-swizzled by row (conflict-free ldmatrix), a STAGES-deep cp.async pipeline (4: several CTAs
// per SM; 8: one CTA per SM streaming a longer K range with more bytes in flight).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <cooperative_groups.h>

#include "matmul/kernels/gemm_mma.cuh"

namespace torch_dnn {
namespace matmul {
namespace skinny {

constexpr int kRows = 128;      // weight rows (output columns) per CTA: 8 warps of 16
constexpr int kBK = 64;         // K per stage: 128 bytes of 16-bit elements, one swizzle period
constexpr int kThreads = 256;
constexpr int kLdc = kRows + 4;  // float row stride of the staged output tile (conflict-free fragment stores)
constexpr int kMaxRows = 64;     // x rows: the largest BX
constexpr int kMaxCluster = 8;   // the portable cluster size limit

template <typename T>
struct Params {
  const T* w;  // [N][K], row stride ldw
  const T* x;  // [M][K], row stride ldx
  int64_t ldw, ldx, M, N, K;
  int tiles_n, splits, kt_per_split;  // split s covers K tiles [s * kt_per_split, (s + 1) * kt_per_split)
  float* ws;                          // splits > 1: partial tiles [split][tile_n][BX][kRows]
  unsigned* counters;                 // splits > 1: one arrival counter per tile_n, zero at launch
  Epi<T> e;
};

template <int BX, int STAGES>
constexpr int smem_bytes() {
  constexpr int pipe = STAGES * (kRows + BX) * kBK * 2;
  constexpr int epi = BX * kLdc * 4;
  return pipe > epi ? pipe : epi;
}

// Element (r, c) of a [rows][kBK] tile: 16-byte chunk c / 8 of row r at chunk (c / 8) ^ (r & 7).
__device__ __forceinline__ int off(int r, int c) { return r * kBK + ((((c >> 3) ^ r) & 7) << 3) + (c & 7); }

// Rows [r0, r0 + ROWS) of a [R][K] K-contiguous matrix, K columns [k0, k0 + kBK), rows past R and columns
// past K zero-filled (cp.async's src-size).
template <typename T, int ROWS>
__device__ __forceinline__ void load_tile(T* s, const T* g, int64_t ld, int64_t r0, int64_t R, int64_t k0,
                                          int64_t K, int tid) {
  constexpr int kChunks = ROWS * (kBK / 8);
#pragma unroll
  for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    if (kChunks % kThreads != 0 && idx >= kChunks) break;
    const int r = idx >> 3, ch = idx & 7;
    const int64_t gr = r0 + r, gc = k0 + ch * 8;
    int64_t cnt = K - gc;
    cnt = gr < R ? (cnt < 0 ? 0 : (cnt > 8 ? 8 : cnt)) : 0;
    mma::cp_async16(s + off(r, ch * 8), cnt > 0 ? g + gr * ld + gc : g, int(cnt) * 2);
  }
}

template <typename T, int BX, bool CLUSTER, int STAGES>
__global__ void __launch_bounds__(kThreads, 2) skinny_kernel(const Params<T> p) {
  static_assert(BX % 16 == 0 && BX <= kMaxRows, "x rows per CTA: 16, 32 or 64");
  constexpr int NB = BX / 8;  // 8-wide blocks of x rows
  constexpr int kStageElems = (kRows + BX) * kBK;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  __shared__ bool last;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int tn = blockIdx.x, split = blockIdx.y;
  const int64_t n0 = int64_t(tn) * kRows;
  const int64_t ktiles = (p.K + kBK - 1) / kBK;
  const int64_t kt0 = int64_t(split) * p.kt_per_split;
  const int64_t kt1 = kt0 + p.kt_per_split < ktiles ? kt0 + p.kt_per_split : ktiles;
  const int nk = kt1 > kt0 ? int(kt1 - kt0) : 0;

  auto load_stage = [&](int stage, int64_t kt) {
    T* sw = smem + stage * kStageElems;
    load_tile<T, kRows>(sw, p.w, p.ldw, n0, p.N, kt * kBK, p.K, tid);
    load_tile<T, BX>(sw + kRows * kBK, p.x, p.ldx, 0, p.M, kt * kBK, p.K, tid);
  };

  float acc[NB][4];
#pragma unroll
  for (int j = 0; j < NB; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[j][q] = 0.f;

#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < nk) load_stage(st, kt0 + st);
    mma::cp_async_commit();
  }
  const int r = lane & 7, j = lane >> 3;
#pragma unroll 1
  for (int it = 0; it < nk; ++it) {
    mma::cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage it has landed; every warp is done with stage it - 1, which the next load refills
    const int nxt = it + STAGES - 1;
    if (nxt < nk) load_stage(nxt % STAGES, kt0 + nxt);
    mma::cp_async_commit();
    const T* sw = smem + (it % STAGES) * kStageElems;
    const T* sx = sw + kRows * kBK;
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 16) {
      uint32_t a[4], b[NB][2];
      mma::ldmatrix_x4<false>(a, sw + off(warp * 16 + r + 8 * (j & 1), ks + 8 * (j >> 1)));
#pragma unroll
      for (int pb = 0; pb < NB / 2; ++pb) {
        uint32_t q[4];
        mma::ldmatrix_x4<false>(q, sx + off(pb * 16 + r + 8 * (j >> 1), ks + 8 * (j & 1)));
        b[2 * pb][0] = q[0];
        b[2 * pb][1] = q[1];
        b[2 * pb + 1][0] = q[2];
        b[2 * pb + 1][1] = q[3];
      }
#pragma unroll
      for (int jn = 0; jn < NB; ++jn) mma::mma_16816<T>(acc[jn], a, b[jn]);
    }
  }
  mma::cp_async_wait<0>();
  __syncthreads();

  // acc[jn] holds D^T rows (weight rows) warp*16 + g (+8) and columns (x rows) jn*8 + 2t (+1): staged as the
  // float tile cs[x row][weight row], so that a thread then owns 8 consecutive output columns of one row.
  float* cs = reinterpret_cast<float*>(smem_raw);
  {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int jn = 0; jn < NB; ++jn)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < 2; ++q) cs[(jn * 8 + 2 * t + q) * kLdc + warp * 16 + g + 8 * h] = acc[jn][2 * h + q];
  }
  __syncthreads();

  constexpr int kItems = BX * (kRows / 8) / kThreads;  // (x row, 8 columns) items per thread
  if constexpr (CLUSTER) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // the cluster is (1, splits): CTA `split` has rank `split`; it finishes items split, split + splits, ...
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every split's tile is staged
    for (int idx = split * kThreads + tid; idx < BX * (kRows / 8); idx += p.splits * kThreads) {
      const int m = idx / (kRows / 8), c = (idx % (kRows / 8)) * 8;
      const int64_t n = n0 + c;
      if (m >= p.M || n >= p.N) continue;
      float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
      for (int s = 0; s < p.splits; ++s) {  // fixed order
        const float* part = cluster.map_shared_rank(cs, s) + m * kLdc + c;
        const float4 lo = *reinterpret_cast<const float4*>(part);
        const float4 hi = *reinterpret_cast<const float4*>(part + 4);
        v[0] += lo.x, v[1] += lo.y, v[2] += lo.z, v[3] += lo.w, v[4] += hi.x, v[5] += hi.y, v[6] += hi.z, v[7] += hi.w;
      }
      epi_store8(p.e, 0, m, n, p.N, v);
    }
    cluster.sync();  // no CTA leaves while another still reads its shared memory
#endif
    return;
  }
  if (p.splits > 1) {
    float* mine = p.ws + (int64_t(split) * p.tiles_n + tn) * (BX * kRows);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int idx = tid + i * kThreads, m = idx / (kRows / 8), c = (idx % (kRows / 8)) * 8;
      *reinterpret_cast<float4*>(mine + m * kRows + c) = *reinterpret_cast<const float4*>(cs + m * kLdc + c);
      *reinterpret_cast<float4*>(mine + m * kRows + c + 4) = *reinterpret_cast<const float4*>(cs + m * kLdc + c + 4);
    }
    __threadfence();  // the partial is visible device-wide before this CTA is counted
    __syncthreads();
    if (tid == 0) last = atomicAdd(p.counters + tn, 1u) == unsigned(p.splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();  // acquire: every other split's partial is read after its arrival was seen
  }
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = tid + i * kThreads, m = idx / (kRows / 8), c = (idx % (kRows / 8)) * 8;
    const int64_t n = n0 + c;
    if (m >= p.M || n >= p.N) continue;
    float v[8];
    if (p.splits > 1) {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = 0.f;
#pragma unroll 1
      for (int s = 0; s < p.splits; ++s) {  // fixed order: the sum does not depend on which CTA came last
        const float* part = p.ws + (int64_t(s) * p.tiles_n + tn) * (BX * kRows) + m * kRows + c;
        const float4 lo = __ldcg(reinterpret_cast<const float4*>(part));
        const float4 hi = __ldcg(reinterpret_cast<const float4*>(part + 4));
        v[0] += lo.x, v[1] += lo.y, v[2] += lo.z, v[3] += lo.w, v[4] += hi.x, v[5] += hi.y, v[6] += hi.z, v[7] += hi.w;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = cs[m * kLdc + c + e];
    }
    epi_store8(p.e, 0, m, n, p.N, v);
  }
}

}  // namespace skinny
}  // namespace matmul
}  // namespace torch_dnn
