// The SIMT GEMM: true float32 (FFMA, as PyTorch computes float32 with TF32 off) and float64 (DFMA).
//
// CTA tile 128 x 128 x 8, 256 threads, 8 x 8 outputs per thread (rows ty*4 + {0..3} and 64 + ty*4 + {0..3},
// the same for columns), double-buffered shared memory fed through registers (the next tile's loads are in
// flight while the current one is multiplied), one barrier per K step. Any layout and alignment: each
// thread loads 4 elements of A and of B per K step, walking whichever dimension is contiguous in memory.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "matmul/kernels/gemm_common.cuh"

namespace torch_dnn {
namespace matmul {
namespace simt {

constexpr int kBM = 128, kBN = 128, kBK = 8, kThreads = 256, kLds = kBM + 4;

template <typename T>
struct Params {
  Operand<T> A, B;           // element (m, k) of A at p[m * ld + k] (a_kmajor) or p[k * ld + m]; (k, n) of B
  bool a_kmajor, b_kmajor;   // at p[n * ld + k] (b_kmajor) or p[k * ld + n]
  int64_t M, N, K, batch;
  int64_t tiles_m, tiles_n;
  int splits, kt_per_split;
  acc_t<T>* ws;
  Epi<T> e;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) gemm_kernel(const Params<T> p) {
  using A = acc_t<T>;
  __shared__ A As[2][kBK][kLds];
  __shared__ A Bs[2][kBK][kLds];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t tm = blockIdx.x % p.tiles_m, tn = blockIdx.x / p.tiles_m;
  const int64_t m0 = tm * kBM, n0 = tn * kBN;
  const int64_t ktiles = (p.K + kBK - 1) / kBK;

  // which element of the tile each of this thread's 4 loads covers (fixed over K)
  int am[4], ak[4], bn[4], bk[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = tid + i * kThreads;
    if (p.a_kmajor) ak[i] = e % kBK, am[i] = e / kBK;
    else am[i] = e % kBM, ak[i] = e / kBM;
    if (p.b_kmajor) bk[i] = e % kBK, bn[i] = e / kBK;
    else bn[i] = e % kBN, bk[i] = e / kBN;
  }

  for (int64_t z = blockIdx.z; z < p.batch * p.splits; z += gridDim.z) {
    const int64_t b = z / p.splits, s = z % p.splits;
    const int64_t kt0 = s * p.kt_per_split;
    const int64_t kt1 = kt0 + p.kt_per_split < ktiles ? kt0 + p.kt_per_split : ktiles;
    const int nk = int(kt1 > kt0 ? kt1 - kt0 : 0);
    const T* gA = p.A.p + b * p.A.bs;
    const T* gB = p.B.p + b * p.B.bs;

    A ra[4], rb[4];
    auto fetch = [&](int64_t kt) {
      const int64_t k0 = kt * kBK;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t m = m0 + am[i], k = k0 + ak[i];
        ra[i] = (m < p.M && k < p.K) ? to_acc<A>(gA[p.a_kmajor ? m * p.A.ld + k : k * p.A.ld + m]) : A(0);
        const int64_t n = n0 + bn[i], kb = k0 + bk[i];
        rb[i] = (n < p.N && kb < p.K) ? to_acc<A>(gB[p.b_kmajor ? n * p.B.ld + kb : kb * p.B.ld + n]) : A(0);
      }
    };
    auto stash = [&](int buf) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        As[buf][ak[i]][am[i]] = ra[i];
        Bs[buf][bk[i]][bn[i]] = rb[i];
      }
    };

    A acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = A(0);

    if (nk > 0) {
      fetch(kt0);
      stash(0);
    }
    __syncthreads();
#pragma unroll 1
    for (int it = 0; it < nk; ++it) {
      const int buf = it & 1;
      if (it + 1 < nk) fetch(kt0 + it + 1);
#pragma unroll
      for (int k = 0; k < kBK; ++k) {
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
      if (it + 1 < nk) stash(buf ^ 1);
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
