// Torch-free entry point of the layout transpose: a dense tensor of N batches, C channels and S spatial positions
// (S = the product of the spatial sizes) converted between channels-last order ([N][S][C] in memory: channels_last,
// channels_last_3d, a channels-last 1-D layout) and contiguous order ([N][C][S]), for ops whose kernels run in one
// layout and whose inputs or results are in the other. Defined in layout_transpose.cu (CUDA builds only).
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "common/hd.h"

namespace torch_dnn {

// to_channels_last = false: src [N][S][C] -> dst [N][C][S]; true: src [N][C][S] -> dst [N][S][C]. src and dst
// must not overlap. Any alignment and sizes: 16-byte accesses where the pointers are 16-byte aligned and the rows
// on that side hold whole 16-byte vectors, element accesses otherwise. Enqueues on `stream`, returns
// cudaGetLastError() (cudaSuccess at once when there is nothing to copy).
cudaError_t launch_layout_transpose(DType dtype, const void* src, void* dst, int64_t N, int64_t S, int64_t C,
                                    bool to_channels_last, cudaStream_t stream);

}  // namespace torch_dnn
