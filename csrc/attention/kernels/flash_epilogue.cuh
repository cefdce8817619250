// The flash kernels' epilogues (torch-free): a warp's float accumulator rows rounded to 16 bits, staged through
// the warp's own rows of a shared tile (no other warp reads them), then written 16 bytes a lane; the forward's
// O = acc / l and lse = (m + log2 l) ln 2, +inf (and O = 0) for a row that saw no visible key.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/kernels/flash_smem.cuh"
#include "attention/kernels/flash_softmax.cuh"

namespace torch_dnn {
namespace attention {
namespace flash {

// Writes a warp's 16 x D accumulator (DT = D / 8 tiles), row g + 8 hr multiplied by mul[hr], as 16-bit rows:
// staged through the warp's 16 rows of a [.][D] shared tile starting at tile row srow0 (rows no other warp
// touches), then 16 bytes a lane to g_rows + r * ld for rows row0 + r < nrows.
template <typename T, int D>
__device__ __forceinline__ void store_rows(const float (&acc)[D / 8][4], const float (&mul)[2], T* tile, int srow0,
                                           T* g_rows, int64_t ld, int64_t row0, int64_t nrows, int lane) {
  using Tile = SmemTile<D>;
  constexpr int DT = D / 8, CPR = D / 8;
  const int g = lane >> 2, t = lane & 3;
  __syncwarp();  // every lane is done reading these rows of the tile
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = srow0 + g + 8 * hr;
      *reinterpret_cast<uint32_t*>(tile + Tile::off(r, dt * 8 + 2 * t)) =
          pack2<T>(acc[dt][2 * hr] * mul[hr], acc[dt][2 * hr + 1] * mul[hr]);
    }
  __syncwarp();
#pragma unroll
  for (int it = 0; it < 16 * CPR / 32; ++it) {
    const int idx = lane + it * 32, r = idx / CPR, c = idx % CPR;
    const int64_t row = row0 + r;
    if (row < nrows) {
      const int4 v = *reinterpret_cast<const int4*>(tile + (srow0 + r) * D + Tile::swz(srow0 + r, c) * 8);
      *reinterpret_cast<int4*>(g_rows + row * ld + c * 8) = v;
    }
  }
}

// The forward's output: O = o / l, lse = (m + log2 l) ln 2 (+inf and O = 0 where a row saw no visible key).
// gO: row 0 of the sequence's head; tile / srow0 as store_rows; lse: row 0 of the head's lse (or null).
template <typename T, int D>
__device__ __forceinline__ void store_output(const float (&o)[D / 8][4], const RowState& st, T* tile, int srow0,
                                             T* gO, int64_t ld, int64_t row0, int64_t nrows, float* lse, int lane) {
  const int g = lane >> 2, t = lane & 3;
  float inv[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float l = quad_sum(st.l[hr]);
    inv[hr] = l > 0.f ? 1.f / l : 0.f;
    const int64_t row = row0 + g + 8 * hr;
    if (lse != nullptr && t == 0 && row < nrows) lse[row] = l > 0.f ? st.m[hr] * kLn2 + logf(l) : INFINITY;
  }
  store_rows<T, D>(o, inv, tile, srow0, gO, ld, row0, nrows, lane);
}

}  // namespace flash
}  // namespace attention
}  // namespace torch_dnn
