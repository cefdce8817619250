// CUDA launchers of local_response_norm. Registered for the CUDA dispatch key only.
#include "common/cuda_utils.h"
#include "lrn/lrn_ops.h"

namespace torch_dnn {
namespace lrn {
namespace {

struct CudaBackend {
  static void forward(const at::Tensor& x, at::Tensor& y, const LrnShape& s) {
    c10::cuda::CUDAGuard guard(x.device());
    TD_CHECK_LAUNCH(launch_forward(to_dtype(x.scalar_type()), x.const_data_ptr(), y.data_ptr(), s, current_stream()));
  }
  static void backward(const at::Tensor& dy, const at::Tensor& x, at::Tensor& dx, const LrnShape& s) {
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor ws = at::empty({x.numel()}, x.options().dtype(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
    TD_CHECK_LAUNCH(launch_backward(to_dtype(x.scalar_type()), dy.const_data_ptr(), x.const_data_ptr(), dx.data_ptr(),
                                    ws.data_ptr(), s, current_stream()));
  }
};

}  // namespace
}  // namespace lrn
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::lrn::register_lrn_impls<torch_dnn::lrn::CudaBackend>(m);
}
