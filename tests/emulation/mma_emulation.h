// The sm_80 PTX wrappers of csrc/matmul/kernels/gemm_mma.cuh (cp.async, ldmatrix(.trans), mma.sync m16n8k16 and
// m16n8k8 TF32, cvt.rna.tf32) computed on the host for cuda_host_shim.h's emulation, following the PTX ISA's
// fragment layouts, so that a kernel's fragment and swizzle arithmetic can be checked without a GPU. Each warp-wide
// operation exchanges the 32 lanes' operands through a per-warp buffer between two barriers of that warp's 32 host
// threads (every lane of a warp must call it together, as on the GPU). Needs emu_warp_barrier() from the including
// file.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
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

// Publishes this lane's A and B fragment registers to its warp and waits for every lane's: an mma's operands are
// spread over the warp.
inline WarpExchange& exchange_fragments(const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const unsigned lane = emu_thread_idx.x & 31;
  WarpExchange& x = warp_exchange();
  for (int i = 0; i < 4; ++i) x.a[lane][i] = a[i];
  x.b[lane][0] = b[0];
  x.b[lane][1] = b[1];
  emu_warp_barrier().arrive_and_wait();
  return x;
}

// mma.sync.m16n8k16.row.col, float accumulators:
//   A (16 x 16): a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..)
//   B (16 x 8):  b0 (k = 2t..2t+1, n = g), b1 (k = 2t + 8.., n = g)
//   C (16 x 8):  c0, c1 (g, 2t..2t+1), c2, c3 (g + 8, 2t..2t+1)
template <typename T>
inline void mma_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const unsigned lane = emu_thread_idx.x & 31;
  const WarpExchange& x = exchange_fragments(a, b);
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

// ---- TF32 ----

// cvt.rna.tf32.f32: x rounded to nearest, ties away from zero, at TF32's 10 fraction bits (the low 13 bits cleared);
// infinities kept, NaN a NaN.
inline uint32_t to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return 0x7fffe000u;
  if (std::isfinite(x)) u += 0x1000u;
  return u & 0xffffe000u;
}

// How the emulated TF32 mma adds its products to C (a program picks one, process-wide):
//   Float:    each product (exact in float: 11 x 11 significant bits) added to the accumulator in k order, rounded
//             to nearest, as a chain of float FMAs would;
//   Truncate: the accumulator and each group of four products aligned to the largest exponent among them, bits
//             below 24 significant bits of it dropped, the sum rounded toward zero to float: the truncating
//             accumulation Fasi et al. (2021) measured on NVIDIA tensor cores, as a pessimistic model (the
//             hardware's exact alignment width and grouping for TF32 are not modelled).
enum class Tf32Accumulation { Float, Truncate };
inline Tf32Accumulation& tf32_accumulation() {
  static Tf32Accumulation mode = Tf32Accumulation::Float;
  return mode;
}

// A TF32 operand as the tensor cores read it: the register's top 19 bits (1 sign, 8 exponent, 10 fraction).
inline float tf32_operand(uint32_t bits) {
  const uint32_t u = bits & 0xffffe000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// c + sum_k a[k] b[k] for TF32 operand values a, b, accumulated as tf32_accumulation() says.
inline float tf32_dot(float c, const float* a, const float* b, int k) {
  if (tf32_accumulation() == Tf32Accumulation::Float) {
    for (int i = 0; i < k; ++i) c = std::fma(a[i], b[i], c);
    return c;
  }
  for (int k0 = 0; k0 < k; k0 += 4) {
    double term[5] = {c, 0, 0, 0, 0};
    bool finite = std::isfinite(c);
    for (int i = 0; i < 4 && k0 + i < k; ++i) {
      term[i + 1] = double(a[k0 + i]) * double(b[k0 + i]);
      finite &= std::isfinite(term[i + 1]);
    }
    if (!finite) {
      for (int i = 1; i < 5; ++i) c = float(double(c) + term[i]);
      continue;
    }
    int emax = INT32_MIN;
    for (double v : term)
      if (v != 0) emax = std::max(emax, std::ilogb(v));
    if (emax == INT32_MIN) {
      c = 0.f;
      continue;
    }
    const double quantum = std::ldexp(1.0, emax - 23);
    double sum = 0;
    for (double v : term) sum += std::trunc(v / quantum) * quantum;  // exact: a few dozen significant bits
    float r = float(sum);
    if (std::fabs(double(r)) > std::fabs(sum)) r = std::nextafter(r, 0.f);
    c = r;
  }
  return c;
}

// mma.sync.m16n8k8.row.col.f32.tf32.tf32.f32:
//   A (16 x 8): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   B (8 x 8):  b0 (k = t, n = g), b1 (k = t + 4, n = g)
//   C (16 x 8): c0, c1 (g, 2t..2t+1), c2, c3 (g + 8, 2t..2t+1)
inline void mma_1688_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const unsigned lane = emu_thread_idx.x & 31;
  const WarpExchange& x = exchange_fragments(a, b);
  const int g = int(lane >> 2), t = int(lane & 3);
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    float av[8], bv[8];
    for (int k = 0; k < 8; ++k) {
      av[k] = tf32_operand(x.a[(row % 8) * 4 + (k % 4)][(row >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)]);
      bv[k] = tf32_operand(x.b[col * 4 + (k % 4)][k >= 4 ? 1 : 0]);
    }
    out[e] = tf32_dot(c[e], av, bv, 8);
  }
  emu_warp_barrier().arrive_and_wait();
  for (int e = 0; e < 4; ++e) c[e] = out[e];
}

}  // namespace torch_dnn_emu_ptx
