// Hopper warpgroup tensor-core operations (wgmma.mma_async, sm_90a) and the shared-memory matrix descriptors they
// read operands through. A warpgroup is 4 consecutive warps (128 threads, the first warp a multiple of 4); every
// call here is warpgroup-collective. Order of use: wgmma_fence() after the accumulator or a register operand was
// written by ordinary instructions, the MMAs, wgmma_commit() to close them as one group, wgmma_wait<N>() before the
// accumulator is read (N: groups that may stay in flight).
//
// Accumulator fragment of an m64nN tile (N/2 floats a thread), as mma.sync's m16n8 C fragment repeated: warp w of
// the warpgroup holds rows 16 w + g and 16 w + g + 8 (g = lane / 4); d[4 j + 2 r + e] is row 16 w + g + 8 r,
// column 8 j + 2 (lane % 4) + e. A register A operand (m64k16, 4 registers of packed pairs) has mma.sync's m16k16
// A layout, so the accumulator's chunks 2 k and 2 k + 1 packed pairwise are the A operand of k-step k.
//
// Shared memory operands use the 128-byte swizzle: a tile of rows of 64 16-bit elements (128 bytes), 8 rows a
// 1024-byte atom (1024-byte aligned) in which 16-byte chunk c of row r is stored at chunk c ^ (r % 8). A matrix
// wider than 64 elements is stored as 64-wide column blocks one after another.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace torch_dnn {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TORCH_DNN_HAS_WGMMA 1
#endif
// The bodies of the kernels that use these are compiled for sm_90a, and for the host emulation of them
// (tests/emulation/wgmma_emulation.h computes the MMAs and barriers); elsewhere they are empty.
#if defined(TORCH_DNN_HAS_WGMMA) || defined(TORCH_DNN_EMULATE_MBARRIER)
#define TORCH_DNN_WGMMA_CODE 1
#endif

// Byte offset of element (row, col) of a 128-byte-swizzled tile of `rows` rows (16-bit elements).
__host__ __device__ constexpr unsigned sw128_offset(int rows, int row, int col) {
  return unsigned((col / 64) * rows * 128 + row * 128 + ((((col % 64) / 8) ^ (row % 8)) * 16) + (col % 8) * 2);
}

// Descriptor of a K-major operand (the reduction dim contiguous: rows of 64 elements) starting at shared address
// `addr`: 8-row groups 1024 bytes apart. A k16 step inside a 64-wide block advances addr by 32 bytes.
__device__ __forceinline__ uint64_t sw128_desc_kmajor(unsigned addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
// Descriptor of an MN-major operand (the N dim contiguous: rows are k, 64 N-elements each); the next 64-wide
// N block `block_bytes` further. A k16 step advances addr by 16 rows (2048 bytes).
__device__ __forceinline__ uint64_t sw128_desc_mnmajor(unsigned addr, unsigned block_bytes) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(block_bytes >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#ifdef TORCH_DNN_HAS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef TORCH_DNN_HAS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef TORCH_DNN_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// A warpgroup's register budget changed to N a thread (setmaxnreg, sm_90a; every warp of the warpgroup executes it):
// a warp-specialised kernel's copy warpgroup gives registers back (dec) that its MMA warpgroups take (inc). It takes
// effect only in a kernel launched with a register cap (__launch_bounds__(threads, 1)). An increase draws only on the
// registers the CTA was launched with, waiting until decreases have freed enough: one the pool cannot satisfy never
// returns (the host emulation fails it instead).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#ifdef TORCH_DNN_HAS_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#elif defined(TORCH_DNN_EMULATE_MBARRIER)
  emu_setmaxnreg(N);
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#ifdef TORCH_DNN_HAS_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#elif defined(TORCH_DNN_EMULATE_MBARRIER)
  emu_setmaxnreg(N);
#endif
}
// Keeps the compiler from moving accesses of the accumulator across an asynchronous MMA's issue or wait.
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[N]) {
#if defined(__CUDA_ARCH__)
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
#else
  (void)d;  // the host emulation's MMAs complete when issued
#endif
}

// m64nNk16, float accumulation, T (__nv_bfloat16 or __half) operands: ss (A and B K-major in shared memory),
// rs (A in registers, B MN-major in shared memory).
template <int N, typename T>
struct Wgmma;

#ifdef TORCH_DNN_HAS_WGMMA
// One specialisation a shape, for both 16-bit types: T and its PTX type TY ("bf16" or "f16").
#define TD_WGMMA_64(T, TY) \
  template <> \
  struct Wgmma<64, T> { \
    /* d[32] += A (64x16, shared, K-major) * B (16x64, shared, K-major); scale_d = 0 overwrites d. */ \
    static __device__ __forceinline__ void ss(float* d, uint64_t a, uint64_t b, int scale_d) { \
      asm volatile( \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
          "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
          : "l"(a), "l"(b), "r"(scale_d)); \
    } \
    /* d[32] += A (64x16, registers: the accumulator fragment's layout, packed pairs) * B (16x64, shared, */ \
    /* MN-major: the 64 columns contiguous). */ \
    static __device__ __forceinline__ void rs(float* d, const uint32_t* a, uint64_t b) { \
      asm volatile( \
          "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
          "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n" \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)); \
    } \
  };
TD_WGMMA_64(__nv_bfloat16, "bf16")
TD_WGMMA_64(__half, "f16")
#undef TD_WGMMA_64

#define TD_WGMMA_128(T, TY) \
  template <> \
  struct Wgmma<128, T> { \
    /* d[64] += A (64x16, shared, K-major) * B (16x128, shared, K-major); scale_d = 0 overwrites d. */ \
    static __device__ __forceinline__ void ss(float* d, uint64_t a, uint64_t b, int scale_d) { \
      asm volatile( \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
          "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
          : "l"(a), "l"(b), "r"(scale_d)); \
    } \
    /* d[64] += A (64x16, registers: the accumulator fragment's layout, packed pairs) * B (16x128, shared, */ \
    /* MN-major: the 128 columns contiguous). */ \
    static __device__ __forceinline__ void rs(float* d, const uint32_t* a, uint64_t b) { \
      asm volatile( \
          "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" \
          "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n" \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)); \
    } \
  };
TD_WGMMA_128(__nv_bfloat16, "bf16")
TD_WGMMA_128(__half, "f16")
#undef TD_WGMMA_128

#define TD_WGMMA_176(T, TY) \
  template <> \
  struct Wgmma<176, T> { \
    /* d[88] += A (64x16, shared, K-major) * B (16x176, shared, K-major); scale_d = 0 overwrites d. (S over 176-key */ \
    /* tiles: no register-A form.) */ \
    static __device__ __forceinline__ void ss(float* d, uint64_t a, uint64_t b, int scale_d) { \
      asm volatile( \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n" \
          "wgmma.mma_async.sync.aligned.m64n176k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87}, %88, %89, p, 1, 1, 0, 0;\n}\n" \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]) \
          : "l"(a), "l"(b), "r"(scale_d)); \
    } \
  };
TD_WGMMA_176(__nv_bfloat16, "bf16")
TD_WGMMA_176(__half, "f16")
#undef TD_WGMMA_176
#elif defined(TORCH_DNN_EMULATE_MBARRIER)
template <int N, typename T>
struct Wgmma {
  static void ss(float* d, uint64_t a, uint64_t b, int scale_d) {
    torch_dnn_emu_wgmma::ss<T, N>(d, a, b, scale_d);
  }
  static void rs(float* d, const uint32_t* a, uint64_t b) { torch_dnn_emu_wgmma::rs<T, N>(d, a, b); }
};
#endif  // TORCH_DNN_HAS_WGMMA

}  // namespace torch_dnn
