// CPU kernels of the convolution family (the readable reference; see conv_ops.h for the contract).
#pragma once
#include <ATen/ATen.h>

#include "conv/conv_kernels.h"
#include "conv/conv_ops.h"

namespace torch_dnn {
namespace conv {

// ConvArgs's three passes on host memory (conv_kernels.h's definitions), for Float64, Float32, Float16 and
// BFloat16, accumulated in double for Float64 and in float otherwise; fprop applies the whole epilogue (bias,
// residual, activation). Every operand is read through its strides.
void conv_cpu(Pass pass, const ConvArgs& a);
void conv_bias_grad_cpu(DType dtype, const ConvGeometry& g, const Operand5& dy, void* db);

struct CpuBackend {
  static void run(Pass pass, ConvArgs& a, const at::Tensor&, const at::Tensor&) { conv_cpu(pass, a); }
  static void bias_grad(const ConvGeometry& g, const Operand5& dy, const at::Tensor& db) {
    conv_bias_grad_cpu(to_dtype(db.scalar_type()), g, dy, db.data_ptr());
  }
};

}  // namespace conv
}  // namespace torch_dnn
