// Entry points for the fused bias + activation (the conv/matmul epilogue primitive).
#include "activation/activation_kernels.h"
#include "activation/kernels/bias_act.cuh"

namespace torch_dnn {
namespace activation {

cudaError_t launch_bias_act_forward(DType dtype, Act act, ActParams p, const void* x, const void* bias, void* y,
                                    BiasActShape s, cudaStream_t stream) {
  if (s.numel() == 0) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_act(act, [&]<Act K>() {
      run_bias_act_forward<T, K>(static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(y), s, p, stream);
    });
  });
  return cudaGetLastError();
}

int64_t bias_act_backward_workspace(DType dtype, BiasActShape s) {
  int64_t rows = 0;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t a = backward_partial_rows<T>(s, true), b = backward_partial_rows<T>(s, false);
    rows = a > b ? a : b;
  });
  return rows * s.C;
}

cudaError_t launch_bias_act_backward(DType dtype, Act act, ActParams p, const void* grad, const void* x, const void* bias,
                                     void* dx, void* dbias, void* workspace, BiasActShape s, cudaStream_t stream) {
  if (s.numel() == 0) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_act(act, [&]<Act K>() {
      run_bias_act_backward<T, K>(static_cast<const T*>(grad), static_cast<const T*>(x), static_cast<const T*>(bias),
                                  static_cast<T*>(dx), static_cast<T*>(dbias), static_cast<acc_t<T>*>(workspace), s, p,
                                  stream);
    });
  });
  return cudaGetLastError();
}

}  // namespace activation
}  // namespace torch_dnn
