// CPU kernels of the group_norm family (the readable reference; see group_norm_ops.h for the contract).
#pragma once
#include <ATen/ATen.h>

#include "group_norm/group_norm_kernels.h"

namespace torch_dnn {
namespace group_norm {

struct CpuBackend {
  static void forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, at::Tensor& y, at::Tensor& mean,
                      at::Tensor& rstd, const GnShape& s, double eps, bool stats_given);
  static void backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
                       const at::Tensor& w, at::Tensor& dx, at::Tensor& dw, at::Tensor& db, const GnShape& s,
                       bool stats_given);
};

}  // namespace group_norm
}  // namespace torch_dnn
