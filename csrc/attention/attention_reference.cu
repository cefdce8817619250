// The reference attention kernels' entry points (attention_kernels.h): CUDA cores, every dtype (Float16,
// BFloat16, Float32, Float64) and every option of the contract (strides, GQA, bool/additive masks with broadcast
// strides, causal/window with either alignment, softcap, ALiBi, dropout, variable lengths, fully masked rows).
// They are the fallback behind the flash kernels and the GPU-side reference the flash kernels are tested against:
// correctness first. Kernels in kernels/attention_reference.cuh:
//   reference_forward   forward_kernel: a warp a query row, 8 rows a block, K/V tiles of 32 keys in shared
//                       memory (fewer keys / rows where the head dims need more than the device's shared memory).
//   reference_backward  dq_kernel (D = rowsum(dO * O) to the workspace, dq, dbias), then dkdv_kernel (a warp a key
//                       row, looping over the query heads of its group and the query rows that see it). No atomics:
//                       bitwise reproducible whatever `deterministic` says.
// Accumulation in float (Float64: double), exact exp/log/tanh. Refused (cudaErrorInvalidValue): Hq not a multiple
// of Hkv, a backward without lse, head dims that do not fit shared memory with one row and one key a tile
// (Float64: Dqk + Dv beyond ~7000 on an H100), grids past 2^31 blocks.
#include <algorithm>

#include "attention/kernels/attention_reference.cuh"
#include "common/cuda/device.cuh"

namespace torch_dnn {
namespace attention {

namespace {

using reference::Shape;

constexpr int64_t kMaxBlocks = (int64_t(1) << 31) - 1;

template <typename A>
int64_t forward_smem(const AttnArgs& a, Shape s) {
  return int64_t(sizeof(A)) * (s.T * (a.Dqk + 1) + s.T * a.Dv + s.R * a.Dqk + s.R * a.Dv + s.R * s.T);
}
template <typename A>
int64_t dq_smem(const AttnArgs& a, Shape s) {
  return int64_t(sizeof(A)) * (s.T * (a.Dqk + 1) + s.T * (a.Dv + 1) + 2 * s.R * a.Dqk + s.R * a.Dv + s.R * s.T);
}
template <typename A>
int64_t dkdv_smem(const AttnArgs& a, Shape s) {
  return int64_t(sizeof(A)) *
         (s.T * (a.Dqk + 1) + s.T * (a.Dv + 1) + 2 * s.T + 2 * s.R * a.Dqk + 2 * s.R * a.Dv + 2 * s.R * s.T);
}

// The largest shape (8 rows, 32 keys a tile first; keys halved before rows) whose shared memory fits `limit`.
template <class F>
bool choose_shape(F smem_of, int64_t limit, Shape& out, int64_t& bytes) {
  for (int R = 8; R >= 1; R >>= 1)
    for (int T = 32; T >= 1; T >>= 1) {
      const Shape s{R, T};
      const int64_t n = smem_of(s);
      if (n <= limit) {
        out = s;
        bytes = n;
        return true;
      }
    }
  return false;
}

// The shape for `smem_of` within the default 48 KB of dynamic shared memory (more blocks resident), else within
// the device's opt-in limit, raised for Kernel. False where not even one row and one key fit.
template <auto Kernel, class F>
bool pick_shape(F smem_of, Shape& s, int64_t& bytes) {
  if (choose_shape(smem_of, 48 * 1024, s, bytes)) return true;
#if defined(TORCH_DNN_EMULATE_CUDA)
  return false;
#else
  const int64_t limit = allow_max_dynamic_smem<Kernel>();
  return limit > 0 && choose_shape(smem_of, limit, s, bytes);
#endif
}

bool valid_heads(const AttnArgs& a) { return a.Hkv > 0 && a.Hq > 0 && a.Hq % a.Hkv == 0; }

template <typename T>
cudaError_t forward_typed(const AttnArgs& a, cudaStream_t stream) {
  using A = acc_t<T>;
  constexpr auto kernel = reference::forward_kernel<T>;
  Shape s;
  int64_t bytes = 0;
  if (!pick_shape<kernel>([&](Shape x) { return forward_smem<A>(a, x); }, s, bytes)) return cudaErrorInvalidValue;
  const int64_t row_blocks = (a.Sq + s.R - 1) / s.R;
  const int64_t blocks = row_blocks * a.Hq * a.B;
  if (blocks > kMaxBlocks) return cudaErrorInvalidValue;
  launch_1d(kernel, blocks, 32 * s.R, size_t(bytes), stream, a, s, row_blocks);
  return cudaGetLastError();
}

template <typename T>
cudaError_t backward_typed(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t stream) {
  using A = acc_t<T>;
  constexpr auto dq_kernel = reference::dq_kernel<T>;
  constexpr auto dkdv_kernel = reference::dkdv_kernel<T>;
  Shape sq_shape, sk_shape;
  int64_t dq_bytes = 0, dkdv_bytes = 0;
  if (!pick_shape<dq_kernel>([&](Shape x) { return dq_smem<A>(a, x); }, sq_shape, dq_bytes) ||
      !pick_shape<dkdv_kernel>([&](Shape x) { return dkdv_smem<A>(a, x); }, sk_shape, dkdv_bytes))
    return cudaErrorInvalidValue;
  const int64_t q_blocks = (a.Sq + sq_shape.R - 1) / sq_shape.R;
  const int64_t k_blocks = (a.Sk + sk_shape.R - 1) / sk_shape.R;
  if (q_blocks * a.Hq * a.B > kMaxBlocks || k_blocks * a.Hkv * a.B > kMaxBlocks) return cudaErrorInvalidValue;
  A* dsum = nullptr;
  if (q_blocks > 0) {
    dsum = static_cast<A*>(ws.get(a.B * a.Hq * a.Sq * int64_t(sizeof(A))));
    if (dsum == nullptr) return cudaErrorMemoryAllocation;
    launch_1d(dq_kernel, q_blocks * a.Hq * a.B, 32 * sq_shape.R, size_t(dq_bytes), stream, a, g, dsum, sq_shape,
              q_blocks);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (k_blocks > 0)
    launch_1d(dkdv_kernel, k_blocks * a.Hkv * a.B, 32 * sk_shape.R, size_t(dkdv_bytes), stream, a, g,
              static_cast<const A*>(dsum), sk_shape, k_blocks);
  return cudaGetLastError();
}

}  // namespace

cudaError_t reference_forward(const AttnArgs& a, const Workspace&, cudaStream_t stream) {
  if (!valid_heads(a)) return cudaErrorInvalidValue;
  if (a.B == 0 || a.Sq == 0) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  dispatch_dtype(a.dtype, [&](auto tag) { e = forward_typed<decltype(tag)>(a, stream); });
  return e;
}

cudaError_t reference_backward(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t stream) {
  if (!valid_heads(a) || a.lse == nullptr) return cudaErrorInvalidValue;
  if (a.B == 0 || (a.Sq == 0 && a.Sk == 0)) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  dispatch_dtype(a.dtype, [&](auto tag) { e = backward_typed<decltype(tag)>(a, g, ws, stream); });
  return e;
}

}  // namespace attention
}  // namespace torch_dnn
