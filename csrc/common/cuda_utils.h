// Torch-side helpers for CUDA launchers (g++ compiles these; nvcc never sees torch headers).
#pragma once
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

namespace torch_dnn {

inline cudaStream_t current_stream() { return at::cuda::getCurrentCUDAStream().stream(); }

// Every torch-free launcher returns cudaGetLastError(); this turns a failure into a Python exception.
#define TD_CHECK_LAUNCH(expr) C10_CUDA_CHECK(expr)

}  // namespace torch_dnn
