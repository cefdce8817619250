// batch_norm family: schemas, and the CPU kernels' registration. act: 0 identity, 1 relu, 2 silu.
#include "batch_norm/batch_norm_cpu.h"
#include "batch_norm/batch_norm_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  m.def("batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!)? running_mean, Tensor(b!)? running_var, "
        "bool training, float momentum, float eps) -> (Tensor out, Tensor save_mean, Tensor save_invstd)");
  m.def("batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, Tensor? running_mean, "
        "Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, bool training, float eps, bool[3] output_mask) "
        "-> (Tensor, Tensor, Tensor)");
  // y = act(batch_norm(input) + residual): the end of a ResNet block
  m.def("batch_norm_add_act(Tensor input, Tensor? residual, Tensor? weight, Tensor? bias, Tensor(a!)? running_mean, "
        "Tensor(b!)? running_var, bool training, float momentum, float eps, int act) "
        "-> (Tensor out, Tensor save_mean, Tensor save_invstd)");
  m.def("batch_norm_add_act_backward(Tensor grad_out, Tensor input, Tensor? residual, Tensor? weight, Tensor? bias, "
        "Tensor save_mean, Tensor save_invstd, bool training, int act, bool[4] output_mask) "
        "-> (Tensor, Tensor, Tensor, Tensor)");
  // per-channel (mean, m2 = sum of squared deviations) of the local batch (SyncBatchNorm)
  m.def("batch_norm_stats(Tensor input) -> (Tensor mean, Tensor m2)");
  // SyncBatchNorm's other pieces: normalise with given (global) statistics; the backward's local per-channel
  // sums; the input gradient from the (all-reduced) sums over `count` elements per channel.
  m.def("batch_norm_elemt(Tensor input, Tensor mean, Tensor invstd, Tensor? weight, Tensor? bias) -> Tensor");
  m.def("batch_norm_backward_reduce(Tensor grad_out, Tensor input, Tensor mean, Tensor invstd) "
        "-> (Tensor sum_dy, Tensor sum_dy_xmu)");
  m.def("batch_norm_backward_elemt(Tensor grad_out, Tensor input, Tensor mean, Tensor invstd, Tensor? weight, "
        "Tensor sum_dy, Tensor sum_dy_xmu, int count) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::batch_norm::register_batch_norm_impls<torch_dnn::batch_norm::CpuBackend>(m);
}
