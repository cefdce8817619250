// CPU kernels of the activation family (the readable reference; see activation_ops.h for the contract).
#pragma once
#include <ATen/ATen.h>

#include "activation/activation_math.h"

namespace torch_dnn {
namespace activation {

struct CpuBackend {
  static void forward(const at::Tensor& x, at::Tensor& y, Act k, ActParams p);
  static void backward(const at::Tensor& g, const at::Tensor& s, at::Tensor& dx, Act k, ActParams p);
  static void bias_act_forward(const at::Tensor& x, const at::Tensor& bias, at::Tensor& y, BiasActShape s, Act k,
                               ActParams p);
  static void bias_act_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& bias, at::Tensor& dx,
                                at::Tensor& dbias, BiasActShape s, Act k, ActParams p);
};

}  // namespace activation
}  // namespace torch_dnn
