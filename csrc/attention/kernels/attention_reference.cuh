// The reference attention kernels (CUDA cores, every dtype and option of attention_kernels.h), O(S) memory:
//
//   forward   one warp a query row, R rows a block (R warps); the block walks the key range its rows see in tiles
//             of TK keys staged in shared memory (K as [TK][Dqk + 1], V as [TK][Dv], in the accumulation type);
//             a lane computes the score of key (lane % TK) over a 1 / (32 / TK) slice of the head dimension,
//             the slices summed by shuffles; online softmax (running max m, sum l) per row; the output row is
//             accumulated in shared memory, a lane owning dims lane, lane + 32, ...
//   dq        the same layout: P recomputed from lse, dP = dO V^T (times the dropout factor), dS = P (dP - D),
//             D = rowsum(dO * O) computed first and saved to the workspace for the next kernel; dq = scale
//             (dS * softcap') K; dS written to dbias when asked.
//   dk / dv   one warp a key row, R rows a block, looping over every query head that shares the key/value head
//             and the query rows that see the key, in tiles of TQ rows of Q and dO (and their lse and D):
//             dv += P_drop dO, dk += scale (dS * softcap') Q. Fixed order everywhere: deterministic, no atomics.
//
// Accumulation in float (double for Float64); exact exp/log/tanh.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/kernels/attention_common.cuh"

namespace torch_dnn {
namespace attention {
namespace reference {

// The launch shape: R warps (rows) a block, T keys (or queries) a tile; T divides 32.
struct Shape {
  int R = 8, T = 32;
};

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}
// Sums over the lanes that share lane % T (the slices of one dot product).
template <typename A>
__device__ __forceinline__ A slice_sum(A v, int T) {
  for (int o = T; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Decomposes the flattened block index into (row block, head, batch), row blocks fastest: neighbouring blocks
// share their key/value tiles in L2.
struct BlockIndex {
  int64_t rb, h, b;
};
__device__ __forceinline__ BlockIndex block_index(int64_t row_blocks, int64_t heads) {
  const int64_t id = blockIdx.x;
  BlockIndex r;
  r.rb = id % row_blocks;
  const int64_t rest = id / row_blocks;
  r.h = rest % heads;
  r.b = rest / heads;
  return r;
}

// Stages rows [r0, r0 + n) of a [rows][D] operand slice (row r at base + r * ss) into dst[n][ld] as A, zeros
// past `rows`.
template <typename T, typename A>
__device__ __forceinline__ void stage_rows(A* dst, int ld, const T* base, int64_t ss, int64_t r0, int n,
                                           int64_t rows, int D) {
  for (int idx = threadIdx.x; idx < n * D; idx += blockDim.x) {
    const int r = idx / D, d = idx - r * D;
    const int64_t gr = r0 + r;
    dst[r * ld + d] = gr < rows ? to_acc<A>(base[gr * ss + d]) : A(0);
  }
}

template <typename T>
__global__ void forward_kernel(const AttnArgs a, Shape sh, int64_t row_blocks) {
  using A = acc_t<T>;
  unsigned char* smem_raw = attn_smem();
  const int Dqk = int(a.Dqk), Dv = int(a.Dv), R = sh.R, TK = sh.T;
  const int ldk = Dqk + 1;
  A* ks = reinterpret_cast<A*>(smem_raw);  // [TK][Dqk + 1]
  A* vs = ks + TK * ldk;                   // [TK][Dv]
  A* qs = vs + TK * Dv;                    // [R][Dqk]
  A* os = qs + R * Dqk;                    // [R][Dv]
  A* ps = os + R * Dv;                     // [R][TK]

  const BlockIndex bi = block_index(row_blocks, a.Hq);
  const int64_t b = bi.b, h = bi.h, hk = h / (a.Hq / a.Hkv);
  const Seq seq = make_seq(a, b);
  const Visibility vis = make_visibility(a, seq);
  const int64_t i0 = bi.rb * R;
  if (i0 >= seq.sq) return;  // the whole block: no barrier is skipped by part of it
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t i = i0 + warp;
  const bool row_ok = i < seq.sq;
  const int64_t i_last = (i0 + R < seq.sq ? i0 + R : seq.sq) - 1;

  const T* q = static_cast<const T*>(a.q.ptr);
  const T* k = static_cast<const T*>(a.k.ptr) + seq.k_off(a.k, b, hk, 0);
  const T* v = static_cast<const T*>(a.v.ptr) + seq.k_off(a.v, b, hk, 0);
  A* qrow = qs + warp * Dqk;
  A* orow = os + warp * Dv;
  A* prow = ps + warp * TK;
  for (int d = lane; d < Dqk; d += 32) qrow[d] = row_ok ? to_acc<A>(q[seq.q_off(a.q, b, h, i) + d]) : A(0);
  for (int d = lane; d < Dv; d += 32) orow[d] = A(0);

  const uint32_t thr = dropout_threshold(a.dropout_p);
  const A keep_scale = a.dropout_p < 1.0 ? A(1.0 / (1.0 - a.dropout_p)) : A(0);
  const bool dropout = a.dropout_p > 0.0;
  const int key = lane % TK, part = lane / TK, P = 32 / TK;

  const int64_t j_begin = vis.lo(i0), j_end = vis.hi(i_last);
  A m = -INFINITY, l = A(0);
  for (int64_t jt = j_begin; jt < j_end; jt += TK) {
    __syncthreads();  // the previous tile is consumed (and q / o rows are written, the first time)
    stage_rows<T, A>(ks, ldk, k, a.k.ss, jt, TK, seq.sk, Dqk);
    stage_rows<T, A>(vs, Dv, v, a.v.ss, jt, TK, seq.sk, Dv);
    __syncthreads();
    if (!row_ok) continue;
    const int64_t j = jt + key;
    A dot = A(0);
    for (int d = part; d < Dqk; d += P) dot += qrow[d] * ks[key * ldk + d];
    dot = slice_sum(dot, TK);
    A t;
    bool visible;
    const A s = score<A>(a, vis, b, h, i, j, dot, t, visible);
    const A m_new = warp_max(m > s ? m : s);
    if (m_new == -INFINITY) continue;  // nothing visible yet (uniform across the warp)
    const A alpha = td_exp(m - m_new);  // 0 while m is -inf
    A p = s == -INFINITY ? A(0) : td_exp(s - m_new);
    l = l * alpha + warp_sum(part == 0 ? p : A(0));
    m = m_new;
    if (dropout && p != A(0)) p *= dropout_factor<A>(a, thr, keep_scale, b, h, i, j);
    if (part == 0) prow[key] = p;
    __syncwarp();
    for (int d = lane; d < Dv; d += 32) {
      A acc = orow[d] * alpha;
      for (int r = 0; r < TK; ++r) acc += prow[r] * vs[r * Dv + d];
      orow[d] = acc;
    }
    __syncwarp();
  }
  if (!row_ok) return;
  const A inv = l > A(0) ? A(1) / l : A(0);
  T* o = static_cast<T*>(a.o.ptr) + seq.q_off(a.o, b, h, i);
  for (int d = lane; d < Dv; d += 32) o[d] = from_acc<T>(orow[d] * inv);
  if (lane == 0 && a.lse != nullptr)
    static_cast<A*>(a.lse)[(b * a.Hq + h) * a.Sq + i] = l > A(0) ? m + td_log(l) : A(INFINITY);
}

// dq (and D = rowsum(dO * O) into dsum[(b * Hq + h) * Sq + i], and dbias).
template <typename T>
__global__ void dq_kernel(const AttnArgs a, const AttnGrads g, acc_t<T>* dsum, Shape sh, int64_t row_blocks) {
  using A = acc_t<T>;
  unsigned char* smem_raw = attn_smem();
  const int Dqk = int(a.Dqk), Dv = int(a.Dv), R = sh.R, TK = sh.T;
  const int ldk = Dqk + 1, ldv = Dv + 1;
  A* ks = reinterpret_cast<A*>(smem_raw);  // [TK][Dqk + 1]
  A* vs = ks + TK * ldk;                   // [TK][Dv + 1]
  A* qs = vs + TK * ldv;                   // [R][Dqk]
  A* dos = qs + R * Dqk;                   // [R][Dv]
  A* dqs = dos + R * Dv;                   // [R][Dqk]
  A* ps = dqs + R * Dqk;                   // [R][TK]

  const BlockIndex bi = block_index(row_blocks, a.Hq);
  const int64_t b = bi.b, h = bi.h, hk = h / (a.Hq / a.Hkv);
  const Seq seq = make_seq(a, b);
  const Visibility vis = make_visibility(a, seq);
  const int64_t i0 = bi.rb * R;
  if (i0 >= seq.sq) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t i = i0 + warp;
  const bool row_ok = i < seq.sq;
  const int64_t i_last = (i0 + R < seq.sq ? i0 + R : seq.sq) - 1;

  const T* q = static_cast<const T*>(a.q.ptr);
  const T* o = static_cast<const T*>(a.o.ptr);
  const T* dout = static_cast<const T*>(g.dout.ptr);
  const T* k = static_cast<const T*>(a.k.ptr) + seq.k_off(a.k, b, hk, 0);
  const T* v = static_cast<const T*>(a.v.ptr) + seq.k_off(a.v, b, hk, 0);
  A* qrow = qs + warp * Dqk;
  A* dorow = dos + warp * Dv;
  A* dqrow = dqs + warp * Dqk;
  A* prow = ps + warp * TK;
  A drow = A(0), lse = A(INFINITY);
  if (row_ok) {
    for (int d = lane; d < Dqk; d += 32) {
      qrow[d] = to_acc<A>(q[seq.q_off(a.q, b, h, i) + d]);
      dqrow[d] = A(0);
    }
    A acc = A(0);
    for (int d = lane; d < Dv; d += 32) {
      const A x = to_acc<A>(dout[seq.q_off(g.dout, b, h, i) + d]);
      dorow[d] = x;
      acc += x * to_acc<A>(o[seq.q_off(a.o, b, h, i) + d]);
    }
    drow = warp_sum(acc);
    const int64_t li = (b * a.Hq + h) * a.Sq + i;
    if (lane == 0) dsum[li] = drow;
    lse = static_cast<const A*>(a.lse)[li];
  }

  const uint32_t thr = dropout_threshold(a.dropout_p);
  const A keep_scale = a.dropout_p < 1.0 ? A(1.0 / (1.0 - a.dropout_p)) : A(0);
  const bool dropout = a.dropout_p > 0.0;
  const int key = lane % TK, part = lane / TK, P = 32 / TK;
  // dbias is written for every key of the row: the masked ones get 0.
  const bool want_dbias = g.dbias != nullptr && a.mask_kind == MaskKind::Additive;
  const int64_t j_begin = want_dbias ? 0 : vis.lo(i0), j_end = want_dbias ? seq.sk : vis.hi(i_last);
  for (int64_t jt = j_begin; jt < j_end; jt += TK) {
    __syncthreads();
    stage_rows<T, A>(ks, ldk, k, a.k.ss, jt, TK, seq.sk, Dqk);
    stage_rows<T, A>(vs, ldv, v, a.v.ss, jt, TK, seq.sk, Dv);
    __syncthreads();
    if (!row_ok) continue;
    const int64_t j = jt + key;
    A ds = A(0), t = A(0);
    if (lse != A(INFINITY)) {
      A dot = A(0), dp = A(0);
      for (int d = part; d < Dqk; d += P) dot += qrow[d] * ks[key * ldk + d];
      for (int d = part; d < Dv; d += P) dp += dorow[d] * vs[key * ldv + d];
      dot = slice_sum(dot, TK);
      dp = slice_sum(dp, TK);
      bool visible;
      const A s = score<A>(a, vis, b, h, i, j, dot, t, visible);
      const A p = s == -INFINITY ? A(0) : td_exp(s - lse);
      if (dropout && p != A(0)) dp *= dropout_factor<A>(a, thr, keep_scale, b, h, i, j);
      ds = p * (dp - drow);
    }
    if (want_dbias && part == 0 && j < seq.sk)
      store_dyn<A>(g.dbias, a.mask_dtype, b * g.dbias_sb + h * g.dbias_sh + i * g.dbias_sq + j, ds);
    if (part == 0) prow[key] = ds * (A(1) - t * t) * A(a.scale);
    __syncwarp();
    for (int d = lane; d < Dqk; d += 32) {
      A acc = dqrow[d];
      for (int r = 0; r < TK; ++r) acc += prow[r] * ks[r * ldk + d];
      dqrow[d] = acc;
    }
    __syncwarp();
  }
  if (!row_ok) return;
  T* dq = static_cast<T*>(g.dq.ptr) + seq.q_off(g.dq, b, h, i);
  for (int d = lane; d < Dqk; d += 32) dq[d] = from_acc<T>(dqrow[d]);
}

// dk, dv: one warp a key row of key/value head hk, summing over the query heads of its group.
template <typename T>
__global__ void dkdv_kernel(const AttnArgs a, const AttnGrads g, const acc_t<T>* dsum, Shape sh, int64_t row_blocks) {
  using A = acc_t<T>;
  unsigned char* smem_raw = attn_smem();
  const int Dqk = int(a.Dqk), Dv = int(a.Dv), R = sh.R, TQ = sh.T;
  const int ldq = Dqk + 1, ldo = Dv + 1;
  A* qs = reinterpret_cast<A*>(smem_raw);  // [TQ][Dqk + 1]
  A* dos = qs + TQ * ldq;                  // [TQ][Dv + 1]
  A* lses = dos + TQ * ldo;                // [TQ]
  A* dss = lses + TQ;                      // [TQ]: D of the tile's rows
  A* kr = dss + TQ;                        // [R][Dqk]
  A* vr = kr + R * Dqk;                    // [R][Dv]
  A* dks = vr + R * Dv;                    // [R][Dqk]
  A* dvs = dks + R * Dqk;                  // [R][Dv]
  A* pw = dvs + R * Dv;                    // [R][TQ]: dropped-out P
  A* sw = pw + R * TQ;                     // [R][TQ]: scale * dS * softcap'

  const BlockIndex bi = block_index(row_blocks, a.Hkv);
  const int64_t b = bi.b, hk = bi.h, G = a.Hq / a.Hkv;
  const Seq seq = make_seq(a, b);
  const Visibility vis = make_visibility(a, seq);
  const int64_t j0 = bi.rb * R;
  if (j0 >= seq.sk) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j = j0 + warp;
  const bool row_ok = j < seq.sk;
  const int64_t j_last = (j0 + R < seq.sk ? j0 + R : seq.sk) - 1;

  const T* kp = static_cast<const T*>(a.k.ptr);
  const T* vp = static_cast<const T*>(a.v.ptr);
  A* krow = kr + warp * Dqk;
  A* vrow = vr + warp * Dv;
  A* dkrow = dks + warp * Dqk;
  A* dvrow = dvs + warp * Dv;
  A* prow = pw + warp * TQ;
  A* srow = sw + warp * TQ;
  for (int d = lane; d < Dqk; d += 32) {
    krow[d] = row_ok ? to_acc<A>(kp[seq.k_off(a.k, b, hk, j) + d]) : A(0);
    dkrow[d] = A(0);
  }
  for (int d = lane; d < Dv; d += 32) {
    vrow[d] = row_ok ? to_acc<A>(vp[seq.k_off(a.v, b, hk, j) + d]) : A(0);
    dvrow[d] = A(0);
  }

  const uint32_t thr = dropout_threshold(a.dropout_p);
  const A keep_scale = a.dropout_p < 1.0 ? A(1.0 / (1.0 - a.dropout_p)) : A(0);
  const bool dropout = a.dropout_p > 0.0;
  const int qi = lane % TQ, part = lane / TQ, P = 32 / TQ;
  const int64_t i_begin = vis.qlo(j0), i_end = vis.qhi(j_last);
  const A* lse_all = static_cast<const A*>(a.lse);
  for (int64_t hh = 0; hh < G; ++hh) {
    const int64_t h = hk * G + hh;
    const T* q = static_cast<const T*>(a.q.ptr) + seq.q_off(a.q, b, h, 0);
    const T* dout = static_cast<const T*>(g.dout.ptr) + seq.q_off(g.dout, b, h, 0);
    for (int64_t it = i_begin; it < i_end; it += TQ) {
      __syncthreads();
      stage_rows<T, A>(qs, ldq, q, a.q.ss, it, TQ, seq.sq, Dqk);
      stage_rows<T, A>(dos, ldo, dout, g.dout.ss, it, TQ, seq.sq, Dv);
      for (int r = threadIdx.x; r < TQ; r += blockDim.x) {
        const int64_t ii = it + r;
        const int64_t li = (b * a.Hq + h) * a.Sq + ii;
        lses[r] = ii < seq.sq ? lse_all[li] : A(INFINITY);
        dss[r] = ii < seq.sq ? dsum[li] : A(0);
      }
      __syncthreads();
      if (!row_ok) continue;
      const int64_t i = it + qi;
      A dot = A(0), dp = A(0);
      for (int d = part; d < Dqk; d += P) dot += qs[qi * ldq + d] * krow[d];
      for (int d = part; d < Dv; d += P) dp += dos[qi * ldo + d] * vrow[d];
      dot = slice_sum(dot, TQ);
      dp = slice_sum(dp, TQ);
      A t;
      bool visible;
      const A s = score<A>(a, vis, b, h, i, j, dot, t, visible);
      const A lse = lses[qi];
      const A p = (s == -INFINITY || lse == A(INFINITY)) ? A(0) : td_exp(s - lse);
      const A f = dropout && p != A(0) ? dropout_factor<A>(a, thr, keep_scale, b, h, i, j) : A(1);
      const A ds = p * (dp * f - dss[qi]);
      if (part == 0) {
        prow[qi] = p * f;
        srow[qi] = ds * (A(1) - t * t) * A(a.scale);
      }
      __syncwarp();
      for (int d = lane; d < Dqk; d += 32) {
        A acc = dkrow[d];
        for (int r = 0; r < TQ; ++r) acc += srow[r] * qs[r * ldq + d];
        dkrow[d] = acc;
      }
      for (int d = lane; d < Dv; d += 32) {
        A acc = dvrow[d];
        for (int r = 0; r < TQ; ++r) acc += prow[r] * dos[r * ldo + d];
        dvrow[d] = acc;
      }
      __syncwarp();
    }
  }
  if (!row_ok) return;
  T* dk = static_cast<T*>(g.dk.ptr) + seq.k_off(g.dk, b, hk, j);
  T* dv = static_cast<T*>(g.dv.ptr) + seq.k_off(g.dv, b, hk, j);
  for (int d = lane; d < Dqk; d += 32) dk[d] = from_acc<T>(dkrow[d]);
  for (int d = lane; d < Dv; d += 32) dv[d] = from_acc<T>(dvrow[d]);
}

}  // namespace reference
}  // namespace attention
}  // namespace torch_dnn
