// Entry points for the plain activations: one instantiation per (dtype, activation).
#include "activation/activation_kernels.h"
#include "activation/kernels/elementwise.cuh"

namespace torch_dnn {
namespace activation {

cudaError_t launch_forward(DType dtype, Act act, ActParams p, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_act(act, [&]<Act K>() { run_forward<T, K>(static_cast<const T*>(x), static_cast<T*>(y), n, p, stream); });
  });
  return cudaGetLastError();
}

cudaError_t launch_backward(DType dtype, Act act, ActParams p, const void* grad, const void* saved, void* dx, int64_t n,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_act(act, [&]<Act K>() {
      run_backward<T, K>(static_cast<const T*>(grad), static_cast<const T*>(saved), static_cast<T*>(dx), n, p, stream);
    });
  });
  return cudaGetLastError();
}

}  // namespace activation
}  // namespace torch_dnn
