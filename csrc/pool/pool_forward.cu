// Pooling forward entry points: max (with indices), avg and adaptive avg, over dtype x layout.
#include "pool/kernels/pool.cuh"

namespace torch_dnn {
namespace pool {

cudaError_t launch_max_forward(DType t, const void* x, void* y, int64_t* ind, const PoolShape& s, cudaStream_t stream) {
  if (s.N * s.C * s.OH * s.OW == 0) return cudaSuccess;
  dispatch_layout(t, s, aligned16(x) && aligned16(y), [&](auto tag, auto cl, auto v) {
    using T = decltype(tag);
    const int64_t items = s.N * s.C / v.value * s.OH * s.OW;
    max_pool_fwd<T, cl.value, v.value><<<grid_for(items, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), ind, s, items);
  });
  return cudaGetLastError();
}

cudaError_t launch_avg_forward(DType t, const void* x, void* y, const PoolShape& s, cudaStream_t stream) {
  if (s.N * s.C * s.OH * s.OW == 0) return cudaSuccess;
  dispatch_layout(t, s, aligned16(x) && aligned16(y), [&](auto tag, auto cl, auto v) {
    using T = decltype(tag);
    const int64_t items = s.N * s.C / v.value * s.OH * s.OW;
    avg_pool_fwd<T, cl.value, v.value><<<grid_for(items, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), s, items);
  });
  return cudaGetLastError();
}

}  // namespace pool
}  // namespace torch_dnn
