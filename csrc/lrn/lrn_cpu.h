// CPU kernels of local_response_norm (the readable reference; see lrn_ops.h for the contract).
#pragma once
#include <ATen/ATen.h>

#include "lrn/lrn_kernels.h"

namespace torch_dnn {
namespace lrn {

struct CpuBackend {
  static void forward(const at::Tensor& x, at::Tensor& y, const LrnShape& s);
  static void backward(const at::Tensor& dy, const at::Tensor& x, at::Tensor& dx, const LrnShape& s);
};

}  // namespace lrn
}  // namespace torch_dnn
