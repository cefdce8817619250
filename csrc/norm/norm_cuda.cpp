// CUDA launchers of the norm family: raw pointers, the current stream and the knobs (norm_plan.h, read once a call)
// to the torch-free entry points. Registered for the CUDA dispatch key only.
#include "common/cuda_utils.h"
#include "norm/norm_ops.h"

namespace torch_dnn {
namespace norm {
namespace {

const void* cptr(const at::Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }
void* mptr(at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

struct CudaBackend {
  static void forward(const at::Tensor& x, const at::Tensor& res, const at::Tensor& w, const at::Tensor& b,
                      at::Tensor& y, at::Tensor& sum, at::Tensor& mean, at::Tensor& rstd, NormShape s, bool rms,
                      double eps) {
    c10::cuda::CUDAGuard guard(x.device());
    const ForwardArgs a{cptr(x), cptr(res), cptr(w), cptr(b), mptr(y), mptr(sum), mptr(mean), mptr(rstd), eps};
    TD_CHECK_LAUNCH(launch_forward(to_dtype(x.scalar_type()), rms, a, s, read_knobs(), current_stream()));
  }
  static void backward(const at::Tensor& dy, const at::Tensor& dsum, const at::Tensor& x, const at::Tensor& mean,
                       const at::Tensor& rstd, const at::Tensor& w, at::Tensor& dx, at::Tensor& dw, at::Tensor& db,
                       NormShape s, bool rms) {
    c10::cuda::CUDAGuard guard(x.device());
    const DType dt = to_dtype(x.scalar_type());
    const Knobs knobs = read_knobs();
    at::Tensor ws;
    if (dw.defined() || db.defined())
      ws = at::empty({backward_workspace(dt, rms, s, true, knobs)}, x.options().dtype(stat_type(x.scalar_type())));
    const BackwardArgs a{cptr(dy), cptr(dsum), cptr(x), cptr(mean), cptr(rstd), cptr(w),
                         mptr(dx), mptr(dw),   mptr(db), mptr(ws)};
    TD_CHECK_LAUNCH(launch_backward(dt, rms, a, s, knobs, current_stream()));
  }
};

}  // namespace
}  // namespace norm
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::norm::register_norm_impls<torch_dnn::norm::CudaBackend>(m);
}
