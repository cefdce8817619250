// Torch-free entry points of the activation family's CUDA kernels. Pointers are device pointers to dense
// memory of `dtype`; every call enqueues on `stream` and returns cudaGetLastError().
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "activation/activation_math.h"

namespace torch_dnn {
namespace activation {

// y[i] = act(x[i]) for i < n. x may equal y (in place).
cudaError_t launch_forward(DType dtype, Act act, ActParams p, const void* x, void* y, int64_t n, cudaStream_t stream);

// dx[i] = grad[i] * act'(saved[i]); saved is the input (or the result for Sigmoid/Tanh).
cudaError_t launch_backward(DType dtype, Act act, ActParams p, const void* grad, const void* saved, void* dx, int64_t n,
                            cudaStream_t stream);

// x, y seen in memory as [outer, C, inner]; y = act(x + bias[c]). bias may be null (then plain act).
cudaError_t launch_bias_act_forward(DType dtype, Act act, ActParams p, const void* x, const void* bias, void* y,
                                    BiasActShape s, cudaStream_t stream);

// dx = grad * act'(x + bias[c]) and dbias[c] = sum of dx over outer and inner (summed in float/double in a
// fixed order: deterministic). `workspace` holds bias_act_backward_workspace(s) accumulation-type elements.
int64_t bias_act_backward_workspace(DType dtype, BiasActShape s);
cudaError_t launch_bias_act_backward(DType dtype, Act act, ActParams p, const void* grad, const void* x, const void* bias,
                                     void* dx, void* dbias, void* workspace, BiasActShape s, cudaStream_t stream);

}  // namespace activation
}  // namespace torch_dnn
