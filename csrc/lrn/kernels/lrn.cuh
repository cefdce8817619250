// local_response_norm kernels: a thread per element, each window sum recomputed from memory (the window's
// other elements are L1/L2 hits: NCHW neighbours in the channel are S apart, a thread per position makes the
// loads coalesced; channels-last neighbours are adjacent). No running sum, so no cancellation.
//   lrn_fwd       y = x * scale^-beta
//   lrn_bwd_terms t = dy * x * scale^(-beta-1) into an accumulation-type workspace
//   lrn_bwd       dx = dy * scale^-beta - 2 alpha beta / size * x * sum of t over the channels whose window
//                 holds this one
#pragma once
#include "common/cuda/device.cuh"
#include "common/cuda/types.cuh"
#include "lrn/lrn_kernels.h"

namespace torch_dnn {
namespace lrn {

__device__ __forceinline__ float td_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double td_pow(double a, double b) { return pow(a, b); }

template <typename A>
struct LrnParams {
  int64_t N, C, S, numel;
  int before, after;  // window [c - before, c + after]
  A alpha_n, beta, k;  // alpha / size
  bool cl;
};

// Channel of element i and the offset of channel 0 of its column; channel stride.
template <typename A>
__device__ __forceinline__ void column_of(const LrnParams<A>& p, int64_t i, int64_t& c, int64_t& base, int64_t& cs) {
  if (p.cl) {
    c = i % p.C;
    base = i - c;
    cs = 1;
  } else {
    c = (i / p.S) % p.C;
    base = i - c * p.S;
    cs = p.S;
  }
}

template <typename T, typename A>
__device__ __forceinline__ A scale_at(const T* x, const LrnParams<A>& p, int64_t c, int64_t base, int64_t cs) {
  const int64_t lo = c - p.before < 0 ? 0 : c - p.before;
  const int64_t hi = c + p.after < p.C - 1 ? c + p.after : p.C - 1;
  A sum = A(0);
  for (int64_t q = lo; q <= hi; ++q) {
    const A v = to_acc<A>(x[base + q * cs]);
    sum += v * v;
  }
  return p.k + p.alpha_n * sum;
}

template <typename T>
__global__ void __launch_bounds__(256) lrn_fwd(const T* x, T* y, LrnParams<acc_t<T>> p) {
  using A = acc_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c, base, cs;
    column_of(p, i, c, base, cs);
    const A sc = scale_at(x, p, c, base, cs);
    y[i] = from_acc<T>(to_acc<A>(x[i]) * td_pow(sc, -p.beta));
  }
}

template <typename T>
__global__ void __launch_bounds__(256) lrn_bwd_terms(const T* dy, const T* x, acc_t<T>* t, LrnParams<acc_t<T>> p) {
  using A = acc_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c, base, cs;
    column_of(p, i, c, base, cs);
    const A sc = scale_at(x, p, c, base, cs);
    t[i] = to_acc<A>(dy[i]) * to_acc<A>(x[i]) * td_pow(sc, -p.beta) / sc;
  }
}

template <typename T>
__global__ void __launch_bounds__(256) lrn_bwd(const T* dy, const T* x, const acc_t<T>* t, T* dx,
                                               LrnParams<acc_t<T>> p) {
  using A = acc_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c, base, cs;
    column_of(p, i, c, base, cs);
    const A sc = scale_at(x, p, c, base, cs);
    // channel c lies in the windows of channels [c - after, c + before]
    const int64_t lo = c - p.after < 0 ? 0 : c - p.after;
    const int64_t hi = c + p.before < p.C - 1 ? c + p.before : p.C - 1;
    A acc = A(0);
    for (int64_t q = lo; q <= hi; ++q) acc += t[base + q * cs];
    dx[i] = from_acc<T>(to_acc<A>(dy[i]) * td_pow(sc, -p.beta) - A(2) * p.alpha_n * p.beta * to_acc<A>(x[i]) * acc);
  }
}

template <typename T>
LrnParams<acc_t<T>> make_params(const LrnShape& s) {
  using A = acc_t<T>;
  return {s.N, s.C, s.S, s.N * s.C * s.S, int(s.size / 2), int((s.size - 1) / 2), A(s.alpha / double(s.size)),
          A(s.beta), A(s.k), s.channels_last};
}

}  // namespace lrn
}  // namespace torch_dnn
