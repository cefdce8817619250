// CPU kernels of the pooling family (the readable reference; see pool_ops.h for the contract).
#pragma once
#include <ATen/ATen.h>

#include "pool/pool_kernels.h"

namespace torch_dnn {
namespace pool {

struct CpuBackend {
  static void max_forward(const at::Tensor& x, at::Tensor& y, at::Tensor& indices, const PoolShape& s);
  static void max_backward(const at::Tensor& g, const at::Tensor& indices, at::Tensor& dx, const PoolShape& s);
  static void avg_forward(const at::Tensor& x, at::Tensor& y, const PoolShape& s);
  static void avg_backward(const at::Tensor& g, at::Tensor& dx, const PoolShape& s);
  static void lp_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& y, at::Tensor& dx,
                          const PoolShape& s);
};

}  // namespace pool
}  // namespace torch_dnn
