// What the implicit-GEMM convolution kernels share: the CTA tile of the matmul family's sm_80 GEMM (its
// mma.sync fragments, swizzled shared-memory tiles and cp.async wrappers are reused as they are), division by
// run-time constants without a divide instruction, and the mapping of a GEMM row to an output pixel. Torch-free.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "matmul/kernels/gemm_mma.cuh"

namespace torch_dnn {
namespace conv {
namespace igemm {

namespace mma = ::torch_dnn::matmul::mma;

constexpr int kBM = mma::kBM, kBN = mma::kBN, kThreads = mma::kThreads, kStages = mma::kStages;
constexpr int kGroupM = mma::kGroupM;
constexpr int kLdc = mma::kLdc;  // float row stride of the staged accumulator tile

// n / d and n % d for 0 <= n < 2^31 and 1 <= d < 2^31, by a multiply-high and a shift (Granlund and
// Montgomery; the form CUTLASS's FastDivmod uses): q = umulhi(n, mul) >> shr, with mul = ceil(2^p / d),
// p = 31 + ceil(log2 d). The wgrad loader decomposes pixel indices this way on every K tile.
struct FastDiv {
  int d = 1;
  unsigned mul = 0, shr = 0;
  FastDiv() = default;
  explicit FastDiv(int divisor) : d(divisor) {
    if (d > 1) {
      unsigned l = 0;
      while ((1u << l) < unsigned(d)) ++l;  // ceil(log2 d)
      const unsigned p = 31 + l;
      mul = unsigned(((uint64_t(1) << p) + unsigned(d) - 1) / unsigned(d));
      shr = p - 32;
    }
  }
  TD_HD int div(int n) const {
#ifdef __CUDA_ARCH__
    return d > 1 ? int(__umulhi(unsigned(n), mul) >> shr) : n;
#else
    return d > 1 ? int(((uint64_t(unsigned(n)) * mul) >> 32) >> shr) : n;
#endif
  }
  TD_HD void divmod(int n, int& q, int& r) const {
    q = div(n);
    r = n - q * d;
  }
};

// A GEMM row of the output-stationary passes (fprop, dgrad): the pixel (n, p, q, o) of an output [N][P][Q][O].
struct Pixel {
  int n, p, q, o;
};
__device__ __forceinline__ Pixel pixel_of(int m, const FastDiv& P, const FastDiv& Q, const FastDiv& O) {
  Pixel x;
  int t;
  O.divmod(m, t, x.o);
  Q.divmod(t, t, x.q);
  P.divmod(t, x.n, x.p);
  return x;
}

// Grouped rasterisation of the output tiles (the GEMM's): kGroupM tile rows walk the N tiles together so that
// the operand tiles stay in L2.
__device__ __forceinline__ void tile_of(int64_t id, int64_t tiles_m, int64_t tiles_n, int64_t& tm, int64_t& tn) {
  const int64_t width = kGroupM * tiles_n;
  const int64_t first_m = (id / width) * kGroupM;
  const int64_t gsize = tiles_m - first_m < kGroupM ? tiles_m - first_m : kGroupM;
  tm = first_m + (id % width) % gsize;
  tn = (id % width) / gsize;
}

template <typename T>
constexpr int smem_bytes() {
  return mma::smem_bytes<T>();
}

}  // namespace igemm
}  // namespace conv
}  // namespace torch_dnn
