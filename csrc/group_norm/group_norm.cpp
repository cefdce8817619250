// group_norm family: schemas, and the CPU kernels' registration. instance_norm is group_norm with one channel
// per group (running statistics are updated in Python, torch_dnn/ops/group_norm.py).
#include "group_norm/group_norm_cpu.h"
#include "group_norm/group_norm_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  // out, and the per-(n, group) statistics [N, num_groups] (float32; float64 for float64 input)
  m.def("group_norm(Tensor input, int num_groups, Tensor? weight, Tensor? bias, float eps) "
        "-> (Tensor out, Tensor mean, Tensor rstd)");
  // the affine map with given statistics [N, num_groups]: (input - mean) * rstd * weight + bias
  // (instance_norm with running statistics)
  m.def("group_norm_with_stats(Tensor input, int num_groups, Tensor mean, Tensor rstd, Tensor? weight, "
        "Tensor? bias) -> Tensor");
  // (grad_input, grad_weight, grad_bias) in the input's dtype, each an empty tensor where output_mask says it
  // is not wanted; stats_given: the forward was group_norm_with_stats (the statistics are constants)
  m.def("group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, "
        "int num_groups, bool stats_given, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::group_norm::register_group_norm_impls<torch_dnn::group_norm::CpuBackend>(m);
}
