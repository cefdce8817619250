// The flash forward mainloop (FlashAttention-2's algorithm on mma.sync m16n8k16, sm_80+; torch-free).
//
// A CTA owns BM = 16 WARPS query rows of one (batch, head); warp w the rows 16 w .. 16 w + 15. Shared memory:
// the Q tile [BM][D] and two stages of K and V tiles [BN][D] (flash_smem.cuh), filled by cp.async: tile n + 1 is
// in flight while tile n is computed. For each key tile:
//   S = Q K^T      A = Q fragments (registers for D <= 128, else ldmatrix from the tile each time), B = K by
//                  ldmatrix (K rows are the n side, d contiguous: the "col" operand as stored);
//   scores         scale (or softcap), log2 units, visibility / ALiBi on the tiles that need it
//                  (flash_softmax.cuh), online softmax in registers, then dropout on P (the sums take P whole);
//   O += P V       P converted in registers to the A fragments of the second mma (the accumulator layout of
//                  two n8 tiles is the A layout of one k16 step), B = V by ldmatrix.trans.
// Only the key tiles some row of the CTA can see are visited (causal / window bounds, nondecreasing in the row).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/kernels/flash_epilogue.cuh"
#include "attention/kernels/flash_smem.cuh"
#include "attention/kernels/flash_softmax.cuh"

namespace torch_dnn {
namespace attention {
namespace flash {

template <int D, int WARPS, int BN>
struct FwdConfig {
  static constexpr int kD = D, kWarps = WARPS, kBM = 16 * WARPS, kBN = BN, kThreads = 32 * WARPS;
  static constexpr bool kQInRegs = D <= 128;
  // Head dims up to 64 leave registers for more warps an SM: 2 CTAs of 8 warps (128 registers a thread, no
  // spills) or 3 of 4 (170; 128 spilled), instead of 1 or 2 at 255
  static constexpr int kMinBlocks = D <= 64 ? (WARPS == 8 ? 2 : 3) : 1;
  static constexpr int kSmemBytes = (kBM * D + 4 * BN * D) * 2;
};

// DROP: dropout on (a kernel of its own: the Philox draws take registers the plain kernel should not give up).
template <typename T, class Cfg, bool DROP>
__global__ void __launch_bounds__(Cfg::kThreads, DROP ? 1 : Cfg::kMinBlocks) flash_forward_kernel(const AttnArgs a, const ScoreParams sp) {
  constexpr int D = Cfg::kD, BM = Cfg::kBM, BN = Cfg::kBN, THREADS = Cfg::kThreads;
  constexpr int KSTEPS = D / 16, NT = BN / 8, DT = D / 8;
  using Tile = SmemTile<D>;
  T* sQ = reinterpret_cast<T*>(attn_smem());
  T* sK = sQ + BM * D;      // [2][BN][D]
  T* sV = sK + 2 * BN * D;  // [2][BN][D]

  // 1-D grid: query tiles fastest, then heads, then batches (neighbouring CTAs share K/V in L2); the last query
  // tile first, which under causal masking has the most keys to visit (the short tiles fill the tail)
  const int64_t mblocks = (a.Sq + BM - 1) / BM;
  const int64_t bid = blockIdx.x, b = bid / (mblocks * a.Hq), h = (bid / mblocks) % a.Hq;
  const Seq seq = make_seq(a, b);
  const int64_t m0 = (mblocks - 1 - bid % mblocks) * BM;
  if (m0 >= seq.sq) return;  // the whole CTA
  const Visibility vis = make_visibility(a, seq);
  const int64_t hk = h / (a.Hq / a.Hkv);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r8 = lane & 7, j4 = lane >> 3;

  const T* gQ = static_cast<const T*>(a.q.ptr) + seq.q_off(a.q, b, h, 0);
  const T* gK = static_cast<const T*>(a.k.ptr) + seq.k_off(a.k, b, hk, 0);
  const T* gV = static_cast<const T*>(a.v.ptr) + seq.k_off(a.v, b, hk, 0);
  T* gO = static_cast<T*>(a.o.ptr) + seq.q_off(a.o, b, h, 0);

  const int64_t m_last = (m0 + BM < seq.sq ? m0 + BM : seq.sq) - 1;
  const int64_t n_lo = vis.lo(m0) / BN * BN, n_hi = vis.hi(m_last);
  const int ntiles = n_hi > n_lo ? int((n_hi - n_lo + BN - 1) / BN) : 0;
  // Tiles wholly inside every row's visible range need no per-element check.
  const int64_t full_lo = vis.lo(m_last), full_hi = vis.hi(m0);
  const float slope_log2 = a.alibi_slopes != nullptr ? a.alibi_slopes[b * a.alibi_sb + h] * kLog2e : 0.f;

  load_tile_async<D, BM, THREADS>(sQ, gQ, a.q.ss, m0, seq.sq, tid);
  ptx::cp_async_commit();
  if (ntiles > 0) {
    load_tile_async<D, BN, THREADS>(sK, gK, a.k.ss, n_lo, seq.sk, tid);
    load_tile_async<D, BN, THREADS>(sV, gV, a.v.ss, n_lo, seq.sk, tid);
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();

  const int wrow = warp * 16;  // the warp's first row in the tile
  uint32_t qf[Cfg::kQInRegs ? KSTEPS : 1][4];
  if constexpr (Cfg::kQInRegs) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
      ptx::ldmatrix_x4<false>(qf[ks], sQ + Tile::off(wrow + r8 + 8 * (j4 & 1), ks * 16 + 8 * (j4 >> 1)));
  }

  float o[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  RowState st;

#pragma unroll 1
  for (int n = 0; n < ntiles; ++n) {
    const int64_t n0 = n_lo + int64_t(n) * BN;
    if (n > 0) {
      ptx::cp_async_wait<0>();
      __syncthreads();  // tile n has landed; every warp is done with tile n - 1, whose stage the next load refills
    }
    if (n + 1 < ntiles) {
      const int nx = (n + 1) & 1;
      load_tile_async<D, BN, THREADS>(sK + nx * BN * D, gK, a.k.ss, n0 + BN, seq.sk, tid);
      load_tile_async<D, BN, THREADS>(sV + nx * BN * D, gV, a.v.ss, n0 + BN, seq.sk, tid);
    }
    ptx::cp_async_commit();
    const T* cK = sK + (n & 1) * BN * D;
    const T* cV = sV + (n & 1) * BN * D;

    float s[NT][4];
#pragma unroll
    for (int jn = 0; jn < NT; ++jn) s[jn][0] = s[jn][1] = s[jn][2] = s[jn][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      uint32_t af[4];
      if constexpr (Cfg::kQInRegs) {
        af[0] = qf[ks][0], af[1] = qf[ks][1], af[2] = qf[ks][2], af[3] = qf[ks][3];
      } else {
        ptx::ldmatrix_x4<false>(af, sQ + Tile::off(wrow + r8 + 8 * (j4 & 1), ks * 16 + 8 * (j4 >> 1)));
      }
#pragma unroll
      for (int p = 0; p < BN / 16; ++p) {
        uint32_t kb[4];
        ptx::ldmatrix_x4<false>(kb, cK + Tile::off(p * 16 + r8 + 8 * (j4 >> 1), ks * 16 + 8 * (j4 & 1)));
        const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        ptx::mma_16816<T>(s[2 * p], af, b0);
        ptx::mma_16816<T>(s[2 * p + 1], af, b1);
      }
    }

    const bool need_mask = n0 < full_lo || n0 + BN > full_hi || n0 + BN > seq.sk || slope_log2 != 0.f;
    scores_tile<NT, BN>(s, sp, vis, m0 + wrow, n0, need_mask, slope_log2, lane);
    online_softmax<NT, DT>(s, o, st);
    if constexpr (DROP) apply_dropout<NT>(s, a, sp, b, h, m0 + wrow, n0, lane);

#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vb[4];
        ptx::ldmatrix_x4<true>(vb, cV + Tile::off(kk * 16 + r8 + 8 * (j4 & 1), dp * 16 + 8 * (j4 >> 1)));
        const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
        ptx::mma_16816<T>(o[2 * dp], pa, b0);
        ptx::mma_16816<T>(o[2 * dp + 1], pa, b1);
      }
    }
  }

  float* lse = a.lse != nullptr ? static_cast<float*>(a.lse) + (b * a.Hq + h) * a.Sq : nullptr;
  store_output<T, D>(o, st, sQ, wrow, gO, a.o.ss, m0 + wrow, seq.sq, lse, lane);
}

}  // namespace flash
}  // namespace attention
}  // namespace torch_dnn
