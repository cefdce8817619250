// Norm family: schemas, and the CPU kernels' registration.
#include "norm/norm_cpu.h"
#include "norm/norm_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  // out, and the per-row statistics (float32; float64 for float64 input; shape = the leading dims) that the
  // backward reads
  m.def("layer_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, float eps) "
        "-> (Tensor out, Tensor mean, Tensor rstd)");
  m.def("rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float eps) -> (Tensor out, Tensor rstd)");
  // pre-norm residual step: sum = input + residual, out = norm(sum)
  m.def("add_layer_norm(Tensor input, Tensor residual, int[] normalized_shape, Tensor? weight, Tensor? bias, "
        "float eps) -> (Tensor sum, Tensor out, Tensor mean, Tensor rstd)");
  m.def("add_rms_norm(Tensor input, Tensor residual, int[] normalized_shape, Tensor? weight, float eps) "
        "-> (Tensor sum, Tensor out, Tensor rstd)");
  // backward: (grad_input, grad_weight, grad_bias) in the input's dtype, each an empty tensor where
  // output_mask says it is not wanted. The add_ forms take the input of the norm (sum) and add grad_sum,
  // the gradient reaching the residual stream directly, into grad_input.
  m.def("layer_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, "
        "int[] normalized_shape, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def("add_layer_norm_backward(Tensor grad_out, Tensor? grad_sum, Tensor sum, Tensor mean, Tensor rstd, "
        "Tensor? weight, int[] normalized_shape, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def("rms_norm_backward(Tensor grad_out, Tensor input, Tensor rstd, Tensor? weight, int[] normalized_shape, "
        "bool[2] output_mask) -> (Tensor, Tensor)");
  m.def("add_rms_norm_backward(Tensor grad_out, Tensor? grad_sum, Tensor sum, Tensor rstd, Tensor? weight, "
        "int[] normalized_shape, bool[2] output_mask) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::norm::register_norm_impls<torch_dnn::norm::CpuBackend>(m);
}
