// Torch-free entry points of the local_response_norm kernels. The input is [N, C, S] (S = the product of the
// remaining sizes), dense, NCHW-contiguous ([N][C][S] in memory) or channels-last ([N][S][C]); the output
// and the gradients share the layout. With the window W(c) = [c - size/2, c + (size-1)/2] (clipped: zero
// padding), scale_c = k + alpha / size * sum over W(c) of x^2 and y_c = x_c * scale_c^-beta. Every call
// enqueues on `stream` and returns cudaGetLastError().
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "common/hd.h"

namespace torch_dnn {
namespace lrn {

struct LrnShape {
  int64_t N = 0, C = 0, S = 0;
  bool channels_last = false;
  int64_t size = 1;
  double alpha = 1e-4, beta = 0.75, k = 1.0;
};

cudaError_t launch_forward(DType dtype, const void* x, void* y, const LrnShape& s, cudaStream_t stream);
// dx = dy * scale^-beta - 2 alpha beta / size * x * sum over {c : j in W(c)} of dy_c x_c scale_c^(-beta-1);
// `workspace` holds N * C * S accumulation-type elements (the per-element terms of that sum).
cudaError_t launch_backward(DType dtype, const void* dy, const void* x, void* dx, void* workspace, const LrnShape& s,
                            cudaStream_t stream);

}  // namespace lrn
}  // namespace torch_dnn
