// The stem forward (kernels/conv_stem_fprop.cuh): a network's first convolution on tensor cores, x and w read in
// any layout (no staging copy).
//
// Taken: Float16 / BFloat16; fprop of a 2-D problem (D = T = P = 1), groups 1, no dilation; C <= 4 input
// channels; kernel rows and columns <= 8; horizontal stride 2 or 4; bias allowed, no residual or activation.
// Else cudaErrorNotSupported (the implicit GEMMs, staged, and the direct kernels follow). Any K (tiles of 64
// channels, the grid's y), any N, H, W.
#include <algorithm>

#include "common/cuda/device.cuh"
#include "conv/kernels/conv_stem_fprop.cuh"

namespace torch_dnn {
namespace conv {

cudaError_t conv_stem_fprop(const ConvArgs& a, cudaStream_t stream) {
  const ConvGeometry& g = a.g;
  const bool plain_2d = g.in[0] == 1 && g.ker[0] == 1 && g.out[0] == 1 && g.G == 1 && g.dil[1] == 1 && g.dil[2] == 1;
  if ((a.dtype != DType::Float16 && a.dtype != DType::BFloat16) || !plain_2d || g.C < 1 || g.C > 4 ||
      g.ker[1] > stem::kMaxTaps || g.ker[2] > stem::kMaxTaps || g.stride[2] % 2 != 0 ||
      g.stride[2] > stem::kMaxStride || a.residual.ptr != nullptr || a.act != Act::Identity)
    return cudaErrorNotSupported;
  stem::Geometry sg{};
  sg.N = g.N, sg.C = g.C, sg.K = g.K, sg.H = g.in[1], sg.W = g.in[2], sg.OH = g.out[1], sg.OW = g.out[2];
  sg.R = int(g.ker[1]), sg.S = int(g.ker[2]), sg.sh = int(g.stride[1]), sg.sw = int(g.stride[2]);
  sg.ph = int(g.pad[1]), sg.pw = int(g.pad[2]);
  sg.tiles_w = (sg.OW + stem::kTileM - 1) / stem::kTileM;
  sg.tiles = sg.N * sg.OH * sg.tiles_w;
  const int64_t k_tiles = (g.K + stem::kTileN - 1) / stem::kTileN;
  if (sg.tiles == 0 || g.K == 0) return cudaSuccess;
  if (k_tiles > 4096) return cudaErrorNotSupported;
  sg.k_tiles = int(k_tiles);
  const int smem = stem::smem_bytes(sg.R, sg.sw);
#if defined(TORCH_DNN_EMULATE_CUDA)
  const int allowed = smem;  // the emulation's shared memory is a host buffer of any size
#else
  const int allowed = a.dtype == DType::Float16 ? allow_max_dynamic_smem<stem::conv_stem_fprop_kernel<__half>>()
                                                : allow_max_dynamic_smem<stem::conv_stem_fprop_kernel<__nv_bfloat16>>();
#endif
  if (smem > allowed) return cudaErrorNotSupported;
  // a few CTAs a SM in all, each keeping its channels' weights over many output tiles
  const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(sg.tiles, int64_t(sm_count()) * 3 / k_tiles));
  if (a.dtype == DType::Float16)
    launch_direct(stem::conv_stem_fprop_kernel<__half>, slots * k_tiles, stem::kThreads, smem, stream, a, sg);
  else
    launch_direct(stem::conv_stem_fprop_kernel<__nv_bfloat16>, slots * k_tiles, stem::kThreads, smem, stream, a, sg);
  return cudaGetLastError();
}

}  // namespace conv
}  // namespace torch_dnn
