// The sm_80 tensor-core wrappers (cp.async, ldmatrix, mma.sync m16n8k16) as torch_dnn::ptx: matmul's PTX
// (matmul/kernels/gemm_mma.cuh) on the GPU, the same operations computed on the host under the CPU emulation
// (TORCH_DNN_EMULATE_CUDA: tests/emulation/mma_emulation.h), so that a kernel written against them runs in both.
#pragma once
#if defined(TORCH_DNN_EMULATE_CUDA)
#include "mma_emulation.h"
namespace torch_dnn {
namespace ptx = ::torch_dnn_emu_ptx;
}  // namespace torch_dnn
#else
#include "matmul/kernels/gemm_mma.cuh"
namespace torch_dnn {
namespace ptx = ::torch_dnn::matmul::mma;
}  // namespace torch_dnn
#endif
