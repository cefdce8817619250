// What the torch-free *_kernels.h headers need to declare their CUDA entry points. A CPU-only build
// (no CUDA toolkit) includes those headers for their shape structs but never declares-then-calls a launcher,
// so opaque stand-ins for the two CUDA types suffice there.
#pragma once
#if defined(__CUDACC__) || defined(TORCH_DNN_WITH_CUDA)
#include <cuda_runtime_api.h>
#else
typedef struct CUstream_st* cudaStream_t;
enum cudaError_t : int {};
#endif
