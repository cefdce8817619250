// The layout transpose (layout_transpose.h) as N independent transposes of an R x K matrix, src [n][R][K] ->
// dst [n][K][R] (to contiguous: R = S, K = C; to channels-last: R = C, K = S), through a 64 x 64 tile of shared
// memory, so that both sides of global memory are read and written along their rows. The elements are moved as
// unsigned integers of their size: one kernel per element size serves every dtype.
#include "common/layout_transpose.h"

#include <cstdint>
#include <cstring>

#include "common/cuda/device.cuh"
#include "common/cuda/vec.cuh"

namespace torch_dnn {
namespace {

constexpr int kTile = 64;      // tile rows and columns, in elements
constexpr int kThreads = 256;  // 8 warps

// How the 256 threads cover a tile, for elements of U's size (2, 4 or 8 bytes). A thread moves 16-byte vectors of
// V elements: it loads one along a tile row (a source row) and stores one along a tile column (a destination
// row), kPasses of each a tile.
//   Loads: a warp takes 4 tile rows x 8 vectors (128-byte runs of source rows).
//   Stores: a warp takes kStoreRows destination rows x kStoreVecs vectors: 4 x 8 (128-byte runs), except for
//   2-byte elements, 8 x 4 (64-byte runs, whole 32-byte sectors), which the bank layout below needs.
// Shared memory: the tile's rows are padded to a stride of 33 words (2- and 4-byte elements; 66 and 65 elements)
// or 65 doubles, so that every access of a warp takes the fewest wavefronts (one; two for 8-byte elements, a half
// warp each). 2-byte: a load's element j of tile row r, vector v lies in bank r + 4v + j/2 (4 rows x 8 vectors:
// 32 banks); a store's element j of vector u, column c in bank 8u + j + c/2 (8 columns x 4 vectors: 16 banks, a
// word shared by two lanes; with 4 x 8, lanes u and u + 4 would take one bank). 4-byte: r + 4v + j and
// 4u + j + c. 8-byte, banks (pairs) of a half warp: 2r + 4v + 2j and 4u + 2j + 2c. (Coverage and bank counts
// checked by enumerating this mapping.)
template <typename U>
struct TileShape {
  static constexpr int V = 16 / int(sizeof(U));               // elements a vector: 8, 4, 2
  static constexpr int kRowVecs = kTile / V;                   // vectors a tile row: 8, 16, 32
  static constexpr int kPasses = kTile * kRowVecs / kThreads;  // vectors a thread moves each way: 2, 4, 8
  static constexpr int kLoadAcross = kRowVecs / 8;             // warps side by side along a tile row
  static constexpr int kLoadRowsPerPass = 4 * (8 / kLoadAcross);
  static constexpr int kStoreRows = sizeof(U) == 2 ? 8 : 4;
  static constexpr int kStoreVecs = 32 / kStoreRows;
  static constexpr int kStoreAcross = kRowVecs / kStoreVecs;  // warps side by side along a destination row
  static constexpr int kStoreRowsPerPass = kStoreRows * (8 / kStoreAcross);
  static constexpr int kPad = sizeof(U) == 2 ? 2 : 1;
  static_assert(kPasses * kLoadRowsPerPass == kTile && kPasses * kStoreRowsPerPass == kTile, "tile coverage");
};

// A vector as four 32-bit words, for store16.
__device__ __forceinline__ uint4 as_words(const Vec<uint16_t, 8>& y) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = uint32_t(y.v[2 * i]) | (uint32_t(y.v[2 * i + 1]) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ uint4 as_words(const Vec<uint32_t, 4>& y) { return make_uint4(y.v[0], y.v[1], y.v[2], y.v[3]); }
__device__ __forceinline__ uint4 as_words(const Vec<uint64_t, 2>& y) {
  return make_uint4(uint32_t(y.v[0]), uint32_t(y.v[0] >> 32), uint32_t(y.v[1]), uint32_t(y.v[1] >> 32));
}

// One 16-byte store. In PTX because NVVM split every plain 16-byte store of this kernel (the Vec, or a uint4 of
// words) into 2- to 8-byte pieces. No "memory" clobber: nothing in the kernel reads dst, so the compiler stays free
// to move the next shared-memory loads above it.
__device__ __forceinline__ void store16(void* p, const uint4& w) {
#if defined(TORCH_DNN_EMULATE_CUDA)
  std::memcpy(p, &w, 16);
#else
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w));
#endif
}

// LW, SW: the elements one global load / store moves: V (16-byte accesses) or 1, where the rows of that side
// (K for loads, R for stores) are not whole vectors or the pointer is not 16-byte aligned (the launcher decides).
// Shared memory is accessed alike in every variant. A grid-stride loop over the tiles, the column tile fastest.
template <typename U, int LW, int SW>
__global__ void __launch_bounds__(kThreads)
    layout_transpose_kernel(const U* __restrict__ src, U* __restrict__ dst, int64_t R, int64_t K, int64_t tiles_r,
                            int64_t tiles_k, int64_t tiles) {
  using Sh = TileShape<U>;
  constexpr int V = Sh::V;
  static_assert((LW == V || LW == 1) && (SW == V || SW == 1), "access widths");
  __shared__ U tile[kTile][kTile + Sh::kPad];
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int lk = (lane % 8 + 8 * (warp % Sh::kLoadAcross)) * V;  // tile column of this thread's load vector
  const int lr = lane / 8 + 4 * (warp / Sh::kLoadAcross);        // its tile row in pass 0
  const int se = (lane % Sh::kStoreVecs + Sh::kStoreVecs * (warp % Sh::kStoreAcross)) * V;  // tile row of the store
  const int sc = lane / Sh::kStoreVecs + Sh::kStoreRows * (warp / Sh::kStoreAcross);  // its tile column in pass 0
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t tk = t % tiles_k, tr = (t / tiles_k) % tiles_r, n = t / tiles_k / tiles_r;
    const int64_t r0 = tr * kTile, k0 = tk * kTile;
    const U* s = src + n * R * K;
    U* d = dst + n * R * K;
    // every pass's loads first (kPasses vectors in flight a thread), then the shared-memory writes; the zeros
    // taken for elements outside the matrix are never stored
    Vec<U, V> x[Sh::kPasses];
#pragma unroll
    for (int p = 0; p < Sh::kPasses; ++p) {
      const int64_t r = r0 + lr + p * Sh::kLoadRowsPerPass, k = k0 + lk;
#pragma unroll
      for (int a = 0; a < V; a += LW) {
        Vec<U, LW> v{};
        if (r < R && k + a < K) v = load_vec<U, LW>(s + r * K + k + a);
#pragma unroll
        for (int j = 0; j < LW; ++j) x[p].v[a + j] = v.v[j];
      }
    }
#pragma unroll
    for (int p = 0; p < Sh::kPasses; ++p)
#pragma unroll
      for (int j = 0; j < V; ++j) tile[lr + p * Sh::kLoadRowsPerPass][lk + j] = x[p].v[j];
    __syncthreads();
#pragma unroll
    for (int p = 0; p < Sh::kPasses; ++p) {
      const int c = sc + p * Sh::kStoreRowsPerPass;
      const int64_t dr = k0 + c, e = r0 + se;  // the destination row (a source column) and its first element
      if (dr < K && e < R) {
        Vec<U, V> y;
#pragma unroll
        for (int j = 0; j < V; ++j) y.v[j] = tile[se + j][c];
        U* q = d + dr * R + e;
        if constexpr (SW == V) {
          store16(q, as_words(y));
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j)
            if (e + j < R) q[j] = y.v[j];
        }
      }
    }
    __syncthreads();  // the tile is rewritten by the next iteration
  }
}

template <typename U>
cudaError_t run(const U* src, U* dst, int64_t N, int64_t R, int64_t K, cudaStream_t stream) {
  constexpr int V = TileShape<U>::V;
  // the batch offset n * R * K is a whole number of vectors whenever that side's rows are
  const bool vec_load = aligned16(src) && K % V == 0;
  const bool vec_store = aligned16(dst) && R % V == 0;
  const int64_t tiles_r = (R + kTile - 1) / kTile, tiles_k = (K + kTile - 1) / kTile;
  const int64_t tiles = N * tiles_r * tiles_k;
  const unsigned grid = grid_for(tiles, 1, /*waves=*/16);
  const auto go = [&](auto kernel) {
#if defined(TORCH_DNN_EMULATE_CUDA)  // the threads on the CPU: tests/emulation/layout_transpose_emulation.cpp
    emulate_launch(kernel, grid, kThreads, src, dst, R, K, tiles_r, tiles_k, tiles);
#else
    kernel<<<grid, kThreads, 0, stream>>>(src, dst, R, K, tiles_r, tiles_k, tiles);
#endif
  };
  if (vec_load && vec_store) {
    go(layout_transpose_kernel<U, V, V>);
  } else if (vec_load) {
    go(layout_transpose_kernel<U, V, 1>);
  } else if (vec_store) {
    go(layout_transpose_kernel<U, 1, V>);
  } else {
    go(layout_transpose_kernel<U, 1, 1>);
  }
  return cudaGetLastError();
}

template <typename U>
cudaError_t run_layout(const void* src, void* dst, int64_t N, int64_t S, int64_t C, bool to_channels_last,
                       cudaStream_t stream) {
  const int64_t R = to_channels_last ? C : S, K = to_channels_last ? S : C;
  return run<U>(static_cast<const U*>(src), static_cast<U*>(dst), N, R, K, stream);
}

}  // namespace

cudaError_t launch_layout_transpose(DType dtype, const void* src, void* dst, int64_t N, int64_t S, int64_t C,
                                    bool to_channels_last, cudaStream_t stream) {
  if (N < 0 || S < 0 || C < 0) return cudaErrorInvalidValue;
  if (N == 0 || S == 0 || C == 0) return cudaSuccess;
  switch (dtype) {
    case DType::Float16:
    case DType::BFloat16: return run_layout<uint16_t>(src, dst, N, S, C, to_channels_last, stream);
    case DType::Float32: return run_layout<uint32_t>(src, dst, N, S, C, to_channels_last, stream);
    case DType::Float64: return run_layout<uint64_t>(src, dst, N, S, C, to_channels_last, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace torch_dnn
