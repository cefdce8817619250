// The pooling family's CUDA kernels run on the CPU through cuda_host_shim.h, registered as the ops of a second
// namespace, torch.ops.torch_dnn_emu (same schemas, same op bodies, pool_ops.h): tests/test_pool_emulation.py
// compares them with the CPU reference. Built on demand by that test with g++ (no GPU, no nvcc).
#include "cuda_host_shim.h"

#include "pool/pool_backward.cu"
#include "pool/pool_forward.cu"
#include "pool/pool_ops.h"

namespace torch_dnn {
namespace pool {
namespace {

void check(cudaError_t e) { TORCH_CHECK(e == cudaSuccess, "emulated launch failed"); }

struct EmuBackend {
  static void max_forward(const at::Tensor& x, at::Tensor& y, at::Tensor& indices, const PoolShape& s) {
    check(launch_max_forward(to_dtype(x.scalar_type()), x.const_data_ptr(), y.data_ptr(), indices.data_ptr<int64_t>(),
                             s, nullptr));
  }
  static void max_backward(const at::Tensor& g, const at::Tensor& indices, at::Tensor& dx, const PoolShape& s) {
    check(launch_max_backward(to_dtype(g.scalar_type()), g.const_data_ptr(), indices.const_data_ptr<int64_t>(),
                              dx.data_ptr(), s, nullptr));
  }
  static void avg_forward(const at::Tensor& x, at::Tensor& y, const PoolShape& s) {
    check(launch_avg_forward(to_dtype(x.scalar_type()), x.const_data_ptr(), y.data_ptr(), s, nullptr));
  }
  static void avg_backward(const at::Tensor& g, at::Tensor& dx, const PoolShape& s) {
    check(launch_avg_backward(to_dtype(g.scalar_type()), g.const_data_ptr(), dx.data_ptr(), s, nullptr));
  }
  static void lp_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& y, at::Tensor& dx,
                          const PoolShape& s) {
    check(launch_lp_backward(to_dtype(g.scalar_type()), g.const_data_ptr(), x.const_data_ptr(), y.const_data_ptr(),
                             dx.data_ptr(), s, nullptr));
  }
};

}  // namespace
}  // namespace pool
}  // namespace torch_dnn

TORCH_LIBRARY(torch_dnn_emu, m) { torch_dnn::pool::define_pool_schemas(m); }

TORCH_LIBRARY_IMPL(torch_dnn_emu, CPU, m) { torch_dnn::pool::register_pool_impls<torch_dnn::pool::EmuBackend>(m); }
