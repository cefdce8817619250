// Softmax family: schemas, the CPU kernels' registration and the C++ autograd.
#include "common/autograd_register.h"
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

// Autograd: the backward op reads the result, the dim and the input's dtype (as torch_dnn/ops/softmax.py's formula).
TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::autograd_kernel;
  for (const char* name : {"softmax", "log_softmax"}) {
    register_single_input_autograd(m, name, {{Saved::Output0}, /*n_args=*/1, /*input_dtype=*/true});
  }
}
