// group_norm forward entry point.
#include "group_norm/kernels/gn_forward.cuh"

namespace torch_dnn {
namespace group_norm {

template <typename T>
GnParams<T> make_params(const void* x, const void* dy, const void* w, const void* b, void* out, const void* mean,
                        const void* rstd, double eps, const GnShape& s) {
  using A = acc_t<T>;
  const int64_t D = s.C / s.G;
  return GnParams<T>{static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const T*>(w),
                     static_cast<const T*>(b), static_cast<T*>(out), static_cast<A*>(const_cast<void*>(mean)),
                     static_cast<A*>(const_cast<void*>(rstd)), A(eps), s.N, s.C, s.S, s.G, D, D * s.S,
                     s.channels_last};
}

int64_t forward_workspace(DType dtype, const GnShape& s, bool stats_given) {
  if (s.N == 0 || s.C == 0 || s.S == 0) return 0;
  return forward_workspace_elems(s, stats_given);
}

cudaError_t launch_forward(DType dtype, const ForwardArgs& a, const GnShape& s, const Knobs& knobs,
                           cudaStream_t stream) {
  if (s.N == 0 || s.C == 0 || s.S == 0) return cudaSuccess;
  bool launched = true;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    GnParams<T> p = make_params<T>(a.x, nullptr, a.w, a.b, a.y, a.mean, a.rstd, a.eps, s);
    if (s.y_contiguous) {
      p.out_nchw = true;
      const bool aligned = aligned16(p.x) && aligned16(p.out) && (!p.w || aligned16(p.w)) && (!p.b || aligned16(p.b));
      launched = s.channels_last && !a.stats_given && try_cluster_fwd(p, aligned, knobs, stream);
      return;
    }
    run_forward<T>(p, a.stats_given, static_cast<acc_t<T>*>(a.workspace), knobs, stream);
  });
  return launched ? cudaGetLastError() : cudaErrorNotSupported;
}

}  // namespace group_norm
}  // namespace torch_dnn
