// CPU kernels of the softmax family (the readable reference; see softmax_ops.h for the contract).
#pragma once
#include <ATen/ATen.h>

#include "softmax/softmax_kernels.h"

namespace torch_dnn {
namespace softmax {

struct CpuBackend {
  static void forward(const at::Tensor& x, at::Tensor& y, SoftmaxShape s, bool log);
  static void backward(const at::Tensor& g, const at::Tensor& y, at::Tensor& dx, SoftmaxShape s, bool log);
};

}  // namespace softmax
}  // namespace torch_dnn
