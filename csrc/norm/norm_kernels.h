// Torch-free entry points of the norm family's CUDA kernels (layer_norm and rms_norm, optionally fused with a
// residual add). Tensors are dense rows: `rows` rows of `cols` contiguous elements, one after the other;
// weight and bias have `cols` elements of the same dtype; statistics (mean, rstd) are one accumulation-type
// value (float, double for double) per row. Every call enqueues on `stream` and returns cudaGetLastError().
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "common/hd.h"
#include "norm/norm_plan.h"

namespace torch_dnn {
namespace norm {

struct NormShape {
  int64_t rows = 0, cols = 0;
};

// y = norm(x + res) * w + b, with sum = x + res written when res is given (the pre-norm residual stream).
// res, sum, w, b may be null; mean is null for rms_norm (which writes rstd only).
struct ForwardArgs {
  const void* x;
  const void* res;
  const void* w;
  const void* b;
  void* y;
  void* sum;
  void* mean;
  void* rstd;
  double eps;
};

// From dy (and dsum, the gradient reaching the residual stream directly, when not null): dx (null: not
// wanted), dw and db (null: not wanted; summed deterministically through `workspace`).
struct BackwardArgs {
  const void* dy;
  const void* dsum;
  const void* x;
  const void* mean;
  const void* rstd;
  const void* w;
  void* dx;
  void* dw;
  void* db;
  void* workspace;
};

// knobs: read_knobs() (norm_plan.h), once by the launcher call and given to every entry point it calls.
cudaError_t launch_forward(DType dtype, bool rms, const ForwardArgs& a, NormShape s, const Knobs& knobs,
                           cudaStream_t stream);

// Accumulation-type elements of workspace the backward needs (0 when neither dw nor db is wanted).
int64_t backward_workspace(DType dtype, bool rms, NormShape s, bool weight_grads, const Knobs& knobs);
cudaError_t launch_backward(DType dtype, bool rms, const BackwardArgs& a, NormShape s, const Knobs& knobs,
                            cudaStream_t stream);

}  // namespace norm
}  // namespace torch_dnn
