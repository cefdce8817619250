// Softmax forward entry points: (input, output) dtype pairs x {softmax, log_softmax}.
#include "softmax/kernels/softmax_forward.cuh"

namespace torch_dnn {
namespace softmax {

bool forward_dtypes_supported(DType in, DType out) {
  return in == out || (out == DType::Float32 && (in == DType::Float16 || in == DType::BFloat16));
}

int64_t forward_workspace(DType in, SoftmaxShape s, const Knobs& knobs) {
  const PlanInfo p = make_plan(s, 1, false, 0, knobs.plan);  // the chunking does not depend on vectorization
  return p.plan == Plan::SplitRow ? s.outer * p.chunks * 2 : 0;
}

template <typename Ti, typename To>
static void forward_typed(bool log, const void* x, void* y, void* ws, SoftmaxShape s, const Knobs& knobs,
                          cudaStream_t stream) {
  auto* xp = static_cast<const Ti*>(x);
  auto* yp = static_cast<To*>(y);
  auto* wp = static_cast<acc_t<Ti>*>(ws);
  if (log) run_forward<Ti, To, true>(xp, yp, wp, s, knobs, stream);
  else run_forward<Ti, To, false>(xp, yp, wp, s, knobs, stream);
}

cudaError_t launch_forward(DType in, DType out, bool log, const void* x, void* y, void* ws, SoftmaxShape s,
                           const Knobs& knobs, cudaStream_t stream) {
  if (s.outer * s.dim * s.inner == 0) return cudaSuccess;
  if (in == out) {
    dispatch_dtype(in, [&](auto tag) { forward_typed<decltype(tag), decltype(tag)>(log, x, y, ws, s, knobs, stream); });
  } else if (in == DType::Float16) {
    forward_typed<__half, float>(log, x, y, ws, s, knobs, stream);
  } else if (in == DType::BFloat16) {
    forward_typed<__nv_bfloat16, float>(log, x, y, ws, s, knobs, stream);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace softmax
}  // namespace torch_dnn
