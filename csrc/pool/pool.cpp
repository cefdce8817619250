// Pooling family: schemas (pool_ops.h: define_pool_schemas), the CPU kernels' registration and the C++ autograd.
#include "common/autograd_kernel.h"
#include "common/autograd_register.h"
#include "pool/pool_call.h"
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

// lp_pool recomputed as PyTorch composes it, through our average pooling (differentiable to any order):
// (sign(a) relu(|a|) * kernel numel)^(1/p), a = avg_pool(x^p). Arguments (norm_type, kernel_size, stride, ceil_mode).
at::Tensor lp_pool_composite(const at::Tensor& x, c10::ArrayRef<c10::IValue> args) {
  const double p = args[0].toDouble();
  const std::vector<int64_t> kernel = args[1].toIntVector(), stride = args[2].toIntVector();
  const at::Tensor a = call_avg_pool(x.pow(p), kernel, stride, args[3].toBool());
  return (at::sign(a) * at::relu(a.abs()) * double(c10::multiply_integers(kernel))).pow(1.0 / p);
}

}  // namespace

at::Tensor call_avg_pool(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride, bool ceil_mode) {
  using Sig = at::Tensor(const at::Tensor&, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool, bool,
                         std::optional<int64_t>);
  using autograd_kernel::op_handle;
  static const c10::TypedOperatorHandle<Sig> ops[3] = {op_handle<Sig>("torch_dnn::avg_pool1d"),
                                                        op_handle<Sig>("torch_dnn::avg_pool2d"),
                                                        op_handle<Sig>("torch_dnn::avg_pool3d")};
  const size_t rank = kernel.size();
  TORCH_CHECK(rank >= 1 && rank <= 3, "torch_dnn: call_avg_pool: a kernel of 1 to 3 dims, got ", rank);
  const std::vector<int64_t> zeros(rank, 0);
  return ops[rank - 1].call(x, kernel, stride, zeros, ceil_mode, /*count_include_pad=*/true, std::nullopt);
}

}  // namespace pool
}  // namespace torch_dnn

// Autograd (the specs torch_dnn/ops/pool.py derives its formulas from): the backward ops read the input, and the
// indices (max), or the output (lp); the adaptive forms' backward ops take no arguments besides. Double backward: the
// max and average backward ops are linear in grad and constant in the input (almost everywhere); their adjoints are a
// gather at the indices and the average forward; lp_pool's gradient comes from its recomputation through the average
// forward.
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
    register_single_input_autograd(m, ("lp_pool" + d).c_str(),
                                   {{Saved::Input, Saved::Output0}, -1, false, by_recompute(lp_pool_composite)});
    for (const char* op : {"max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "lp_pool"}) {
      register_first_order_backward(m, {(op + d + "_backward").c_str()});
    }
  }
}
