// act(x) and grad * act'(s) over flat dense memory: 16-byte vectors, UNROLL vectors in flight per thread,
// a grid-stride loop over the vector part and a scalar tail.
#pragma once
#include "activation/activation_math.h"
#include "common/cuda/device.cuh"
#include "common/cuda/vec.cuh"

namespace torch_dnn {
namespace activation {

constexpr int kThreads = 256;
constexpr int kUnroll = 2;

// The grid-stride walk over nvec vectors, kUnroll of them a thread a step: load(u, i) for each vector i of the
// step, then apply(u, i) for each, so that all of a step's loads are in flight before any is used.
template <class Load, class Apply>
__device__ __forceinline__ void for_each_vector_unrolled(int64_t nvec, Load&& load, Apply&& apply) {
  const int64_t stride = int64_t(gridDim.x) * kThreads * kUnroll;
  for (int64_t base = int64_t(blockIdx.x) * kThreads * kUnroll + threadIdx.x; base < nvec; base += stride) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kThreads;
      if (i < nvec) load(u, i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kThreads;
      if (i < nvec) apply(u, i);
    }
  }
}

template <typename T, Act K, int V>
__global__ void __launch_bounds__(kThreads) act_forward_kernel(const T* x, T* y, int64_t n, acc_t<T> a, acc_t<T> b) {
  using A = acc_t<T>;
  const int64_t nvec = n / V;
  Vec<T, V> v[kUnroll];
  for_each_vector_unrolled(
      nvec, [&](int u, int64_t i) { v[u] = load_vec<T, V>(x + i * V); },
      [&](int u, int64_t i) {
#pragma unroll
        for (int j = 0; j < V; ++j) v[u].v[j] = from_acc<T>(act_forward<K, A, kFastMath<T>>(to_acc<A>(v[u].v[j]), a, b));
        store_vec<T, V>(y + i * V, v[u]);
      });
  // Scalar tail: at most V-1 elements.
  if (blockIdx.x == 0) {
    for (int64_t i = nvec * V + threadIdx.x; i < n; i += kThreads) y[i] = from_acc<T>(act_forward<K, A, kFastMath<T>>(to_acc<A>(x[i]), a, b));
  }
}

template <typename T, Act K, int V>
__global__ void __launch_bounds__(kThreads)
    act_backward_kernel(const T* g, const T* s, T* dx, int64_t n, acc_t<T> a, acc_t<T> b) {
  using A = acc_t<T>;
  const int64_t nvec = n / V;
  Vec<T, V> gv[kUnroll], sv[kUnroll];
  for_each_vector_unrolled(
      nvec,
      [&](int u, int64_t i) {
        gv[u] = load_vec<T, V>(g + i * V);
        sv[u] = load_vec<T, V>(s + i * V);
      },
      [&](int u, int64_t i) {
#pragma unroll
        for (int j = 0; j < V; ++j)
          gv[u].v[j] = from_acc<T>(act_backward<K, A, kFastMath<T>>(to_acc<A>(gv[u].v[j]), to_acc<A>(sv[u].v[j]), a, b));
        store_vec<T, V>(dx + i * V, gv[u]);
      });
  if (blockIdx.x == 0) {
    for (int64_t i = nvec * V + threadIdx.x; i < n; i += kThreads)
      dx[i] = from_acc<T>(act_backward<K, A, kFastMath<T>>(to_acc<A>(g[i]), to_acc<A>(s[i]), a, b));
  }
}

template <typename T, Act K>
void run_forward(const T* x, T* y, int64_t n, ActParams p, cudaStream_t stream) {
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  if (aligned16(x) && aligned16(y)) {
    act_forward_kernel<T, K, V><<<grid_for(n / V + 1, kThreads * kUnroll), kThreads, 0, stream>>>(x, y, n, A(p.a), A(p.b));
  } else {
    act_forward_kernel<T, K, 1><<<grid_for(n, kThreads * kUnroll), kThreads, 0, stream>>>(x, y, n, A(p.a), A(p.b));
  }
}

template <typename T, Act K>
void run_backward(const T* g, const T* s, T* dx, int64_t n, ActParams p, cudaStream_t stream) {
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  if (aligned16(g) && aligned16(s) && aligned16(dx)) {
    act_backward_kernel<T, K, V><<<grid_for(n / V + 1, kThreads * kUnroll), kThreads, 0, stream>>>(g, s, dx, n, A(p.a), A(p.b));
  } else {
    act_backward_kernel<T, K, 1><<<grid_for(n, kThreads * kUnroll), kThreads, 0, stream>>>(g, s, dx, n, A(p.a), A(p.b));
  }
}

}  // namespace activation
}  // namespace torch_dnn
