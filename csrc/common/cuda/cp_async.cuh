// Asynchronous 16-byte global -> shared copies (cp.async, sm_80+), for kernels that stage tiles without
// passing the data through registers. A thread's copies complete for that thread at its wait; other threads
// see them after a barrier. In the host emulation (TORCH_DNN_EMULATE_CUDA) a copy is an immediate memcpy.
#pragma once
#include <cstdint>
#include <cstring>

namespace torch_dnn {

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = unsigned(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem_src) : "memory");
#elif defined(TORCH_DNN_EMULATE_CUDA)
  std::memcpy(smem_dst, gmem_src, 16);
#elif defined(__CUDA_ARCH__)
  *reinterpret_cast<int4*>(smem_dst) = *reinterpret_cast<const int4*>(gmem_src);
#endif
}
// As cp_async16, but copies `src_bytes` (16 or 0) and fills the rest of the 16 bytes with zeros: rows past an
// operand's end read as zeros without a branch around the copy (the source address must still be valid).
__device__ __forceinline__ void cp_async16_zfill(void* smem_dst, const void* gmem_src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = unsigned(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem_src), "r"(src_bytes) : "memory");
#elif defined(TORCH_DNN_EMULATE_CUDA)
  if (src_bytes == 16) std::memcpy(smem_dst, gmem_src, 16);
  else std::memset(smem_dst, 0, 16);
#endif
}
// One arrival on the shared-memory mbarrier `bar`, made when all of this thread's earlier cp.async copies have
// landed (noinc: the barrier's expected count includes it). Lets consumers wait on the copies of many threads
// through the barrier instead of a block-wide sync.
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = unsigned(__cvta_generic_to_shared(bar));
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(s) : "memory");
#elif defined(TORCH_DNN_EMULATE_MBARRIER)
  emu_mbar_arrive(bar);  // the emulated copies are done when issued
#else
  (void)bar;
#endif
}
// Closes the thread's group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N of the thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

}  // namespace torch_dnn
