// What the Hopper (wgmma) attention kernels share: a thread's share of a swizzled tile copy, 16-bit packing of
// accumulator pairs, and masking an accumulator tile's columns by per-row bounds.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda/bulk_copy.cuh"
#include "common/cuda/cp_async.cuh"
#include "common/cuda/wgmma.cuh"

namespace torch_dnn {
namespace attention {

// The block's dynamic shared memory, aligned up to a 1024-byte swizzle atom (the kernels ask for 1024 bytes more).
#if defined(TORCH_DNN_EMULATE_CUDA)
inline unsigned char* sm90_smem() { return emu_dyn_smem(); }  // the shim aligns it to 256 KB
#else
__device__ __forceinline__ unsigned char* sm90_smem() {
  extern __shared__ __align__(1024) unsigned char sm90_smem_raw[];
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(sm90_smem_raw) + 1023) & ~uintptr_t(1023));
}
#endif

// One thread's share of copying R rows of D elements into a swizzled tile: its 16-byte chunk column is fixed
// (c = tid % (D / 8)) and its rows are tid / (D / 8) + i * kRowStep, so that the swizzle (row % 8) is the same for
// all of them and each next copy is a constant step in shared memory and a row-stride step in global memory.
template <int D, int R, int NT>
struct Sm90TileLoader {
  static constexpr int kChunks = D / 8;             // 16-byte chunks a row
  static constexpr int kRowStep = NT / kChunks;     // rows apart of one thread's consecutive copies
  static constexpr int kCopies = R * kChunks / NT;  // copies a thread makes
  unsigned smem_off = 0;  // of the first copy, in the tile
  int row = 0;            // first row of the thread
  int64_t gmem_off = 0;   // element offset of (row, c * 8) from the operand's row 0

  __device__ __forceinline__ Sm90TileLoader(int tid, int64_t ss) {
    row = tid / kChunks;
    const int c = tid % kChunks;
    smem_off = sw128_offset(R, row, c * 8);
    gmem_off = int64_t(row) * ss + c * 8;
  }
  // Rows [row0, row0 + R) of `base` (row stride ss) into dst; rows at or past `rows_valid` read as zeros.
  template <typename T>
  __device__ __forceinline__ void load(unsigned char* dst, const T* base, int64_t ss, int64_t row0,
                                       int64_t rows_valid) const {
    const T* src = base + row0 * ss + gmem_off;
    const int64_t step = int64_t(kRowStep) * ss;
    if (row0 + R <= rows_valid) {
#pragma unroll
      for (int i = 0; i < kCopies; ++i) cp_async16(dst + smem_off + i * kRowStep * 128, src + i * step);
    } else {
      const int64_t left = rows_valid - row0 - row;  // this thread's rows before the end
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const bool ok = i * kRowStep < left;
        cp_async16_zfill(dst + smem_off + i * kRowStep * 128, ok ? src + i * step : base, ok ? 16 : 0);
      }
    }
  }
};

__device__ __forceinline__ uint32_t sm90_pack(float lo, float hi, __nv_bfloat16*) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t sm90_pack(float lo, float hi, __half*) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Sets to -inf the elements of an m64 x N accumulator fragment (wgmma.cuh's layout) whose column lies outside
// [lo[r], hi[r]) for the thread's row r (0: row g, 1: row g + 8); col0 is the global column of the thread's first
// element (the tile's first column + 2 (lane % 4)).
template <int N>
__device__ __forceinline__ void sm90_mask_cols(float* acc, const int64_t (&lo)[2], const int64_t (&hi)[2],
                                               int64_t col0) {
  auto clamp = [](int64_t v) { return int(v < -1 ? -1 : (v > N ? N : v)); };  // [-1, N] decides every column
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int clo = clamp(lo[r] - col0), chi = clamp(hi[r] - col0);
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * j + e;
        if (col < clo || col >= chi) acc[4 * j + 2 * r + e] = -INFINITY;
      }
  }
}

}  // namespace attention
}  // namespace torch_dnn
