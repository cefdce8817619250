// local_response_norm entry points.
#include "lrn/kernels/lrn.cuh"

namespace torch_dnn {
namespace lrn {

cudaError_t launch_forward(DType dtype, const void* x, void* y, const LrnShape& s, cudaStream_t stream) {
  if (s.N * s.C * s.S == 0) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto p = make_params<T>(s);
    lrn_fwd<T><<<grid_for(p.numel, 256), 256, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
  });
  return cudaGetLastError();
}

cudaError_t launch_backward(DType dtype, const void* dy, const void* x, void* dx, void* workspace, const LrnShape& s,
                            cudaStream_t stream) {
  if (s.N * s.C * s.S == 0) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const auto p = make_params<T>(s);
    const unsigned grid = grid_for(p.numel, 256);
    lrn_bwd_terms<T><<<grid, 256, 0, stream>>>(static_cast<const T*>(dy), static_cast<const T*>(x),
                                               static_cast<A*>(workspace), p);
    lrn_bwd<T><<<grid, 256, 0, stream>>>(static_cast<const T*>(dy), static_cast<const T*>(x),
                                         static_cast<const A*>(workspace), static_cast<T*>(dx), p);
  });
  return cudaGetLastError();
}

}  // namespace lrn
}  // namespace torch_dnn
