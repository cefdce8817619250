// Division by a run-time constant with a multiply-high and a shift (Granlund & Montgomery), for index
// arithmetic in memory-bound kernels where a 64-bit `/` would cost more than the memory access.
#pragma once
#include <cstdint>

namespace torch_dnn {

struct FastDivmod32 {
  uint32_t d = 1, m = 0, s = 0;
  FastDivmod32() = default;
  explicit FastDivmod32(uint32_t divisor) : d(divisor) {
    for (s = 0; s < 32; ++s)
      if ((uint64_t(1) << s) >= d) break;
    const uint64_t one = 1;
    m = uint32_t(((one << 32) * ((one << s) - d)) / d + 1);
  }
  // Valid for n < 2^31.
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
  __device__ __forceinline__ void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * d;
  }
};

}  // namespace torch_dnn
