// flash_decode's main kernel (flash-decoding): one CTA a (batch row, KV head, key split, row chunk) attends the
// RC query rows of the chunk (the query heads of the KV head's GQA group x the query rows, so the keys are read
// once for all of them) to the keys of its split, and writes that split's normalised partial output and
// log-sum-exp (base 2) to the workspace; flash_decode_combine.cuh merges the splits.
//
// Threads: kTpr threads read one key row (16 bytes each, kNv vectors), kGroups groups of them read kGroups
// consecutive keys; each thread loads kKeysPerThread keys of K and V before it computes (the bytes in flight that
// a memory-bound kernel lives on), then per key: its slice of q . k for every row, summed across the group's lanes
// (butterfly: every lane gets the score), online softmax in base 2 (q pre-scaled by scale * log2 e), and its
// slice of the output accumulated in float (double for double). Each group keeps its own running max / sum /
// accumulator; at the end the groups are merged through shared memory.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/decode_kernels.h"
#include "attention/kernels/decode_cache.cuh"
#include "common/cuda/types.cuh"

namespace torch_dnn {
namespace attention {
namespace decode {

constexpr int kThreads = 128;
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

template <typename T, int D, int RC>
__global__ void __launch_bounds__(kThreads) flash_decode_split_kernel(DecodeArgs a, CacheMap map,
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
  // every thread runs the same iterations (the shuffles are block-uniform); keys past the split are masked
  for (int64_t base = k0; base < k1; base += G::kStep) {
    uint4 kr[KPT][G::kNv], vr[KPT][G::kNv];
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
#pragma unroll
    for (int r = 0; r < RC; ++r) {
      A mx = m[r];
#pragma unroll
      for (int u = 0; u < KPT; ++u) {
        const int64_t j = base + group + G::kGroups * u;
        if (!(j < k1 && j < limit[r])) s[u][r] = -INFINITY;
        mx = s[u][r] > mx ? s[u][r] : mx;
      }
      if (mx == -INFINITY) continue;  // nothing seen yet by this row
      const A corr = exp2_acc(m[r] - mx);  // 0 while m is -inf
      m[r] = mx;
      A p[KPT];
      A psum = A(0);
#pragma unroll
      for (int u = 0; u < KPT; ++u) {
        p[u] = exp2_acc(s[u][r] - mx);
        psum += p[u];
      }
      l[r] = l[r] * corr + psum;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[r][e] *= corr;
#pragma unroll
      for (int u = 0; u < KPT; ++u) {
        A vf[E];
#pragma unroll
        for (int n = 0; n < G::kNv; ++n) unpack<T>(vr[u][n], vf + n * G::kVec);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r][e] += p[u] * vf[e];
      }
    }
  }

  // merge the groups: each writes its max, sum and slice; then each thread finishes some (row, column) elements
  __shared__ A sm_m[G::kGroups][RC];
  __shared__ A sm_l[G::kGroups][RC];
  __shared__ A sm_acc[G::kGroups][RC][D];
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
