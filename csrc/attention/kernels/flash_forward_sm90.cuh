// The flash forward on Hopper's warpgroup tensor cores (wgmma, sm_90a): FlashAttention's online softmax with
// S = Q K^T read from shared memory and O += P V taking P straight from the registers that hold the scores.
//
// A CTA of two warpgroups (256 threads) owns BM = 128 query rows of one (batch, query head), 64 a warpgroup, and
// walks the visible key tiles of BN = 128 keys. Shared memory: Q [128][D] and two-stage rings of K and of V tiles
// [128][D], all in the 128-byte swizzle (common/cuda/wgmma.cuh), filled by cp.async from every thread; D = 128:
// 160 KB. Each stage has two mbarriers: full (every thread's cp.async arrival, 256 a phase) and empty (every thread
// arrives once its warpgroup's MMAs that read the stage completed). At the top of iteration t each thread issues its
// share of K of tile t + 1 and V of tile t (V of t is first read by the P V of iteration t + 1).
// Iteration t of a warpgroup (FlashAttention-3's overlap within a warpgroup): S of tile t (D / 16 SS MMAs, 64 x 128
// floats, 64 a thread) and P V of tile t - 1 (BN / 16 RS MMAs, P packed to 16 bits in the registers that held its
// scores) are issued together; the softmax of t (masking where the tile crosses the visibility boundary or the
// end of the keys; the running max and sum in the log2 domain, reduced over the quad of lanes sharing a row) runs
// while P V computes; then O is rescaled and P packed. The two warpgroups drift apart by up to an iteration, so
// one's softmax overlaps the other's MMAs. (Enforcing the alternation with named barriers, FlashAttention-3's
// ping-pong, measured 1-7% slower on the H200.)
// The epilogue divides by the row sums and writes O (16-bit pairs) and lse (float); a row that sees no key gets
// zeros and lse = +inf.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/kernels/attention_common.cuh"
#include "attention/kernels/sm90_common.cuh"

namespace torch_dnn {
namespace attention {

template <int D>
struct Sm90FwdConfig {
  static constexpr int kBM = 128, kBN = 128, kThreads = 256, kStages = 2;
  static constexpr int kQBytes = kBM * D * 2;
  static constexpr int kTileBytes = kBN * D * 2;  // one K or V stage
  static constexpr int kBarrierBytes = 64;
  // +1024: the dynamic shared memory is aligned up to the swizzle atom inside the kernel.
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kTileBytes + kBarrierBytes;
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0, "every tile starts on a swizzle atom");
};

template <typename T, int D>
__global__ void __launch_bounds__(256, 1) flash_forward_sm90_kernel(const AttnArgs a, float scale_log2) {
#ifdef TORCH_DNN_WGMMA_CODE
  using C = Sm90FwdConfig<D>;
  constexpr int BM = C::kBM, BN = C::kBN, NT = C::kThreads;
  const Sm90Thread th;
  const int tid = th.tid, wg = th.wg, quad = th.quad;
  const Sm90QueryTile qt(a, BM, BN);
  if (qt.empty) return;
  const int64_t b = qt.b, h = qt.h, hk = qt.hk, m0 = qt.m0, n_lo = qt.n_lo;
  const int n_tiles = qt.n_tiles;
  const Seq& seq = qt.seq;

  unsigned char* smem = sm90_smem();
  unsigned char* sQ = smem;
  unsigned char* sK = sQ + C::kQBytes;
  unsigned char* sV = sK + C::kStages * C::kTileBytes;
  uint64_t* full_k = reinterpret_cast<uint64_t*>(sV + C::kStages * C::kTileBytes);
  uint64_t* empty_k = full_k + 2;
  uint64_t* full_v = full_k + 4;
  uint64_t* empty_v = full_k + 6;
  sm90_init_barriers(full_k, 8, NT);

  const T* qp = static_cast<const T*>(a.q.ptr) + seq.q_off(a.q, b, h, 0);
  const T* kp = static_cast<const T*>(a.k.ptr) + seq.k_off(a.k, b, hk, 0);
  const T* vp = static_cast<const T*>(a.v.ptr) + seq.k_off(a.v, b, hk, 0);

  // Tile t's K goes to stage t % 2 (it held K of t - 2, released once both warpgroups computed S of t - 2), its
  // V likewise. Issued one tile ahead: K of t + 1 and V of t before S of t (V of t is read by the P V of t + 1).
  const Sm90TileLoader<D, BN, NT> k_loader(tid, a.k.ss), v_loader(tid, a.v.ss);
  auto load_k = [&](int t) {
    if (t >= 2) mbar_wait(&empty_k[t & 1], ((t - 2) >> 1) & 1);
    k_loader.load(sK + (t & 1) * C::kTileBytes, kp, a.k.ss, n_lo + int64_t(t) * BN, seq.sk);
    cp_async_arrive_noinc(&full_k[t & 1]);
  };
  auto load_v = [&](int t) {
    if (t >= 2) mbar_wait(&empty_v[t & 1], ((t - 2) >> 1) & 1);
    v_loader.load(sV + (t & 1) * C::kTileBytes, vp, a.v.ss, n_lo + int64_t(t) * BN, seq.sk);
    cp_async_arrive_noinc(&full_v[t & 1]);
  };

  // This thread's two rows (r = 0, 1) of the tile and the keys each sees.
  int64_t row[2], lo[2], hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row[r] = m0 + th.row(r);
    lo[r] = qt.vis.lo(row[r]);
    hi[r] = qt.vis.hi(row[r]);
  }

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float sc[BN / 2];      // S of the current tile, then its P (float)
  uint32_t pf[BN / 16][4];  // P of the previous tile, packed: the A operand of its P V

  // Descriptors of each operand's start; a k-step adds its byte offset / 16 to the address field (no carry: the
  // shared window is below 256 KB).
  const uint64_t q_desc = sw128_desc_kmajor(smem_addr(sQ) + wg * 64 * 128);
  const uint64_t k_desc = sw128_desc_kmajor(smem_addr(sK));
  const uint64_t v_desc = sw128_desc_mnmajor(smem_addr(sV), BN * 128);
  constexpr uint64_t kStageStep = C::kTileBytes >> 4;
  auto issue_s = [&](int t) {
    const uint64_t kd = k_desc + (t & 1) * kStageStep;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      // k16 step kk: 64-wide column block kk / 4, 32 bytes a step inside it
      Wgmma<BN, T>::ss(sc, q_desc + (((kk / 4) * BM * 128 + (kk % 4) * 32) >> 4),
                       kd + (((kk / 4) * BN * 128 + (kk % 4) * 32) >> 4), kk > 0);
    }
  };
  auto issue_pv = [&](int t) {
    const uint64_t vd = v_desc + (t & 1) * kStageStep;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) Wgmma<D, T>::rs(o, pf[kk], vd + ((kk * 16 * 128) >> 4));
  };
  // Masks S of tile t where needed and folds it into the running max and sum: sc becomes P; returns in alpha the
  // factors O must be rescaled by.
  auto softmax = [&](int t, float (&alpha)[2]) {
    const int64_t n0 = n_lo + int64_t(t) * BN;
    if (qt.needs_mask(n0, BN)) sm90_mask_cols<BN>(sc, lo, hi, n0 + 2 * quad);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * r], sc[4 * j + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[r], mx * scale_log2);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      alpha[r] = td_exp2_fast(m_run[r] - m_use);
      m_run[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = td_exp2_fast(fmaf(sc[4 * j + 2 * r + e], scale_log2, -m_use));
          sc[4 * j + 2 * r + e] = p;
          sum += p;
        }
      l_run[r] = l_run[r] * alpha[r] + sum;
    }
  };

  if (n_tiles > 0) {
    // Q and K of tile 0 share full_k[0]'s first phase.
    Sm90TileLoader<D, BM, NT>(tid, a.q.ss).load(sQ, qp, a.q.ss, m0, seq.sq);
    load_k(0);
    if (n_tiles > 1) load_k(1);
    load_v(0);
    mbar_wait(&full_k[0], 0);
    wgmma_fence();
    issue_s(0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(sc);
    mbar_arrive(&empty_k[0]);
    float alpha[2];
    softmax(0, alpha);
    sm90_acc_to_a<BN, T>(sc, pf);
  }
  // Iteration t: S of t and P V of t - 1 in flight together; the softmax of t runs while P V is still computing.
  for (int t = 1; t < n_tiles; ++t) {
    if (t + 1 < n_tiles) load_k(t + 1);
    load_v(t);
    mbar_wait(&full_k[t & 1], (t >> 1) & 1);
    mbar_wait(&full_v[(t - 1) & 1], ((t - 1) >> 1) & 1);
    wgmma_fence_operand(o);
    wgmma_fence();
    issue_s(t);
    wgmma_commit();
    issue_pv(t - 1);
    wgmma_commit();
    wgmma_wait<1>();
    wgmma_fence_operand(sc);
    mbar_arrive(&empty_k[t & 1]);
    float alpha[2];
    softmax(t, alpha);
    wgmma_wait<0>();
    wgmma_fence_operand(o);
    mbar_arrive(&empty_v[(t - 1) & 1]);
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        o[4 * j + 2 * r] *= alpha[r];
        o[4 * j + 2 * r + 1] *= alpha[r];
      }
    sm90_acc_to_a<BN, T>(sc, pf);
  }
  if (n_tiles > 0) {
    const int t = n_tiles - 1;
    mbar_wait(&full_v[t & 1], (t >> 1) & 1);
    wgmma_fence_operand(o);
    wgmma_fence();
    issue_pv(t);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(o);
  }

  // Epilogue: O / l, lse.
  T* op = static_cast<T*>(a.o.ptr);
  float* lse = static_cast<float*>(a.lse);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int64_t i = row[r];
    if (i < seq.sq) {
      T* orow = op + seq.q_off(a.o, b, h, i);
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const uint32_t v = sm90_pack(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv, static_cast<T*>(nullptr));
        *reinterpret_cast<uint32_t*>(orow + 8 * j + 2 * quad) = v;
      }
      if (quad == 0) {
        lse[(b * a.Hq + h) * a.Sq + i] = l > 0.f ? (m_run[r] + log2f(l)) * 0.6931471805599453f : INFINITY;
      }
    }
  }
#endif
}

}  // namespace attention
}  // namespace torch_dnn
