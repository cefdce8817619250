// Softmax backward entry points: (grad_input, grad_output) dtype pairs x {softmax, log_softmax}.
#include "softmax/kernels/softmax_backward.cuh"

namespace torch_dnn {
namespace softmax {

int64_t backward_workspace(DType grad, SoftmaxShape s, const Knobs& knobs) {
  const PlanInfo p = make_plan(s, 1, false, 0, knobs.plan);
  return p.plan == Plan::SplitRow ? s.outer * p.chunks : 0;
}

template <typename Ti, typename To>
static void backward_typed(bool log, const void* g, const void* y, void* dx, void* ws, SoftmaxShape s,
                           const Knobs& knobs, cudaStream_t stream) {
  auto* gp = static_cast<const To*>(g);
  auto* yp = static_cast<const To*>(y);
  auto* dp = static_cast<Ti*>(dx);
  auto* wp = static_cast<acc_t<To>*>(ws);
  if (log) run_backward<Ti, To, true>(gp, yp, dp, wp, s, knobs, stream);
  else run_backward<Ti, To, false>(gp, yp, dp, wp, s, knobs, stream);
}

cudaError_t launch_backward(DType in, DType out, bool log, const void* g, const void* y, void* dx, void* ws,
                            SoftmaxShape s, const Knobs& knobs, cudaStream_t stream) {
  if (s.outer * s.dim * s.inner == 0) return cudaSuccess;
  if (in == out) {
    dispatch_dtype(in, [&](auto tag) { backward_typed<decltype(tag), decltype(tag)>(log, g, y, dx, ws, s, knobs, stream); });
  } else if (out == DType::Float32 && in == DType::Float16) {
    backward_typed<__half, float>(log, g, y, dx, ws, s, knobs, stream);
  } else if (out == DType::Float32 && in == DType::BFloat16) {
    backward_typed<__nv_bfloat16, float>(log, g, y, dx, ws, s, knobs, stream);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace softmax
}  // namespace torch_dnn
