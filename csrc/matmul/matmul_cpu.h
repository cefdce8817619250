// CPU kernels of the matmul family (the readable reference; see matmul_ops.h for the contract).
#pragma once
#include <ATen/ATen.h>

#include "matmul/gemm_kernels.h"

namespace torch_dnn {
namespace matmul {

// GemmArgs's contract on host memory, for Float64, Float32, Float16 and BFloat16 (accumulated in double for
// Float64, float otherwise; allow_tf32 is ignored: the CPU computes in full float32).
void gemm_cpu(const GemmArgs& a);

struct CpuBackend {
  static void gemm(const GemmArgs& a, const at::Tensor& like) { gemm_cpu(a); }
  static void act_grad(const at::Tensor& g, const at::Tensor& pre, const at::Tensor& dpre, const at::Tensor& dbias,
                       int64_t rows, int64_t cols, Act k, ActParams p);
};

}  // namespace matmul
}  // namespace torch_dnn
