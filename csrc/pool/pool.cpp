// Pooling family: schemas (pool_ops.h: define_pool_schemas), the CPU kernels' registration and the C++ autograd.
#include "common/autograd_register.h"
#include "pool/pool_cpu.h"
#include "pool/pool_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  torch_dnn::pool::define_pool_schemas(m);
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::pool::register_pool_impls<torch_dnn::pool::CpuBackend>(m);
}

namespace torch_dnn {
namespace pool {
namespace {

using autograd_kernel::GradientFn;

// The adjoint of max pooling's backward (a scatter of grad to the argmax positions): a gather at the indices (saved
// second), flat positions within each (n, c) volume of the `rank` spatial dims.
GradientFn gather_at_indices(int64_t rank) {
  return [rank](const at::Tensor& gg, const std::vector<at::Tensor>& saved, c10::ArrayRef<c10::IValue>) {
    const at::Tensor& indices = saved[1];
    return gg.flatten(-rank).gather(-1, indices.flatten(-rank)).view(indices.sizes());
  };
}

}  // namespace
}  // namespace pool
}  // namespace torch_dnn

// Autograd (as torch_dnn/ops/pool.py's formulas): the backward ops read the input, and the indices (max), or the
// output (lp); the adaptive forms' backward ops take no arguments besides. Double backward: the max and average
// backward ops are linear in grad and constant in the input (almost everywhere); their adjoints are a gather at the
// indices and the average forward. lp_pool has none.
TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::autograd_kernel;
  using namespace torch_dnn::pool;
  for (int64_t rank = 1; rank <= 3; ++rank) {
    const std::string d = std::to_string(rank) + "d";
    register_single_input_autograd(m, ("max_pool" + d).c_str(),
                                   {{Saved::Input, Saved::Output1}, -1, false, nullptr, gather_at_indices(rank)});
    register_single_input_autograd(m, ("avg_pool" + d).c_str(),
                                   {{Saved::Input}, -1, false, nullptr, call_op(("avg_pool" + d).c_str())});
    register_single_input_autograd(
        m, ("adaptive_avg_pool" + d).c_str(),
        {{Saved::Input}, /*n_args=*/0, false, nullptr, call_op(("adaptive_avg_pool" + d).c_str())});
    register_single_input_autograd(m, ("adaptive_max_pool" + d).c_str(),
                                   {{Saved::Input, Saved::Output1}, 0, false, nullptr, gather_at_indices(rank)});
    register_single_input_autograd(m, ("lp_pool" + d).c_str(), {{Saved::Input, Saved::Output0}});
    for (const char* op : {"max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "lp_pool"}) {
      register_first_order_backward(m, {(op + d + "_backward").c_str()});
    }
  }
}
