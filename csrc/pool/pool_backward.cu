// Pooling backward entry points: gather-style (one thread per input item), deterministic, no zero fill.
#include "pool/kernels/pool.cuh"

namespace torch_dnn {
namespace pool {
namespace {

template <Op OP>
void launch_gather(DType t, const void* g, const int64_t* ind, const void* x, const void* y, void* dx,
                   const PoolShape& s, cudaStream_t stream) {
  const int64_t in[3] = {s.ax[0].in, s.ax[1].in, s.ax[2].in};
  bool aligned = aligned16(g) && aligned16(dx);
  if (OP == Op::Max) aligned = aligned && aligned16(ind);
  if (OP == Op::Lp) aligned = aligned && aligned16(x) && aligned16(y);
  dispatch_layout(t, s, aligned, [&](auto tag, auto cl, auto v) {
    using T = decltype(tag);
    const T* gp = static_cast<const T*>(g);
    const T* xp = static_cast<const T*>(x);
    const T* yp = static_cast<const T*>(y);
    T* dxp = static_cast<T*>(dx);
    // the scalar channels-last path (C not a multiple of the vector) is the rare one: loops only
    dispatch_cover<OP, (!decltype(cl)::value || decltype(v)::value > 1)>(s, [&](auto ch, auto cw) {
      if constexpr (cl.value) {
        const Args<4> a = cl_args(s, v.value, in);
        launch(pool_bwd_cl<T, OP, v.value, ch.value, cw.value>, grid_for(a.items, kThreads), kThreads, stream, gp,
               ind, xp, yp, dxp, a);
      } else {
        const Args<3> a = nc_args(s, in);
        launch(pool_bwd_nc<T, OP, ch.value, cw.value>, grid_for(a.items, kThreads), kThreads, stream, gp,
               ind, xp, yp, dxp, a);
      }
    });
  });
}

}  // namespace

cudaError_t launch_max_backward(DType t, const void* g, const int64_t* ind, void* dx, const PoolShape& s,
                                cudaStream_t stream) {
  if (s.N * s.C * s.in_volume() == 0) return cudaSuccess;
  launch_gather<Op::Max>(t, g, ind, nullptr, nullptr, dx, s, stream);
  return cudaGetLastError();
}

cudaError_t launch_avg_backward(DType t, const void* g, void* dx, const PoolShape& s, cudaStream_t stream) {
  if (s.N * s.C * s.in_volume() == 0) return cudaSuccess;
  launch_gather<Op::Avg>(t, g, nullptr, nullptr, nullptr, dx, s, stream);
  return cudaGetLastError();
}

cudaError_t launch_lp_backward(DType t, const void* g, const void* x, const void* y, void* dx, const PoolShape& s,
                               cudaStream_t stream) {
  if (s.N * s.C * s.in_volume() == 0) return cudaSuccess;
  launch_gather<Op::Lp>(t, g, nullptr, x, y, dx, s, stream);
  return cudaGetLastError();
}

}  // namespace pool
}  // namespace torch_dnn
