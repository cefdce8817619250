// The SIMT GEMM: true float32 (FFMA, as PyTorch computes float32 with TF32 off) and float64 (DFMA).
//
// CTA tile 128 x 128, K step 16 (float; 8 for double), 256 threads, 8 x 8 outputs per thread (rows ty*4 + {0..3} and
// 64 + ty*4 + {0..3}, the same for columns), double-buffered shared memory fed through registers (the next step's
// loads are in flight while the current one is multiplied), one barrier per K step. Each thread loads its share of A
// and of B per K step as 16-byte vectors through pointers that step along K where the operands are 16-byte aligned
// (in edge tiles too for k-major float operands: rows past M or N read as zeros); element by element with bounds
// checks otherwise (a partial last K step, any layout or alignment). The operand layouts are template parameters.
// Layouts as template parameters because run-time layouts made every load a branch; the 16-deep step halves the
// barriers. The kernel is one CTA an SM (200-250 registers): bounding them to 128 for two CTAs an SM makes it spill
// (docs/matmul.md has the measurements).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda/vec.cuh"
#include "matmul/kernels/gemm_common.cuh"

namespace torch_dnn {
namespace matmul {
namespace simt {

constexpr int kBM = 128, kBN = 128, kThreads = 256, kLds = kBM + 4;
constexpr int kBK = 8;  // the split-K plan's unit of K (make_plan); the kernel's own step is its template argument

template <typename T>
struct Params {
  Operand<T> A, B;  // element (m, k) of A at p[m * ld + k] (k-major) or p[k * ld + m]; (k, n) of B at p[n * ld + k]
                    // (k-major) or p[k * ld + n]: the kernel's AK / BK
  int64_t M, N, K, batch;
  int64_t tiles_m, tiles_n;
  int splits, kt_per_split;
  acc_t<T>* ws;
  Epi<T> e;
};

// One operand's 128 x BK tile per K step: rows r (m of A, n of B) by k. KMAJOR: element (r, k) at p[r * ld + k],
// else at p[k * ld + r]. Thread tid covers elements tid + 256 i (scalar) or vectors tid + 256 j (kVec16 elements
// along the contiguous dimension): E elements a thread either way.
template <typename T, bool KMAJOR, int BK>
struct TileLoader {
  using A = acc_t<T>;
  static constexpr int V = kVec16<T>, E = kBM * BK / kThreads, L = E / V;
  static_assert(L * V == E, "whole vectors a thread");
  // Positions are recomputed from tid where used (a few integer ops a K step) rather than kept in registers.
  static __device__ int srow(int tid, int i) { return KMAJOR ? (tid + i * kThreads) / BK : (tid + i * kThreads) % kBM; }
  static __device__ int sk(int tid, int i) { return KMAJOR ? (tid + i * kThreads) % BK : (tid + i * kThreads) / kBM; }
  static __device__ int vrow(int tid, int j) {
    return KMAJOR ? (tid + j * kThreads) / (BK / V) : ((tid + j * kThreads) % (kBM / V)) * V;
  }
  static __device__ int vk(int tid, int j) {
    return KMAJOR ? ((tid + j * kThreads) % (BK / V)) * V : (tid + j * kThreads) / (kBM / V);
  }
  A reg[E];

  // the tile at rows r0.., k0.. of a matrix with `rows` rows, columns below k_end, bounds checked
  __device__ void fetch_scalar(int tid, const T* g, int64_t ld, int64_t r0, int64_t rows, int64_t k0, int64_t k_end) {
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const int64_t r = r0 + srow(tid, i), k = k0 + sk(tid, i);
      reg[i] = (r < rows && k < k_end) ? to_acc<A>(g[KMAJOR ? r * ld + k : k * ld + r]) : A(0);
    }
  }
  __device__ void stash_scalar(int tid, A (*S)[kLds]) const {
#pragma unroll
    for (int i = 0; i < E; ++i) S[sk(tid, i)][srow(tid, i)] = reg[i];
  }
  // the vector path: vector j's address at k = 0; a K step moves it by step()
  static __device__ const T* vec_base(int tid, const T* g, int64_t ld, int64_t r0, int j) {
    return KMAJOR ? g + (r0 + vrow(tid, j)) * ld + vk(tid, j) : g + int64_t(vk(tid, j)) * ld + r0 + vrow(tid, j);
  }
  static __device__ int64_t step(int64_t ld) { return KMAJOR ? BK : BK * ld; }
  static __device__ int64_t offset(int64_t k, int64_t ld) { return KMAJOR ? k : k * ld; }
  // rows at or past `rows` (an edge tile) read as zeros: a k-major vector lies in one row; another covers V rows,
  // element by element where it straddles the edge
  // Float k-major operands only: the edge code cost double a spill, and the straddling case of the other layout
  // pushed the kernels that have one to 253-255 registers and slowed their interior tiles; those take vectors in
  // interior tiles only.
  static constexpr bool kEdgeVec = sizeof(T) == 4 && KMAJOR;
  __device__ void fetch_vec(int tid, const T* const* ptr, int64_t r0, int64_t rows) {
#pragma unroll
    for (int j = 0; j < L; ++j) {
      const int64_t r = r0 + vrow(tid, j);
      if (!kEdgeVec || (KMAJOR ? r < rows : r + V <= rows)) {
        const Vec<T, V> v = load_vec<T, V>(ptr[j]);
#pragma unroll
        for (int i = 0; i < V; ++i) reg[j * V + i] = v.v[i];
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) reg[j * V + i] = (!KMAJOR && r + i < rows) ? ptr[j][i] : A(0);
      }
    }
  }
  __device__ void stash_vec(int tid, A (*S)[kLds]) const {
#pragma unroll
    for (int j = 0; j < L; ++j) {
      if constexpr (KMAJOR) {
#pragma unroll
        for (int i = 0; i < V; ++i) S[vk(tid, j) + i][vrow(tid, j)] = reg[j * V + i];
      } else {
        Vec<A, V> v;
#pragma unroll
        for (int i = 0; i < V; ++i) v.v[i] = reg[j * V + i];
        *reinterpret_cast<Vec<A, V>*>(&S[vk(tid, j)][vrow(tid, j)]) = v;
      }
    }
  }
};

// AK: A is k-major (element (m, k) at m * ld + k); BKM: B is k-major (element (k, n) at n * ld + k). BK: the K step
// (16 for float: half the barriers of 8; shared memory limits double to 8). The split-K plan counts K in steps of
// kBK (8): split s covers K [s * kt_per_split * 8, ...), which the kernel walks BK at a time.
template <typename T, bool AK, bool BKM, int BK>
__global__ void __launch_bounds__(kThreads) gemm_kernel(const Params<T> p) {
  static_assert(std::is_same_v<T, acc_t<T>>, "float and double only");
  using A = acc_t<T>;
  using LA = TileLoader<T, AK, BK>;
  using LB = TileLoader<T, BKM, BK>;
  __shared__ alignas(16) A As[2][BK][kLds];
  __shared__ alignas(16) A Bs[2][BK][kLds];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t tm = blockIdx.x % p.tiles_m, tn = blockIdx.x / p.tiles_m;
  const int64_t m0 = tm * kBM, n0 = tn * kBN;
  // 16-byte loads where both operands are aligned and the tile is inside M and N, or past them in a k-major operand
  // (a partial last K step goes element by element)
  const bool vec = p.A.vec && p.B.vec && (LA::kEdgeVec || m0 + kBM <= p.M) && (LB::kEdgeVec || n0 + kBN <= p.N);
  LA la;
  LB lb;

  for (int64_t z = blockIdx.z; z < p.batch * p.splits; z += gridDim.z) {
    const int64_t b = z / p.splits, s = z % p.splits;
    const int64_t k_begin = s * p.kt_per_split * kBK;
    const int64_t k_end = k_begin + p.kt_per_split * kBK < p.K ? k_begin + p.kt_per_split * kBK : p.K;
    const int nk = int(k_end > k_begin ? (k_end - k_begin + BK - 1) / BK : 0);
    const T* gA = p.A.p + b * p.A.bs;
    const T* gB = p.B.p + b * p.B.bs;
    const T* pa[LA::L];
    const T* pb[LB::L];
#pragma unroll
    for (int j = 0; j < LA::L; ++j) pa[j] = LA::vec_base(tid, gA, p.A.ld, m0, j) + LA::offset(k_begin, p.A.ld);
#pragma unroll
    for (int j = 0; j < LB::L; ++j) pb[j] = LB::vec_base(tid, gB, p.B.ld, n0, j) + LB::offset(k_begin, p.B.ld);

    // K step `it` into registers (vectors: through pa / pb, which then move to the next step); whether it went
    // through the vector path
    auto fetch = [&](int it) {
      const int64_t k0 = k_begin + int64_t(it) * BK;
      if (vec && k0 + BK <= k_end) {
        la.fetch_vec(tid, pa, m0, p.M);
        lb.fetch_vec(tid, pb, n0, p.N);
#pragma unroll
        for (int j = 0; j < LA::L; ++j) pa[j] += LA::step(p.A.ld);
#pragma unroll
        for (int j = 0; j < LB::L; ++j) pb[j] += LB::step(p.B.ld);
        return true;
      }
      la.fetch_scalar(tid, gA, p.A.ld, m0, p.M, k0, k_end);
      lb.fetch_scalar(tid, gB, p.B.ld, n0, p.N, k0, k_end);
      return false;
    };
    auto stash = [&](int buf, bool as_vec) {
      if (as_vec) {
        la.stash_vec(tid, As[buf]);
        lb.stash_vec(tid, Bs[buf]);
      } else {
        la.stash_scalar(tid, As[buf]);
        lb.stash_scalar(tid, Bs[buf]);
      }
    };

    A acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = A(0);

    if (nk > 0) stash(0, fetch(0));
    __syncthreads();
#pragma unroll 1
    for (int it = 0; it < nk; ++it) {
      const int buf = it & 1;
      const bool next_vec = it + 1 < nk ? fetch(it + 1) : false;
#pragma unroll
      for (int k = 0; k < BK; ++k) {
        A a[8], bv[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          a[i] = As[buf][k][ty * 4 + i];
          a[i + 4] = As[buf][k][64 + ty * 4 + i];
          bv[i] = Bs[buf][k][tx * 4 + i];
          bv[i + 4] = Bs[buf][k][64 + tx * 4 + i];
        }
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[i][j] = fma(a[i], bv[j], acc[i][j]);
      }
      if (it + 1 < nk) stash(buf ^ 1, next_vec);
      __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
      if (m >= p.M) continue;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
        if (n >= p.N) continue;
        if (p.splits > 1) *partial_ptr(p.ws, s, b, m, n, p.batch, p.M, p.N) = acc[i][j];
        else epi_store1(p.e, b, m, n, acc[i][j]);
      }
    }
    __syncthreads();
  }
}

}  // namespace simt
}  // namespace matmul
}  // namespace torch_dnn
