// The flash forward on Hopper's warpgroup tensor cores (wgmma, sm_90a): FlashAttention's online softmax with
// S = Q K^T read from shared memory and O += P V taking P straight from the registers that hold the scores.
//
// Two or three MMA warpgroups own BM = 64 query rows each of one (batch, query head) and walk the visible key
// tiles of BN keys (the launcher's choice of tiles: 128 x 128, 128 x 176, 192 x 128). Shared memory: Q [BM][D] and
// two-stage rings of K and of V tiles [BN][D], all in the 128-byte swizzle (common/cuda/wgmma.cuh); D = 128: 160
// KB (BN = 128) or 208 KB (176). Each stage has two mbarriers: full (its copies landed) and empty (every MMA thread
// arrives once its warpgroup's MMAs that read the stage completed). The tiles are copied in the order they are read: Q with K of tile 0, then K of t + 1 before V of t
// (V of t is first read by the P V of iteration t + 1), by one of two schemes (kTma, below): a copy warpgroup's
// tensor copies, or each MMA thread's share by cp.async at the top of iteration t.
// Iteration t of a warpgroup (FlashAttention-3's overlap within a warpgroup): S of tile t (D / 16 SS MMAs, 64 x BN
// floats, BN / 2 a thread) and P V of tile t - 1 (BN / 16 RS MMAs, P packed to 16 bits in the registers that held its
// scores) are issued together; the softmax of t (masking where the tile crosses the visibility boundary or the
// end of the keys; the running max and sum in the log2 domain, reduced over the quad of lanes sharing a row) runs
// while P V computes; then O is rescaled and P packed. The warpgroups either take turns issuing their MMAs
// (PingPong, the default: FlashAttention-3's named-barrier schedule, so that one's softmax runs while another's
// MMAs hold the tensor cores) or drift apart freely by up to an iteration.
// The epilogue divides by the row sums and writes O (16-bit pairs) and lse (float); a row that sees no key gets
// zeros and lse = +inf.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/kernels/attention_common.cuh"
#include "attention/kernels/sm90_common.cuh"
#include "common/cuda/tma.cuh"

namespace torch_dnn {
namespace attention {

// The schedules (Sm90Fwd, attention_kernels.h). Warp-specialised (WarpSpecialized, PingPong): a third warpgroup
// (the first, threads 0-127) moves the tiles: one thread issues the copy engine's tensor copies (tma.cuh) of Q and
// of each K and V tile, announcing their bytes on the stage's full barrier, and the MMA warpgroups only compute
// (they take the copy warpgroup's registers: setmaxnreg). PingPong: the MMA warpgroups also take turns issuing
// their MMAs (named barriers 1, 2, ...), so that one's softmax runs while another's MMAs hold the tensor cores.
// CpAsync: every thread of the two MMA warpgroups issues its share of each tile by cp.async.
template <int D, Sm90Fwd kSchedule, int BN = 128, int WGs = 2>
struct Sm90FwdConfig {
  static constexpr bool kTma = kSchedule != Sm90Fwd::CpAsync;
  static constexpr int kMmaWarpgroups = WGs;
  static constexpr int kBM = 64 * WGs, kBN = BN, kStages = 2;
  static_assert(BN % 16 == 0 && BN <= 256 && kBM <= 256, "key tiles of whole k16 steps of P V; one box a tile");
  static_assert(WGs == 2 || (WGs == 3 && kTma), "three MMA warpgroups only with a copy warpgroup");
  static constexpr int kMmaThreads = 128 * WGs;
  static constexpr int kThreads = kTma ? kMmaThreads + 128 : kMmaThreads;
  // Registers a thread after setmaxnreg. The increase draws only on the registers the CTA was launched with (the
  // 64K an SM over its threads, rounded down to a multiple of 8: 168 each of 384, 128 each of 512) and waits until
  // the copy warpgroup's decrease has freed them: asking for more than that pool holds never returns (the kernel
  // hangs). The MMA warpgroups take what the copy warpgroup's 24 leave, at most 240 (two: 240; three: 160).
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8, kCopyRegs = 24;
  static constexpr int kMmaRegs = ((kThreads * kLaunchRegs - 128 * kCopyRegs) / kMmaThreads / 8 * 8) < 240
                                      ? (kThreads * kLaunchRegs - 128 * kCopyRegs) / kMmaThreads / 8 * 8
                                      : 240;
  static_assert(128 * kCopyRegs + kMmaThreads * kMmaRegs <= kThreads * kLaunchRegs, "setmaxnreg beyond the pool");
  static constexpr int kQBytes = kBM * D * 2;
  static constexpr int kTileBytes = kBN * D * 2;  // one K or V stage
  static constexpr int kBarrierBytes = 128;
  // +1024: the dynamic shared memory is aligned up to the swizzle atom inside the kernel.
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kTileBytes + kBarrierBytes;
  static_assert(kQBytes % 1024 == 0 && kTileBytes % 1024 == 0, "every tile starts on a swizzle atom");
  static_assert(kSmemBytes <= 227 * 1024, "beyond an SM's shared memory");
};

// The tensor maps of q, k and v ([B][H][S][D] as 4-D tensors, D innermost; a packed batch as B = 1), boxes of 64
// columns by a tile's rows (BM for q, BN for k and v). Unused by the cp.async form.
struct Sm90FwdMaps {
  TmaMap4 q, k, v;
};

template <typename T, int D, Sm90Fwd kSchedule, int kBN, int kWGs>
__global__ void __launch_bounds__(Sm90FwdConfig<D, kSchedule, kBN, kWGs>::kThreads, 1)
    flash_forward_sm90_kernel(const AttnArgs a, float scale_log2, const __grid_constant__ Sm90FwdMaps maps) {
#ifdef TORCH_DNN_WGMMA_CODE
  using C = Sm90FwdConfig<D, kSchedule, kBN, kWGs>;
  constexpr bool kTma = C::kTma, kPingPong = kSchedule == Sm90Fwd::PingPong;
  constexpr int BM = C::kBM, BN = C::kBN, NT = C::kMmaThreads;
  // the thread's place among the MMA threads (the copy warpgroup's threads have none)
  const Sm90Thread th(kTma ? int(threadIdx.x) - 128 : int(threadIdx.x));
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
  uint64_t* tail_v = full_k + 8;  // kTma, packed batches: the last V tile before its foreign rows are zeroed
  if constexpr (kTma) {
    // full: the copy thread's one arrival (with the bytes); empty: every MMA thread once its warpgroup's MMAs that
    // read the stage completed
    if (threadIdx.x == 0) {
      for (int st = 0; st < C::kStages; ++st) {
        mbar_init(&full_k[st], 1);
        mbar_init(&full_v[st], 1);
        mbar_init(&empty_k[st], NT);
        mbar_init(&empty_v[st], NT);
      }
      mbar_init(tail_v, 1);
      mbar_fence_init();
    }
    __syncthreads();
  } else {
    sm90_init_barriers(full_k, 8, NT);  // full: every thread's cp.async arrival; empty: as above
  }

  if constexpr (kTma) {
    if (threadIdx.x < 128) {
      setmaxnreg_dec<C::kCopyRegs>();
      if (threadIdx.x >= 32) return;
      // The copy warp. Tile t's K goes to stage t % 2 (it held K of t - 2, released once both warpgroups computed
      // S of t - 2), its V likewise; issued in the order the MMAs read them: Q with K of 0, then K of t + 1 before V
      // of t. In a packed batch the rows past a sequence's end belong to the next one: the last V tile lands on its
      // own barrier, the warp zeroes those rows (a non-finite value there times a zero probability would reach the
      // output) and then completes the stage's full barrier.
      const int lane = int(threadIdx.x);
      const int batch = seq.varlen ? 0 : int(b);
      const int64_t q_row0 = seq.varlen ? seq.q_row0 : 0, k_row0 = seq.varlen ? seq.k_row0 : 0;
      const uint64_t keep = l2_policy_evict_last(), once = l2_policy_evict_first();
      if (n_tiles == 0) return;
      if (lane == 0) {
        mbar_arrive_expect_tx(&full_k[0], C::kQBytes + C::kTileBytes);
        tma_load_tile_4d<D>(sQ, &maps.q, q_row0 + m0, h, batch, BM, &full_k[0], once);
        tma_load_tile_4d<D>(sK, &maps.k, k_row0 + n_lo, hk, batch, BN, &full_k[0], keep);
      }
      unsigned tail_phase = 0;
      for (int t = 0; t < n_tiles; ++t) {
        if (lane == 0 && t + 1 < n_tiles) {
          const int u = t + 1;
          if (u >= 2) mbar_wait(&empty_k[u & 1], ((u - 2) >> 1) & 1);
          mbar_arrive_expect_tx(&full_k[u & 1], C::kTileBytes);
          tma_load_tile_4d<D>(sK + (u & 1) * C::kTileBytes, &maps.k, k_row0 + n_lo + int64_t(u) * BN, hk, batch, BN,
                              &full_k[u & 1], keep);
        }
        const int64_t n0 = n_lo + int64_t(t) * BN;
        const bool foreign_rows = seq.varlen && n0 + BN > seq.sk;
        unsigned char* dst = sV + (t & 1) * C::kTileBytes;
        if (lane == 0) {
          if (t >= 2) mbar_wait(&empty_v[t & 1], ((t - 2) >> 1) & 1);
          uint64_t* bar = foreign_rows ? tail_v : &full_v[t & 1];
          mbar_arrive_expect_tx(bar, C::kTileBytes);
          tma_load_tile_4d<D>(dst, &maps.v, k_row0 + n0, hk, batch, BN, bar, keep);
        }
        if (foreign_rows) {
          sm90_complete_foreign_rows(tail_v, tail_phase, &full_v[t & 1], lane, [&](int lane) {  // V's rows
            for (int r = int(seq.sk - n0) + lane; r < BN; r += 32)
#pragma unroll
              for (int cb = 0; cb < D / 64; ++cb)
#pragma unroll
                for (int c = 0; c < 8; ++c) *reinterpret_cast<int4*>(dst + cb * BN * 128 + r * 128 + c * 16) = int4{};
          });
        }
      }
      return;
    }
    setmaxnreg_inc<C::kMmaRegs>();
  }

  const T* qp = static_cast<const T*>(a.q.ptr) + seq.q_off(a.q, b, h, 0);
  const T* kp = static_cast<const T*>(a.k.ptr) + seq.k_off(a.k, b, hk, 0);
  const T* vp = static_cast<const T*>(a.v.ptr) + seq.k_off(a.v, b, hk, 0);

  // The cp.async form: each thread issues its share of K of tile t + 1 and V of tile t at the top of iteration t.
  const Sm90TileLoader<D, BN, NT> k_loader(tid, a.k.ss), v_loader(tid, a.v.ss);
  auto load_k = [&](int t) {
    if constexpr (!kTma) {
      if (t >= 2) mbar_wait(&empty_k[t & 1], ((t - 2) >> 1) & 1);
      k_loader.load(sK + (t & 1) * C::kTileBytes, kp, a.k.ss, n_lo + int64_t(t) * BN, seq.sk);
      cp_async_arrive_noinc(&full_k[t & 1]);
    }
  };
  auto load_v = [&](int t) {
    if constexpr (!kTma) {
      if (t >= 2) mbar_wait(&empty_v[t & 1], ((t - 2) >> 1) & 1);
      v_loader.load(sV + (t & 1) * C::kTileBytes, vp, a.v.ss, n_lo + int64_t(t) * BN, seq.sk);
      cp_async_arrive_noinc(&full_v[t & 1]);
    }
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

  // Turns (kPingPong), round robin: warpgroup w waits on barrier 1 + w and hands over to the next one's barrier
  // (each barrier: the 128 threads waiting and the 128 arriving). Each warpgroup issues n_tiles + 1 times; the last
  // lets warpgroup 0 go first and skips its own last hand-over, so that every phase of every barrier completes.
  constexpr int kLast = C::kMmaWarpgroups - 1;
  auto my_turn = [&]() {
    if constexpr (kPingPong) named_barrier_sync(1 + wg, 256);
  };
  auto your_turn = [&](bool last) {
    if constexpr (kPingPong) {
      if (!(last && wg == kLast)) named_barrier_arrive(1 + (wg == kLast ? 0 : wg + 1), 256);
    }
  };
  if (kPingPong && n_tiles > 0 && wg == kLast) named_barrier_arrive(1, 256);

  if (n_tiles > 0) {
    // Q and K of tile 0 share full_k[0]'s first phase.
    if constexpr (!kTma) Sm90TileLoader<D, BM, NT>(tid, a.q.ss).load(sQ, qp, a.q.ss, m0, seq.sq);
    load_k(0);
    if (n_tiles > 1) load_k(1);
    load_v(0);
    mbar_wait(&full_k[0], 0);
    my_turn();
    wgmma_fence();
    issue_s(0);
    wgmma_commit();
    your_turn(false);
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
    my_turn();
    wgmma_fence();
    issue_s(t);
    wgmma_commit();
    issue_pv(t - 1);
    wgmma_commit();
    your_turn(false);
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
    my_turn();
    wgmma_fence();
    issue_pv(t);
    wgmma_commit();
    your_turn(true);
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
