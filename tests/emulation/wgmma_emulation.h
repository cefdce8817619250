// The sm_90 operations of the Hopper (wgmma) kernels computed on the host for cuda_host_shim.h's emulation
// (compiled with TORCH_DNN_EMULATE_MBARRIER): shared-memory mbarriers with their phases, arrival counts and
// transaction bytes; setmaxnreg's register pool; named barriers; wgmma.mma_async reading its shared-memory operands
// through their matrix descriptors (address, leading / stride byte offsets, the 128-byte swizzle applied to the
// address bits as the hardware does) and its register A operand from the warpgroup's 128 threads. The MMAs complete at issue (a
// kernel's fences and waits are no-ops): this checks layouts, descriptors, swizzles and the barrier protocol, not
// the asynchronous hazards. Shared addresses are offsets into the dynamic shared memory buffer, which the shim
// aligns to 256 KB so that an offset has the absolute address's low bits (what the swizzle reads).
// Included after cuda_host_shim.h and warp_emulation.h, before the kernel sources.
#pragma once
#include <algorithm>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include "mma_emulation.h"

#ifndef TORCH_DNN_EMULATE_MBARRIER
#error "define TORCH_DNN_EMULATE_MBARRIER before including wgmma_emulation.h (the kernel headers read it)"
#endif

// ---- mbarriers ----
struct EmuMbar {
  int expected = 0, pending = 0;
  int64_t tx = 0;
  unsigned completed = 0;  // phases completed so far; try_wait.parity(p) succeeds iff (completed & 1) != p
};
struct EmuMbarTable {
  std::mutex m;
  std::condition_variable cv;
  std::map<const void*, EmuMbar> bars;
};
inline EmuMbarTable& emu_mbars() {
  static EmuMbarTable t;
  return t;
}
inline void emu_mbar_complete_if_done(EmuMbar& b) {
  if (b.pending == 0 && b.tx == 0) {
    ++b.completed;
    b.pending = b.expected;
    emu_mbars().cv.notify_all();
  }
}
inline void emu_mbar_init(const void* bar, unsigned count) {
  std::lock_guard<std::mutex> l(emu_mbars().m);
  emu_mbars().bars[bar] = EmuMbar{int(count), int(count), 0, 0};
}
inline void emu_mbar_arrive(const void* bar, int64_t tx_bytes = 0) {
  std::lock_guard<std::mutex> l(emu_mbars().m);
  auto it = emu_mbars().bars.find(bar);
  if (it == emu_mbars().bars.end()) throw std::runtime_error("arrive on an uninitialised mbarrier");
  it->second.tx += tx_bytes;
  --it->second.pending;
  emu_mbar_complete_if_done(it->second);
}
inline void emu_mbar_complete_tx(const void* bar, int64_t bytes) {
  std::lock_guard<std::mutex> l(emu_mbars().m);
  auto& b = emu_mbars().bars.at(bar);
  b.tx -= bytes;
  emu_mbar_complete_if_done(b);
}
inline void emu_mbar_wait(const void* bar, unsigned parity) {
  std::unique_lock<std::mutex> l(emu_mbars().m);
  auto it = emu_mbars().bars.find(bar);
  if (it == emu_mbars().bars.end()) throw std::runtime_error("wait on an uninitialised mbarrier");
  EmuMbar& b = it->second;
  emu_mbars().cv.wait(l, [&] { return (b.completed & 1u) != (parity & 1u); });
}

// ---- setmaxnreg: the CTA's register pool ----
// Every thread starts a block with what its launch gave it (the most __launch_bounds__(blockDim, 1) allows: 64K
// registers over blockDim threads, rounded down to 8, at most 255); a decrease returns the difference to the block's
// pool, an increase waits until the pool holds what it asks. On the GPU an increase the pool never satisfies hangs
// the kernel; here, after half a minute of waiting, the program says so and aborts.
struct EmuRegPool {
  std::mutex m;
  std::condition_variable cv;
  unsigned block = ~0u;  // emu_blocks_run when the pool was last reset
  int64_t free = 0;
};
inline EmuRegPool& emu_reg_pool() {
  static EmuRegPool p;
  return p;
}
inline void emu_setmaxnreg(int n) {
  thread_local unsigned my_block = ~0u;
  thread_local int regs = 0;
  EmuRegPool& p = emu_reg_pool();
  std::unique_lock<std::mutex> l(p.m);
  const unsigned block = emu_blocks_run.load();
  if (p.block != block) p.block = block, p.free = 0;
  if (my_block != block) my_block = block, regs = int(std::min(255u, 65536u / emu_block_dim.x) / 8 * 8);
  if (n <= regs) {
    p.free += regs - n;
    p.cv.notify_all();
  } else if (!p.cv.wait_for(l, std::chrono::seconds(30), [&] { return p.free >= n - regs; })) {
    std::fprintf(stderr,
                 "setmaxnreg.inc %d from %d: the block's pool never holds %d free registers (a hang on the GPU)\n", n,
                 regs, n - regs);
    std::abort();
  } else {
    p.free -= n - regs;
  }
  regs = n;
}

// ---- named barriers (bar.sync / bar.arrive id, threads) ----
inline void emu_named_barrier(int id, int threads, bool wait) {
  static std::mutex m;
  static std::map<int, std::unique_ptr<std::barrier<>>> bars;
  std::barrier<>* bar;
  {
    std::lock_guard<std::mutex> l(m);
    auto& p = bars[id];
    if (!p) p = std::make_unique<std::barrier<>>(threads);
    bar = p.get();
  }
  if (wait)
    bar->arrive_and_wait();
  else
    (void)bar->arrive();
}

// ---- wgmma ----
namespace torch_dnn_emu_wgmma {

inline uint16_t smem_u16(unsigned byte) {
  byte ^= ((byte >> 7) & 7u) << 4;  // the 128-byte swizzle on the address bits
  uint16_t v;
  std::memcpy(&v, emu_dyn_smem() + byte, 2);
  return v;
}
struct Desc {
  unsigned start, lbo, sbo;
  explicit Desc(uint64_t d)
      : start(unsigned(d & 0x3FFF) << 4), lbo(unsigned((d >> 16) & 0x3FFF) << 4), sbo(unsigned((d >> 32) & 0x3FFF) << 4) {
    if ((d >> 62) != 1) throw std::runtime_error("only the 128-byte swizzle is emulated");
  }
  // K-major: element (mn, k) of rows of 64 k-elements; MN-major: (k, mn) of rows of 64 mn-elements, next 64-wide
  // mn block lbo further. k < 16 (one instruction), 16-bit elements.
  uint16_t kmajor(int mn, int k) const { return smem_u16(start + (mn / 8) * sbo + (mn % 8) * 128 + k * 2); }
  uint16_t mnmajor(int k, int mn) const {
    return smem_u16(start + (k / 8) * sbo + (k % 8) * 128 + (mn / 64) * lbo + (mn % 64) * 2);
  }
};

template <typename T>
float tof(uint16_t bits) {
  return torch_dnn_emu_ptx::half_bits_to_float<T>(bits);
}

// The warpgroup's 128 threads exchange their A registers (rs) through this, between two barriers of the group.
struct GroupExchange {
  uint32_t a[128][4];
  std::barrier<> bar{128};
};
inline GroupExchange& group_exchange() {
  static GroupExchange x[8];
  return x[emu_thread_idx.x / 128];
}

// d (this thread's N/2 floats of the m64nN accumulator) = (scale_d ? d : 0) + A B, A (64 x 16) from `a_at(row, k)`.
template <typename T, int N, class AAt>
void mma(float* d, AAt a_at, const Desc& b, bool b_mn, int scale_d) {
  const unsigned t = emu_thread_idx.x % 128, w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  float out[N / 2];
  for (int j = 0; j < N / 8; ++j)
    for (int r = 0; r < 2; ++r)
      for (int e = 0; e < 2; ++e) {
        const int row = int(16 * w + g + 8 * r), col = 8 * j + int(2 * q) + e;
        float acc = scale_d ? d[4 * j + 2 * r + e] : 0.f;
        for (int k = 0; k < 16; ++k) acc += a_at(row, k) * tof<T>(b_mn ? b.mnmajor(k, col) : b.kmajor(col, k));
        out[4 * j + 2 * r + e] = acc;
      }
  for (int i = 0; i < N / 2; ++i) d[i] = out[i];
}

template <typename T, int N>
void ss(float* d, uint64_t da, uint64_t db, int scale_d) {
  const Desc a(da), b(db);
  mma<T, N>(d, [&](int row, int k) { return tof<T>(a.kmajor(row, k)); }, b, false, scale_d);
}

template <typename T, int N>
void rs(float* d, const uint32_t* areg, uint64_t db) {
  GroupExchange& x = group_exchange();
  const unsigned t = emu_thread_idx.x % 128;
  for (int i = 0; i < 4; ++i) x.a[t][i] = areg[i];
  x.bar.arrive_and_wait();
  // mma.sync's m16k16 A layout per warp: a0 (g, 2q..), a1 (g + 8, 2q..), a2 (g, 2q + 8..), a3 (g + 8, 2q + 8..)
  auto a_at = [&](int row, int k) {
    const int w = row / 16, rr = row % 16;
    const uint32_t v = x.a[w * 32 + (rr % 8) * 4 + (k % 8) / 2][(rr >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
    return tof<T>(uint16_t((k & 1) ? v >> 16 : v & 0xffff));
  };
  mma<T, N>(d, a_at, Desc(db), true, 1);
  x.bar.arrive_and_wait();
}

}  // namespace torch_dnn_emu_wgmma
