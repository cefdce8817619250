// The flash backward on Hopper's warpgroup tensor cores (wgmma, sm_90a), in three launches as the mma.sync
// backward (flash_backward.cu): dK and dV by key tiles, dQ by query tiles, each gradient row summed by one
// warpgroup in a fixed order (no atomics: deterministic).
//   1. flash_bwd_prep_sm90_kernel: lse2 = lse log2(e) and D = rowsum(dO * O) into [B][Hq][sq_pad] float
//      workspaces (sq_pad: Sq rounded up to 64), padded rows lse2 = +inf (P = 0) and D = 0, so that a 64-row
//      slice of either is a 16-byte-aligned copy that needs no bounds.
//   2. flash_bwd_dkdv_sm90_kernel: a CTA per 128 keys of a (batch, key/value head), 64 a warpgroup, K and V
//      resident; it walks the group's query heads and the 64-row query tiles that see its keys (Q, dO, lse2, D of
//      a tile in a ring of stages). Transposed, so that the keys are the MMAs' M side and P^T, dS^T stay in
//      registers as A operands:
//        S^T = K Q^T, dP^T = V dO^T      (SS: K / V and Q / dO K-major)
//        P^T = exp2(scale log2(e) S^T - lse2),  dS^T = P^T (dP^T - D)
//        dV += P^T dO, dK += dS^T Q      (RS: dO / Q read MN-major)
//      dK = scale dK at the end.
//      (dQ is not added here by float atomics into a workspace, FlashAttention-3's way: atomics make the result
//      depend on the order of arrival, so dQ has its own deterministic pass; docs/attention.md has the measurement.)
//   3. flash_bwd_dq_sm90_kernel: a CTA per 128 query rows of a (batch, head), 64 a warpgroup, Q and dO resident;
//      key tiles of 64 (K and V in a ring of stages):
//        S = Q K^T, dP = dO V^T (SS);  P = exp2(.. - lse2), dS = P (dP - D);  dQ += dS K (RS, K MN-major)
//      dQ = scale dQ at the end.
// Passes 2 and 3 have two schedules each (Sm90Bwd; Sm90DkdvConfig, Sm90DqConfig): the MMA threads copying the
// tiles by cp.async (two stages), or a copy warpgroup's tensor copies (WarpSpecialized, three stages), with the same
// products in the same order.
// Stages are guarded as in the forward (flash_forward_sm90.cuh): full[s] completes when every thread's copies
// landed (cp.async) or the copy thread's bytes did (WarpSpecialized), empty[s] when every MMA thread's MMAs that
// read the stage completed.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/kernels/attention_common.cuh"
#include "attention/kernels/flash_bwd_preprocess.cuh"
#include "attention/kernels/sm90_common.cuh"
#include "common/cuda/tma.cuh"

namespace torch_dnn {
namespace attention {

constexpr int kSm90PrepWarps = 8;
constexpr int kSm90RowPad = 64;

template <typename T>
__global__ void __launch_bounds__(32 * kSm90PrepWarps)
    flash_bwd_prep_sm90_kernel(const AttnArgs a, const AttnGrads gr, float* lse2, float* dsum, int64_t sq_pad) {
  const int64_t row = int64_t(blockIdx.x) * kSm90PrepWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= a.B * a.Hq * sq_pad) return;
  const int64_t i = row % sq_pad, bh = row / sq_pad, h = bh % a.Hq, b = bh / a.Hq;
  const Seq seq = make_seq(a, b);
  const float acc = flash::rowsum_dout_o<T>(a, gr, seq, b, h, i, lane);
  if (lane == 0) {
    dsum[row] = acc;
    lse2[row] = i < seq.sq ? static_cast<const float*>(a.lse)[bh * a.Sq + i] * 1.4426950408889634f : INFINITY;
  }
}

// The dK / dV pass's schedules (Sm90Bwd, attention_kernels.h). CpAsync: every thread of the two MMA warpgroups
// issues its share of each query tile by cp.async, a tile ahead, over two stages. WarpSpecialized: a copy
// warpgroup (the first, threads 0-127; one thread issues) copies K and V once by the copy engine (tma.cuh), then for
// each query tile Q and dO by the copy engine and its lse2 and D rows by bulk copies into a ring of kStages stages,
// and the MMA warpgroups only compute (they take its registers: setmaxnreg, as the forward's). Both compute the
// same products in the same order, so their gradients are bitwise equal.
template <int D, Sm90Bwd kSchedule = Sm90Bwd::CpAsync>
struct Sm90DkdvConfig {
  static constexpr bool kTma = kSchedule == Sm90Bwd::WarpSpecialized;
  static constexpr int kBN = 128, kBQ = 64, kMmaThreads = 256;
  static constexpr int kThreads = kTma ? kMmaThreads + 128 : kMmaThreads;
  // The copy engine's tiles land without a thread's issue slots, so more of them can be in flight.
  static constexpr int kStages = kTma ? 3 : 2;
  // Registers after setmaxnreg (flash_forward_sm90.cuh: an increase draws only on what the CTA was launched with,
  // 168 x 384 here): the copy warpgroup keeps 24, the MMA warpgroups take the rest, 240.
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8, kCopyRegs = 24;
  static constexpr int kMmaRegs = (kThreads * kLaunchRegs - 128 * kCopyRegs) / kMmaThreads / 8 * 8;
  static_assert(!kTma || (kMmaRegs == 240 && 128 * kCopyRegs + kMmaThreads * kMmaRegs <= kThreads * kLaunchRegs),
                "setmaxnreg beyond the pool");
  static constexpr int kKBytes = kBN * D * 2;  // K or V
  static constexpr int kQBytes = kBQ * D * 2;  // one stage of Q or dO
  static constexpr int kVecBytes = kBQ * 4;    // one stage of lse2 or D
  // Q and dO of a stage start on swizzle atoms (1024 bytes): the vectors' 512 bytes take a whole atom.
  static constexpr int kStageBytes = 2 * kQBytes + 1024;
  static_assert(2 * kVecBytes <= 1024 && kQBytes % 1024 == 0 && kKBytes % 1024 == 0, "swizzle atoms");
  // full and empty of each stage, kv_full, and (WarpSpecialized) tail: 8 barriers
  static constexpr int kBarrierBytes = 64;
  static_assert((2 * kStages + 2) * 8 <= kBarrierBytes, "barriers");
  static constexpr int kSmemBytes = 1024 + 2 * kKBytes + kStages * kStageBytes + kBarrierBytes;
  static_assert(kSmemBytes <= 227 * 1024, "beyond an SM's shared memory");
};

// The tensor maps of q, dout, k and v ([B][H][S][D] as 4-D tensors, D innermost; a packed batch as B = 1), in
// boxes of 64 columns by a pass's tile rows: the dK / dV pass's query tiles (64) and key tiles (128), or the dQ
// pass's query tiles (128) and key tiles (64). Unused by the cp.async form.
struct Sm90BwdMaps {
  TmaMap4 q, dout, k, v;
};

template <typename T, int D, Sm90Bwd kSchedule>
__global__ void __launch_bounds__(Sm90DkdvConfig<D, kSchedule>::kThreads, 1)
    flash_bwd_dkdv_sm90_kernel(const AttnArgs a, const AttnGrads gr, const float* lse2_all, const float* dsum_all,
                               int64_t sq_pad, float scale_log2, const __grid_constant__ Sm90BwdMaps maps) {
#ifdef TORCH_DNN_WGMMA_CODE
  using C = Sm90DkdvConfig<D, kSchedule>;
  constexpr bool kTma = C::kTma;
  constexpr int BN = C::kBN, BQ = C::kBQ, NT = C::kMmaThreads, kStages = C::kStages;
  // the thread's place among the MMA threads (the copy warpgroup's threads have none)
  const Sm90Thread th(kTma ? int(threadIdx.x) - 128 : int(threadIdx.x));
  const int tid = th.tid, wg = th.wg, quad = th.quad;

  const int64_t n_tiles = (a.Sk + BN - 1) / BN;
  int64_t bid = blockIdx.x;
  const int64_t nt = bid % n_tiles;
  bid /= n_tiles;
  const int64_t hk = bid % a.Hkv, b = bid / a.Hkv;
  const int64_t group = a.Hq / a.Hkv;
  const Seq seq = make_seq(a, b);
  const int64_t n0 = nt * BN;
  if (n0 >= seq.sk) return;
  const Visibility vis = make_visibility(a, seq);
  const int64_t last_key = (n0 + BN < seq.sk ? n0 + BN : seq.sk) - 1;
  // Query rows that see any key of the tile, in whole tiles from the first; the rows that see all of them.
  const int64_t q_lo = vis.qlo(n0) / BQ * BQ, q_hi = vis.qhi(last_key);
  const int nq = q_hi > q_lo ? int((q_hi - q_lo + BQ - 1) / BQ) : 0;
  const int total = nq * int(group);
  const int64_t full_qlo = vis.qlo(last_key), full_qhi = vis.qhi(n0);

  unsigned char* smem = sm90_smem();
  unsigned char* sK = smem;
  unsigned char* sV = sK + C::kKBytes;
  unsigned char* stages = sV + C::kKBytes;  // stage s: Q, dO, lse2, D
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + kStages * C::kStageBytes);
  uint64_t* empty = full + kStages;
  uint64_t* kv_full = full + 2 * kStages;
  uint64_t* tail = kv_full + 1;  // kTma, packed batches: a query tile before its foreign rows are zeroed
  if constexpr (kTma) {
    // full, kv_full, tail: the copy thread's one arrival (with the bytes); empty: every MMA thread once its
    // warpgroup's MMAs that read the stage completed
    if (threadIdx.x == 0) {
      for (int st = 0; st < kStages; ++st) {
        mbar_init(&full[st], 1);
        mbar_init(&empty[st], NT);
      }
      mbar_init(kv_full, 1);
      mbar_init(tail, 1);
      mbar_fence_init();
    }
    __syncthreads();
  } else {
    sm90_init_barriers(full, 2 * kStages + 1, NT);  // full: every thread's cp.async arrival; empty: as above
  }

  if constexpr (kTma) {
    if (threadIdx.x < 128) {
      setmaxnreg_dec<C::kCopyRegs>();
      if (threadIdx.x >= 32) return;
      // The copy warp: K and V, then tile `it` into stage it % kStages once the MMAs that read its previous tile
      // (it - kStages) completed. In a packed batch the rows past a sequence's end belong to the next one: a tile
      // that reaches them lands on its own barrier, the warp zeroes those rows of Q and dO (their probabilities
      // are zero, but a non-finite value there times zero would reach dK and dV; the cp.async form reads zeros)
      // and then completes the stage's full barrier.
      const int lane = int(threadIdx.x);
      const int batch = seq.varlen ? 0 : int(b);
      const int64_t q_row0 = seq.varlen ? seq.q_row0 : 0, k_row0 = seq.varlen ? seq.k_row0 : 0;
      // Q, dO and their rows are read by every key tile of the head; K and V by this CTA only.
      const uint64_t keep = l2_policy_evict_last(), once = l2_policy_evict_first();
      if (lane == 0) {
        mbar_arrive_expect_tx(kv_full, 2 * C::kKBytes);
        tma_load_tile_4d<D>(sK, &maps.k, k_row0 + n0, hk, batch, BN, kv_full, once);
        tma_load_tile_4d<D>(sV, &maps.v, k_row0 + n0, hk, batch, BN, kv_full, once);
      }
      unsigned tail_phase = 0;
      for (int it = 0; it < total; ++it) {
        const int s = it % kStages;
        const int64_t h = hk * group + it / nq;
        const int64_t i0 = q_lo + int64_t(it % nq) * BQ;
        const bool foreign_rows = seq.varlen && i0 + BQ > seq.sq;
        unsigned char* st = stages + s * C::kStageBytes;
        if (lane == 0) {
          if (it >= kStages) mbar_wait(&empty[s], (it / kStages - 1) & 1);
          uint64_t* bar = foreign_rows ? tail : &full[s];
          mbar_arrive_expect_tx(bar, 2 * C::kQBytes + 2 * C::kVecBytes);
          tma_load_tile_4d<D>(st, &maps.q, q_row0 + i0, h, batch, BQ, bar, keep);
          tma_load_tile_4d<D>(st + C::kQBytes, &maps.dout, q_row0 + i0, h, batch, BQ, bar, keep);
          const int64_t vec = (b * a.Hq + h) * sq_pad + i0;  // padded rows: always whole
          bulk_copy_g2s(st + 2 * C::kQBytes, lse2_all + vec, C::kVecBytes, bar, keep);
          bulk_copy_g2s(st + 2 * C::kQBytes + C::kVecBytes, dsum_all + vec, C::kVecBytes, bar, keep);
        }
        if (foreign_rows) {
          sm90_complete_foreign_rows(tail, tail_phase, &full[s], lane, [&](int lane) {  // Q's and dO's rows
            for (int r = int(seq.sq - i0) + lane; r < BQ; r += 32)
#pragma unroll
              for (int m = 0; m < 2; ++m)
#pragma unroll
                for (int cb = 0; cb < D / 64; ++cb)
#pragma unroll
                  for (int c = 0; c < 8; ++c)
                    *reinterpret_cast<int4*>(st + m * C::kQBytes + cb * BQ * 128 + r * 128 + c * 16) = int4{};
          });
        }
      }
      return;
    }
    setmaxnreg_inc<C::kMmaRegs>();
  }

  const T* kp = static_cast<const T*>(a.k.ptr) + seq.k_off(a.k, b, hk, 0);
  const T* vp = static_cast<const T*>(a.v.ptr) + seq.k_off(a.v, b, hk, 0);
  if constexpr (!kTma) {
    const Sm90TileLoader<D, BN, NT> kv_loader(tid, a.k.ss);
    kv_loader.load(sK, kp, a.k.ss, n0, seq.sk);
    const Sm90TileLoader<D, BN, NT> v_loader(tid, a.v.ss);
    v_loader.load(sV, vp, a.v.ss, n0, seq.sk);
    cp_async_arrive_noinc(kv_full);
  }
  const Sm90TileLoader<D, BQ, NT> q_loader(tid, a.q.ss), do_loader(tid, gr.dout.ss);
  // The cp.async form's copies of tile `it`: query head hk * group + it / nq, rows q_lo + (it % nq) BQ.
  auto load = [&](int it) {
    if constexpr (!kTma) {
      const int s = it % kStages;
      if (it >= kStages) mbar_wait(&empty[s], (it / kStages - 1) & 1);
      const int64_t h = hk * group + it / nq;
      const int64_t i0 = q_lo + int64_t(it % nq) * BQ;
      unsigned char* st = stages + s * C::kStageBytes;
      q_loader.load(st, static_cast<const T*>(a.q.ptr) + seq.q_off(a.q, b, h, 0), a.q.ss, i0, seq.sq);
      do_loader.load(st + C::kQBytes, static_cast<const T*>(gr.dout.ptr) + seq.q_off(gr.dout, b, h, 0), gr.dout.ss,
                     i0, seq.sq);
      if (tid < 2 * (BQ / 4)) {  // 16 chunks of lse2, then 16 of D
        const int which = tid / (BQ / 4), c = tid % (BQ / 4);
        const float* src = (which == 0 ? lse2_all : dsum_all) + (b * a.Hq + h) * sq_pad + i0 + 4 * c;
        cp_async16(st + 2 * C::kQBytes + which * C::kVecBytes + 16 * c, src);
      }
      cp_async_arrive_noinc(&full[s]);
    }
  };

  // This thread's two key rows and the query rows that see each.
  int64_t lo[2], hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = n0 + th.row(r);
    lo[r] = vis.qlo(j);
    hi[r] = vis.qhi(j);
  }

  float dv[D / 2], dk[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dv[i] = dk[i] = 0.f;

  if (total > 0) load(0);
  if (total > 1) load(1);
  mbar_wait(kv_full, 0);

  const uint64_t k_desc = sw128_desc_kmajor(smem_addr(sK) + wg * 64 * 128);
  const uint64_t v_desc = sw128_desc_kmajor(smem_addr(sV) + wg * 64 * 128);
  const uint64_t st_kdesc = sw128_desc_kmajor(smem_addr(stages));                 // Q of stage 0 (K-major)
  const uint64_t st_mndesc = sw128_desc_mnmajor(smem_addr(stages), BQ * 128);     // Q of stage 0 (MN-major)
  constexpr uint64_t kStageStep = C::kStageBytes >> 4, kDoStep = C::kQBytes >> 4;

  for (int it = 0; it < total; ++it) {
    const int s = it % kStages;
    if (it >= 1 && it + 1 < total) load(it + 1);
    mbar_wait(&full[s], (it / kStages) & 1);
    const unsigned char* st = stages + s * C::kStageBytes;
    const uint64_t qd = st_kdesc + s * kStageStep, dod = qd + kDoStep;

    float sc[BQ / 2], dp[BQ / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t off_k = ((kk / 4) * BN * 128 + (kk % 4) * 32) >> 4;
      const uint64_t off_q = ((kk / 4) * BQ * 128 + (kk % 4) * 32) >> 4;
      Wgmma<BQ, T>::ss(sc, k_desc + off_k, qd + off_q, kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t off_k = ((kk / 4) * BN * 128 + (kk % 4) * 32) >> 4;
      const uint64_t off_q = ((kk / 4) * BQ * 128 + (kk % 4) * 32) >> 4;
      Wgmma<BQ, T>::ss(dp, v_desc + off_k, dod + off_q, kk > 0);
    }
    wgmma_commit();
    // S^T, dP^T and dV, dK are separate groups, so that this warpgroup's exponentials run while its dP^T is in
    // flight and dS^T while dV is (groups complete in order: wait<1> is the older one landed)
    wgmma_wait<1>();
    wgmma_fence_operand(sc);

    const int64_t i0 = q_lo + int64_t(it % nq) * BQ;
    if (i0 < full_qlo || i0 + BQ > full_qhi) sm90_mask_cols<BQ>(sc, lo, hi, i0 + 2 * quad);
    const float* l2 = reinterpret_cast<const float*>(st + 2 * C::kQBytes);
    const float* dsv = l2 + BQ;
    uint32_t pa[BQ / 16][4], da[BQ / 16][4];
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j) {
      const float2 l = *reinterpret_cast<const float2*>(l2 + 8 * j + 2 * quad);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = 4 * j + 2 * r;
        sc[i] = td_exp2_fast(fmaf(sc[i], scale_log2, -l.x));  // sc holds P^T from here
        sc[i + 1] = td_exp2_fast(fmaf(sc[i + 1], scale_log2, -l.y));
      }
    }
    sm90_acc_to_a<BQ, T>(sc, pa);

    const uint64_t qmn = st_mndesc + s * kStageStep, domn = qmn + kDoStep;
    wgmma_fence_operand(dv);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) Wgmma<D, T>::rs(dv, pa[kk], domn + ((kk * 16 * 128) >> 4));
    wgmma_commit();
    wgmma_wait<1>();  // dP^T landed; dV may still run
    wgmma_fence_operand(dp);
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j) {
      const float2 d = *reinterpret_cast<const float2*>(dsv + 8 * j + 2 * quad);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = 4 * j + 2 * r;
        dp[i] = sc[i] * (dp[i] - d.x);  // dp holds dS^T from here
        dp[i + 1] = sc[i + 1] * (dp[i + 1] - d.y);
      }
    }
    sm90_acc_to_a<BQ, T>(dp, da);
    wgmma_fence_operand(dk);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) Wgmma<D, T>::rs(dk, da[kk], qmn + ((kk * 16 * 128) >> 4));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(dv);
    wgmma_fence_operand(dk);
    mbar_arrive(&empty[s]);
  }

  const float scale = scale_log2 * 0.6931471805599453f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = n0 + th.row(r);
    if (j >= seq.sk) continue;
    T* dkr = static_cast<T*>(gr.dk.ptr) + seq.k_off(gr.dk, b, hk, j);
    T* dvr = static_cast<T*>(gr.dv.ptr) + seq.k_off(gr.dv, b, hk, j);
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      const int i = 4 * c + 2 * r;
      *reinterpret_cast<uint32_t*>(dkr + 8 * c + 2 * quad) =
          sm90_pack(dk[i] * scale, dk[i + 1] * scale, static_cast<T*>(nullptr));
      *reinterpret_cast<uint32_t*>(dvr + 8 * c + 2 * quad) = sm90_pack(dv[i], dv[i + 1], static_cast<T*>(nullptr));
    }
  }
#endif
}

// The dQ pass's schedules, as the dK / dV pass's: CpAsync (the MMA threads copy Q and dO, then each key tile's K
// and V a tile ahead over two stages) or WarpSpecialized (a copy warpgroup's tensor copies: Q and dO with the
// first key tile, then K and V of each key tile into a ring of kStages stages).
template <int D, Sm90Bwd kSchedule = Sm90Bwd::CpAsync>
struct Sm90DqConfig {
  static constexpr bool kTma = kSchedule == Sm90Bwd::WarpSpecialized;
  static constexpr int kBM = 128, kBN = 64, kMmaThreads = 256;
  static constexpr int kThreads = kTma ? kMmaThreads + 128 : kMmaThreads;
  static constexpr int kStages = kTma ? 3 : 2;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8, kCopyRegs = 24;
  static constexpr int kMmaRegs = (kThreads * kLaunchRegs - 128 * kCopyRegs) / kMmaThreads / 8 * 8;
  static_assert(!kTma || (kMmaRegs == 240 && 128 * kCopyRegs + kMmaThreads * kMmaRegs <= kThreads * kLaunchRegs),
                "setmaxnreg beyond the pool");
  static constexpr int kQBytes = kBM * D * 2;   // Q or dO
  static constexpr int kKVBytes = kBN * D * 2;  // one stage of K or V
  // full and empty of each stage, and (WarpSpecialized) tail
  static constexpr int kBarrierBytes = 64;
  static_assert((2 * kStages + 1) * 8 <= kBarrierBytes, "barriers");
  static constexpr int kSmemBytes = 1024 + 2 * kQBytes + 2 * kStages * kKVBytes + kBarrierBytes;
  static_assert(kQBytes % 1024 == 0 && kKVBytes % 1024 == 0, "swizzle atoms");
  static_assert(kSmemBytes <= 227 * 1024, "beyond an SM's shared memory");
};

// maps: q and dout in boxes of 64 columns by 128 rows, k and v by 64 rows (unused by the cp.async form).
template <typename T, int D, Sm90Bwd kSchedule>
__global__ void __launch_bounds__(Sm90DqConfig<D, kSchedule>::kThreads, 1)
    flash_bwd_dq_sm90_kernel(const AttnArgs a, const AttnGrads gr, const float* lse2_all, const float* dsum_all,
                             int64_t sq_pad, float scale_log2, const __grid_constant__ Sm90BwdMaps maps) {
#ifdef TORCH_DNN_WGMMA_CODE
  using C = Sm90DqConfig<D, kSchedule>;
  constexpr bool kTma = C::kTma;
  constexpr int BM = C::kBM, BN = C::kBN, NT = C::kMmaThreads, kStages = C::kStages;
  const Sm90Thread th(kTma ? int(threadIdx.x) - 128 : int(threadIdx.x));
  const int tid = th.tid, wg = th.wg, quad = th.quad;
  const Sm90QueryTile qt(a, BM, BN);
  if (qt.empty) return;
  const int64_t b = qt.b, h = qt.h, hk = qt.hk, m0 = qt.m0, n_lo = qt.n_lo;
  const int n_tiles = qt.n_tiles;
  const Seq& seq = qt.seq;

  unsigned char* smem = sm90_smem();
  unsigned char* sQ = smem;
  unsigned char* sDo = sQ + C::kQBytes;
  unsigned char* sK = sDo + C::kQBytes;              // kStages stages
  unsigned char* sV = sK + kStages * C::kKVBytes;    // kStages stages
  uint64_t* full = reinterpret_cast<uint64_t*>(sV + kStages * C::kKVBytes);
  uint64_t* empty = full + kStages;
  uint64_t* tail = full + 2 * kStages;  // kTma, packed batches: the last key tile before its foreign rows are zeroed
  if constexpr (kTma) {
    if (threadIdx.x == 0) {
      for (int st = 0; st < kStages; ++st) {
        mbar_init(&full[st], 1);
        mbar_init(&empty[st], NT);
      }
      mbar_init(tail, 1);
      mbar_fence_init();
    }
    __syncthreads();
  } else {
    sm90_init_barriers(full, 2 * kStages, NT);
  }

  if constexpr (kTma) {
    if (threadIdx.x < 128) {
      setmaxnreg_dec<C::kCopyRegs>();
      if (threadIdx.x >= 32) return;
      // The copy warp: Q and dO with key tile 0 on its stage's first phase, then key tile t into stage
      // t % kStages once the MMAs that read tile t - kStages completed. In a packed batch the rows past a
      // sequence's end belong to the next one: the last key tile lands on its own barrier and the warp zeroes those
      // rows of K and V (their probabilities are zero, but a non-finite value there times zero would reach dQ; the
      // cp.async form reads zeros) before completing the stage's full barrier.
      const int lane = int(threadIdx.x);
      const int batch = seq.varlen ? 0 : int(b);
      const int64_t q_row0 = seq.varlen ? seq.q_row0 : 0, k_row0 = seq.varlen ? seq.k_row0 : 0;
      // K and V are read by every query tile of the head; Q and dO by this CTA only.
      const uint64_t keep = l2_policy_evict_last(), once = l2_policy_evict_first();
      unsigned tail_phase = 0;
      for (int t = 0; t < n_tiles; ++t) {
        const int s = t % kStages;
        const int64_t n = n_lo + int64_t(t) * BN;
        const bool foreign_rows = seq.varlen && n + BN > seq.sk;
        unsigned char* dk = sK + s * C::kKVBytes;
        unsigned char* dv = sV + s * C::kKVBytes;
        if (lane == 0) {
          if (t >= kStages) mbar_wait(&empty[s], (t / kStages - 1) & 1);
          uint64_t* bar = foreign_rows ? tail : &full[s];
          mbar_arrive_expect_tx(bar, 2 * C::kKVBytes + (t == 0 ? 2 * C::kQBytes : 0));
          if (t == 0) {
            tma_load_tile_4d<D>(sQ, &maps.q, q_row0 + m0, h, batch, BM, bar, once);
            tma_load_tile_4d<D>(sDo, &maps.dout, q_row0 + m0, h, batch, BM, bar, once);
          }
          tma_load_tile_4d<D>(dk, &maps.k, k_row0 + n, hk, batch, BN, bar, keep);
          tma_load_tile_4d<D>(dv, &maps.v, k_row0 + n, hk, batch, BN, bar, keep);
        }
        if (foreign_rows) {
          sm90_complete_foreign_rows(tail, tail_phase, &full[s], lane, [&](int lane) {  // K's and V's rows
            for (int r = int(seq.sk - n) + lane; r < BN; r += 32)
#pragma unroll
              for (int cb = 0; cb < D / 64; ++cb)
#pragma unroll
                for (int c = 0; c < 8; ++c) {
                  *reinterpret_cast<int4*>(dk + cb * BN * 128 + r * 128 + c * 16) = int4{};
                  *reinterpret_cast<int4*>(dv + cb * BN * 128 + r * 128 + c * 16) = int4{};
                }
          });
        }
      }
      return;
    }
    setmaxnreg_inc<C::kMmaRegs>();
  }

  const T* kp = static_cast<const T*>(a.k.ptr) + seq.k_off(a.k, b, hk, 0);
  const T* vp = static_cast<const T*>(a.v.ptr) + seq.k_off(a.v, b, hk, 0);
  const Sm90TileLoader<D, BN, NT> k_loader(tid, a.k.ss), v_loader(tid, a.v.ss);
  // The cp.async form's copies of key tile t.
  auto load = [&](int t) {
    if constexpr (!kTma) {
      const int s = t % kStages;
      if (t >= kStages) mbar_wait(&empty[s], (t / kStages - 1) & 1);
      const int64_t n = n_lo + int64_t(t) * BN;
      k_loader.load(sK + s * C::kKVBytes, kp, a.k.ss, n, seq.sk);
      v_loader.load(sV + s * C::kKVBytes, vp, a.v.ss, n, seq.sk);
      cp_async_arrive_noinc(&full[s]);
    }
  };

  int64_t row[2], lo[2], hi[2];
  float lse2[2], dsum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row[r] = m0 + th.row(r);
    lo[r] = qt.vis.lo(row[r]);
    hi[r] = qt.vis.hi(row[r]);
    const bool in = row[r] < seq.sq;
    lse2[r] = in ? lse2_all[(b * a.Hq + h) * sq_pad + row[r]] : INFINITY;
    dsum[r] = in ? dsum_all[(b * a.Hq + h) * sq_pad + row[r]] : 0.f;
  }

  float dq[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dq[i] = 0.f;

  if constexpr (!kTma) {
    if (n_tiles > 0) {
      Sm90TileLoader<D, BM, NT>(tid, a.q.ss)
          .load(sQ, static_cast<const T*>(a.q.ptr) + seq.q_off(a.q, b, h, 0), a.q.ss, m0, seq.sq);
      Sm90TileLoader<D, BM, NT>(tid, gr.dout.ss)
          .load(sDo, static_cast<const T*>(gr.dout.ptr) + seq.q_off(gr.dout, b, h, 0), gr.dout.ss, m0, seq.sq);
      load(0);  // Q and dO share stage 0's first phase
      if (n_tiles > 1) load(1);
    }
  }

  const uint64_t q_desc = sw128_desc_kmajor(smem_addr(sQ) + wg * 64 * 128);
  const uint64_t do_desc = sw128_desc_kmajor(smem_addr(sDo) + wg * 64 * 128);
  const uint64_t k_desc = sw128_desc_kmajor(smem_addr(sK));
  const uint64_t v_desc = sw128_desc_kmajor(smem_addr(sV));
  const uint64_t kmn_desc = sw128_desc_mnmajor(smem_addr(sK), BN * 128);
  constexpr uint64_t kStageStep = C::kKVBytes >> 4;

  for (int t = 0; t < n_tiles; ++t) {
    const int s = t % kStages;
    if (t >= 1 && t + 1 < n_tiles) load(t + 1);
    mbar_wait(&full[s], (t / kStages) & 1);

    float sc[BN / 2], dp[BN / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t off_m = ((kk / 4) * BM * 128 + (kk % 4) * 32) >> 4;
      const uint64_t off_n = ((kk / 4) * BN * 128 + (kk % 4) * 32) >> 4;
      Wgmma<BN, T>::ss(sc, q_desc + off_m, k_desc + s * kStageStep + off_n, kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t off_m = ((kk / 4) * BM * 128 + (kk % 4) * 32) >> 4;
      const uint64_t off_n = ((kk / 4) * BN * 128 + (kk % 4) * 32) >> 4;
      Wgmma<BN, T>::ss(dp, do_desc + off_m, v_desc + s * kStageStep + off_n, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<1>();  // S landed; the exponentials run while dP is in flight
    wgmma_fence_operand(sc);

    const int64_t n0 = n_lo + int64_t(t) * BN;
    if (qt.needs_mask(n0, BN)) sm90_mask_cols<BN>(sc, lo, hi, n0 + 2 * quad);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) sc[i] = td_exp2_fast(fmaf(sc[i], scale_log2, -lse2[(i / 2) % 2]));  // P
    wgmma_wait<0>();
    wgmma_fence_operand(dp);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) dp[i] = sc[i] * (dp[i] - dsum[(i / 2) % 2]);  // dS
    uint32_t da[BN / 16][4];
    sm90_acc_to_a<BN, T>(dp, da);

    wgmma_fence_operand(dq);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) Wgmma<D, T>::rs(dq, da[kk], kmn_desc + s * kStageStep + ((kk * 16 * 128) >> 4));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(dq);
    mbar_arrive(&empty[s]);
  }

  const float scale = scale_log2 * 0.6931471805599453f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= seq.sq) continue;
    T* dqr = static_cast<T*>(gr.dq.ptr) + seq.q_off(gr.dq, b, h, row[r]);
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      const int i = 4 * c + 2 * r;
      *reinterpret_cast<uint32_t*>(dqr + 8 * c + 2 * quad) =
          sm90_pack(dq[i] * scale, dq[i + 1] * scale, static_cast<T*>(nullptr));
    }
  }
#endif
}

}  // namespace attention
}  // namespace torch_dnn
