// local_response_norm family: schemas, the CPU kernels' registration and the C++ autograd. Its own family (not group_norm's):
// a window across channels, no statistics, no parameters; it shares no kernel with the group norms.
#include "common/autograd_register.h"
#include "lrn/lrn_cpu.h"
#include "lrn/lrn_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  m.def("local_response_norm(Tensor input, int size, float alpha, float beta, float k) -> Tensor");
  m.def("local_response_norm_backward(Tensor grad_out, Tensor input, int size, float alpha, float beta, float k) "
        "-> Tensor");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::lrn::register_lrn_impls<torch_dnn::lrn::CpuBackend>(m);
}

// Autograd (as torch_dnn/ops/lrn.py's formula): the backward op reads the input and the window's arguments.
TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::autograd_kernel;
  register_single_input_autograd(m, "local_response_norm", {{Saved::Input}});
  register_first_order_backward(m, {"local_response_norm_backward"});  // no double backward
}
