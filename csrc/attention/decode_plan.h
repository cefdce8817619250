// flash_decode's choices on CUDA (a pure function of the problem and the device's SM count; flash_decode.cu runs
// the plan). The op is memory-bound: the cache is read once, so the plan's whole job is to keep every SM reading.
//  - Query rows per CTA: the (query head of the KV head's group) x (query row) pairs, GQA-packed so that one CTA
//    reads its keys once for all of them; at most 8 a CTA (the scores and accumulators live in registers), more
//    rows take several row chunks (their CTAs read the same keys, mostly from L2).
//  - Splits: the keys of a batch row are cut into `splits` equal ranges, one CTA each (flash-decoding), so that
//    B x Hkv x row chunks x splits CTAs fill the GPU about kDecodeWaves times over (`resident` CTAs an SM, from
//    the occupancy query). Memory-bound CTAs keep the DRAM busy with well under all the SMs' slots in use, so a
//    second wave's tail costs little, and a second wave evens out CTAs that finish early (short rows of a ragged
//    batch). A split keeps at least kDecodeMinKeysPerSplit keys of the capacity, so short caches are not cut into
//    slivers whose combine costs more than it saves.
#pragma once
#include <algorithm>
#include <cstdint>

namespace torch_dnn {
namespace attention {

struct DecodePlan {
  int rows_per_cta = 1;    // 1, 4 or 8: a kernel template argument
  int64_t row_chunks = 1;  // ceil(group rows / rows_per_cta)
  int64_t splits = 1;
};

constexpr int kDecodeWaves = 2;
constexpr int64_t kDecodeMinKeysPerSplit = 256;
constexpr int64_t kDecodeMaxSplits = 128;

inline int decode_rows_per_cta(int64_t Hq, int64_t Hkv, int64_t Sq, int max_rows = 8) {
  const int64_t rows = Hq / Hkv * Sq;  // per KV head
  return rows <= 1 ? 1 : rows <= 4 || max_rows < 8 ? 4 : 8;
}

inline DecodePlan plan_decode(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t capacity, int sm_count,
                              int resident, int max_rows = 8) {
  DecodePlan p;
  p.rows_per_cta = decode_rows_per_cta(Hq, Hkv, Sq, max_rows);
  p.row_chunks = (Hq / Hkv * Sq + p.rows_per_cta - 1) / p.rows_per_cta;
  const int64_t base = std::max<int64_t>(1, B * Hkv * p.row_chunks);
  const int64_t target = int64_t(std::max(sm_count, 1)) * std::max(resident, 1) * kDecodeWaves;
  const int64_t by_len = std::max<int64_t>(1, (capacity + kDecodeMinKeysPerSplit - 1) / kDecodeMinKeysPerSplit);
  p.splits = std::clamp<int64_t>(target / base, 1, std::min(by_len, kDecodeMaxSplits));
  return p;
}

}  // namespace attention
}  // namespace torch_dnn
