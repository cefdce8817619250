// Norm backward entry points: dtypes x {layer_norm, rms_norm}.
#include "norm/kernels/norm_backward.cuh"

namespace torch_dnn {
namespace norm {

int64_t backward_workspace(DType dtype, bool rms, NormShape s, bool weight_grads, const Knobs& knobs) {
  if (!weight_grads || s.rows == 0 || s.cols == 0) return 0;
  int64_t P = 0;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    P = rms ? backward_partial_rows<T, true>(s.rows, s.cols, knobs)
            : backward_partial_rows<T, false>(s.rows, s.cols, knobs);
  });
  return 2 * P * s.cols;
}

template <typename T>
static void backward_typed(bool rms, const BackwardArgs& a, NormShape s, const Knobs& knobs, cudaStream_t stream) {
  using A = acc_t<T>;
  const BwdParams<T> p{static_cast<const T*>(a.dy), static_cast<const T*>(a.dsum), static_cast<const T*>(a.x),
                       static_cast<const A*>(a.mean), static_cast<const A*>(a.rstd), static_cast<const T*>(a.w),
                       static_cast<T*>(a.dx),         (a.dw || a.db) ? static_cast<A*>(a.workspace) : nullptr,
                       0,                             s.rows,
                       s.cols};
  if (rms) run_backward<T, true>(p, static_cast<T*>(a.dw), static_cast<T*>(a.db), knobs, stream);
  else run_backward<T, false>(p, static_cast<T*>(a.dw), static_cast<T*>(a.db), knobs, stream);
}

cudaError_t launch_backward(DType dtype, bool rms, const BackwardArgs& a, NormShape s, const Knobs& knobs,
                            cudaStream_t stream) {
  if (s.rows == 0 || s.cols == 0) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) { backward_typed<decltype(tag)>(rms, a, s, knobs, stream); });
  return cudaGetLastError();
}

}  // namespace norm
}  // namespace torch_dnn
