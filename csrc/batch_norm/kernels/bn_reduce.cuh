// batch_norm backward sums: per-channel sum(dz) and sum(dz * (x - mean)), dz = dy * act'(z), then a fixed-order finalize.
#pragma once
#include "batch_norm/kernels/bn_coeffs.cuh"
#include "batch_norm/kernels/bn_common.cuh"

namespace torch_dnn {
namespace batch_norm {
namespace {

// ---- backward sums ----

template <typename T>
struct GradArgs {
  using A = acc_t<T>;
  const T* dy;
  const T* x;
  const T* res;
  const A* scale;
  const A* shift;
  const A* mean;
  T* dz;
  int act;
};

template <typename T, int V>
struct GradIn {
  acc_t<T> d[V], v[V], r[V];
};
// ACT: an activation (and maybe a residual) to differentiate through; false is plain batch_norm, whose
// kernels then keep no activation state in registers.
template <typename T, int V, bool ACT>
__device__ __forceinline__ void grad_load(const GradArgs<T>& g, int64_t o, GradIn<T, V>& in) {
  load_acc<V>(g.dy + o, in.d);
  load_acc<V>(g.x + o, in.v);
  if (ACT && g.res) load_acc<V>(g.res + o, in.r);
}
template <typename T, int V, bool ACT>
__device__ __forceinline__ void grad_use(const GradArgs<T>& g, int64_t o, GradIn<T, V>& in, const acc_t<T> (&mu)[V],
                                         const acc_t<T> (&sc)[V], const acc_t<T> (&sh)[V], acc_t<T> (&s1)[V],
                                         acc_t<T> (&s2)[V]) {
  using A = acc_t<T>;
  if constexpr (ACT) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      in.d[j] *= act_grad(fma(in.v[j], sc[j], sh[j]) + (g.res ? in.r[j] : A(0)), g.act);
  }
  if (g.dz) store_acc<V>(g.dz + o, in.d);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    s1[j] += in.d[j];
    s2[j] = fma(in.d[j], in.v[j] - mu[j], s2[j]);
  }
}
// Two accesses' loads issued before either is used.
template <typename T, int V, bool ACT>
__device__ __forceinline__ void grad_pair(const GradArgs<T>& g, int64_t o0, int64_t o1, const acc_t<T> (&mu)[V],
                                          const acc_t<T> (&sc)[V], const acc_t<T> (&sh)[V], acc_t<T> (&s1)[V],
                                          acc_t<T> (&s2)[V]) {
  GradIn<T, V> a, b;
  grad_load<T, V, ACT>(g, o0, a);
  grad_load<T, V, ACT>(g, o1, b);
  grad_use<T, V, ACT>(g, o0, a, mu, sc, sh, s1, s2);
  grad_use<T, V, ACT>(g, o1, b, mu, sc, sh, s1, s2);
}
template <typename T, int V, bool ACT>
__device__ __forceinline__ void grad_one(const GradArgs<T>& g, int64_t o, const acc_t<T> (&mu)[V],
                                         const acc_t<T> (&sc)[V], const acc_t<T> (&sh)[V], acc_t<T> (&s1)[V],
                                         acc_t<T> (&s2)[V]) {
  GradIn<T, V> a;
  grad_load<T, V, ACT>(g, o, a);
  grad_use<T, V, ACT>(g, o, a, mu, sc, sh, s1, s2);
}

template <typename T, int V, bool ACT>
__global__ void __launch_bounds__(kThreads, 3) reduce_rows(GradArgs<T> g, int64_t R, int64_t C, int TX,
                                                        acc_t<T>* __restrict__ part) {
  using A = acc_t<T>;
  __shared__ A sm[2][kThreads * V];
  const int TY = kThreads / TX, tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int64_t c0 = (int64_t(blockIdx.x) * TX + tx) * V;
  const bool active = c0 < C;
  A s1[V], s2[V];
#pragma unroll
  for (int j = 0; j < V; ++j) s1[j] = s2[j] = A(0);
  if (active) {
    A mu[V], sc[V], sh[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      mu[j] = g.mean[c0 + j];
      sc[j] = ACT ? g.scale[c0 + j] : A(0);
      sh[j] = ACT ? g.shift[c0 + j] : A(0);
    }
    const int64_t step = int64_t(gridDim.y) * TY;
    int64_t r = int64_t(blockIdx.y) * TY + ty;
    for (; r + step < R; r += 2 * step) grad_pair<T, V, ACT>(g, r * C + c0, (r + step) * C + c0, mu, sc, sh, s1, s2);
    if (r < R) grad_one<T, V, ACT>(g, r * C + c0, mu, sc, sh, s1, s2);
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    sm[0][threadIdx.x * V + j] = s1[j];
    sm[1][threadIdx.x * V + j] = s2[j];
  }
  __syncthreads();
  for (int h = TY / 2; h > 0; h >>= 1) {
    if (ty < h) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        sm[0][threadIdx.x * V + j] += sm[0][(threadIdx.x + h * TX) * V + j];
        sm[1][threadIdx.x * V + j] += sm[1][(threadIdx.x + h * TX) * V + j];
      }
    }
    __syncthreads();
  }
  if (ty == 0 && active) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      *partial(part, 0, c0 + j, blockIdx.y, C) = sm[0][threadIdx.x * V + j];
      *partial(part, 1, c0 + j, blockIdx.y, C) = sm[1][threadIdx.x * V + j];
    }
  }
}

// One thread's sums of channel c, a = sum dz and b = sum dz (x - mean), over the (image, piece) units u0, u0 + step,
// ... of a planes walk (its V lanes added): before adding across the warp.
template <typename T, int V, bool ACT>
__device__ __forceinline__ void plane_grad_sums(const GradArgs<T>& g, int64_t N, int64_t C, int64_t S, int64_t pieces,
                                                int64_t c, int64_t u0, int64_t step, acc_t<T>& a, acc_t<T>& b) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  A mu[V], sc[V], sh[V], s1[V], s2[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    mu[j] = g.mean[c];
    sc[j] = ACT ? g.scale[c] : A(0);
    sh[j] = ACT ? g.shift[c] : A(0);
    s1[j] = s2[j] = A(0);
  }
  const int64_t sv = S / V;
  for (int64_t u = u0; u < N * pieces; u += step) {
    const int64_t n = u / pieces, i0 = (u - n * pieces) * kPiece, end = min(sv, i0 + kPiece);
    const int64_t base = (n * C + c) * S;
    int64_t i = i0 + lane;
    for (; i + 32 < end; i += 64) grad_pair<T, V, ACT>(g, base + i * V, base + (i + 32) * V, mu, sc, sh, s1, s2);
    if (i < end) grad_one<T, V, ACT>(g, base + i * V, mu, sc, sh, s1, s2);
  }
  a = b = A(0);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    a += s1[j];
    b += s2[j];
  }
}

template <typename T, int V, bool ACT>
__global__ void __launch_bounds__(kThreads, 3) reduce_planes(GradArgs<T> g, int64_t N, int64_t C, int64_t S,
                                                          int64_t pieces, acc_t<T>* __restrict__ part) {
  using A = acc_t<T>;
  __shared__ A sm[2][kWarps];
  const int64_t c = blockIdx.x;
  const int warp = threadIdx.x / 32;
  A a, b;
  plane_grad_sums<T, V, ACT>(g, N, C, S, pieces, c, int64_t(blockIdx.y) * kWarps + warp, int64_t(gridDim.y) * kWarps,
                             a, b);
  block_sums(a, b, sm);
  if (threadIdx.x == 0) {
    *partial(part, 0, c, blockIdx.y, C) = a;
    *partial(part, 1, c, blockIdx.y, C) = b;
  }
}

// One warp per channel adds the splits' sums (fixed order). COEFFS: the channel's backward coefficients (d_weight,
// d_bias, k, a, b) are computed from them at once, in place of writing the sums.
template <typename A, bool COEFFS>
__global__ void __launch_bounds__(kThreads) reduce_finalize(const A* __restrict__ part, int splits, int64_t C,
                                                            A* __restrict__ sum_dz, A* __restrict__ sum_dz_xmu,
                                                            BwdCoeffPtrs coeffs) {
  const int64_t c = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= C) return;
  A a = A(0), b = A(0);
  for (int j = lane; j < splits; j += 32) {
    a += part[c * splits + j];
    b += part[(C + c) * splits + j];
  }
  a = warp_reduce(a, SumOp{});
  b = warp_reduce(b, SumOp{});
  if (lane == 0) {
    if constexpr (COEFFS) {
      bwd_coeffs_one(coeffs, c, double(a), double(b));
    } else {
      sum_dz[c] = a;
      sum_dz_xmu[c] = b;
    }
  }
}

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn
