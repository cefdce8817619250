// local_response_norm family: schemas, the CPU kernels' registration and the C++ autograd. Its own family (not group_norm's):
// a window across channels, no statistics, no parameters; it shares no kernel with the group norms.
#include "common/autograd_register.h"
#include "lrn/lrn_cpu.h"
#include "lrn/lrn_ops.h"
#include "pool/pool_call.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  m.def("local_response_norm(Tensor input, int size, float alpha, float beta, float k) -> Tensor");
  m.def("local_response_norm_backward(Tensor grad_out, Tensor input, int size, float alpha, float beta, float k) "
        "-> Tensor");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::lrn::register_lrn_impls<torch_dnn::lrn::CpuBackend>(m);
}

namespace torch_dnn {
namespace lrn {
namespace {

// local_response_norm recomputed as PyTorch composes it, through our average pooling over a window of channels
// (differentiable to any order): x / (k + alpha * avg(x^2 over `size` channels, zero-padded))^beta.
// Arguments (size, alpha, beta, k).
at::Tensor composite(const at::Tensor& x, c10::ArrayRef<c10::IValue> args) {
  const int64_t size = args[0].toInt();
  const double alpha = args[1].toDouble(), beta = args[2].toDouble(), k = args[3].toDouble();
  at::Tensor div;
  if (x.dim() == 3) {  // (N, C, L) as (N, 1, C, L), a (size, 1) window
    const at::Tensor sq = at::constant_pad_nd(x.square().unsqueeze(1), {0, 0, size / 2, (size - 1) / 2});
    div = pool::call_avg_pool(sq, {size, 1}, {1, 1}, false).squeeze(1);
  } else {  // (N, C, *) as (N, 1, C, H, rest), a (size, 1, 1) window
    const at::Tensor sq = x.square().reshape({x.size(0), 1, x.size(1), x.size(2), -1});
    const at::Tensor padded = at::constant_pad_nd(sq, {0, 0, 0, 0, size / 2, (size - 1) / 2});
    div = pool::call_avg_pool(padded, {size, 1, 1}, {1, 1, 1}, false).squeeze(1).reshape(x.sizes());
  }
  return x / (div * alpha + k).pow(beta);
}

}  // namespace
}  // namespace lrn
}  // namespace torch_dnn

// Autograd (the spec torch_dnn/ops/lrn.py derives its formula from): the backward op reads the input and the
// window's arguments. With grad mode on (double backward), the gradient of the op recomputed through average pooling.
TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::autograd_kernel;
  register_single_input_autograd(m, "local_response_norm",
                                 {{Saved::Input}, -1, false, by_recompute(torch_dnn::lrn::composite)});
  register_first_order_backward(m, {"local_response_norm_backward"});
}
