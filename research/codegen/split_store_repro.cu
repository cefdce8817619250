// NVVM splits a 16-byte vector store into element stores (research/codegen/README.md). Not part of the
// build: compile to PTX and count the stores of each kernel.
//
//   nvcc -arch=sm_90a -O3 -ptx research/codegen/split_store_repro.cu -o /tmp/split.ptx
//   for k in one_vector four_vectors four_vectors_asm; do
//     echo "$k: $(awk "/entry .*${k}P/,/^}/" /tmp/split.ptx | grep -c 'st.global')"; done
//
// CUDA 13.0: one_vector 1 store (st.global.v4.u32); four_vectors 28 (st.global.u16 / .u32: 7 a vector, which ptxas
// merges into four STG.E); four_vectors_asm 4 (st.global.v4.b32). A make_uint4 of the vector's words, a memcpy into
// a uint4 and __builtin_assume_aligned split the same way as the struct store. The split depends on the index
// arithmetic: with blockDim.x instead of the constant block size, or with the index computed in 32 bits and then
// widened (int64_t(blockIdx.x * kThreads + threadIdx.x) * 8), four_vectors gets four st.global.v4.
#include <cuda_bf16.h>
#include <cstdint>

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};
using V8 = Vec<__nv_bfloat16, 8>;
constexpr int kThreads = 256;  // a compile-time block size, as the kernels here have

__device__ __forceinline__ V8 load(const __nv_bfloat16* p) { return *reinterpret_cast<const V8*>(p); }
__device__ __forceinline__ V8 pack(const float (&in)[8]) {  // rounded in pairs, as pack_vec
  V8 v;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(in[2 * j], in[2 * j + 1]);
  return v;
}
__device__ __forceinline__ V8 twice(const V8& x) {  // element by element into floats, then packed
  float o[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] = 2.f * __bfloat162float(x.v[j]);
  return pack(o);
}
__device__ __forceinline__ void store_struct(__nv_bfloat16* p, const V8& v) { *reinterpret_cast<V8*>(p) = v; }
__device__ __forceinline__ void store_asm(__nv_bfloat16* p, const V8& v) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
}

__global__ void one_vector(const __nv_bfloat16* x, __nv_bfloat16* y) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  store_struct(y + i, twice(load(x + i)));
}

// Four vectors a thread, loaded first, then computed and stored: the shape of the memory-bound kernels here.
template <bool kAsm>
__device__ __forceinline__ void four(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t C) {
  const int64_t col = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * 8;  // with blockDim.x: 4 v4 stores
  for (int64_t r0 = int64_t(blockIdx.y) * 4; r0 + 4 <= rows; r0 += int64_t(gridDim.y) * 4) {
    V8 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = load(x + (r0 + u) * C + col);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if constexpr (kAsm) store_asm(y + (r0 + u) * C + col, twice(v[u]));
      else store_struct(y + (r0 + u) * C + col, twice(v[u]));
    }
  }
}
__global__ void four_vectors(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t C) {
  four<false>(x, y, rows, C);
}
__global__ void four_vectors_asm(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t C) {
  four<true>(x, y, rows, C);
}
