// What the sm_80 GEMM kernels share: typed operands, the fused epilogue (alpha, bias, activation, residual,
// optional pre-activation store), the split-K partial store and its fixed-order reduction. Torch-free.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "activation/activation_math.h"
#include "common/cuda/types.cuh"
#include "common/cuda/vec.cuh"
#include "matmul/gemm_kernels.h"

namespace torch_dnn {
namespace matmul {

template <typename T> __device__ __forceinline__ T zero() { return from_acc<T>(acc_t<T>(0)); }

// One operand: element (r, c) of the stored matrix of batch b at p[b * bs + r * ld + c] (see each kernel for
// what rows and columns are). vec: 16-byte accesses are aligned (base, ld and batch stride).
template <typename T>
struct Operand {
  const T* p;
  int64_t ld, bs;
  bool vec;
};

// The epilogue, typed: pre = alpha * acc + bias[n]; D = act(pre) + residual. vec_d / vec_r: 16-byte accesses
// of D (and preact) / residual are aligned for every 16-byte-aligned column n.
template <typename T>
struct Epi {
  using A = acc_t<T>;
  T* d;
  int64_t ldd, bsd;
  T* pre;
  const T* bias;
  const T* res;
  int64_t ldr, bsr;
  A alpha, pa, pb;
  Act act;
  bool vec_d, vec_r;
};

// The activation as a run-time switch in one out-of-line function per accumulation type: one copy of the
// activation code per kernel file instead of one per (kernel, activation).
template <typename A, bool FAST>
__device__ __noinline__ A apply_act(A x, Act k, A a, A b) {
  using activation::act_forward;
  switch (k) {
    case Act::Identity: return x;
    case Act::Relu: return act_forward<Act::Relu, A, FAST>(x, a, b);
    case Act::Relu6: return act_forward<Act::Relu6, A, FAST>(x, a, b);
    case Act::Hardtanh: return act_forward<Act::Hardtanh, A, FAST>(x, a, b);
    case Act::LeakyRelu: return act_forward<Act::LeakyRelu, A, FAST>(x, a, b);
    case Act::Elu: return act_forward<Act::Elu, A, FAST>(x, a, b);
    case Act::Gelu: return act_forward<Act::Gelu, A, FAST>(x, a, b);
    case Act::GeluTanh: return act_forward<Act::GeluTanh, A, FAST>(x, a, b);
    case Act::Silu: return act_forward<Act::Silu, A, FAST>(x, a, b);
    case Act::Sigmoid: return act_forward<Act::Sigmoid, A, FAST>(x, a, b);
    case Act::Tanh: return act_forward<Act::Tanh, A, FAST>(x, a, b);
    case Act::Softplus: return act_forward<Act::Softplus, A, FAST>(x, a, b);
    case Act::Mish: return act_forward<Act::Mish, A, FAST>(x, a, b);
    case Act::Hardswish: return act_forward<Act::Hardswish, A, FAST>(x, a, b);
    case Act::Hardsigmoid: return act_forward<Act::Hardsigmoid, A, FAST>(x, a, b);
  }
  return x;
}

// One output element (m < M, n < N).
template <typename T>
__device__ __forceinline__ void epi_store1(const Epi<T>& e, int64_t b, int64_t m, int64_t n, acc_t<T> v) {
  using A = acc_t<T>;
  v = e.alpha * v;
  if (e.bias) v += to_acc<A>(e.bias[n]);
  const int64_t o = b * e.bsd + m * e.ldd + n;
  if (e.pre) e.pre[o] = from_acc<T>(v);
  if (e.act != Act::Identity) v = apply_act<A, kFastMath<T>>(v, e.act, e.pa, e.pb);
  if (e.res) v += to_acc<A>(e.res[b * e.bsr + m * e.ldr + n]);
  e.d[o] = from_acc<T>(v);
}

// Eight consecutive output elements n .. n+7 of row m (n a multiple of 8), float accumulators: 16-byte
// accesses where the row holds all eight and the pointers allow, element by element otherwise.
template <typename T>
__device__ __forceinline__ void epi_store8(const Epi<T>& e, int64_t b, int64_t m, int64_t n, int64_t N, const float (&v)[8]) {
  static_assert(sizeof(acc_t<T>) == 4, "float accumulators");
  if (n + 8 <= N && e.vec_d && (e.res == nullptr || e.vec_r)) {
    constexpr int KE = 16 / sizeof(T);
    constexpr int NV = 8 / KE;  // 16-byte vectors per 8 elements
    float x[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = e.alpha * v[j] + (e.bias ? to_acc<float>(e.bias[n + j]) : 0.f);
    const int64_t o = b * e.bsd + m * e.ldd + n;
    if (e.pre) {
#pragma unroll
      for (int q = 0; q < NV; ++q) {
        Vec<T, KE> w;
#pragma unroll
        for (int j = 0; j < KE; ++j) w.v[j] = from_acc<T>(x[q * KE + j]);
        store_vec(e.pre + o + q * KE, w);
      }
    }
    if (e.act != Act::Identity) {
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = apply_act<float, kFastMath<T>>(x[j], e.act, e.pa, e.pb);
    }
    if (e.res) {
      const T* r = e.res + b * e.bsr + m * e.ldr + n;
#pragma unroll
      for (int q = 0; q < NV; ++q) {
        const Vec<T, KE> w = load_vec<T, KE>(r + q * KE);
#pragma unroll
        for (int j = 0; j < KE; ++j) x[q * KE + j] += to_acc<float>(w.v[j]);
      }
    }
#pragma unroll
    for (int q = 0; q < NV; ++q) {
      Vec<T, KE> w;
#pragma unroll
      for (int j = 0; j < KE; ++j) w.v[j] = from_acc<T>(x[q * KE + j]);
      store_vec(e.d + o + q * KE, w);
    }
    return;
  }
#pragma unroll 1
  for (int j = 0; j < 8; ++j)
    if (n + j < N) epi_store1(e, b, m, n + j, v[j]);
}

// Split-K: the partial sums of split s go to ws[((s * batch + b) * M + m) * N + n] (accumulation type); the
// reduction adds the splits in order 0, 1, ... (deterministic) and applies the epilogue.
template <typename A>
__device__ __forceinline__ A* partial_ptr(A* ws, int64_t s, int64_t b, int64_t m, int64_t n, int64_t batch, int64_t M,
                                          int64_t N) {
  return ws + ((s * batch + b) * M + m) * N + n;
}

template <typename T>
__global__ void splitk_reduce_kernel(const acc_t<T>* __restrict__ ws, int splits, int64_t batch, int64_t M, int64_t N,
                                     Epi<T> e) {
  using A = acc_t<T>;
  const int64_t per = M * N, total = batch * per;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    A acc = ws[i];
    for (int s = 1; s < splits; ++s) acc += ws[s * total + i];
    const int64_t b = i / per, r = i - b * per, m = r / N, n = r - m * N;
    epi_store1(e, b, m, n, acc);
  }
}

}  // namespace matmul
}  // namespace torch_dnn
