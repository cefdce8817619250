// Pooling family: schemas, and the CPU kernels' registration. Sizes are normalised to pairs in Python.
#include "pool/pool_cpu.h"
#include "pool/pool_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  // (output, indices): indices are flat h * W + w positions within each (n, c) plane, as PyTorch's
  m.def("max_pool2d(Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode) -> (Tensor, Tensor)");
  m.def("max_pool2d_backward(Tensor grad_output, Tensor self, Tensor indices, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode) -> Tensor");
  m.def("avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor");
  m.def("avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor");
  m.def("adaptive_avg_pool2d(Tensor self, int[2] output_size) -> Tensor");
  m.def("adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::pool::register_pool_impls<torch_dnn::pool::CpuBackend>(m);
}
