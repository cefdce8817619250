// The epilogues of the implicit-GEMM convolution kernels. Each reads the CTA's BM x BN float accumulator tile,
// staged in shared memory as [BM][kLdc] by the mainloop, 8 consecutive columns a thread (16-byte stores; every
// channel count this path takes is a multiple of 8, so 8 columns never straddle the edge of N).
//   store_pixels: fprop / dgrad, rows are output pixels [n][p][q][o] of a channels-innermost output.
//                 v = act(acc + bias[k] + residual) in float, then one rounding to T (conv_kernels.h's order:
//                 the residual is added before the activation). With K splits the CTAs write float partial sums
//                 (store_rows) and finish_pixel_splits_kernel adds them in split order and finishes them alike.
//   store_rows:   wgrad, rows are dw's K index, columns its (t, r, s, c) index: dw rows at stride ldw, or the
//                 float partial sums of a K split (ws[split][M][N]), which sum_splits adds in split order.
#pragma once
#include "conv/kernels/conv_igemm_common.cuh"

namespace torch_dnn {
namespace conv {
namespace igemm {

template <typename T>
struct OutParams {
  T* y;  // [n][p][q][o][k], k at stride 1
  int64_t ys_n, ys_d, ys_h, ys_w;
  const T* bias;  // [N] or null
  const T* res;   // shaped as y, or null; any strides (16-byte loads where res_vec)
  int64_t rs_n, rs_c, rs_d, rs_h, rs_w;
  bool res_vec;
  Act act;
  float pa, pb;
};

template <typename T>
__device__ __forceinline__ void read8(const float* cs, int r, int c, float (&v)[8]) {
  const float4 lo = *reinterpret_cast<const float4*>(cs + r * kLdc + c);
  const float4 hi = *reinterpret_cast<const float4*>(cs + r * kLdc + c + 4);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}

template <typename T>
__device__ __forceinline__ void write8(T* dst, const float (&v)[8]) {
  constexpr int KE = 16 / sizeof(T), NV = 8 / KE;
#pragma unroll
  for (int q = 0; q < NV; ++q) {
    Vec<T, KE> w;
#pragma unroll
    for (int j = 0; j < KE; ++j) w.v[j] = from_acc<T>(v[q * KE + j]);
    store_vec(dst + q * KE, w);
  }
}

// Columns n .. n+7 of output pixel px: v = act(acc + bias + residual), one rounding, 16-byte stores.
template <typename T>
__device__ __forceinline__ void finish8(const OutParams<T>& e, const Pixel& px, int64_t n, float (&v)[8]) {
  constexpr int KE = 16 / sizeof(T), NV = 8 / KE;
  if (e.bias) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] += to_acc<float>(e.bias[n + j]);
  }
  if (e.res) {
    const int64_t ro = px.n * e.rs_n + px.p * e.rs_d + px.q * e.rs_h + px.o * e.rs_w;
    if (e.res_vec) {
      const T* rp = e.res + ro + n;
#pragma unroll
      for (int q = 0; q < NV; ++q) {
        const Vec<T, KE> w = load_vec<T, KE>(rp + q * KE);
#pragma unroll
        for (int j = 0; j < KE; ++j) v[q * KE + j] += to_acc<float>(w.v[j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] += to_acc<float>(e.res[ro + (n + j) * e.rs_c]);
    }
  }
  if (e.act != Act::Identity) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = matmul::apply_act<float, kFastMath<T>>(v[j], e.act, e.pa, e.pb);
  }
  write8<T>(e.y + (px.n * e.ys_n + px.p * e.ys_d + px.q * e.ys_h + px.o * e.ys_w + n), v);
}

// f(r, c, m, n) for each of a thread's 8-column chunks of the CTA's BM x BN tile (row r, column c of the tile; row
// m, column n of the GEMM, the tile at m0, n0) that lies inside the M x N output, rows kThreads / (BN / 8) apart.
template <int BM, int BN, class F>
__device__ __forceinline__ void for_each_chunk8(int M, int N, int64_t m0, int64_t n0, int tid, F&& f) {
  constexpr int TPR = BN / 8, RPP = kThreads / TPR;  // threads a row, rows a pass
#pragma unroll 1
  for (int pass = 0; pass < BM / RPP; ++pass) {
    const int r = pass * RPP + tid / TPR, c = (tid % TPR) * 8;
    const int64_t m = m0 + r, n = n0 + c;
    if (m >= M || n >= N) continue;
    f(r, c, m, n);
  }
}

template <typename T, int BM, int BN>
__device__ __forceinline__ void store_pixels(const OutParams<T>& e, const FastDiv& P, const FastDiv& Q,
                                             const FastDiv& O, int M, int N, const float* cs, int64_t m0, int64_t n0,
                                             int tid) {
  for_each_chunk8<BM, BN>(M, N, m0, n0, tid, [&](int r, int c, int64_t m, int64_t n) {
    float v[8];
    read8<T>(cs, r, c, v);
    finish8(e, pixel_of(int(m), P, Q, O), n, v);
  });
}

// The split form of store_pixels: out[m][n] = finish8(sum over s = 0, 1, ... of ws[s][m][n]), in that order
// (bitwise reproducible), 8 columns a thread.
template <typename T>
__global__ void finish_pixel_splits_kernel(const float* __restrict__ ws, int splits, int M, int N, FastDiv P, FastDiv Q,
                                           FastDiv O, OutParams<T> e) {
  const int64_t total = int64_t(M) * N, octs = total / 8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < octs; i += int64_t(gridDim.x) * blockDim.x) {
    float4 lo = reinterpret_cast<const float4*>(ws)[2 * i], hi = reinterpret_cast<const float4*>(ws)[2 * i + 1];
    for (int s = 1; s < splits; ++s) {
      const float4* w = reinterpret_cast<const float4*>(ws + s * total);
      const float4 a = w[2 * i], b = w[2 * i + 1];
      lo.x += a.x, lo.y += a.y, lo.z += a.z, lo.w += a.w;
      hi.x += b.x, hi.y += b.y, hi.z += b.z, hi.w += b.w;
    }
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const int64_t el = i * 8, m = el / N, n = el - m * N;
    finish8(e, pixel_of(int(m), P, Q, O), n, v);
  }
}

template <typename T, int BM, int BN>
__device__ __forceinline__ void store_rows(T* dw, int64_t ldw, float* ws, int split, int splits, int M, int N,
                                           const float* cs, int64_t m0, int64_t n0, int tid) {
  for_each_chunk8<BM, BN>(M, N, m0, n0, tid, [&](int r, int c, int64_t m, int64_t n) {
    if (splits > 1) {
      float* w = ws + (int64_t(split) * M + m) * N + n;
      *reinterpret_cast<float4*>(w) = *reinterpret_cast<const float4*>(cs + r * kLdc + c);
      *reinterpret_cast<float4*>(w + 4) = *reinterpret_cast<const float4*>(cs + r * kLdc + c + 4);
    } else {
      float v[8];
      read8<T>(cs, r, c, v);
      write8<T>(dw + m * ldw + n, v);
    }
  });
}

// dw[m][n] = sum over s = 0, 1, ... of ws[s][m][n], in that order (bitwise reproducible), 4 columns a thread.
template <typename T>
__global__ void sum_splits_kernel(const float* __restrict__ ws, int splits, int M, int N, T* __restrict__ dw,
                                  int64_t ldw) {
  const int64_t total = int64_t(M) * N, quads = total / 4;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < quads; i += int64_t(gridDim.x) * blockDim.x) {
    float4 a = reinterpret_cast<const float4*>(ws)[i];
    for (int s = 1; s < splits; ++s) {
      const float4 b = reinterpret_cast<const float4*>(ws + s * total)[i];
      a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
    }
    const int64_t e = i * 4, m = e / N, n = e - m * N;
    Vec<T, 4> o;
    o.v[0] = from_acc<T>(a.x), o.v[1] = from_acc<T>(a.y), o.v[2] = from_acc<T>(a.z), o.v[3] = from_acc<T>(a.w);
    store_vec(dw + m * ldw + n, o);
  }
}

}  // namespace igemm
}  // namespace conv
}  // namespace torch_dnn
