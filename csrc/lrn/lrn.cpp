// local_response_norm family: schemas, and the CPU kernels' registration. Its own family (not group_norm's):
// a window across channels, no statistics, no parameters; it shares no kernel with the group norms.
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
