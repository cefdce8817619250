// Float32 -> TF32 rounding (round to nearest, ties away: cvt.rna, as cuBLAS and the portable path's fragment
// loads do) into a float buffer, for the Hopper TF32 GEMM: wgmma reads fp32 operands from shared memory and
// truncates them to TF32, which gave 2.7x cuBLAS's TF32 error on the H100 (2.6x in CPU emulation,
// scripts/tf32_rounding_probe.py). One operand rounded in advance brings the error to ~1.6x (emulation), both
// to cuBLAS's. The transposing form also turns an M- or N-major operand into the K-major one the kernel takes.
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

}  // namespace

cudaError_t round_to_tf32_2d(const float* src, int64_t ld, int64_t rows, int64_t cols, bool transpose, float* dst,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (!transpose && ld == cols) return round_to_tf32(src, dst, rows * cols, stream);
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
