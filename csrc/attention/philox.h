// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the attention dropout
// mask built on it: torch-free, the same on host (the CPU op) and device (every CUDA kernel), so that forward and
// backward, CPU and CUDA, regenerate one mask from (seed, offset).
//
// The mask: element (b, h, i, j) of the [B][Hq][Sq][Sk] probability matrix (Sq, Sk: the maximal lengths for
// variable-length batches; i, j local to the sequence) draws one Philox block with
//   key = (seed lo, seed hi),  counter = (n lo, n hi, offset lo, offset hi),  n = ((b * Hq + h) * Sq + i) * Sk + j
// and is kept iff the block's first word x satisfies x >= threshold(p) = floor(p * 2^32) (p < 1): P(keep) = 1 - p
// to within 2^-32. A kept probability is scaled by 1 / (1 - p).
#pragma once
#include <cstdint>

#include "common/hd.h"

namespace torch_dnn {
namespace attention {

struct Philox4 {
  uint32_t x[4];
};

TD_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

// Philox4x32 with 10 rounds.
TD_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, c0, hi0, lo0);
    philox_mulhilo(kM1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// floor(p * 2^32) for 0 <= p < 1 (p >= 1: every element dropped, see dropout_keep).
TD_HD uint32_t dropout_threshold(double p) {
  if (p <= 0.0) return 0u;
  if (p >= 1.0) return 0xFFFFFFFFu;
  const double t = p * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : uint32_t(t);
}

// Whether element n = ((b * Hq + h) * Sq + i) * Sk + j is kept; `threshold` from dropout_threshold(p), p < 1.
TD_HD bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t n, uint32_t threshold) {
  const Philox4 r = philox4x32_10(uint32_t(n), uint32_t(n >> 32), uint32_t(offset), uint32_t(offset >> 32),
                                  uint32_t(seed), uint32_t(seed >> 32));
  return r.x[0] >= threshold;
}

}  // namespace attention
}  // namespace torch_dnn
