// The sm_80 PTX wrappers of csrc/matmul/kernels/gemm_mma.cuh (cp.async, ldmatrix(.trans), mma.sync m16n8k16)
// computed on the host for cuda_host_shim.h's emulation, following the PTX ISA's fragment layouts, so that a
// kernel's fragment and swizzle arithmetic can be checked without a GPU. Each warp-wide operation exchanges
// the 32 lanes' operands through a per-warp buffer between two barriers of that warp's 32 host threads (every
// lane of a warp must call it together, as on the GPU). Needs emu_warp_barrier() from the including file.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace torch_dnn_emu_ptx {

// cp.async with a source size: an immediate copy of `src_bytes`, the rest of the 16 bytes zero-filled.
inline void cp_async16(void* smem, const void* gmem, int src_bytes) {
  std::memset(smem, 0, 16);
  if (src_bytes > 0) std::memcpy(smem, gmem, size_t(src_bytes));
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

struct WarpExchange {
  const void* addr[32];
  uint32_t a[32][4];
  uint32_t b[32][2];
};
inline WarpExchange& warp_exchange() {
  static WarpExchange x[32];
  return x[emu_thread_idx.x / 32];
}

inline uint32_t pair16(const uint16_t* p0, const uint16_t* p1) { return uint32_t(*p0) | (uint32_t(*p1) << 16); }

// ldmatrix.x4: lanes 8m .. 8m + 7 give the row addresses of matrix m; lane (g = lane / 4, t = lane % 4) gets
// row g, columns 2t, 2t + 1 of each matrix (.trans: rows 2t, 2t + 1 of column g).
template <bool TRANS>
inline void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const unsigned lane = emu_thread_idx.x & 31;
  WarpExchange& x = warp_exchange();
  x.addr[lane] = smem;
  emu_warp_barrier().arrive_and_wait();
  const unsigned g = lane >> 2, t = lane & 3;
  for (int m = 0; m < 4; ++m) {
    if (!TRANS) {
      const uint16_t* row = static_cast<const uint16_t*>(x.addr[8 * m + g]);
      r[m] = pair16(row + 2 * t, row + 2 * t + 1);
    } else {
      const uint16_t* r0 = static_cast<const uint16_t*>(x.addr[8 * m + 2 * t]);
      const uint16_t* r1 = static_cast<const uint16_t*>(x.addr[8 * m + 2 * t + 1]);
      r[m] = pair16(r0 + g, r1 + g);
    }
  }
  emu_warp_barrier().arrive_and_wait();
}

template <typename T>
inline float half_bits_to_float(uint16_t bits) {
  if constexpr (std::is_same_v<T, __half>) {
    __half h;
    std::memcpy(&h, &bits, 2);
    return __half2float(h);
  } else {
    const uint32_t w = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &w, 4);
    return f;
  }
}

// mma.sync.m16n8k16.row.col, float accumulators:
//   A (16 x 16): a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..)
//   B (16 x 8):  b0 (k = 2t..2t+1, n = g), b1 (k = 2t + 8.., n = g)
//   C (16 x 8):  c0, c1 (g, 2t..2t+1), c2, c3 (g + 8, 2t..2t+1)
template <typename T>
inline void mma_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const unsigned lane = emu_thread_idx.x & 31;
  WarpExchange& x = warp_exchange();
  for (int i = 0; i < 4; ++i) x.a[lane][i] = a[i];
  x.b[lane][0] = b[0];
  x.b[lane][1] = b[1];
  emu_warp_barrier().arrive_and_wait();
  auto A = [&](int row, int k) {
    const uint32_t w = x.a[(row % 8) * 4 + (k % 8) / 2][(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
    return half_bits_to_float<T>(uint16_t((k & 1) ? w >> 16 : w & 0xffff));
  };
  auto B = [&](int k, int n) {
    const uint32_t w = x.b[n * 4 + (k % 8) / 2][k >= 8 ? 1 : 0];
    return half_bits_to_float<T>(uint16_t((k & 1) ? w >> 16 : w & 0xffff));
  };
  const int g = int(lane >> 2), t = int(lane & 3);
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    float acc = c[e];
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    out[e] = acc;
  }
  emu_warp_barrier().arrive_and_wait();
  for (int e = 0; e < 4; ++e) c[e] = out[e];
}

}  // namespace torch_dnn_emu_ptx
