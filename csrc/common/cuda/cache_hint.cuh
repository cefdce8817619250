// L2 eviction priorities (sm_80+ createpolicy) and 16-byte loads / stores that carry one: keep lines that are
// read again soon (evict_last), drop lines read or written once (evict_first). Below sm_80 and in the host
// emulation the policy is 0 and the accesses are plain.
#pragma once
#include <cstdint>

#include "common/cuda/vec.cuh"

namespace torch_dnn {

__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}
__device__ __forceinline__ uint64_t l2_policy_evict_normal() {
  uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec_hint(const T* p, uint64_t policy) {
  static_assert(sizeof(Vec<T, N>) == 16, "16-byte vectors only");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  Vec<T, N> r;
  uint32_t* w = reinterpret_cast<uint32_t*>(&r);
  asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
               : "l"(p), "l"(policy));
  return r;
#else
  (void)policy;
  return load_vec<T, N>(p);
#endif
}

template <typename T, int N>
__device__ __forceinline__ void store_vec_hint(T* p, const Vec<T, N>& v, uint64_t policy) {
  static_assert(sizeof(Vec<T, N>) == 16, "16-byte vectors only");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
               :
               : "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]), "l"(policy)
               : "memory");
#else
  (void)policy;
  store_vec<T, N>(p, v);
#endif
}

}  // namespace torch_dnn
