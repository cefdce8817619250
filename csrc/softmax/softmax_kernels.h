// Torch-free entry points of the softmax family's CUDA kernels. A dense tensor is seen in memory as
// [outer, dim, inner] with softmax taken along `dim`. Every call enqueues on `stream` and returns
// cudaGetLastError().
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "common/hd.h"
#include "softmax/softmax_plan.h"

namespace torch_dnn {
namespace softmax {

struct SoftmaxShape {
  int64_t outer = 1, dim = 1, inner = 1;
};

// Supported (input, output) dtype pairs: equal, or float16/bfloat16 -> float32 (softmax's dtype= argument).
bool forward_dtypes_supported(DType in, DType out);

// knobs: read_knobs() (softmax_plan.h), once by the launcher call and given to both entry points it calls.
// Elements (in the accumulation type) of workspace the forward/backward need for this shape.
int64_t forward_workspace(DType in, SoftmaxShape s, const Knobs& knobs);
int64_t backward_workspace(DType grad, SoftmaxShape s, const Knobs& knobs);

// y = softmax(x) (log_softmax when `log`), x of dtype `in`, y of dtype `out`.
cudaError_t launch_forward(DType in, DType out, bool log, const void* x, void* y, void* workspace, SoftmaxShape s,
                           const Knobs& knobs, cudaStream_t stream);

// grad_input (dtype `in`) from grad_output and output (both dtype `out`).
cudaError_t launch_backward(DType in, DType out, bool log, const void* grad, const void* y, void* dx,
                            void* workspace, SoftmaxShape s, const Knobs& knobs, cudaStream_t stream);

}  // namespace softmax
}  // namespace torch_dnn
