// group_norm backward entry point.
#include "group_norm/kernels/gn_backward.cuh"

namespace torch_dnn {
namespace group_norm {

int64_t backward_workspace(DType dtype, const GnShape& s, bool stats_given, bool weight_grads) {
  if (s.N == 0 || s.C == 0 || s.S == 0) return 0;
  return backward_workspace_elems(s);
}

cudaError_t launch_backward(DType dtype, const BackwardArgs& a, const GnShape& s, const Knobs& knobs,
                            cudaStream_t stream) {
  if (s.N == 0 || s.C == 0 || s.S == 0) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const int64_t D = s.C / s.G;
    const GnParams<T> p{static_cast<const T*>(a.x), static_cast<const T*>(a.dy), static_cast<const T*>(a.w), nullptr,
                        static_cast<T*>(a.dx), static_cast<A*>(const_cast<void*>(a.mean)),
                        static_cast<A*>(const_cast<void*>(a.rstd)), A(0), s.N, s.C, s.S, s.G, D, D * s.S,
                        s.channels_last};
    run_backward<T>(p, a.stats_given, static_cast<A*>(a.workspace), static_cast<T*>(a.dw), static_cast<T*>(a.db),
                    knobs, stream);
  });
  return cudaGetLastError();
}

}  // namespace group_norm
}  // namespace torch_dnn
