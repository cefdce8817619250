// Float32 -> TF32 rounding (round to nearest, ties away: cvt.rna, as cuBLAS and the portable path's fragment
// loads do) into a float buffer, for the Hopper TF32 GEMM: wgmma reads fp32 operands from shared memory and
// truncates them to TF32, which gave 2.7x cuBLAS's TF32 error on the H100 (2.6x in CPU emulation,
// scripts/tf32_rounding_probe.py). One operand rounded in advance brings the error to ~1.6x (emulation).
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

}  // namespace

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
