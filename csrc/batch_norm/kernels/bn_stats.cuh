// batch_norm statistics: per-channel (count, mean, M2) over the rows or planes walk, then a fixed-order finalize.
#pragma once
#include "batch_norm/kernels/bn_coeffs.cuh"
#include "batch_norm/kernels/bn_common.cuh"

namespace torch_dnn {
namespace batch_norm {
namespace {

// ---- statistics ----

template <typename T, int V>
__global__ void __launch_bounds__(kThreads, 3) stats_rows(const T* __restrict__ x, int64_t R, int64_t C, int TX,
                                                       acc_t<T>* __restrict__ part) {
  using A = acc_t<T>;
  __shared__ Moments<A> sm[kThreads * V];
  const int TY = kThreads / TX, tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int64_t c0 = (int64_t(blockIdx.x) * TX + tx) * V;
  const bool active = c0 < C;
  Moments<A> m[V];
#pragma unroll
  for (int j = 0; j < V; ++j) m[j] = {A(0), A(0), A(0)};
  if (active) {
    A sh[V], s[V], q[V];
    load_acc<V>(x + c0, sh);
    const int64_t step = int64_t(gridDim.y) * TY;
    int64_t r = int64_t(blockIdx.y) * TY + ty;
    while (r < R) {
      const int64_t end = min(R, r + kFold * step);
      int cnt = 0;
#pragma unroll
      for (int j = 0; j < V; ++j) s[j] = q[j] = A(0);
      // four rows' loads issued before any is used: enough bytes in flight per thread
      for (; r + 3 * step < end; r += 4 * step) {
        A v[4][V];
#pragma unroll
        for (int u = 0; u < 4; ++u) load_acc<V>(x + (r + u * step) * C + c0, v[u]);
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const A d = v[u][j] - sh[j];
            s[j] += d;
            q[j] = fma(d, d, q[j]);
          }
        cnt += 4;
      }
      for (; r < end; r += step) {
        A v[V];
        load_acc<V>(x + r * C + c0, v);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A d = v[j] - sh[j];
          s[j] += d;
          q[j] = fma(d, d, q[j]);
        }
        ++cnt;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) m[j] = merge(m[j], from_sums(cnt, sh[j], s[j], q[j]));
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) sm[threadIdx.x * V + j] = m[j];
  __syncthreads();
  for (int h = TY / 2; h > 0; h >>= 1) {
    if (ty < h) {
#pragma unroll
      for (int j = 0; j < V; ++j)
        sm[threadIdx.x * V + j] = merge(sm[threadIdx.x * V + j], sm[(threadIdx.x + h * TX) * V + j]);
    }
    __syncthreads();
  }
  if (ty == 0 && active) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const Moments<A> t = sm[threadIdx.x * V + j];
      *partial(part, 0, c0 + j, blockIdx.y, C) = t.n;
      *partial(part, 1, c0 + j, blockIdx.y, C) = t.mean;
      *partial(part, 2, c0 + j, blockIdx.y, C) = t.m2;
    }
  }
}

// The moments of channel c over the (image, piece) units u0, u0 + step, ... of a planes walk, shifted by sh (the
// channel's first element): one warp's share, before merging across the warp.
template <typename T, int V>
__device__ __forceinline__ Moments<acc_t<T>> plane_moments(const T* __restrict__ x, int64_t N, int64_t C, int64_t S,
                                                           int64_t pieces, int64_t c, int64_t u0, int64_t step,
                                                           acc_t<T> sh) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t sv = S / V;
  Moments<A> m{A(0), A(0), A(0)};
  for (int64_t u = u0; u < N * pieces; u += step) {
    const int64_t n = u / pieces, i0 = (u - n * pieces) * kPiece, end = min(sv, i0 + kPiece);
    const T* p = x + (n * C + c) * S;
    static_assert(kPiece <= kFold * 32, "one fold per piece");
    A s = A(0), q = A(0);
    int cnt = 0;
    int64_t i = i0 + lane;
    for (; i + 96 < end; i += 128) {
      A v[4][V];
#pragma unroll
      for (int u = 0; u < 4; ++u) load_acc<V>(p + (i + 32 * u) * V, v[u]);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A d = v[u][j] - sh;
          s += d;
          q = fma(d, d, q);
        }
      cnt += 4 * V;
    }
    for (; i < end; i += 32) {
      A v[V];
      load_acc<V>(p + i * V, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A d = v[j] - sh;
        s += d;
        q = fma(d, d, q);
      }
      cnt += V;
    }
    m = merge(m, from_sums(cnt, sh, s, q));
  }
  return m;
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads, 3) stats_planes(const T* __restrict__ x, int64_t N, int64_t C, int64_t S,
                                                         int64_t pieces, acc_t<T>* __restrict__ part) {
  using A = acc_t<T>;
  __shared__ Moments<A> sm[kWarps];
  const int64_t c = blockIdx.x;
  const int warp = threadIdx.x / 32;
  const A sh = to_acc<A>(x[c * S]);
  const Moments<A> t = block_moments(plane_moments<T, V>(x, N, C, S, pieces, c, int64_t(blockIdx.y) * kWarps + warp,
                                                        int64_t(gridDim.y) * kWarps, sh),
                                     sm);
  if (threadIdx.x == 0) {
    *partial(part, 0, c, blockIdx.y, C) = t.n;
    *partial(part, 1, c, blockIdx.y, C) = t.mean;
    *partial(part, 2, c, blockIdx.y, C) = t.m2;
  }
}

// One warp per channel merges the splits' moments: lane-strided, then across the warp (fixed order). COEFFS: the
// channel's forward coefficients (and running statistics) are computed from them at once, in place of writing
// mean and m2: the training forward's separate passes then take one launch less.
template <typename A, bool COEFFS>
__global__ void __launch_bounds__(kThreads) stats_finalize(const A* __restrict__ part, int splits, int64_t C,
                                                           A* __restrict__ mean, A* __restrict__ m2,
                                                           FwdCoeffPtrs coeffs) {
  const int64_t c = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (c >= C) return;
  Moments<A> m{A(0), A(0), A(0)};
  const int64_t cs = C * splits;
  for (int j = lane; j < splits; j += 32) {
    const A* p = part + c * splits + j;
    m = merge(m, Moments<A>{p[0], p[cs], p[2 * cs]});
  }
  m = warp_merge(m);
  if (lane == 0) {
    if constexpr (COEFFS) {
      double scale, shift;
      fwd_coeffs_one(coeffs, c, double(m.mean), double(m.m2), &scale, &shift);
    } else {
      mean[c] = m.mean;
      m2[c] = m.m2;
    }
  }
}

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn
