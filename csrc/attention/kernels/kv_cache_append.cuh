// flash_decode's first kernel (when k_new / v_new are given): rows t < Snew of k_new[b] / v_new[b] written into
// the caches at positions cache_seqlens[b] + t (contiguous or paged, decode_cache.cuh), 16 bytes a thread in a
// grid-stride loop. Positions outside [0, capacity) are skipped rather than written past the cache.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/decode_kernels.h"
#include "attention/kernels/decode_cache.cuh"

namespace torch_dnn {
namespace attention {
namespace decode {

template <typename T>
__global__ void kv_cache_append_kernel(DecodeArgs a, CacheMap map) {
  constexpr int kVec = 16 / int(sizeof(T));
  const int64_t row_vecs = a.D / kVec;
  const int64_t total = a.B * a.Snew * a.Hkv * row_vecs;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = idx;
    const int64_t c = rest % row_vecs * kVec;
    rest /= row_vecs;
    const int64_t hk = rest % a.Hkv;
    rest /= a.Hkv;
    const int64_t t = rest % a.Snew;
    const int64_t b = rest / a.Snew;
    const int64_t pos = int64_t(a.cache_seqlens[b]) + t;
    if (pos < 0 || pos >= a.capacity) continue;
    const T* kn = static_cast<const T*>(a.k_new) + b * a.kn_sb + t * a.kn_ss + hk * a.kn_sh + c;
    const T* vn = static_cast<const T*>(a.v_new) + b * a.vn_sb + t * a.vn_ss + hk * a.vn_sh + c;
    T* kc = static_cast<T*>(a.k.ptr) + map.key_offset(a.k, b, hk, int32_t(pos)) + c;
    T* vc = static_cast<T*>(a.v.ptr) + map.key_offset(a.v, b, hk, int32_t(pos)) + c;
    *reinterpret_cast<uint4*>(kc) = *reinterpret_cast<const uint4*>(kn);
    *reinterpret_cast<uint4*>(vc) = *reinterpret_cast<const uint4*>(vn);
  }
}

}  // namespace decode
}  // namespace attention
}  // namespace torch_dnn
