// Tiled tensor copies global -> shared memory by the copy engine (cp.async.bulk.tensor, sm_90) through a tensor
// map, completing on a shared-memory mbarrier (bulk_copy.cuh), for tiles that the Hopper MMAs read in the
// 128-byte swizzle (wgmma.cuh): a box of 64 16-bit elements (128 bytes) by R rows lands as R rows of 128 bytes,
// 16-byte chunk c of row r at chunk c ^ (r % 8), when its destination is 1024-byte aligned. Rows and columns outside
// the tensor read as zeros (and still count their bytes on the barrier).
//
// The map (TmaMap4) describes a 4-D tensor of 16-bit elements, innermost dimension contiguous, any strides (multiples
// of 16 bytes), and is made on the host (tma_map_16bit) and passed by value as a __grid_constant__ kernel argument.
// In the host emulation (TORCH_DNN_EMULATE_MBARRIER, tests/emulation/wgmma_emulation.h) the map keeps the tensor's
// address, sizes and strides, and a copy is made at issue with the swizzle applied to the destination's address
// bits, its bytes completing on the emulated barrier.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "common/cuda/bulk_copy.cuh"
#include "common/driver_api.h"

namespace torch_dnn {

#if defined(TORCH_DNN_EMULATE_MBARRIER)
struct TmaMap4 {
  const unsigned char* ptr = nullptr;
  int64_t dim[4] = {0, 0, 0, 0};     // elements
  int64_t stride[4] = {2, 0, 0, 0};  // bytes
  int box_cols = 0, box_rows = 0;
};
#else
struct TmaMap4 {  // CUtensorMap is 64-byte aligned
  CUtensorMap map;
};
#endif

// A map of the 4-D tensor of 16-bit elements at `ptr` with sizes dim[0..3] (dim[0] contiguous) and byte strides
// stride[1..3] of dimensions 1..3, copied in boxes of box_cols (x 2 bytes: at most 128) by box_rows (dimension 1) with
// the 128-byte swizzle. False when the driver refuses it (the caller takes another path).
inline bool tma_map_16bit(TmaMap4* m, const void* ptr, const int64_t (&dim)[4], const int64_t (&stride)[4],
                          int box_cols, int box_rows) {
  // what the encoder takes: a 16-byte-aligned address, sizes in [1, 2^32], strides positive multiples of 16 below 2^40
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0 || box_cols * 2 > 128) return false;
  for (int i = 0; i < 4; ++i)
    if (dim[i] <= 0 || dim[i] > (int64_t(1) << 32)) return false;
  for (int i = 1; i < 4; ++i)
    if (stride[i] <= 0 || stride[i] % 16 != 0 || stride[i] >= (int64_t(1) << 40)) return false;
#if defined(TORCH_DNN_EMULATE_MBARRIER)
  m->ptr = static_cast<const unsigned char*>(ptr);
  for (int i = 0; i < 4; ++i) {
    m->dim[i] = dim[i];
    m->stride[i] = i == 0 ? 2 : stride[i];
  }
  m->box_cols = box_cols;
  m->box_rows = box_rows;
  return true;
#elif defined(__CUDA_ARCH__)
  (void)m;
  return false;
#else
  const auto encode = tensor_map_encode_tiled();
  if (encode == nullptr) return false;
  cuuint64_t gdim[4], gstride[3];
  for (int i = 0; i < 4; ++i) gdim[i] = cuuint64_t(dim[i]);
  for (int i = 1; i < 4; ++i) gstride[i - 1] = cuuint64_t(stride[i]);
  const cuuint32_t box[4] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1, 1};
  const cuuint32_t elem_stride[4] = {1, 1, 1, 1};
  return encode(&m->map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void*>(ptr), gdim, gstride, box, elem_stride,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
#endif
}

// Copies the box at element coordinates (c0, c1, c2, c3) of `map` to shared `dst` (1024-byte aligned); its bytes
// complete on `bar`, whose phase must have announced them (mbar_arrive_expect_tx). One thread issues it.
__device__ __forceinline__ void tma_load_4d(void* dst, const TmaMap4* map, int c0, int c1, int c2, int c3,
                                            uint64_t* bar, uint64_t policy) {
#ifdef TORCH_DNN_HAS_BULK_COPY
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
#elif defined(TORCH_DNN_EMULATE_MBARRIER)
  (void)policy;
  unsigned char* smem = emu_dyn_smem();
  const unsigned base = smem_addr(dst);
  for (int r = 0; r < map->box_rows; ++r)
    for (int c = 0; c < map->box_cols; ++c) {
      const int64_t x = int64_t(c0) + c, y = int64_t(c1) + r;
      uint16_t v = 0;
      if (x >= 0 && x < map->dim[0] && y >= 0 && y < map->dim[1] && c2 >= 0 && c2 < map->dim[2] && c3 >= 0 &&
          c3 < map->dim[3])
        std::memcpy(&v, map->ptr + x * 2 + y * map->stride[1] + c2 * map->stride[2] + c3 * map->stride[3], 2);
      unsigned at = base + unsigned(r * map->box_cols * 2 + c * 2);
      at ^= ((at >> 7) & 7u) << 4;  // the 128-byte swizzle on the address bits
      std::memcpy(smem + at, &v, 2);
    }
  emu_mbar_complete_tx(bar, int64_t(map->box_rows) * map->box_cols * 2);
#else
  (void)dst, (void)map, (void)c0, (void)c1, (void)c2, (void)c3, (void)bar, (void)policy;
#endif
}

// A tile of `rows` rows of D 16-bit columns at (row, head, batch) of `map` (boxes of 64 columns): D / 64 boxes, each
// landing rows x 128 bytes after the previous, the layout the 128-byte-swizzled wgmma operands read. One thread.
template <int D>
__device__ __forceinline__ void tma_load_tile_4d(unsigned char* dst, const TmaMap4* map, int64_t row, int64_t head,
                                                 int batch, int rows, uint64_t* bar, uint64_t policy) {
#pragma unroll
  for (int cb = 0; cb < D / 64; ++cb)
    tma_load_4d(dst + cb * rows * 128, map, cb * 64, int(row), int(head), batch, bar, policy);
}

}  // namespace torch_dnn
