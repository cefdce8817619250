// Softmax family: schemas, and the CPU kernels' registration.
#include "softmax/softmax_cpu.h"
#include "softmax/softmax_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  m.def("softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  m.def("log_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  // grad_input (of dtype input_dtype) from grad_output and the forward's output
  m.def("softmax_backward(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor");
  m.def("log_softmax_backward(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::softmax::register_softmax_impls<torch_dnn::softmax::CpuBackend>(m);
}
