// Device-side dtype plumbing: the CUDA type behind each DType, its accumulation type, and conversions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/hd.h"

namespace torch_dnn {

template <typename T> struct AccType { using type = float; };
template <> struct AccType<double> { using type = double; };
template <typename T> using acc_t = typename AccType<T>::type;

// Results stored in 16 bits tolerate the hardware exp/log (see td_exp_fast).
template <typename T> constexpr bool kFastMath = sizeof(T) == 2;

template <typename A, typename T> __device__ __forceinline__ A to_acc(T v) { return static_cast<A>(v); }
template <> __device__ __forceinline__ float to_acc<float, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_acc<float, __nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T, typename A> __device__ __forceinline__ T from_acc(A v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_acc<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16, float>(float v) { return __float2bfloat16_rn(v); }

// Calls f(T{}) with T the CUDA type of `t`.
template <class F>
void dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Float32: f(float{}); break;
    case DType::Float16: f(__half{}); break;
    case DType::BFloat16: f(__nv_bfloat16{}); break;
    case DType::Float64: f(double{}); break;
  }
}

}  // namespace torch_dnn
