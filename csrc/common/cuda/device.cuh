// Host-side facts about the current device, cached per device (torch-free).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <unordered_map>

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

// Lets `Kernel` take all the dynamic shared memory the device allows a block (the opt-in limit less its
// static shared memory) and returns that amount, -1 if refused. Always the maximum, so that launches of
// any size after any other stay within the attribute; asked once per device.
template <auto Kernel>
int allow_max_dynamic_smem() {
  static int cache[64] = {};  // 0: not asked yet
  int dev = 0;
  cudaGetDevice(&dev);
  const bool keep = dev >= 0 && dev < 64;
  if (keep && cache[dev] != 0) return cache[dev];
  int optin = 0, avail = -1;
  cudaFuncAttributes a;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
      cudaFuncGetAttributes(&a, Kernel) == cudaSuccess) {
    avail = optin - int(a.sharedSizeBytes);
    if (avail <= 0 || cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, avail) != cudaSuccess)
      avail = -1;
  }
  if (avail < 0) cudaGetLastError();  // clear only the error this call made
  if (keep) cache[dev] = avail;
  return avail;
}

// Blocks of `Kernel` resident on one SM at `threads` threads and `smem` bytes of dynamic shared memory; 0 where
// none fits or the query fails. Asked of the driver once per (device, threads, smem), which costs microseconds a
// call otherwise. Keyed by the kernel itself, as raise_smem_limit_once; a launch with more than 48 KB of shared
// memory raises the kernel's limit first, or the answer is 0.
template <auto Kernel>
int resident_per_sm(int threads, size_t smem = 0) {
  static std::mutex mu;
  static std::unordered_map<uint64_t, int> cache;
  int dev = 0;
  cudaGetDevice(&dev);
  // threads < 2^16 and smem < 2^32: the fields do not overlap
  const uint64_t key = (uint64_t(uint32_t(dev)) << 48) | (uint64_t(uint32_t(threads) & 0xffff) << 32) | uint64_t(smem);
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, threads, smem) != cudaSuccess || n < 0) {
    cudaGetLastError();
    n = 0;
  }
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, n);
  return n;
}

// A persistent grid of `Kernel`: `items` blocks, or as many as the device keeps resident at once (at least one
// a SM when the occupancy query fails), whichever is fewer; never 0.
template <auto Kernel>
int64_t resident_grid(int64_t items, int threads, size_t smem = 0) {
  const int64_t resident = int64_t(sm_count()) * std::max(resident_per_sm<Kernel>(threads, smem), 1);
  return std::max<int64_t>(1, std::min<int64_t>(items, resident));
}

}  // namespace torch_dnn
