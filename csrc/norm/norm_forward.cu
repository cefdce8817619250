// Norm forward entry point: dtypes x {layer_norm, rms_norm}.
#include "norm/kernels/norm_forward.cuh"

namespace torch_dnn {
namespace norm {

template <typename T>
static void forward_typed(bool rms, const ForwardArgs& a, NormShape s, const Knobs& knobs, cudaStream_t stream) {
  using A = acc_t<T>;
  const FwdParams<T> p{static_cast<const T*>(a.x), static_cast<const T*>(a.res), static_cast<const T*>(a.w),
                       static_cast<const T*>(a.b),  static_cast<T*>(a.y),         static_cast<T*>(a.sum),
                       static_cast<A*>(a.mean),     static_cast<A*>(a.rstd),      A(a.eps),
                       s.rows,                      s.cols};
  if (rms) run_forward<T, true>(p, knobs, stream);
  else run_forward<T, false>(p, knobs, stream);
}

cudaError_t launch_forward(DType dtype, bool rms, const ForwardArgs& a, NormShape s, const Knobs& knobs,
                           cudaStream_t stream) {
  if (s.rows == 0 || s.cols == 0) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) { forward_typed<decltype(tag)>(rms, a, s, knobs, stream); });
  return cudaGetLastError();
}

}  // namespace norm
}  // namespace torch_dnn
