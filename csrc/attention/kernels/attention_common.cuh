// What every attention kernel shares (torch-free): one sequence's geometry (fixed or variable length), the
// visibility of key j to query row i (causal / window and their alignment), and the score pipeline of
// attention_kernels.h (scale, softcap, additive bias, bool mask, ALiBi) evaluated for one (i, j).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/attention_kernels.h"
#include "attention/philox.h"
#include "common/cuda/types.cuh"

#if defined(TORCH_DNN_EMULATE_CUDA) && !defined(__noinline__)
#define __noinline__ __attribute__((noinline))
#endif

namespace torch_dnn {
namespace attention {

// The CUDA-core kernels are launched through here with 1-D grids and blocks (tests/emulation/ runs them on the CPU).
template <typename... P, typename... Args>
void launch_1d(void (*kernel)(P...), int64_t grid, int block, size_t smem, cudaStream_t stream, Args... args) {
#if defined(TORCH_DNN_EMULATE_CUDA)
  (void)stream;
  emulate_launch_smem(kernel, unsigned(grid), unsigned(block), smem, args...);
#else
  kernel<<<unsigned(grid), unsigned(block), smem, stream>>>(args...);
#endif
}

// The running block's dynamic shared memory, 16-byte aligned.
#if defined(TORCH_DNN_EMULATE_CUDA)
inline unsigned char* attn_smem() { return emu_dyn_smem(); }
#else
__device__ __forceinline__ unsigned char* attn_smem() {
  extern __shared__ __align__(16) unsigned char attn_dyn_smem[];
  return attn_dyn_smem;
}
#endif

// Which keys a query row sees: j in [lo(i), hi(i)) from causal and the window, with i aligned by `shift`
// (Sk - Sq of this sequence when bottom_right, else 0). Both bounds are nondecreasing in i.
struct Visibility {
  int64_t shift = 0;
  int64_t left = -1, right = -1;  // -1: unbounded
  int64_t sk = 0, sq = 0;
  __device__ __forceinline__ int64_t lo(int64_t i) const {
    if (left < 0) return 0;
    const int64_t v = i + shift - left;
    return v < 0 ? 0 : v;
  }
  __device__ __forceinline__ int64_t hi(int64_t i) const {
    if (right < 0) return sk;
    const int64_t v = i + shift + right + 1;
    return v < 0 ? 0 : (v > sk ? sk : v);
  }
  __device__ __forceinline__ bool visible(int64_t i, int64_t j) const {
    return i >= 0 && i < sq && j >= 0 && j < sk && j >= lo(i) && j < hi(i);
  }
  // The query rows that see key j: [qlo(j), qhi(j)).
  __device__ __forceinline__ int64_t qlo(int64_t j) const {
    if (right < 0) return 0;
    const int64_t v = j - right - shift;
    return v < 0 ? 0 : v;
  }
  __device__ __forceinline__ int64_t qhi(int64_t j) const {
    if (left < 0) return sq;
    const int64_t v = j + left - shift + 1;
    return v < 0 ? 0 : (v > sq ? sq : v);
  }
};

__device__ __forceinline__ Visibility make_visibility(const AttnArgs& a, const Seq& s) {
  Visibility v;
  v.shift = a.bottom_right ? s.sk - s.sq : 0;
  v.left = a.window_left;
  v.right = a.window_right;
  if (a.causal) v.right = 0;  // causal is window_right = 0 (a wider right window cannot widen it)
  v.sk = s.sk;
  v.sq = s.sq;
  return v;
}

// An element of a float tensor of run-time dtype `t`, as A.
template <typename A>
__device__ __forceinline__ A load_dyn(const void* p, DType t, int64_t idx) {
  switch (t) {
    case DType::Float32: return A(static_cast<const float*>(p)[idx]);
    case DType::Float16: return A(__half2float(static_cast<const __half*>(p)[idx]));
    case DType::BFloat16: return A(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[idx]));
    case DType::Float64: return A(static_cast<const double*>(p)[idx]);
  }
  return A(0);
}
template <typename A>
__device__ __forceinline__ void store_dyn(void* p, DType t, int64_t idx, A v) {
  switch (t) {
    case DType::Float32: static_cast<float*>(p)[idx] = float(v); break;
    case DType::Float16: static_cast<__half*>(p)[idx] = __float2half_rn(float(v)); break;
    case DType::BFloat16: static_cast<__nv_bfloat16*>(p)[idx] = __float2bfloat16_rn(float(v)); break;
    case DType::Float64: static_cast<double*>(p)[idx] = double(v); break;
  }
}

// The score of (b, h, i, j) from dot = <q_i, k_j>: returns s and sets t = tanh(scale * dot / softcap) (softcap's
// derivative is 1 - t^2; t = 0 without softcap) and `visible` (false: s is -inf). An additive -inf gives s = -inf
// with visible true; callers treat both alike.
template <typename A>
__device__ __forceinline__ A score(const AttnArgs& a, const Visibility& vis, int64_t b, int64_t h, int64_t i,
                                   int64_t j, A dot, A& t, bool& visible) {
  t = A(0);
  visible = vis.visible(i, j);
  if (!visible) return -INFINITY;
  A s = A(a.scale) * dot;
  if (a.softcap > 0) {
    const A c = A(a.softcap);
    t = td_tanh(s / c);
    s = c * t;
  }
  if (a.mask_kind != MaskKind::None) {
    const int64_t mi = b * a.mask_sb + h * a.mask_sh + i * a.mask_sq + j * a.mask_sk;
    if (a.mask_kind == MaskKind::Bool) {
      if (!static_cast<const bool*>(a.mask)[mi]) {
        visible = false;
        return -INFINITY;
      }
    } else {
      s += load_dyn<A>(a.mask, a.mask_dtype, mi);
    }
  }
  if (a.alibi_slopes != nullptr) {
    const int64_t d = i + vis.shift - j;
    s -= A(a.alibi_slopes[b * a.alibi_sb + h]) * A(d < 0 ? -d : d);
  }
  return s;
}

// The dropout factor of (b, h, i, j): 0 (dropped) or 1 / (1 - p).
template <typename A>
__device__ __forceinline__ A dropout_factor(const AttnArgs& a, uint32_t threshold, A keep_scale, int64_t b, int64_t h,
                                            int64_t i, int64_t j) {
  const uint64_t n = uint64_t(((b * a.Hq + h) * a.Sq + i) * a.Sk + j);
  return dropout_keep(a.seed, a.offset, n, threshold) ? keep_scale : A(0);
}

}  // namespace attention
}  // namespace torch_dnn
