// Hopper (sm_90a) building blocks in PTX, for kernels that are not CUTLASS's: shared-memory matrix descriptors,
// warpgroup MMA (wgmma) m64n64k16 with float accumulators, mbarriers, and TMA tile loads (plain and multicast).
// Operand tiles are K-major rows of 64 16-bit elements (128 bytes), written by TMA with the 128-byte swizzle, each
// tile 1024-byte aligned: the layout wgmma's 128B-swizzle descriptor mode reads.
#pragma once
#include <cstdint>

#include <cuda.h>

namespace torch_dnn {
namespace matmul {
namespace sm90 {
namespace ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Descriptor of a K-major tile of 128-byte rows in 128B-swizzle mode: the 8-row groups lie 1024 bytes apart (the
// stride byte offset); the leading byte offset is unused in this mode (1 by convention). Stepping K by 16 elements
// inside the 128-byte row adds 32 bytes to the start address (the hardware applies the swizzle to the sum).
__device__ __forceinline__ uint64_t desc_k128(uint32_t saddr) {
  uint64_t d = 0;
  d |= uint64_t((saddr & 0x3FFFF) >> 4);
  d |= uint64_t(1) << 16;
  d |= uint64_t(1024 >> 4) << 32;
  d |= uint64_t(1) << 62;
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across an asynchronous wgmma.
__device__ __forceinline__ void fence_regs(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D(64x64, float) (+)= A(64x16) * B(64x16)^T, both operands from shared memory; 16-bit inputs (bf16 or fp16).
// scale_d = 0 overwrites D (the first K step of a tile).
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
#define TD_WGMMA_REGS                                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),     \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define TD_WGMMA_BODY(TY)                                                                                         \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                                    \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
  if constexpr (kBf16)
    asm volatile(TD_WGMMA_BODY("bf16") : TD_WGMMA_REGS : "l"(da), "l"(db), "r"(scale_d));
  else
    asm volatile(TD_WGMMA_BODY("f16") : TD_WGMMA_REGS : "l"(da), "l"(db), "r"(scale_d));
#undef TD_WGMMA_BODY
#undef TD_WGMMA_REGS
}

// D(64x128, float) (+)= A(64x16) * B(128x16)^T, both operands from shared memory (K-major, 128B swizzle); 16-bit
// inputs. Register i of thread t holds row 16 (t / 32) + (t % 32) / 4 + 8 ((i / 2) % 2), column 8 (i / 4) +
// 2 (t % 4) + i % 2 (as m64n64, with 16 column groups).
__device__ __forceinline__ void fence_regs64(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
#define TD_R8(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), \
                 "+f"(d[b + 6]), "+f"(d[b + 7])
#define TD_WGMMA_BODY128(TY)                                                                                      \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                                  \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "    \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "        \
  "%64, %65, p, 1, 1, 0, 0;\n}\n"
  if constexpr (kBf16)
    asm volatile(TD_WGMMA_BODY128("bf16")
                 : TD_R8(0), TD_R8(8), TD_R8(16), TD_R8(24), TD_R8(32), TD_R8(40), TD_R8(48), TD_R8(56)
                 : "l"(da), "l"(db), "r"(scale_d));
  else
    asm volatile(TD_WGMMA_BODY128("f16")
                 : TD_R8(0), TD_R8(8), TD_R8(16), TD_R8(24), TD_R8(32), TD_R8(40), TD_R8(48), TD_R8(56)
                 : "l"(da), "l"(db), "r"(scale_d));
#undef TD_WGMMA_BODY128
#undef TD_R8
}

// ---- mbarriers --------------------------------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t phase) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(phase)
      : "memory");
}
// Arrive, where `pred`, on the barrier at the same offset in CTA `cta` of the cluster (this CTA included). The
// predicate stays inside the asm: a branch around it is a divergent path, where ptxas serialises the wgmma
// pipeline (C7520). Plain arrive: with .release.cluster ptxas puts a memory barrier (ERRBAR) before it, which
// waits for the warpgroup's MMAs in flight (H100: a 3x slower skinny GEMM).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta, bool pred) {
  asm volatile(
      "{\n.reg .b32 remote;\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "@p mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
      "r"(cta), "r"(int(pred))
      : "memory");
}

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// ---- TMA --------------------------------------------------------------------------------------------------------

__device__ __forceinline__ void prefetch_tmap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Box at (c0 = K offset, c1 = row offset) of a 2-D map into this CTA's shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(const CUtensorMap* map, uint64_t* bar, void* dst, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
// The same box into the same offsets of every CTA in `mask` (cluster ranks), each CTA's barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_2d_multicast(const CUtensorMap* map, uint64_t* bar, void* dst, int c0, int c1,
                                                      uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, "
      "%4}], [%2], %5;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

}  // namespace ptx
}  // namespace sm90
}  // namespace matmul
}  // namespace torch_dnn
