// Warp-level exchanges for cuda_host_shim.h's emulation that synchronise the 32 lanes of one warp only (the
// shim's block-wide shuffles need every thread of the block in step; kernels whose warps branch apart, such as
// the attention kernels, need these). Included after cuda_host_shim.h, before the kernel sources.
#pragma once
#include <barrier>
#include <memory>
#include <vector>

// Warp-level exchanges synchronise the 32 lanes of one warp only (the attention kernels shuffle per warp, and
// warps of one block take different branches).
struct EmuWarpBarriers {
  std::vector<std::unique_ptr<std::barrier<>>> b;
  EmuWarpBarriers() {
    for (int i = 0; i < 32; ++i) b.push_back(std::make_unique<std::barrier<>>(32));
  }
};
inline std::barrier<>& emu_warp_barrier() {
  static EmuWarpBarriers w;
  return *w.b[emu_thread_idx.x / 32];
}
template <typename T>
T emu_warp_shfl_xor(unsigned, T v, int lane_mask, int = 32) {
  static double exchange[1024];
  const unsigned t = emu_thread_idx.x;
  exchange[t] = double(v);
  emu_warp_barrier().arrive_and_wait();
  const T r = T(exchange[(t & ~31u) | ((t & 31u) ^ unsigned(lane_mask))]);
  emu_warp_barrier().arrive_and_wait();
  return r;
}
inline void emu_syncwarp(unsigned = 0xffffffffu) { emu_warp_barrier().arrive_and_wait(); }
#define __shfl_xor_sync emu_warp_shfl_xor
#define __syncwarp emu_syncwarp
