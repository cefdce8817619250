// The flash kernels' shared-memory tiles and their loaders (torch-free, sm_80+): a tile is [rows][D] 16-bit
// elements, each row D / 8 16-byte chunks, the chunks XOR-swizzled by the row so that the 8 row addresses of an
// ldmatrix (8 consecutive rows, one chunk column) fall in 8 different bank groups:
//   D / 8 a multiple of 8 (D = 64, 128, 256): chunk c of row r at c ^ (r & 7)   (rows of 128 bytes or more)
//   D / 8 a multiple of 4 (D = 32, 96):       chunk c of row r at c ^ ((r >> 1) & 3)
// (96: rows of 192 bytes alternate between two half-lines, so pairs of rows take the same XOR; the XOR stays
// inside each aligned group of 4 chunks, so it never leaves the row.) Tiles are filled by cp.async, 16 bytes a
// copy, rows past the sequence's end zero-filled.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <type_traits>

#include "common/cuda/mma_sync.cuh"  // torch_dnn::ptx: cp.async, ldmatrix and mma.sync

namespace torch_dnn {
namespace attention {
namespace flash {

template <int D>
struct SmemTile {
  static constexpr int CPR = D / 8;  // 16-byte chunks a row
  static_assert(D % 32 == 0 && CPR % 4 == 0, "head dims that are multiples of 32");
  __device__ static __forceinline__ int swz(int r, int c) {
    if constexpr (CPR % 8 == 0) return c ^ (r & 7);
    else return c ^ ((r >> 1) & 3);
  }
  // Element offset of (r, col); col a multiple of 8 gives a chunk's start (an ldmatrix row address).
  __device__ static __forceinline__ int off(int r, int col) { return r * D + swz(r, col >> 3) * 8 + (col & 7); }
};

// Starts the copy of rows [r0, r0 + ROWS) of an operand slice (row r at g + r * ld, 16-byte aligned rows) into
// the tile s; rows at or past `nrows` are zero-filled. All THREADS threads of the block take part.
template <int D, int ROWS, int THREADS, typename T>
__device__ __forceinline__ void load_tile_async(T* s, const T* g, int64_t ld, int64_t r0, int64_t nrows, int tid) {
  constexpr int CPR = D / 8, TOTAL = ROWS * CPR;
#pragma unroll
  for (int it = 0; it < (TOTAL + THREADS - 1) / THREADS; ++it) {
    const int idx = tid + it * THREADS;
    if (TOTAL % THREADS == 0 || idx < TOTAL) {
      const int r = idx / CPR, c = idx % CPR;
      const int64_t gr = r0 + r;
      const bool ok = gr < nrows;
      ptx::cp_async16(s + r * D + SmemTile<D>::swz(r, c) * 8, ok ? g + gr * ld + c * 8 : g, ok ? 16 : 0);
    }
  }
}

// One k-step of two products whose B fragments sit at the same offset of two tiles: a1 / a2 += x1 / x2 times the two
// n8 halves of the x4 fragment at b1, and d1 / d2 likewise with x2 and b2 (kTrans: the fragments loaded transposed).
template <bool kTrans, typename T>
__device__ __forceinline__ void mma_pair_step(float (&a1)[4], float (&a2)[4], float (&d1)[4], float (&d2)[4],
                                              const uint32_t (&x1)[4], const uint32_t (&x2)[4], const T* b1,
                                              const T* b2) {
  uint32_t y1[4], y2[4];
  ptx::ldmatrix_x4<kTrans>(y1, b1);
  ptx::ldmatrix_x4<kTrans>(y2, b2);
  const uint32_t y10[2] = {y1[0], y1[1]}, y11[2] = {y1[2], y1[3]};
  const uint32_t y20[2] = {y2[0], y2[1]}, y21[2] = {y2[2], y2[3]};
  ptx::mma_16816<T>(a1, x1, y10);
  ptx::mma_16816<T>(a2, x1, y11);
  ptx::mma_16816<T>(d1, x2, y20);
  ptx::mma_16816<T>(d2, x2, y21);
}

// The backward's paired products of a warp's 16-row strip: s = A1 B1^T and d = A2 B2^T over D, A1 / A2 rows
// [wrow, wrow + 16) of tiles a1 / a2 (the mma A operand), B1 / B2 the R rows of tiles b1 / b2 (R / 8 n8 fragments of
// the B operand), all SmemTile<D> tiles; r8 = lane & 7, j4 = lane >> 3. The two products share every k-step's
// fragment loads' addresses.
template <int D, int R, typename T>
__device__ __forceinline__ void mma_pair(float (&s)[R / 8][4], float (&d)[R / 8][4], const T* a1, const T* a2,
                                         const T* b1, const T* b2, int wrow, int r8, int j4) {
  using Tile = SmemTile<D>;
#pragma unroll
  for (int jn = 0; jn < R / 8; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[jn][e] = d[jn][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t x1[4], x2[4];
    ptx::ldmatrix_x4<false>(x1, a1 + Tile::off(wrow + r8 + 8 * (j4 & 1), ks * 16 + 8 * (j4 >> 1)));
    ptx::ldmatrix_x4<false>(x2, a2 + Tile::off(wrow + r8 + 8 * (j4 & 1), ks * 16 + 8 * (j4 >> 1)));
#pragma unroll
    for (int p = 0; p < R / 16; ++p) {
      const int at = Tile::off(p * 16 + r8 + 8 * (j4 >> 1), ks * 16 + 8 * (j4 & 1));
      mma_pair_step<false>(s[2 * p], s[2 * p + 1], d[2 * p], d[2 * p + 1], x1, x2, b1 + at, b2 + at);
    }
  }
}

// Two floats as the 16-bit pair of one mma operand register (lo: the lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

}  // namespace flash
}  // namespace attention
}  // namespace torch_dnn
