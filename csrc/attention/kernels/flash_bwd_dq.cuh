// The flash backward's dQ kernel (mma.sync m16n8k16, sm_80+; torch-free): the forward's CTA shape (16 WARPS
// query rows of one (batch, head), a warp 16 rows; two stages of K and V tiles [BN][D] by cp.async) with Q and dO
// tiles [BM][D] resident. For each key tile the CTA can see:
//   S = Q K^T and dP = dO V^T    (A from the Q / dO tiles by ldmatrix, B = K / V as stored: non-transposed)
//   P = exp2(S2 - lse2)          (log2 units; lse from the forward, +inf for rows that saw nothing: P = 0)
//   dS = P (dP f - D) softcap'   (D from flash_bwd_preprocess.cuh; f: the dropout factor, 1 without)
//   dQ += dS K                   (dS converted in registers to 16-bit A fragments, B = K by ldmatrix.trans)
// and dQ = scale dQ at the end. Every dQ row is summed by one warp in key order: deterministic, no atomics.
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
struct DqConfig {
  static constexpr int kD = D, kBM = 16 * WARPS, kBN = BN, kThreads = 32 * WARPS;
  static constexpr int kSmemBytes = (2 * kBM * D + 4 * BN * D) * 2;
};

// dS for the NT tiles of one key tile, in place of s; dp: dO V^T; rows' lse2 and D; tr: visible columns;
// DROP: dP times the dropout factor of (b, h, row0 + row, n0 + col).
template <int NT, bool CAP, bool MASK, bool DROP>
__device__ __forceinline__ void dq_scores(float (&s)[NT][4], const float (&dp)[NT][4], const ScoreParams& sp,
                                          const TileRows& tr, float slope_log2, const float (&lse2)[2],
                                          const float (&dsum)[2], const AttnArgs& a, int64_t b, int64_t h,
                                          int64_t row0, int64_t n0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int jn = 0; jn < NT; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int hr = e >> 1;
      float dcap;
      float x = score_log2<CAP>(s[jn][e], sp, dcap);
      if constexpr (MASK) {
        const int c = jn * 8 + 2 * t + (e & 1);
        if (c < tr.lo[hr] || c >= tr.hi[hr]) x = -INFINITY;
        else x -= slope_log2 * fabsf(tr.base[hr] - float(c));
      }
      const float p = td_exp2_fast(x - lse2[hr]);
      float dpv = dp[jn][e];
      if constexpr (DROP) dpv *= drop_factor(a, sp, b, h, row0 + g + 8 * hr, n0 + jn * 8 + 2 * t + (e & 1));
      s[jn][e] = p * (dpv - dsum[hr]) * dcap;
    }
}

// DROP: dropout on (a kernel of its own, as the forward's).
template <typename T, class Cfg, bool DROP>
__global__ void __launch_bounds__(Cfg::kThreads) flash_bwd_dq_kernel(const AttnArgs a, const AttnGrads g,
                                                                     const float* dsum_all, const ScoreParams sp) {
  constexpr int D = Cfg::kD, BM = Cfg::kBM, BN = Cfg::kBN, THREADS = Cfg::kThreads;
  constexpr int NT = BN / 8, DT = D / 8;
  using Tile = SmemTile<D>;
  T* sQ = reinterpret_cast<T*>(attn_smem());
  T* sO = sQ + BM * D;      // dO
  T* sK = sO + BM * D;      // [2][BN][D]
  T* sV = sK + 2 * BN * D;  // [2][BN][D]

  // the last query tile first, as the forward
  const int64_t mblocks = (a.Sq + BM - 1) / BM;
  const int64_t bid = blockIdx.x, b = bid / (mblocks * a.Hq), h = (bid / mblocks) % a.Hq;
  const Seq seq = make_seq(a, b);
  const int64_t m0 = (mblocks - 1 - bid % mblocks) * BM;
  if (m0 >= seq.sq) return;
  const Visibility vis = make_visibility(a, seq);
  const int64_t hk = h / (a.Hq / a.Hkv);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r8 = lane & 7, j4 = lane >> 3;

  const T* gQ = static_cast<const T*>(a.q.ptr) + seq.q_off(a.q, b, h, 0);
  const T* gdO = static_cast<const T*>(g.dout.ptr) + seq.q_off(g.dout, b, h, 0);
  const T* gK = static_cast<const T*>(a.k.ptr) + seq.k_off(a.k, b, hk, 0);
  const T* gV = static_cast<const T*>(a.v.ptr) + seq.k_off(a.v, b, hk, 0);
  T* gdQ = static_cast<T*>(g.dq.ptr) + seq.q_off(g.dq, b, h, 0);

  const int64_t m_last = (m0 + BM < seq.sq ? m0 + BM : seq.sq) - 1;
  const int64_t n_lo = vis.lo(m0) / BN * BN, n_hi = vis.hi(m_last);
  const int ntiles = n_hi > n_lo ? int((n_hi - n_lo + BN - 1) / BN) : 0;
  const int64_t full_lo = vis.lo(m_last), full_hi = vis.hi(m0);
  const float slope_log2 = a.alibi_slopes != nullptr ? a.alibi_slopes[b * a.alibi_sb + h] * kLog2e : 0.f;

  load_tile_async<D, BM, THREADS>(sQ, gQ, a.q.ss, m0, seq.sq, tid);
  load_tile_async<D, BM, THREADS>(sO, gdO, g.dout.ss, m0, seq.sq, tid);
  ptx::cp_async_commit();
  if (ntiles > 0) {
    load_tile_async<D, BN, THREADS>(sK, gK, a.k.ss, n_lo, seq.sk, tid);
    load_tile_async<D, BN, THREADS>(sV, gV, a.v.ss, n_lo, seq.sk, tid);
  }
  ptx::cp_async_commit();

  const int wrow = warp * 16;
  float lse2[2], dsum[2];
  {
    const float* lse = static_cast<const float*>(a.lse) + (b * a.Hq + h) * a.Sq;
    const float* ds = dsum_all + (b * a.Hq + h) * a.Sq;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int64_t i = m0 + wrow + (lane >> 2) + 8 * hr;
      lse2[hr] = i < seq.sq ? lse[i] * kLog2e : INFINITY;
      dsum[hr] = i < seq.sq ? ds[i] : 0.f;
    }
  }
  ptx::cp_async_wait<0>();
  __syncthreads();

  float dq[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.f;

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

    float s[NT][4], dp[NT][4];
    mma_pair<D, BN>(s, dp, sQ, sO, cK, cV, wrow, r8, j4);

    const bool need_mask = n0 < full_lo || n0 + BN > full_hi || n0 + BN > seq.sk || slope_log2 != 0.f;
    const TileRows tr = need_mask ? tile_rows<BN>(vis, m0 + wrow, n0, lane) : TileRows{};
    with_flags(sp.cap_log2 > 0.f, need_mask, [&](auto cap, auto mask) {
      dq_scores<NT, decltype(cap)::value, decltype(mask)::value, DROP>(s, dp, sp, tr, slope_log2, lse2, dsum, a, b,
                                                                       h, m0 + wrow, n0, lane);
    });

#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t da[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp2 = 0; dp2 < D / 16; ++dp2) {
        uint32_t kb[4];
        ptx::ldmatrix_x4<true>(kb, cK + Tile::off(kk * 16 + r8 + 8 * (j4 & 1), dp2 * 16 + 8 * (j4 >> 1)));
        const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        ptx::mma_16816<T>(dq[2 * dp2], da, b0);
        ptx::mma_16816<T>(dq[2 * dp2 + 1], da, b1);
      }
    }
  }

  const float scale[2] = {float(a.scale), float(a.scale)};
  store_rows<T, D>(dq, scale, sQ, wrow, gdQ, g.dq.ss, m0 + wrow, seq.sq, lane);
}

}  // namespace flash
}  // namespace attention
}  // namespace torch_dnn
