// Float32 -> TF32 rounding (round to nearest, ties away: cvt.rna, as cuBLAS and the portable path's fragment
// loads do) into a float buffer, for the Hopper TF32 GEMM: wgmma reads fp32 operands from shared memory and
// truncates them to TF32, which gives several times cuBLAS's TF32 error, past the error-ratio rule (CPU emulation:
// research/gemm/tf32_rounding_probe.py). One operand rounded in advance brings the error to ~1.6x, both to
// cuBLAS's. The transposing form also turns an M- or N-major operand into the K-major one the kernel takes.
#include "common/cuda/device.cuh"
#include "matmul/gemm_kernels.h"

namespace torch_dnn {
namespace matmul {
namespace {

__device__ __forceinline__ float round_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}

// 16-byte vectors over the aligned body, grid-stride; the caller's n covers the whole buffer.
__global__ void round_tf32_kernel(const float4* __restrict__ src, float4* __restrict__ dst, int64_t n4) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    float4 v = src[i];
    v.x = round_tf32(v.x);
    v.y = round_tf32(v.y);
    v.z = round_tf32(v.z);
    v.w = round_tf32(v.w);
    dst[i] = v;
  }
}

// Elements [from, n) one at a time: the tail after the vectors, or everything when a pointer is not 16-byte aligned.
__global__ void round_tf32_scalar(const float* __restrict__ src, float* __restrict__ dst, int64_t from, int64_t n) {
  for (int64_t i = from + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = round_tf32(src[i]);
}

// Strided or transposed: element (r, c) of an R x C matrix at src[r * ld + c] goes to dst[c * R + r]
// (transpose) or dst[r * C + c], through a 32 x 32 shared tile so that both sides are coalesced.
constexpr int kTile = 32;
__global__ void round_tf32_2d(const float* __restrict__ src, int64_t ld, int64_t R, int64_t C, bool transpose,
                              float* __restrict__ dst) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < R && c < C) tile[i][threadIdx.x] = round_tf32(src[r * ld + c]);
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    if (transpose) {  // dst row c0 + i, column r0 + threadIdx.x
      const int64_t c = c0 + i, r = r0 + threadIdx.x;
      if (r < R && c < C) dst[c * R + r] = tile[threadIdx.x][i];
    } else {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < R && c < C) dst[r * C + c] = tile[i][threadIdx.x];
    }
  }
}

// The same with 16-byte accesses on both sides, for a 16-byte aligned source whose ld is a multiple of 4 and dst
// rows of a multiple of 4 floats (the GEMM's case: TMA wants K-major rows of 16 bytes anyway): a 64 x 64 tile,
// 256 threads, a pass 16 tile rows of 16 vectors. A warp takes 4 rows x 8 vectors, so that with the tile's rows
// padded by one float (row stride = 1 bank) both its row accesses (bank r + 4v + j) and its column reads (bank
// 4v + j + c) hit 32 distinct banks. Near the copy ceiling where the scalar kernel is well short of it
// (docs/matmul.md).
constexpr int kVecTile = 64;
__global__ void __launch_bounds__(256) round_tf32_2d_vec(const float* __restrict__ src, int64_t ld, int64_t R,
                                                         int64_t C, bool transpose, float* __restrict__ dst) {
  __shared__ float tile[kVecTile][kVecTile + 1];
  const int64_t r0 = int64_t(blockIdx.y) * kVecTile, c0 = int64_t(blockIdx.x) * kVecTile;
  const int t = threadIdx.x;
  const int v4 = 4 * (t % 8 + 8 * ((t / 32) % 2));  // the vector's first column in the tile
  const int row = (t / 8) % 4 + 4 * (t / 64);      // 0..15: the tile row of pass 0
  // all four passes' loads first (64 bytes in flight a thread), then the shared-memory writes
  float x[4][4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int64_t r = r0 + row + 16 * k, c = c0 + v4;
    const float* p = src + r * ld + c;
    if (r < R && c + 4 <= C) {
      const float4 v = *reinterpret_cast<const float4*>(p);
      x[k][0] = v.x, x[k][1] = v.y, x[k][2] = v.z, x[k][3] = v.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) x[k][j] = r < R && c + j < C ? p[j] : 0.0f;
    }
  }
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) tile[row + 16 * k][v4 + j] = round_tf32(x[k][j]);
  __syncthreads();
  // dst row d0 + i of this tile (src column c0 + i when transposing), 4 elements from tile column / row v4
  const int64_t rows = transpose ? C : R, cols = transpose ? R : C, d0 = transpose ? c0 : r0, e0 = transpose ? r0 : c0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = row + 16 * k;
    const int64_t d = d0 + i, e = e0 + v4;
    float y[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) y[j] = transpose ? tile[v4 + j][i] : tile[i][v4 + j];
    float* q = dst + d * cols + e;
    if (d < rows && e + 4 <= cols) {
      *reinterpret_cast<float4*>(q) = make_float4(y[0], y[1], y[2], y[3]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (d < rows && e + j < cols) q[j] = y[j];
    }
  }
}

}  // namespace

cudaError_t round_to_tf32_2d(const float* src, int64_t ld, int64_t rows, int64_t cols, bool transpose, float* dst,
                             bool vec_allowed, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (!transpose && ld == cols) return round_to_tf32(src, dst, rows * cols, stream);
  const bool vec = reinterpret_cast<uintptr_t>(src) % 16 == 0 && ld % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(dst) % 16 == 0 && (transpose ? rows : cols) % 4 == 0 && vec_allowed;
  if (vec) {
    const int64_t vx = (cols + kVecTile - 1) / kVecTile, vy = (rows + kVecTile - 1) / kVecTile;
    if (vx <= 0x7fffffffLL && vy <= 65535) {
      round_tf32_2d_vec<<<dim3(unsigned(vx), unsigned(vy)), 256, 0, stream>>>(src, ld, rows, cols, transpose, dst);
      return cudaGetLastError();
    }
  }
  const int64_t gx = (cols + kTile - 1) / kTile, gy = (rows + kTile - 1) / kTile;
  if (gx > 0x7fffffffLL || gy > 65535) return cudaErrorInvalidConfiguration;
  round_tf32_2d<<<dim3(unsigned(gx), unsigned(gy)), dim3(kTile, 8), 0, stream>>>(src, ld, rows, cols, transpose, dst);
  return cudaGetLastError();
}

cudaError_t round_to_tf32(const float* src, float* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const bool vec = (reinterpret_cast<uintptr_t>(src) % 16 == 0) && (reinterpret_cast<uintptr_t>(dst) % 16 == 0);
  const int64_t n4 = vec ? n / 4 : 0;
  constexpr int kThreads = 256;
  if (n4 > 0) round_tf32_kernel<<<grid_for(n4, kThreads), kThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(src), reinterpret_cast<float4*>(dst), n4);
  if (n4 * 4 < n) round_tf32_scalar<<<grid_for(n - n4 * 4, kThreads), kThreads, 0, stream>>>(src, dst, n4 * 4, n);
  return cudaGetLastError();
}

}  // namespace matmul
}  // namespace torch_dnn
