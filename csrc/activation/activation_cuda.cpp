// CUDA launchers of the activation family: pick the torch-free entry point, pass raw pointers and the
// current stream, check the launch. Registered for the CUDA dispatch key only.
#include "activation/activation_kernels.h"
#include "activation/activation_ops.h"
#include "common/cuda_utils.h"

namespace torch_dnn {
namespace activation {
namespace {

struct CudaBackend {
  static void forward(const at::Tensor& x, at::Tensor& y, Act k, ActParams p) {
    c10::cuda::CUDAGuard guard(x.device());
    TD_CHECK_LAUNCH(launch_forward(to_dtype(x.scalar_type()), k, p, x.const_data_ptr(), y.data_ptr(), x.numel(),
                                   current_stream()));
  }
  static void backward(const at::Tensor& g, const at::Tensor& s, at::Tensor& dx, Act k, ActParams p) {
    c10::cuda::CUDAGuard guard(s.device());
    TD_CHECK_LAUNCH(launch_backward(to_dtype(s.scalar_type()), k, p, g.const_data_ptr(), s.const_data_ptr(),
                                    dx.data_ptr(), s.numel(), current_stream()));
  }
  static void bias_act_forward(const at::Tensor& x, const at::Tensor& bias, at::Tensor& y, BiasActShape s, Act k,
                               ActParams p) {
    c10::cuda::CUDAGuard guard(x.device());
    TD_CHECK_LAUNCH(launch_bias_act_forward(to_dtype(x.scalar_type()), k, p, x.const_data_ptr(),
                                            bias.defined() ? bias.const_data_ptr() : nullptr, y.data_ptr(), s,
                                            current_stream()));
  }
  static void bias_act_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& bias, at::Tensor& dx,
                                at::Tensor& dbias, BiasActShape s, Act k, ActParams p) {
    c10::cuda::CUDAGuard guard(x.device());
    const DType dt = to_dtype(x.scalar_type());
    at::Tensor ws;
    if (dbias.defined()) {
      const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
      ws = at::empty({bias_act_backward_workspace(dt, s)}, x.options().dtype(acc));
    }
    TD_CHECK_LAUNCH(launch_bias_act_backward(dt, k, p, g.const_data_ptr(), x.const_data_ptr(),
                                             bias.defined() ? bias.const_data_ptr() : nullptr, dx.data_ptr(),
                                             dbias.defined() ? dbias.data_ptr() : nullptr,
                                             ws.defined() ? ws.data_ptr() : nullptr, s, current_stream()));
  }
};

}  // namespace
}  // namespace activation
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::activation::register_activation_impls<torch_dnn::activation::CudaBackend>(m);
}
