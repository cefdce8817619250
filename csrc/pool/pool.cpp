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

// Autograd (as torch_dnn/ops/pool.py's formulas): the backward ops read the input, and the indices (max), or the
// output (lp); the adaptive forms' backward ops take no arguments besides.
TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::autograd_kernel;
  for (const char* r : {"1d", "2d", "3d"}) {
    const std::string d(r);
    register_single_input_autograd(m, ("max_pool" + d).c_str(), {{Saved::Input, Saved::Output1}});
    register_single_input_autograd(m, ("avg_pool" + d).c_str(), {{Saved::Input}});
    register_single_input_autograd(m, ("adaptive_avg_pool" + d).c_str(), {{Saved::Input}, /*n_args=*/0});
    register_single_input_autograd(m, ("adaptive_max_pool" + d).c_str(), {{Saved::Input, Saved::Output1}, 0});
    register_single_input_autograd(m, ("lp_pool" + d).c_str(), {{Saved::Input, Saved::Output0}});
  }
}
