// The flash backward's dK / dV kernel (mma.sync m16n8k16, sm_80+; torch-free). A CTA owns BN = 16 WARPS key rows
// of one (batch, key/value head), a warp 16 of them, with their K and V tiles resident; it walks every query head
// of the group (GQA) and, for each, the query tiles of BM rows that see its keys, Q / dO tiles (and their lse,
// D) double-buffered by cp.async. Everything is computed transposed, keys on the mma's M side, so that no
// fragment has to be transposed through shared memory:
//   S^T = K Q^T, dP^T = V dO^T   (A = the warp's K / V rows by ldmatrix; B = Q / dO as stored: non-transposed)
//   P^T = exp2(S2^T - lse2[col]), dS^T = P^T (dP^T f - D[col]) softcap'  (f: the dropout factor, 1 without)
//   dV += (f P^T) dO, dK += dS^T Q   (P^T / dS^T converted in registers to A fragments; B by ldmatrix.trans)
// and dK = scale dK at the end. Each dK / dV row is summed by one warp in a fixed order (heads, then query
// tiles): deterministic, no atomics, and GQA's sum over the group needs no second pass.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/kernels/flash_epilogue.cuh"
#include "attention/kernels/flash_smem.cuh"
#include "attention/kernels/flash_softmax.cuh"

namespace torch_dnn {
namespace attention {
namespace flash {

template <int D, int WARPS, int BM>
struct DkdvConfig {
  static constexpr int kD = D, kBN = 16 * WARPS, kBM = BM, kThreads = 32 * WARPS;
  static constexpr int kSmemBytes = (2 * kBN * D + 4 * BM * D) * 2 + 4 * BM * 4;
};

// The visible query columns [lo, hi) of a lane's two key rows (g, g + 8) within the query tile at m0, and the
// ALiBi base (j - shift - m0: the distance to column c is |c - base|).
template <int BM>
__device__ __forceinline__ TileRows key_rows(const Visibility& vis, int64_t krow0, int64_t m0, int lane) {
  TileRows tr;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t j = krow0 + (lane >> 2) + 8 * hr;
    if (j >= vis.sk) {
      tr.lo[hr] = BM, tr.hi[hr] = 0;
    } else {
      const int64_t lo = vis.qlo(j) - m0, hi = vis.qhi(j) - m0;  // qhi(j) <= sq
      tr.lo[hr] = int(lo < 0 ? 0 : (lo > BM ? BM : lo));
      tr.hi[hr] = int(hi < 0 ? 0 : (hi > BM ? BM : hi));
    }
    tr.base[hr] = float(j - vis.shift - m0);
  }
  return tr;
}

// P^T (dropped out) into s and dS^T into dp for the NT tiles of one query tile; lse2 / dsum: the tile's columns
// (shared); DROP: the dropout factor of (b, h, query m0 + col, key krow0 + row).
template <int NT, bool CAP, bool MASK, bool DROP>
__device__ __forceinline__ void dkdv_scores(float (&s)[NT][4], float (&dp)[NT][4], const ScoreParams& sp,
                                            const TileRows& tr, float slope_log2, const float* lse2,
                                            const float* dsum, const AttnArgs& a, int64_t b, int64_t h,
                                            int64_t krow0, int64_t m0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int jn = 0; jn < NT; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = jn * 8 + 2 * t + (e & 1);
      float dcap;
      float x = score_log2<CAP>(s[jn][e], sp, dcap);
      if constexpr (MASK) {
        const int hr = e >> 1;
        if (c < tr.lo[hr] || c >= tr.hi[hr]) x = -INFINITY;
        else x -= slope_log2 * fabsf(float(c) - tr.base[hr]);
      }
      const float p = td_exp2_fast(x - lse2[c]);
      float f = 1.f;
      if constexpr (DROP) f = drop_factor(a, sp, b, h, m0 + c, krow0 + g + 8 * (e >> 1));
      s[jn][e] = p * f;
      dp[jn][e] = p * (dp[jn][e] * f - dsum[c]) * dcap;
    }
}

// DROP: dropout on (a kernel of its own, as the forward's).
template <typename T, class Cfg, bool DROP>
__global__ void __launch_bounds__(Cfg::kThreads) flash_bwd_dkdv_kernel(const AttnArgs a, const AttnGrads g,
                                                                       const float* dsum_all, const ScoreParams sp) {
  constexpr int D = Cfg::kD, BM = Cfg::kBM, BN = Cfg::kBN, THREADS = Cfg::kThreads;
  constexpr int NT = BM / 8, DT = D / 8;
  using Tile = SmemTile<D>;
  T* sK = reinterpret_cast<T*>(attn_smem());
  T* sV = sK + BN * D;
  T* sQ = sV + BN * D;       // [2][BM][D]
  T* sO = sQ + 2 * BM * D;   // [2][BM][D]: dO
  float* sL = reinterpret_cast<float*>(sO + 2 * BM * D);  // [2][BM]: lse2
  float* sD = sL + 2 * BM;                                 // [2][BM]: D

  const int64_t nblocks = (a.Sk + BN - 1) / BN;
  const int64_t bid = blockIdx.x, b = bid / (nblocks * a.Hkv), hk = (bid / nblocks) % a.Hkv;
  const Seq seq = make_seq(a, b);
  const int64_t n0 = (bid % nblocks) * BN;
  if (n0 >= seq.sk) return;
  const Visibility vis = make_visibility(a, seq);
  const int64_t G = a.Hq / a.Hkv;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r8 = lane & 7, j4 = lane >> 3;

  const T* gK = static_cast<const T*>(a.k.ptr) + seq.k_off(a.k, b, hk, 0);
  const T* gV = static_cast<const T*>(a.v.ptr) + seq.k_off(a.v, b, hk, 0);
  T* gdK = static_cast<T*>(g.dk.ptr) + seq.k_off(g.dk, b, hk, 0);
  T* gdV = static_cast<T*>(g.dv.ptr) + seq.k_off(g.dv, b, hk, 0);

  const int64_t n_last = (n0 + BN < seq.sk ? n0 + BN : seq.sk) - 1;
  const int64_t i_lo = vis.qlo(n0) / BM * BM, i_hi = vis.qhi(n_last);
  const int nq = i_hi > i_lo ? int((i_hi - i_lo + BM - 1) / BM) : 0;
  const int steps = int(G) * nq;
  const int64_t full_lo = vis.qlo(n_last), full_hi = vis.qhi(n0);

  // Starts the loads of step st (head hk G + st / nq, query tile st % nq) into stage st & 1.
  auto load_step = [&](int st) {
    const int stage = st & 1;
    const int64_t h = hk * G + st / nq, m0 = i_lo + int64_t(st % nq) * BM;
    const T* gQ = static_cast<const T*>(a.q.ptr) + seq.q_off(a.q, b, h, 0);
    const T* gdO = static_cast<const T*>(g.dout.ptr) + seq.q_off(g.dout, b, h, 0);
    load_tile_async<D, BM, THREADS>(sQ + stage * BM * D, gQ, a.q.ss, m0, seq.sq, tid);
    load_tile_async<D, BM, THREADS>(sO + stage * BM * D, gdO, g.dout.ss, m0, seq.sq, tid);
    const float* lse = static_cast<const float*>(a.lse) + (b * a.Hq + h) * a.Sq;
    const float* ds = dsum_all + (b * a.Hq + h) * a.Sq;
    for (int r = tid; r < BM; r += THREADS) {
      const int64_t i = m0 + r;
      sL[stage * BM + r] = i < seq.sq ? lse[i] * kLog2e : INFINITY;
      sD[stage * BM + r] = i < seq.sq ? ds[i] : 0.f;
    }
  };

  load_tile_async<D, BN, THREADS>(sK, gK, a.k.ss, n0, seq.sk, tid);
  load_tile_async<D, BN, THREADS>(sV, gV, a.v.ss, n0, seq.sk, tid);
  if (steps > 0) load_step(0);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();

  const int wrow = warp * 16;
  float dk[DT][4], dv[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[dt][e] = dv[dt][e] = 0.f;

#pragma unroll 1
  for (int st = 0; st < steps; ++st) {
    if (st > 0) {
      ptx::cp_async_wait<0>();
      __syncthreads();  // step st has landed; every warp is done with step st - 1, whose stage is refilled next
    }
    if (st + 1 < steps) load_step(st + 1);
    ptx::cp_async_commit();
    const int stage = st & 1;
    const int64_t h = hk * G + st / nq, m0 = i_lo + int64_t(st % nq) * BM;
    const T* cQ = sQ + stage * BM * D;
    const T* cO = sO + stage * BM * D;

    float s[NT][4], dp[NT][4];
    mma_pair<D, BM>(s, dp, sK, sV, cQ, cO, wrow, r8, j4);

    const float slope_log2 = a.alibi_slopes != nullptr ? a.alibi_slopes[b * a.alibi_sb + h] * kLog2e : 0.f;
    const bool need_mask = m0 < full_lo || m0 + BM > full_hi || m0 + BM > seq.sq || slope_log2 != 0.f;
    const float* cL = sL + stage * BM;
    const float* cD = sD + stage * BM;
    const TileRows tr = need_mask ? key_rows<BM>(vis, n0 + wrow, m0, lane) : TileRows{};
    with_flags(sp.cap_log2 > 0.f, need_mask, [&](auto cap, auto mask) {
      dkdv_scores<NT, decltype(cap)::value, decltype(mask)::value, DROP>(s, dp, sp, tr, slope_log2, cL, cD, a, b, h,
                                                                         n0 + wrow, m0, lane);
    });

#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const uint32_t da[4] = {pack2<T>(dp[2 * kk][0], dp[2 * kk][1]), pack2<T>(dp[2 * kk][2], dp[2 * kk][3]),
                              pack2<T>(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                              pack2<T>(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
#pragma unroll
      for (int d2 = 0; d2 < D / 16; ++d2) {
        const int at = Tile::off(kk * 16 + r8 + 8 * (j4 & 1), d2 * 16 + 8 * (j4 >> 1));
        mma_pair_step<true>(dv[2 * d2], dv[2 * d2 + 1], dk[2 * d2], dk[2 * d2 + 1], pa, da, cO + at, cQ + at);
      }
    }
  }

  const float scale[2] = {float(a.scale), float(a.scale)}, one[2] = {1.f, 1.f};
  store_rows<T, D>(dk, scale, sK, wrow, gdK, g.dk.ss, n0 + wrow, seq.sk, lane);
  store_rows<T, D>(dv, one, sV, wrow, gdV, g.dv.ss, n0 + wrow, seq.sk, lane);
}

}  // namespace flash
}  // namespace attention
}  // namespace torch_dnn
