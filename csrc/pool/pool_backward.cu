// Pooling backward entry points: gather-style (one thread per input item), deterministic.
#include "pool/kernels/pool.cuh"

namespace torch_dnn {
namespace pool {

cudaError_t launch_max_backward(DType t, const void* g, const int64_t* ind, void* dx, const PoolShape& s,
                                cudaStream_t stream) {
  if (s.N * s.C * s.H * s.W == 0) return cudaSuccess;
  dispatch_layout(t, s, aligned16(g) && aligned16(dx), [&](auto tag, auto cl, auto v) {
    using T = decltype(tag);
    const int64_t items = s.N * s.C / v.value * s.H * s.W;
    max_pool_bwd<T, cl.value, v.value><<<grid_for(items, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(g), ind, static_cast<T*>(dx), s, items);
  });
  return cudaGetLastError();
}

cudaError_t launch_avg_backward(DType t, const void* g, void* dx, const PoolShape& s, cudaStream_t stream) {
  if (s.N * s.C * s.H * s.W == 0) return cudaSuccess;
  dispatch_layout(t, s, aligned16(g) && aligned16(dx), [&](auto tag, auto cl, auto v) {
    using T = decltype(tag);
    const int64_t items = s.N * s.C / v.value * s.H * s.W;
    avg_pool_bwd<T, cl.value, v.value><<<grid_for(items, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(g), static_cast<T*>(dx), s, items);
  });
  return cudaGetLastError();
}

}  // namespace pool
}  // namespace torch_dnn
