// CPU kernels of the norm family (the readable reference; see norm_ops.h for the contract).
#pragma once
#include <ATen/ATen.h>

#include "norm/norm_kernels.h"

namespace torch_dnn {
namespace norm {

struct CpuBackend {
  static void forward(const at::Tensor& x, const at::Tensor& res, const at::Tensor& w, const at::Tensor& b, at::Tensor& y,
                      at::Tensor& sum, at::Tensor& mean, at::Tensor& rstd, NormShape s, bool rms, double eps);
  static void backward(const at::Tensor& dy, const at::Tensor& dsum, const at::Tensor& x, const at::Tensor& mean,
                       const at::Tensor& rstd, const at::Tensor& w, at::Tensor& dx, at::Tensor& dw, at::Tensor& db,
                       NormShape s, bool rms);
};

}  // namespace norm
}  // namespace torch_dnn
