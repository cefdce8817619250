// 1-D bulk copies global -> shared memory (cp.async.bulk, the TMA unit without a tensor map; sm_90) that
// complete on a shared-memory mbarrier, and the mbarrier operations around them. One thread issues a copy of
// up to 4 GB of contiguous bytes (16-byte aligned, a multiple of 16): deep memory-level parallelism for a few
// instructions. A waiter sees the bytes once the barrier's phase with that parity completed. Every function
// is a no-op below sm_90; callers check the device (sm_90+) on the host. In the host emulation
// (TORCH_DNN_EMULATE_CUDA) a copy is an immediate memcpy and the barrier operations do nothing: a kernel that
// is emulated puts a __syncthreads between its copies and their first reads; or, compiled with
// TORCH_DNN_EMULATE_MBARRIER (tests/emulation/wgmma_emulation.h), the barriers are emulated with their phases,
// arrivals and transaction bytes, and shared addresses are offsets into the dynamic shared memory.
#pragma once
#include <cstdint>
#include <cstring>

namespace torch_dnn {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TORCH_DNN_HAS_BULK_COPY 1
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p) {
#if defined(TORCH_DNN_EMULATE_MBARRIER)
  return unsigned(static_cast<const unsigned char*>(p) - emu_dyn_smem());  // an offset into the dynamic buffer
#elif defined(TORCH_DNN_EMULATE_CUDA)
  (void)p;
  return 0;
#else
  return unsigned(__cvta_generic_to_shared(p));
#endif
}

// count arrivals (besides the transaction bytes) complete a phase.
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
#ifdef TORCH_DNN_HAS_BULK_COPY
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
#elif defined(TORCH_DNN_EMULATE_MBARRIER)
  emu_mbar_init(bar, count);
#endif
}
// Makes the initialised barriers visible to the copy engine; then a __syncthreads before any use.
__device__ __forceinline__ void mbar_fence_init() {
#ifdef TORCH_DNN_HAS_BULK_COPY
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// One arrival that also announces `bytes` of copies to come in this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
#ifdef TORCH_DNN_HAS_BULK_COPY
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#elif defined(TORCH_DNN_EMULATE_MBARRIER)
  emu_mbar_arrive(bar, bytes);
#endif
}
// One plain arrival (no transaction bytes).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#ifdef TORCH_DNN_HAS_BULK_COPY
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
#elif defined(TORCH_DNN_EMULATE_MBARRIER)
  emu_mbar_arrive(bar);
#endif
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
#ifdef TORCH_DNN_HAS_BULK_COPY
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
#elif defined(TORCH_DNN_EMULATE_MBARRIER)
  emu_mbar_wait(bar, parity);
#endif
}

// L2 eviction priorities for the copies' source lines: keep (data read again soon) or drop (read once).
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

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global src to shared dst; completes
// as transaction bytes on `bar`, whose phase must have announced them (mbar_arrive_expect_tx).
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar,
                                              uint64_t policy) {
#ifdef TORCH_DNN_HAS_BULK_COPY
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
#elif defined(TORCH_DNN_EMULATE_CUDA)
  std::memcpy(dst, src, bytes);
#if defined(TORCH_DNN_EMULATE_MBARRIER)
  emu_mbar_complete_tx(bar, bytes);
#endif
#endif
}

// Asks for `bytes` (a multiple of 16; src 16-byte aligned) of global memory to be brought into L2, without a
// destination or a completion: a hint for data read soon (cp.async.bulk.prefetch.L2).
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, unsigned bytes) {
#ifdef TORCH_DNN_HAS_BULK_COPY
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
#else
  (void)src;
  (void)bytes;
#endif
}

// Orders this thread's earlier writes (generic proxy, global and shared memory) before later bulk copies (async
// proxy) that read those global bytes or refill those shared ones: a writer calls it before the barrier that
// precedes the copy.
__device__ __forceinline__ void fence_proxy_async() {
#ifdef TORCH_DNN_HAS_BULK_COPY
  asm volatile("fence.proxy.async;" ::: "memory");
#endif
}

// In the host emulation a copy is done when its issuing thread returns, not when a waiter's mbar_wait returns:
// a kernel that issues copies between barriers calls this after issuing, so that the emulated threads see them.
// Nothing on the GPU.
__device__ __forceinline__ void emu_sync_after_copies() {
#if defined(TORCH_DNN_EMULATE_CUDA)
  __syncthreads();
#endif
}

}  // namespace torch_dnn
