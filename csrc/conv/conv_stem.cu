// The stem forward (kernels/conv_stem_fprop.cuh): a network's first convolution on tensor cores, x and w read in
// any layout (no staging copy).
//
// conv_stem_wgrad (kernels/conv_stem_wgrad.cuh): the weight gradient of the same problems, reduced over output
// pixels split across CTAs, the float partials summed in a fixed order (deterministic).
//
// Taken: Float16 / BFloat16; a 2-D problem (D = T = P = 1), groups 1, no dilation; C <= 4 input channels; kernel
// rows and columns <= 8 (the weight gradient: 3, 4, 5 or 7 rows); horizontal stride 2 or 4; the forward with conv's
// epilogue (bias, residual, activation). Else cudaErrorNotSupported (the implicit GEMMs, staged, and the direct
// kernels follow). Any K (tiles of 64 channels), any N, H, W.
#include <algorithm>

#include "common/cuda/device.cuh"
#include "conv/kernels/conv_stem_fprop.cuh"
#include "conv/kernels/conv_stem_wgrad.cuh"

namespace torch_dnn {
namespace conv {

namespace {

// The stem kernels' problem (what conv_stem_fprop and conv_stem_wgrad take, the epilogue aside) as their Geometry,
// or false.
bool stem_geometry(const ConvArgs& a, stem::Geometry& sg) {
  const ConvGeometry& g = a.g;
  const bool plain_2d = g.in[0] == 1 && g.ker[0] == 1 && g.out[0] == 1 && g.G == 1 && g.dil[1] == 1 && g.dil[2] == 1;
  if ((a.dtype != DType::Float16 && a.dtype != DType::BFloat16) || !plain_2d || g.C < 1 || g.C > 4 ||
      g.ker[1] > stem::kMaxTaps || g.ker[2] > stem::kMaxTaps || g.stride[2] % 2 != 0 || g.stride[2] > stem::kMaxStride)
    return false;
  const int64_t k_tiles = (g.K + stem::kTileN - 1) / stem::kTileN;
  if (k_tiles > 4096) return false;
  sg = {};
  sg.N = g.N, sg.C = g.C, sg.K = g.K, sg.H = g.in[1], sg.W = g.in[2], sg.OH = g.out[1], sg.OW = g.out[2];
  sg.R = int(g.ker[1]), sg.S = int(g.ker[2]), sg.sh = int(g.stride[1]), sg.sw = int(g.stride[2]);
  sg.ph = int(g.pad[1]), sg.pw = int(g.pad[2]);
  sg.tiles_w = (sg.OW + stem::kTileM - 1) / stem::kTileM;
  sg.tiles = sg.N * sg.OH * sg.tiles_w;
  sg.k_tiles = int(k_tiles);
  return true;
}

}  // namespace

namespace {

template <typename T, bool kFused>
cudaError_t conv_stem_fprop_t(const ConvArgs& a, const stem::Geometry& sg, cudaStream_t stream) {
  const int smem = stem::smem_bytes(sg.R, sg.sw);
#if defined(TORCH_DNN_EMULATE_CUDA)
  const int allowed = smem;  // the emulation's shared memory is a host buffer of any size
#else
  const int allowed = allow_max_dynamic_smem<stem::conv_stem_fprop_kernel<T, kFused>>();
#endif
  if (smem > allowed) return cudaErrorNotSupported;
  // a few CTAs a SM in all, each keeping its channels' weights over many output tiles
  const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(sg.tiles, int64_t(sm_count()) * 3 / sg.k_tiles));
  launch_direct(stem::conv_stem_fprop_kernel<T, kFused>, slots * sg.k_tiles, stem::kThreads, smem, stream, a, sg,
                make_epilogue<T>(a));
  return cudaGetLastError();
}

template <typename T>
cudaError_t conv_stem_fprop_dtype(const ConvArgs& a, const stem::Geometry& sg, cudaStream_t stream) {
  const bool fused = a.residual.ptr != nullptr || a.act != Act::Identity;
  return fused ? conv_stem_fprop_t<T, true>(a, sg, stream) : conv_stem_fprop_t<T, false>(a, sg, stream);
}

}  // namespace

cudaError_t conv_stem_fprop(const ConvArgs& a, cudaStream_t stream) {
  stem::Geometry sg;
  if (!stem_geometry(a, sg)) return cudaErrorNotSupported;
  if (sg.tiles == 0 || sg.K == 0) return cudaSuccess;
  return a.dtype == DType::Float16 ? conv_stem_fprop_dtype<__half>(a, sg, stream)
                                   : conv_stem_fprop_dtype<__nv_bfloat16>(a, sg, stream);
}

// The stem's weight gradient: a.x (x), a.y (dy) read, a.w (dw) written.
namespace {

template <int R>
cudaError_t conv_stem_wgrad_r(const ConvArgs& a, const stem::Geometry& sg, cudaStream_t stream) {
  const int smem = stem::wgrad_smem_bytes(R, sg.sw);
  const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(sg.tiles, int64_t(sm_count()) * 2 / sg.k_tiles));
  float* partial = static_cast<float*>(
      a.workspace.get(slots * sg.k_tiles * int64_t(stem::kTileN) * R * 32 * int64_t(sizeof(float))));
  if (partial == nullptr) return cudaErrorMemoryAllocation;
  const int64_t elems = sg.K * sg.C * R * sg.S;
  if (a.dtype == DType::Float16) {
    launch_direct(stem::conv_stem_wgrad_kernel<__half, R>, slots * sg.k_tiles, stem::kThreads, smem, stream, a, sg,
                  partial);
    launch_direct(stem::conv_stem_wgrad_sum<__half>, (elems + 255) / 256, 256, 0, stream, a, sg,
                  static_cast<const float*>(partial), slots);
  } else {
    launch_direct(stem::conv_stem_wgrad_kernel<__nv_bfloat16, R>, slots * sg.k_tiles, stem::kThreads, smem, stream,
                  a, sg, partial);
    launch_direct(stem::conv_stem_wgrad_sum<__nv_bfloat16>, (elems + 255) / 256, 256, 0, stream, a, sg,
                  static_cast<const float*>(partial), slots);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t conv_stem_wgrad(const ConvArgs& a, cudaStream_t stream) {
  stem::Geometry sg;
  if (!stem_geometry(a, sg) || sg.K == 0 || sg.tiles == 0) return cudaErrorNotSupported;  // dW = 0: another route
  switch (sg.R) {
    case 3: return conv_stem_wgrad_r<3>(a, sg, stream);
    case 4: return conv_stem_wgrad_r<4>(a, sg, stream);
    case 5: return conv_stem_wgrad_r<5>(a, sg, stream);
    case 7: return conv_stem_wgrad_r<7>(a, sg, stream);
    default: return cudaErrorNotSupported;
  }
}

}  // namespace conv
}  // namespace torch_dnn
