// Torch-free entry points of the group_norm family's CUDA kernels (group_norm; instance_norm is group_norm
// with one channel per group). The input is [N, C, S] (S = the product of the spatial sizes), dense, either
// NCHW-contiguous ([N][C][S] in memory) or channels-last ([N][S][C]); the output and the gradients share the
// layout. Groups: G of D = C / G consecutive channels. Statistics (mean, rstd) are [N, G] contiguous, in the
// accumulation type (float; double for double). Weight and bias have C elements of the input's dtype. Every
// call enqueues on `stream` and returns cudaGetLastError().
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "common/hd.h"
#include "group_norm/group_norm_plan.h"

namespace torch_dnn {
namespace group_norm {

struct GnShape {
  int64_t N = 0, C = 0, S = 0, G = 1;
  bool channels_last = false;
  // forward of a channels-last x, y written contiguous ([N][C][S]) in the same pass: only the channels-last cluster
  // plan does it; elsewhere (statistics given, sizes, an sm_80 device, TORCH_DNN_GN_PLAN=smem) launch_forward
  // launches nothing and returns cudaErrorNotSupported
  bool y_contiguous = false;
};

// y = (x - mean) * rstd * w + b per group. stats_given: mean and rstd are inputs (instance_norm with running
// statistics); otherwise they are computed from x and written. w, b may be null.
struct ForwardArgs {
  const void* x;
  const void* w;
  const void* b;
  void* y;
  void* mean;
  void* rstd;
  double eps;
  bool stats_given;
  void* workspace;  // forward_workspace() accumulation-type elements
};

// dx (null: not wanted), dw and db (null: not wanted; per-(n, c) partial sums then a fixed-order sum over n).
// stats_given: the forward was the affine map with given statistics (dx = rstd * w * dy).
struct BackwardArgs {
  const void* dy;
  const void* x;
  const void* mean;
  const void* rstd;
  const void* w;
  void* dx;
  void* dw;
  void* db;
  bool stats_given;
  void* workspace;  // backward_workspace() accumulation-type elements
};

int64_t forward_workspace(DType dtype, const GnShape& s, bool stats_given);
// knobs: read_knobs() (group_norm_plan.h), once by the launcher call.
cudaError_t launch_forward(DType dtype, const ForwardArgs& a, const GnShape& s, const Knobs& knobs,
                           cudaStream_t stream);
int64_t backward_workspace(DType dtype, const GnShape& s, bool stats_given, bool weight_grads);
cudaError_t launch_backward(DType dtype, const BackwardArgs& a, const GnShape& s, const Knobs& knobs,
                            cudaStream_t stream);

}  // namespace group_norm
}  // namespace torch_dnn
