// Driver API entry points the extension calls (the tensor-map encoders of the copy engine), looked up by name
// through the runtime: the extension does not link the driver library, so that machines without a GPU driver import
// it. Torch-free.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

namespace torch_dnn {

// The driver's function `name` at its CUDA 12.0 ABI, or null where the driver has none (the lookup's error cleared).
template <class Fn>
Fn driver_function(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    p = nullptr;
  }
  return reinterpret_cast<Fn>(p);
}

// cuTensorMapEncodeTiled and cuTensorMapEncodeIm2col, each looked up once (null: not available).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encode_tiled() {
  static const auto fn = driver_function<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled");
  return fn;
}
inline PFN_cuTensorMapEncodeIm2col_v12000 tensor_map_encode_im2col() {
  static const auto fn = driver_function<PFN_cuTensorMapEncodeIm2col_v12000>("cuTensorMapEncodeIm2col");
  return fn;
}

}  // namespace torch_dnn
