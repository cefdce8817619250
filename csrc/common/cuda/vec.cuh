// 16-byte vector loads and stores: the unit of every memory-bound kernel here.
#pragma once
#include <cstdint>
#include <type_traits>

#include "common/cuda/types.cuh"

namespace torch_dnn {

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements per 16-byte access.
template <typename T> constexpr int kVec16 = 16 / sizeof(T);

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
// Streaming load: data read once should not push reused data out of L1/L2.
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec_stream(const T* p) {
  static_assert(sizeof(Vec<T, N>) == 16, "16-byte vectors only");
  Vec<T, N> r;
  int4 raw = __ldcs(reinterpret_cast<const int4*>(p));
  *reinterpret_cast<int4*>(&r) = raw;
  return r;
}
// Where a thread stores several vectors of a row, its column index belongs in 32 bits, widened only where it meets
// the 64-bit row offset (`y + r * N + idx * V` with `int idx`): computed in 64 bits (`int64_t(k) * blockDim.x +
// threadIdx.x`), NVVM stores some of the vectors element by element, fp32's too (research/codegen/
// ptx_store_survey.py lists each kernel's stores). Not a law: whole-vector stores made the softmax two-pass
// kernels slower, and in batch_norm's persistent kernels a 32-bit row index split the stores it had kept whole:
// check the SASS and measure after any index change (docs/benchmarking.md, "Code generation checks").
// The vectors of a row that a block-per-row kernel's thread holds in registers, kItems of them: f(k, idx) for each
// item k whose vector idx = k * blockDim.x + threadIdx.x lies in the row (idx < nv); idx in 32 bits (the note above).
template <int kItems, class F>
__device__ __forceinline__ void for_each_held_vector(int64_t nv, F&& f) {
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int idx = k * int(blockDim.x) + int(threadIdx.x);
    if (idx < nv) f(k, idx);
  }
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}
// One st.global.v4 for a 16-byte vector in global memory, and a memory barrier to the compiler: no later load
// moves above it. Its one user is bias_act's backward ("last"), where that ordering is what counts: with a 32-bit
// column index a plain store_vec is whole-vector too, but ptxas then schedules the row loop in far more
// registers and it measured slower (docs/activation.md). Elsewhere a 32-bit column index with store_vec is the fix
// for split stores (softmax's block kernels measured faster that way than with this asm). Vectors of another size
// take store_vec.
template <typename T, int N>
__device__ __forceinline__ void store_vec_global_v4(T* p, const Vec<T, N>& v) {
  if constexpr (sizeof(Vec<T, N>) == 16) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  } else {
    store_vec<T, N>(p, v);
  }
}
template <typename T, int N>
__device__ __forceinline__ void store_vec_stream(T* p, const Vec<T, N>& v) {
  static_assert(sizeof(Vec<T, N>) == 16, "16-byte vectors only");
  __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&v));
}

// Loads V elements (a 16-byte vector, or one element when V == 1) as accumulation-type values.
template <int V, typename T, typename A>
__device__ __forceinline__ void load_acc(const T* p, A (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = to_acc<A>(*p);
  } else {
    const Vec<T, V> v = load_vec<T, V>(p);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_acc<A>(v.v[j]);
  }
}
template <int V, typename T, typename A>
__device__ __forceinline__ void store_acc(T* p, const A (&in)[V]) {
  if constexpr (V == 1) {
    *p = from_acc<T>(in[0]);
  } else {
    Vec<T, V> v;
#pragma unroll
    for (int j = 0; j < V; ++j) v.v[j] = from_acc<T>(in[j]);
    store_vec<T, V>(p, v);
  }
}

// Element j of a vector in the accumulation type. bf16 is read from the vector's 32-bit words (the low element
// shifted up, the high one masked: exact), which keeps a vector held in registers two elements a register:
// conversions that take a 16-bit value (cuda_bf16's, inline asm) let ptxas unpack the vector into one element a
// register (the bf16 norm forward spilled; docs/norm.md). fp16's conversion reads either half of a packed
// register and needs no such care.
template <typename A, typename T, int V>
__device__ __forceinline__ A vec_elem(const Vec<T, V>& v, int j) {
  if constexpr (V % 2 == 0 && std::is_same_v<T, __nv_bfloat16> && std::is_same_v<A, float>) {
    const uint32_t w = reinterpret_cast<const uint32_t*>(&v)[j >> 1];
    return __uint_as_float((j & 1) ? (w & 0xffff0000u) : (w << 16));
  } else {
    return to_acc<A>(v.v[j]);
  }
}

// acc[j] += v[j] in the accumulation type; bf16 from the packed words (vec_elem), half two at a time.
template <int V, typename T, typename A>
__device__ __forceinline__ void add_vec(A (&acc)[V], const Vec<T, V>& v) {
  if constexpr (V % 2 == 0 && std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] += vec_elem<A>(v, j);
  } else if constexpr (V % 2 == 0 && std::is_same_v<T, __half>) {
    const auto* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int j = 0; j < V / 2; ++j) {
      const float2 f = __half22float2(h[j]);
      acc[2 * j] += f.x, acc[2 * j + 1] += f.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] += to_acc<A>(v.v[j]);
  }
}

// V accumulation-type values as a vector, rounded to nearest even: 16-bit types two at a time (one bf16x2 /
// half2 conversion a pair).
template <int V, typename T, typename A>
__device__ __forceinline__ Vec<T, V> pack_vec(const A (&in)[V]) {
  Vec<T, V> v;
  if constexpr (V % 2 == 0 && std::is_same_v<T, __nv_bfloat16>) {
    auto* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int j = 0; j < V / 2; ++j) h[j] = __floats2bfloat162_rn(in[2 * j], in[2 * j + 1]);
  } else if constexpr (V % 2 == 0 && std::is_same_v<T, __half>) {
    auto* h = reinterpret_cast<__half2*>(&v);
#pragma unroll
    for (int j = 0; j < V / 2; ++j) h[j] = __floats2half2_rn(in[2 * j], in[2 * j + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) v.v[j] = from_acc<T>(in[j]);
  }
  return v;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace torch_dnn
