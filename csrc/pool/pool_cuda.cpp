// CUDA launchers of the pooling family. Registered for the CUDA dispatch key only.
#include "common/cuda_utils.h"
#include "pool/pool_ops.h"

namespace torch_dnn {
namespace pool {
namespace {

struct CudaBackend {
  static void max_forward(const at::Tensor& x, at::Tensor& y, at::Tensor& indices, const PoolShape& s) {
    c10::cuda::CUDAGuard guard(x.device());
    const env::Scope knobs;  // the plan reads several TORCH_DNN_POOL_* knobs: one scan of the environment
    TD_CHECK_LAUNCH(launch_max_forward(to_dtype(x.scalar_type()), x.const_data_ptr(), y.data_ptr(),
                                       indices.data_ptr<int64_t>(), s, current_stream()));
  }
  static void max_backward(const at::Tensor& g, const at::Tensor& indices, at::Tensor& dx, const PoolShape& s) {
    c10::cuda::CUDAGuard guard(g.device());
    const env::Scope knobs;
    TD_CHECK_LAUNCH(launch_max_backward(to_dtype(g.scalar_type()), g.const_data_ptr(),
                                        indices.const_data_ptr<int64_t>(), dx.data_ptr(), s, current_stream()));
  }
  static void avg_forward(const at::Tensor& x, at::Tensor& y, const PoolShape& s) {
    c10::cuda::CUDAGuard guard(x.device());
    const env::Scope knobs;  // the plan reads several TORCH_DNN_POOL_* knobs: one scan of the environment
    TD_CHECK_LAUNCH(launch_avg_forward(to_dtype(x.scalar_type()), x.const_data_ptr(), y.data_ptr(), s,
                                       current_stream()));
  }
  static void avg_backward(const at::Tensor& g, at::Tensor& dx, const PoolShape& s) {
    c10::cuda::CUDAGuard guard(g.device());
    const env::Scope knobs;
    TD_CHECK_LAUNCH(launch_avg_backward(to_dtype(g.scalar_type()), g.const_data_ptr(), dx.data_ptr(), s,
                                        current_stream()));
  }
  static void lp_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& y, at::Tensor& dx,
                          const PoolShape& s) {
    c10::cuda::CUDAGuard guard(g.device());
    const env::Scope knobs;
    TD_CHECK_LAUNCH(launch_lp_backward(to_dtype(g.scalar_type()), g.const_data_ptr(), x.const_data_ptr(),
                                       y.const_data_ptr(), dx.data_ptr(), s, current_stream()));
  }
};

}  // namespace
}  // namespace pool
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::pool::register_pool_impls<torch_dnn::pool::CudaBackend>(m);
}
