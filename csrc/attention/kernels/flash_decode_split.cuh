// flash_decode's main kernel (flash-decoding): one CTA a (batch row, KV head, key split, row chunk) attends the
// RC query rows of the chunk (the query heads of the KV head's GQA group x the query rows, so the keys are read
// once for all of them) to the keys of its split, and writes that split's normalised partial output and
// log-sum-exp (base 2) to the workspace; flash_decode_combine.cuh merges the splits.
//
// Threads: kTpr threads read one key row (16 bytes each, kNv vectors), kGroups groups of them read kGroups
// consecutive keys; each thread takes kKeysPerThread keys of K and V a batch (staged through shared memory with
// cp.async several batches ahead, or loaded straight before the compute: the bytes in flight that a memory-bound
// kernel lives on), then per key: its slice of q . k for every row, summed across the group's lanes
// (butterfly: every lane gets the score), online softmax in base 2 (q pre-scaled by scale * log2 e), and its
// slice of the output accumulated in float (double for double). Each group keeps its own running max / sum /
// accumulator; at the end the groups are merged through shared memory.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/decode_kernels.h"
#include "attention/kernels/attention_common.cuh"
#include "attention/kernels/decode_cache.cuh"
#include "common/cuda/cp_async.cuh"
#include "common/cuda/types.cuh"

namespace torch_dnn {
namespace attention {
namespace decode {

constexpr int kThreads = 128;
constexpr int kStages = 4;  // the staged variant's ring of key batches a thread has in flight (3) or in use (1)
constexpr double kLog2e = 1.4426950408889634;

// base-2 exponential and logarithm in the accumulation type
__device__ __forceinline__ float exp2_acc(float x) { return exp2f(x); }
__device__ __forceinline__ double exp2_acc(double x) { return exp2(x); }
__device__ __forceinline__ float log2_acc(float x) { return log2f(x); }
__device__ __forceinline__ double log2_acc(double x) { return log2(x); }

template <typename T, int D>
struct Geometry {
  static constexpr int kVec = 16 / int(sizeof(T));             // elements in 16 bytes
  static constexpr int kRowVecs = D / kVec;                     // 16-byte vectors in a key row
  static constexpr int kTpr = kRowVecs < 32 ? kRowVecs : 32;    // threads a key row (within one warp)
  static constexpr int kNv = kRowVecs / kTpr;                   // vectors a thread reads of a row
  static constexpr int kElems = kNv * kVec;                     // elements a thread owns of a row
  static constexpr int kGroups = kThreads / kTpr;               // keys the CTA reads at once
  static constexpr int kKeysPerThread = kNv < 4 ? 4 / kNv : 1;  // keys loaded before computing: 4 vectors of K, V
  static constexpr int kStep = kGroups * kKeysPerThread;        // keys an iteration
  static_assert(D % kVec == 0 && kRowVecs % kTpr == 0 && kThreads % kTpr == 0, "unsupported head dim");
  // the staged variant's shared memory: kStages batches of a thread's K and V vectors, thread-interleaved (a
  // warp's 16-byte accesses hit consecutive banks)
  static constexpr int kStageVecs = kKeysPerThread * kNv * 2;  // 16-byte vectors a thread a batch
  static constexpr int64_t kStageBytes = int64_t(kStages) * kStageVecs * kThreads * 16;
  static __device__ __forceinline__ int stage_vec(int slot, int u, int n, int kv, int tid) {
    return (((slot * kKeysPerThread + u) * kNv + n) * 2 + kv) * kThreads + tid;
  }
  // element e < kElems of a thread's slice: vector n = e / kVec at (lane + kTpr * n) * kVec
  static __device__ __forceinline__ int column(int lane, int n) { return (lane + kTpr * n) * kVec; }
};

// The split's results, in the accumulation type A: o_part [rows][splits][D] (normalised) and lse_part [rows][splits]
// (base 2, -inf where the split saw no key), rows = (b * Hq + h) * Sq + i, the lse's order.
template <typename A>
struct DecodeWork {
  A* o_part = nullptr;
  A* lse_part = nullptr;
  int64_t splits = 1, row_chunks = 1;
};

template <typename T, typename A>
__device__ __forceinline__ void unpack(const uint4& v, A* f) {
  const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int k = 0; k < int(16 / sizeof(T)); ++k) f[k] = to_acc<A>(e[k]);
}

template <int WIDTH, typename A>
__device__ __forceinline__ A group_sum(A v) {
#pragma unroll
  for (int off = WIDTH / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off, WIDTH);
  return v;
}

// Shared memory of the split kernel (dynamic): the merge's max, sum and accumulators, and with STAGED the ring of
// key batches (the two never live at once).
template <typename T, int D, int RC, bool STAGED>
constexpr int64_t split_smem_bytes() {
  using G = Geometry<T, D>;
  const int64_t merge = int64_t(G::kGroups) * RC * (D + 2) * int64_t(sizeof(acc_t<T>));
  return STAGED && G::kStageBytes > merge ? G::kStageBytes : merge;
}

// STAGED: each thread copies its own K / V vectors of the next kStages - 1 key batches into shared memory with
// cp.async (3 batches, 48 KB a CTA in flight while it computes on the fourth), and reads them back to registers; it
// reads only what it copied itself, so no barrier is needed. Otherwise the batch is loaded straight into registers
// before the compute (16 KB a CTA in flight, then none while it computes).
// Up to 4 rows a CTA fit 168 registers a thread: 3 CTAs an SM (the plan's one wave), which the bound keeps.
template <typename T, int D, int RC, bool STAGED>
__global__ void __launch_bounds__(kThreads, RC <= 4 ? 3 : 1) flash_decode_split_kernel(DecodeArgs a, CacheMap map,
                                                                     DecodeWork<acc_t<T>> w) {
  using G = Geometry<T, D>;
  using A = acc_t<T>;
  constexpr int KPT = G::kKeysPerThread;
  constexpr int E = G::kElems;
  const int tid = int(threadIdx.x);
  const int group = tid / G::kTpr, lane = tid % G::kTpr;

  // CTA order: row chunk fastest, so the CTAs that read one key range run together and share it through L2
  int64_t cta = blockIdx.x;
  const int64_t chunk = cta % w.row_chunks;
  cta /= w.row_chunks;
  const int64_t split = cta % w.splits;
  cta /= w.splits;
  const int64_t hk = cta % a.Hkv;
  const int64_t b = cta / a.Hkv;
  const int64_t heads = a.Hq / a.Hkv;
  const int64_t rows = heads * a.Sq;

  const int64_t L = cache_length(a, b);
  int64_t per = (L + w.splits - 1) / w.splits;
  per = (per + G::kStep - 1) / G::kStep * G::kStep;
  const int64_t k0 = split * per < L ? split * per : L;
  const int64_t k1 = k0 + per < L ? k0 + per : L;

  // this thread's slice of the chunk's query rows, scaled into base 2; the keys each row sees: j < limit
  A q[RC][E];
  int64_t limit[RC];
  const A qscale = A(a.scale * kLog2e);
#pragma unroll
  for (int r = 0; r < RC; ++r) {
    const int64_t rr = chunk * RC + r;
    const bool ok = rr < rows;
    const int64_t i = ok ? rr % a.Sq : 0, h = hk * heads + (ok ? rr / a.Sq : 0);
    limit[r] = !ok ? 0 : a.causal ? L - a.Sq + i + 1 : L;
    const T* qrow = static_cast<const T*>(a.q) + b * a.q_sb + i * a.q_ss + h * a.q_sh;
#pragma unroll
    for (int n = 0; n < G::kNv; ++n) {
      A f[G::kVec];
      if (ok) {
        unpack<T>(*reinterpret_cast<const uint4*>(qrow + G::column(lane, n)), f);
      } else {
#pragma unroll
        for (int e = 0; e < G::kVec; ++e) f[e] = A(0);
      }
#pragma unroll
      for (int e = 0; e < G::kVec; ++e) q[r][n * G::kVec + e] = f[e] * qscale;
    }
  }

  A m[RC], l[RC], acc[RC][E];
#pragma unroll
  for (int r = 0; r < RC; ++r) {
    m[r] = -INFINITY;
    l[r] = A(0);
#pragma unroll
    for (int e = 0; e < E; ++e) acc[r][e] = A(0);
  }

  const T* kbase = static_cast<const T*>(a.k.ptr);
  const T* vbase = static_cast<const T*>(a.v.ptr);
  uint4* ring = reinterpret_cast<uint4*>(attn_smem());
  const int64_t iters = (k1 - k0 + G::kStep - 1) / G::kStep;
  // STAGED: batch `it` into ring slot it % kStages; one commit group a batch (empty past the last) so that the
  // wait below counts batches
  auto stage = [&](int64_t it) {
    if (it < iters) {
      const int slot = int(it % kStages);
#pragma unroll
      for (int u = 0; u < KPT; ++u) {
        const int64_t j = k0 + it * G::kStep + group + G::kGroups * u;
        if (j < k1) {
          const int64_t ko = map.key_offset(a.k, b, hk, int32_t(j));
          const int64_t vo = map.key_offset(a.v, b, hk, int32_t(j));
#pragma unroll
          for (int n = 0; n < G::kNv; ++n) {
            cp_async16(ring + G::stage_vec(slot, u, n, 0, tid), kbase + ko + G::column(lane, n));
            cp_async16(ring + G::stage_vec(slot, u, n, 1, tid), vbase + vo + G::column(lane, n));
          }
        }
      }
    }
    cp_async_commit();
  };
  if constexpr (STAGED) {
#pragma unroll
    for (int it = 0; it < kStages - 1; ++it) stage(it);
  }
  // every thread runs the same iterations (the shuffles are block-uniform); keys past the split are masked
  for (int64_t it = 0; it < iters; ++it) {
    const int64_t base = k0 + it * G::kStep;
    uint4 kr[KPT][G::kNv], vr[KPT][G::kNv];
    if constexpr (STAGED) {
      cp_async_wait<kStages - 2>();  // batch `it` has landed (for this thread: its own copies)
      stage(it + kStages - 1);       // into the slot batch it - 1 used, read back to registers last iteration
      const int slot = int(it % kStages);
#pragma unroll
      for (int u = 0; u < KPT; ++u) {
        const bool valid = base + group + G::kGroups * u < k1;
#pragma unroll
        for (int n = 0; n < G::kNv; ++n) {
          kr[u][n] = valid ? ring[G::stage_vec(slot, u, n, 0, tid)] : make_uint4(0, 0, 0, 0);
          vr[u][n] = valid ? ring[G::stage_vec(slot, u, n, 1, tid)] : make_uint4(0, 0, 0, 0);
        }
      }
    } else {
#pragma unroll
      for (int u = 0; u < KPT; ++u) {
        const int64_t j = base + group + G::kGroups * u;
        if (j < k1) {
          const int64_t ko = map.key_offset(a.k, b, hk, int32_t(j));
          const int64_t vo = map.key_offset(a.v, b, hk, int32_t(j));
#pragma unroll
          for (int n = 0; n < G::kNv; ++n) {
            kr[u][n] = load_stream(kbase + ko + G::column(lane, n));
            vr[u][n] = load_stream(vbase + vo + G::column(lane, n));
          }
        } else {
#pragma unroll
          for (int n = 0; n < G::kNv; ++n) kr[u][n] = vr[u][n] = make_uint4(0, 0, 0, 0);
        }
      }
    }
    A s[KPT][RC];
#pragma unroll
    for (int u = 0; u < KPT; ++u) {
      A kf[E];
#pragma unroll
      for (int n = 0; n < G::kNv; ++n) unpack<T>(kr[u][n], kf + n * G::kVec);
#pragma unroll
      for (int r = 0; r < RC; ++r) {
        A dot = A(0);
#pragma unroll
        for (int e = 0; e < E; ++e) dot += q[r][e] * kf[e];
        s[u][r] = group_sum<G::kTpr>(dot);
      }
    }
    // online softmax: s becomes the probabilities p (0 where masked), the row's state is rescaled to the new max
#pragma unroll
    for (int r = 0; r < RC; ++r) {
      A mx = m[r];
#pragma unroll
      for (int u = 0; u < KPT; ++u) {
        const int64_t j = base + group + G::kGroups * u;
        if (!(j < k1 && j < limit[r])) s[u][r] = -INFINITY;
        mx = s[u][r] > mx ? s[u][r] : mx;
      }
      if (mx == -INFINITY) {  // nothing seen yet by this row
#pragma unroll
        for (int u = 0; u < KPT; ++u) s[u][r] = A(0);
        continue;
      }
      const A corr = exp2_acc(m[r] - mx);  // 0 while m is -inf
      m[r] = mx;
      A psum = A(0);
#pragma unroll
      for (int u = 0; u < KPT; ++u) {
        s[u][r] = exp2_acc(s[u][r] - mx);
        psum += s[u][r];
      }
      l[r] = l[r] * corr + psum;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[r][e] *= corr;
    }
    // o += p v, each value row converted once for all the rows
#pragma unroll
    for (int u = 0; u < KPT; ++u) {
      A vf[E];
#pragma unroll
      for (int n = 0; n < G::kNv; ++n) unpack<T>(vr[u][n], vf + n * G::kVec);
#pragma unroll
      for (int r = 0; r < RC; ++r) {
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r][e] += s[u][r] * vf[e];
      }
    }
  }

  // merge the groups: each writes its max, sum and slice; then each thread finishes some (row, column) elements
  if constexpr (STAGED) {
    cp_async_wait_all();  // the empty trailing groups; nothing is in flight into the ring any more
    __syncthreads();      // every thread is done with the ring the merge reuses
  }
  A (*sm_m)[RC] = reinterpret_cast<A (*)[RC]>(attn_smem());
  A (*sm_l)[RC] = sm_m + G::kGroups;
  A (*sm_acc)[RC][D] = reinterpret_cast<A (*)[RC][D]>(sm_l + G::kGroups);
#pragma unroll
  for (int r = 0; r < RC; ++r) {
    if (lane == 0) {
      sm_m[group][r] = m[r];
      sm_l[group][r] = l[r];
    }
#pragma unroll
    for (int n = 0; n < G::kNv; ++n) {
#pragma unroll
      for (int e = 0; e < G::kVec; ++e) sm_acc[group][r][G::column(lane, n) + e] = acc[r][n * G::kVec + e];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < RC * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    const int64_t rr = chunk * RC + r;
    if (rr >= rows) continue;
    A M = -INFINITY;
#pragma unroll
    for (int g = 0; g < G::kGroups; ++g) M = sm_m[g][r] > M ? sm_m[g][r] : M;
    A lt = A(0), o = A(0);
    if (M != -INFINITY) {
#pragma unroll
      for (int g = 0; g < G::kGroups; ++g) {
        const A wgt = exp2_acc(sm_m[g][r] - M);
        lt += sm_l[g][r] * wgt;
        o += sm_acc[g][r][d] * wgt;
      }
    }
    const int64_t i = rr % a.Sq, h = hk * heads + rr / a.Sq;
    const int64_t row = (b * a.Hq + h) * a.Sq + i;
    w.o_part[(row * w.splits + split) * D + d] = lt > A(0) ? o / lt : A(0);
    if (d == 0) w.lse_part[row * w.splits + split] = lt > A(0) ? M + log2_acc(lt) : A(-INFINITY);
  }
}

}  // namespace decode
}  // namespace attention
}  // namespace torch_dnn
