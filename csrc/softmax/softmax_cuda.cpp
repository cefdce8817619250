// CUDA launchers of the softmax family, with the knob (softmax_plan.h) read once a call. Registered for the CUDA
// dispatch key only.
#include "common/cuda_utils.h"
#include "softmax/softmax_ops.h"

namespace torch_dnn {
namespace softmax {
namespace {

at::ScalarType acc_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

struct CudaBackend {
  static void forward(const at::Tensor& x, at::Tensor& y, SoftmaxShape s, bool log) {
    c10::cuda::CUDAGuard guard(x.device());
    const DType in = to_dtype(x.scalar_type());
    const Knobs knobs = read_knobs();
    const at::Tensor ws =
        workspace_or_none(forward_workspace(in, s, knobs), x.options().dtype(acc_type(x.scalar_type())));
    TD_CHECK_LAUNCH(launch_forward(in, to_dtype(y.scalar_type()), log, x.const_data_ptr(), y.data_ptr(),
                                   data_or_null(ws), s, knobs, current_stream()));
  }
  static void backward(const at::Tensor& g, const at::Tensor& y, at::Tensor& dx, SoftmaxShape s, bool log) {
    c10::cuda::CUDAGuard guard(y.device());
    const DType out = to_dtype(y.scalar_type());
    const Knobs knobs = read_knobs();
    const at::Tensor ws =
        workspace_or_none(backward_workspace(out, s, knobs), y.options().dtype(acc_type(y.scalar_type())));
    TD_CHECK_LAUNCH(launch_backward(to_dtype(dx.scalar_type()), out, log, g.const_data_ptr(), y.const_data_ptr(),
                                    dx.data_ptr(), data_or_null(ws), s, knobs, current_stream()));
  }
};

}  // namespace
}  // namespace softmax
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::softmax::register_softmax_impls<torch_dnn::softmax::CudaBackend>(m);
}
