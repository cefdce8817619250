// Runs this project's CUDA kernel sources on the CPU, to test their index arithmetic without a GPU. Included
// before the kernel sources in a g++ translation unit (TORCH_DNN_EMULATE_CUDA): the CUDA keywords stay host
// attributes (cuda_runtime.h), the built-in indices become thread-local variables, and a launch runs every
// block in turn on a pool of blockDim host threads, so that __syncthreads and warp shuffles (block-wide
// exchanges here: every caller in this project shuffles with the whole block in step) really synchronise.
// Results are those of the kernels' arithmetic in host float/double: not a model of the GPU's timing, memory
// model or fast-math units.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

struct EmuDim {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local EmuDim emu_thread_idx, emu_block_idx;
inline EmuDim emu_block_dim, emu_grid_dim;
inline std::atomic<unsigned> emu_blocks_run{0};  // blocks started so far (state kept per block keys on it)

#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx emu_thread_idx
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim
#undef __shared__
#define __shared__ static  // one block runs at a time: a function-local static is that block's shared memory

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

inline uint32_t __umulhi(uint32_t a, uint32_t b) { return uint32_t((uint64_t(a) * b) >> 32); }
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// The kernels' element types to and from double, for the emulations' references.
template <typename T> double tod(T v) { return double(v); }
template <> inline double tod<__half>(__half v) { return double(__half2float(v)); }
template <> inline double tod<__nv_bfloat16>(__nv_bfloat16 v) { return double(__bfloat162float(v)); }
template <typename T> T fromd(double v) { return T(v); }
template <> inline __half fromd<__half>(double v) { return __float2half_rn(float(v)); }
template <> inline __nv_bfloat16 fromd<__nv_bfloat16>(double v) { return __float2bfloat16_rn(float(v)); }

// CUDA's integer min for 64-bit indices (its device overloads are not declared for the host)
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int4 __ldcs(const int4* p) { return *p; }
inline void __stcs(int4* p, int4 v) { *p = v; }

// blockDim host threads that run one block per job.
class EmuBlockPool {
 public:
  explicit EmuBlockPool(unsigned n) : n_(n), start_(n + 1), done_(n + 1), sync_(n) {
    for (unsigned t = 0; t < n; ++t)
      workers_.emplace_back([this, t] {
        emu_thread_idx = {t, 0, 0};
        for (;;) {
          start_.arrive_and_wait();
          if (quit_) return;
          emu_block_idx = block_;
          job_();
          done_.arrive_and_wait();
        }
      });
  }
  ~EmuBlockPool() {
    quit_ = true;
    start_.arrive_and_wait();
    for (auto& w : workers_) w.join();
  }
  void run(EmuDim block, const std::function<void()>& job) {
    ++emu_blocks_run;
    block_ = block;
    job_ = job;
    start_.arrive_and_wait();
    done_.arrive_and_wait();
  }
  void sync() { sync_.arrive_and_wait(); }
  unsigned size() const { return n_; }

 private:
  unsigned n_;
  std::barrier<> start_, done_, sync_;
  std::vector<std::thread> workers_;
  std::function<void()> job_;
  EmuDim block_;
  bool quit_ = false;
};

inline EmuBlockPool& emu_pool(unsigned n) {
  static std::unique_ptr<EmuBlockPool> pool;
  if (!pool || pool->size() != n) pool = std::make_unique<EmuBlockPool>(n);
  return *pool;
}

inline void __syncthreads() { emu_pool(emu_block_dim.x).sync(); }

// Every thread of the block publishes v, then reads thread src's.
template <typename T>
T emu_exchange(T v, unsigned src) {
  static double exchange[1024];
  exchange[emu_thread_idx.x] = double(v);
  __syncthreads();
  const T r = T(exchange[src]);
  __syncthreads();
  return r;
}

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
  const unsigned t = emu_thread_idx.x, w = unsigned(width);
  return emu_exchange(v, (t & ~(w - 1)) | ((t & (w - 1)) ^ unsigned(lane_mask)));
}

// Lane t reads lane t + delta's value of its width-wide group, its own where that lies past the group.
template <typename T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  const unsigned t = emu_thread_idx.x, w = unsigned(width);
  return emu_exchange(v, (t & (w - 1)) + delta < w ? t + delta : t);
}

template <typename... P, typename... Args>
void emulate_launch(void (*kernel)(P...), unsigned grid, unsigned block, Args... args) {
  emu_grid_dim = {grid, 1, 1};
  emu_block_dim = {block, 1, 1};
  EmuBlockPool& pool = emu_pool(block);
  for (unsigned b = 0; b < grid; ++b) pool.run(EmuDim{b, 0, 0}, [&] { kernel(args...); });
}

// A grid of gx x gy blocks, run x fastest.
template <typename... P, typename... Args>
void emulate_launch_2d(void (*kernel)(P...), unsigned gx, unsigned gy, unsigned block, Args... args) {
  emu_grid_dim = {gx, gy, 1};
  emu_block_dim = {block, 1, 1};
  EmuBlockPool& pool = emu_pool(block);
  for (unsigned by = 0; by < gy; ++by)
    for (unsigned bx = 0; bx < gx; ++bx) pool.run(EmuDim{bx, by, 0}, [&] { kernel(args...); });
}

// Dynamic shared memory: one buffer (one block runs at a time), aligned to 256 KB (so that an offset into it has
// the low address bits of the GPU's shared window, which the Hopper swizzle reads), poisoned before each launch,
// with a poisoned guard after the size the launch asked for: a kernel that wrote past it (its launcher asked for
// less than its layout uses, an illegal address on the GPU) fails the launch.
constexpr size_t kEmuSmemAlign = size_t(256) << 10;
constexpr size_t kEmuSmemGuard = size_t(64) << 10;
inline std::vector<int4>& emu_dyn_buffer() {
  static std::vector<int4> buf;
  return buf;
}
inline unsigned char* emu_dyn_smem() {
  const uintptr_t p = reinterpret_cast<uintptr_t>(emu_dyn_buffer().data());
  return reinterpret_cast<unsigned char*>((p + kEmuSmemAlign - 1) & ~uintptr_t(kEmuSmemAlign - 1));
}

template <typename... P, typename... Args>
void emulate_launch_smem(void (*kernel)(P...), unsigned grid, unsigned block, size_t smem, Args... args) {
  auto& buf = emu_dyn_buffer();
  // NaN-ish bytes: a read before a write shows
  buf.assign((smem + kEmuSmemAlign + kEmuSmemGuard + 15) / 16, int4{-1, -1, -1, -1});
  emulate_launch(kernel, grid, block, args...);
  const unsigned char* guard = emu_dyn_smem() + smem;
  for (size_t i = 0; i < kEmuSmemGuard; ++i)
    if (guard[i] != 0xff)
      throw std::runtime_error("emulated kernel wrote " + std::to_string(i) + " bytes past the " +
                               std::to_string(smem) + " bytes of dynamic shared memory its launch asked for");
}

// The CUDA runtime calls the launchers make, answered for a pretend device of two SMs (small grids, so that
// grid-stride loops go round several times). Renamed, so that a CUDA runtime loaded by torch is not called.
inline cudaError_t emu_cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
inline cudaError_t emu_cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
  *value = 2;
  return cudaSuccess;
}
inline cudaError_t emu_cudaGetLastError() { return cudaSuccess; }
// two resident blocks an SM, whatever the kernel
template <class Kernel>
inline cudaError_t emu_cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, Kernel, int, size_t) {
  *n = 2;
  return cudaSuccess;
}
inline cudaError_t emu_cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t = nullptr) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
#define cudaMemsetAsync emu_cudaMemsetAsync
#define cudaGetDevice emu_cudaGetDevice
#define cudaDeviceGetAttribute emu_cudaDeviceGetAttribute
#define cudaGetLastError emu_cudaGetLastError
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor emu_cudaOccupancyMaxActiveBlocksPerMultiprocessor
