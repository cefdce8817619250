// Host-side facts about the current device, cached per device (torch-free).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace torch_dnn {

// A device attribute of the current device, read once per device; `fallback` where the driver gives none.
template <cudaDeviceAttr Attr>
int cached_device_attribute(int fallback) {
  static int cache[64] = {0};
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev < 0 || dev >= 64) dev = 0;
  if (cache[dev] == 0) {
    int v = 0;
    cudaDeviceGetAttribute(&v, Attr, dev);
    cache[dev] = v > 0 ? v : fallback;
  }
  return cache[dev];
}

inline int sm_count() { return cached_device_attribute<cudaDevAttrMultiProcessorCount>(1); }
// Shared memory of one SM (bytes), for sizing persistent grids by their blocks' shared memory.
inline int smem_per_sm() { return cached_device_attribute<cudaDevAttrMaxSharedMemoryPerMultiprocessor>(1); }
// The most dynamic shared memory a block may opt in to (bytes).
inline int max_smem_optin() { return cached_device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(48 * 1024); }

// Blocks for a grid-stride loop over `work` items handled `per_block` at a time: enough to fill the chip
// several times over, never more than the work needs, never over the grid limit.
inline unsigned grid_for(int64_t work, int64_t per_block, int waves = 8, int blocks_per_sm = 8) {
  int64_t need = (work + per_block - 1) / per_block;
  int64_t cap = int64_t(sm_count()) * blocks_per_sm * waves;
  int64_t g = need < cap ? need : cap;
  return unsigned(g < 1 ? 1 : g);
}

// A kernel's dynamic shared-memory limit, raised once per device (a driver call per launch otherwise). Keyed by
// the kernel itself (a template argument): kernels of one signature share a function-pointer type.
template <auto Kernel>
cudaError_t raise_smem_limit_once(int smem) {
  static bool configured[64] = {false};
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev >= 0 && dev < 64 && !configured[dev]) {
    const cudaError_t err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    configured[dev] = true;
  }
  return cudaSuccess;
}

}  // namespace torch_dnn
