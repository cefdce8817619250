// Where key j of batch row b lives in a KV cache (decode_kernels.h): contiguous [B][S_max][Hkv][D] or paged
// [num_blocks][block_size][Hkv][D] through the block table; and the 16-byte accesses the decode kernels make.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/decode_kernels.h"

namespace torch_dnn {
namespace attention {
namespace decode {

// The cache's addressing, with the block size's division turned into a shift and a mask when it is a power of
// two (the usual case: an integer division is a few dozen instructions, and every thread resolves every key).
struct CacheMap {
  const int32_t* table = nullptr;  // null: contiguous
  int64_t table_sb = 0;
  int32_t block_size = 1;
  int32_t block_shift = -1;  // log2(block_size), or -1

  __device__ __forceinline__ int64_t key_offset(const DecodeCache& c, int64_t b, int64_t hk, int32_t j) const {
    if (table == nullptr) return b * c.s0 + int64_t(j) * c.s1 + hk * c.s2;
    int32_t blk, off;
    if (block_shift >= 0) {
      blk = j >> block_shift;
      off = j & (block_size - 1);
    } else {
      blk = j / block_size;
      off = j - blk * block_size;
    }
    return int64_t(table[b * table_sb + blk]) * c.s0 + int64_t(off) * c.s1 + hk * c.s2;
  }
};

inline CacheMap make_cache_map(const DecodeArgs& a) {
  CacheMap m;
  m.table = a.block_table;
  m.table_sb = a.bt_sb;
  m.block_size = int32_t(a.block_size);
  if (a.block_table != nullptr && a.block_size > 0 && (a.block_size & (a.block_size - 1)) == 0) {
    int s = 0;
    while ((int64_t(1) << s) < a.block_size) ++s;
    m.block_shift = s;
  }
  return m;
}

// Keys of batch row b after the append: cache_seqlens[b] + Snew, within [0, capacity].
__device__ __forceinline__ int64_t cache_length(const DecodeArgs& a, int64_t b) {
  int64_t L = int64_t(a.cache_seqlens[b]) + a.Snew;
  L = L < 0 ? 0 : L;
  return L > a.capacity ? a.capacity : L;
}

// 16 bytes of a cache row, read once: not kept in L1 (every key is read by one CTA; the row chunks of one split,
// which read the same keys, find them in L2).
__device__ __forceinline__ uint4 load_stream(const void* p) {
#if defined(__CUDA_ARCH__)
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#else
  return *static_cast<const uint4*>(p);
#endif
}

}  // namespace decode
}  // namespace attention
}  // namespace torch_dnn
