// What the direct convolution kernels share: the launch helper (tests/emulation/ runs these kernels on the CPU),
// typed views of the contract's operands, the fused epilogue (bias + residual + activation) and the block-wide
// fixed-order sum that makes every reduction deterministic.
#pragma once
#include <cstdint>

#include "common/cuda/divmod.cuh"
#include "common/cuda/types.cuh"
#include "common/cuda/vec.cuh"
#include "conv/conv_kernels.h"

#if defined(TORCH_DNN_EMULATE_CUDA) && !defined(__noinline__)
#define __noinline__ __attribute__((noinline))
#endif

namespace torch_dnn {
namespace conv {

// Every kernel of the direct path is launched through here, with 1-D grids and blocks (the emulation's shape).
template <typename... P, typename... Args>
void launch_direct(void (*kernel)(P...), int64_t grid, int block, size_t smem, cudaStream_t stream, Args... args) {
#if defined(TORCH_DNN_EMULATE_CUDA)
  emulate_launch_smem(kernel, unsigned(grid), unsigned(block), smem, args...);
#else
  kernel<<<unsigned(grid), unsigned(block), smem, stream>>>(args...);
#endif
}

// The running block's dynamic shared memory, 16-byte aligned.
#if defined(TORCH_DNN_EMULATE_CUDA)
inline unsigned char* direct_smem() { return emu_dyn_smem(); }
#else
__device__ __forceinline__ unsigned char* direct_smem() {
  extern __shared__ __align__(16) unsigned char conv_direct_smem[];
  return conv_direct_smem;
}
#endif

// The most blocks a 1-D grid gets (CUDA allows 2^31 - 1; kernels loop over the rest).
constexpr int64_t kMaxGrid = int64_t(1) << 30;

// The activation picked at run time: one copy of the epilogue per dtype instead of one kernel per activation.
// Out of line, so that the 15 bodies do not crowd the registers of the kernels' main loops.
template <typename A, bool FAST>
__device__ __noinline__ A apply_act_runtime(int act, A v, A a, A b) {
  using activation::act_forward;
  switch (Act(act)) {
    case Act::Identity: return v;
    case Act::Relu: return act_forward<Act::Relu, A, FAST>(v, a, b);
    case Act::Relu6: return act_forward<Act::Relu6, A, FAST>(v, a, b);
    case Act::Hardtanh: return act_forward<Act::Hardtanh, A, FAST>(v, a, b);
    case Act::LeakyRelu: return act_forward<Act::LeakyRelu, A, FAST>(v, a, b);
    case Act::Elu: return act_forward<Act::Elu, A, FAST>(v, a, b);
    case Act::Gelu: return act_forward<Act::Gelu, A, FAST>(v, a, b);
    case Act::GeluTanh: return act_forward<Act::GeluTanh, A, FAST>(v, a, b);
    case Act::Silu: return act_forward<Act::Silu, A, FAST>(v, a, b);
    case Act::Sigmoid: return act_forward<Act::Sigmoid, A, FAST>(v, a, b);
    case Act::Tanh: return act_forward<Act::Tanh, A, FAST>(v, a, b);
    case Act::Softplus: return act_forward<Act::Softplus, A, FAST>(v, a, b);
    case Act::Mish: return act_forward<Act::Mish, A, FAST>(v, a, b);
    case Act::Hardswish: return act_forward<Act::Hardswish, A, FAST>(v, a, b);
    case Act::Hardsigmoid: return act_forward<Act::Hardsigmoid, A, FAST>(v, a, b);
  }
  return v;
}

// fprop's epilogue, as the kernels receive it: bias [K] dense or null, the residual shaped as y or null.
template <typename T>
struct Epilogue {
  using A = acc_t<T>;
  const T* bias = nullptr;
  const T* res = nullptr;
  int64_t rs[5] = {0, 0, 0, 0, 0};
  int act = 0;
  A a = A(0), b = A(0);

  // act(acc + bias[k] + residual[offset]), in the accumulation type.
  __device__ __forceinline__ A apply(A acc, int64_t k, int64_t res_offset) const {
    if (bias != nullptr) acc += to_acc<A>(bias[k]);
    return add_res_act(acc, res_offset);
  }
  // act(v + residual[offset]): the epilogue after the bias.
  __device__ __forceinline__ A add_res_act(A v, int64_t res_offset) const {
    if (res != nullptr) v += to_acc<A>(res[res_offset]);
    if (act != 0) v = apply_act_runtime<A, kFastMath<T>>(act, v, a, b);
    return v;
  }
};

template <typename T>
inline Epilogue<T> make_epilogue(const ConvArgs& a) {
  Epilogue<T> e;
  e.bias = static_cast<const T*>(a.bias);
  e.res = static_cast<const T*>(a.residual.ptr);
  for (int i = 0; i < 5; ++i) e.rs[i] = a.residual.stride[i];
  e.act = int(a.act);
  e.a = acc_t<T>(a.act_params.a);
  e.b = acc_t<T>(a.act_params.b);
  return e;
}

// Accumulators (a row of V, or P rows of V) set to zero.
template <int V, typename A>
__device__ __forceinline__ void zero(A (&v)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = A(0);
}

template <int P, int V, typename A>
__device__ __forceinline__ void zero(A (&v)[P][V]) {
#pragma unroll
  for (int j = 0; j < P; ++j) zero(v[j]);
}

// V float (double) values (staged weights) from shared memory, 16 bytes at a time where the row allows.
template <int V, typename A>
__device__ __forceinline__ void load_smem_weights(const A* p, A (&out)[V]) {
  constexpr int E = 16 / int(sizeof(A));
  if constexpr (V % E == 0) {
#pragma unroll
    for (int i = 0; i < V / E; ++i) {
      const Vec<A, E> v = *reinterpret_cast<const Vec<A, E>*>(p + i * E);
#pragma unroll
      for (int e = 0; e < E; ++e) out[i * E + e] = v.v[e];
    }
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = p[v];
  }
}

// The sums of v[0..J) over the block's threads of one lane group: threads tid = lane + width * i (i < blockDim.x
// / width, a power of two) add their values pairwise in a fixed tree; the lane's sums are returned to the thread
// of i == 0 (others get partial sums). `red` holds J * blockDim.x values. Ends synchronised: safe to call back to
// back.
template <int J, typename A>
__device__ __forceinline__ void block_sum_lanes(A (&v)[J], A* red, int width) {
  const int tid = threadIdx.x, nt = blockDim.x;
#pragma unroll
  for (int j = 0; j < J; ++j) red[j * nt + tid] = v[j];
  __syncthreads();
  for (int half = nt / 2; half >= width; half >>= 1) {
    if (tid < half) {
#pragma unroll
      for (int j = 0; j < J; ++j) red[j * nt + tid] += red[j * nt + tid + half];
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < J; ++j) v[j] = red[j * nt + tid];
  __syncthreads();
}

// A row index l of a reduction over up to four dimensions (sizes n[], strides s[], the last one fastest) as an
// element offset; dims of size 1 and mergeable neighbours removed on the host (collapse_rows).
struct RowDims {
  int nd = 0;
  int64_t n[4] = {1, 1, 1, 1};
  int64_t s[4] = {0, 0, 0, 0};
  int64_t total = 1;
  // Row l as digits d[] (d[0] takes what the inner sizes leave), and back to an element offset. (Loops of a
  // fixed length with guards, which nvcc unrolls: the digits stay in registers.)
  TD_HD void digits(int64_t l, int64_t (&d)[4]) const {
    for (int i = 3; i > 0; --i) {
      if (i < nd) {
        d[i] = l % n[i];
        l /= n[i];
      }
    }
    d[0] = l;
  }
  TD_HD int64_t offset(const int64_t (&d)[4]) const {
    int64_t off = 0;
    for (int i = 0; i < 4; ++i)
      if (i < nd) off += d[i] * s[i];
    return off;
  }
  // d += step (both as digits) with carries: a fixed stride through the rows without a division a row.
  TD_HD void advance(int64_t (&d)[4], const int64_t (&step)[4]) const {
    int64_t c = 0;
    for (int i = 3; i > 0; --i) {
      if (i < nd) {
        d[i] += step[i] + c;
        c = d[i] >= n[i];
        if (c) d[i] -= n[i];
      }
    }
    d[0] += step[0] + c;
  }
};

// (sizes, strides) of up to four dims, outermost first, as RowDims: unit dims dropped, a dim merged into the
// next where it continues it (stride[i] == stride[i+1] * size[i+1]).
inline RowDims collapse_rows(const int64_t* sizes, const int64_t* strides, int count) {
  RowDims r;
  for (int i = 0; i < count; ++i) {
    r.total *= sizes[i];
    if (sizes[i] == 1) continue;
    r.n[r.nd] = sizes[i];
    r.s[r.nd] = strides[i];
    ++r.nd;
  }
  // merge from the inside out: dim d-1 continues dim d when s[d-1] == s[d] * n[d]
  for (int d = r.nd - 1; d > 0; --d) {
    if (r.s[d - 1] == r.s[d] * r.n[d]) {
      r.n[d - 1] *= r.n[d];
      r.s[d - 1] = r.s[d];
      for (int e = d; e + 1 < r.nd; ++e) r.n[e] = r.n[e + 1], r.s[e] = r.s[e + 1];
      --r.nd;
    }
  }
  return r;
}

}  // namespace conv
}  // namespace torch_dnn
