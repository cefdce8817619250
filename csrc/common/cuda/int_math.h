// Integer helpers of launch geometry, shared by the families' host-side plans (aligned16 is in vec.cuh).
#pragma once
#include <cstdint>

namespace torch_dnn {

// The least power of two >= v (1 for v <= 1).
inline int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// The least power of two >= v, but no more than cap (cap a power of two).
inline int pow2_at_least(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}

}  // namespace torch_dnn
