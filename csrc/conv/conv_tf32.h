// float32 convolutions in TF32 on the Hopper path (conv_sm90.cu). Its wgmma reads fp32 operands from shared memory
// and truncates them to TF32, which gives 2.6x the error of cuDNN's forward and input gradient (they round to
// nearest: research/conv/tf32_cudnn_rounding_probe.py); so the path takes float32 only on operands rounded to TF32
// first (ConvArgs::tf32_rounded), and this launcher step makes them:
//
//   fprop  x rounded into a buffer of its own layout at every call; the weight's rounded copy, channels-last,
//          kept per weight (conv_weight_cache.h, CopyKind::Tf32)
//   dgrad  stride 1, padding at most dil (k - 1): the fprop of dy with the weight flipped in its spatial dims and
//          its two channel dims swapped, w'[c][k][t][r][s] = w[k][c][T-1-t][R-1-r][S-1-s] (kept as
//          CopyKind::Tf32Flipped), padding dil (k - 1) - pad. CUTLASS's sm_90 dgrad reads the filter with the
//          GEMM's N mode (C) innermost, and TF32's wgmma takes K-major operands only.
//   wgrad  not here: both of its operands are M/N-major (the portable path's TF32 kernels take it)
//
// Groups 1 only (the Hopper path's rule). Nothing is copied unless the path takes the problem
// (conv_sm90_fprop_check first). The buffers come from the caching allocator on the call's stream.
#pragma once
#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <cstdint>

#include "common/cuda_utils.h"
#include "conv/conv_kernels.h"
#include "conv/conv_ops.h"
#include "conv/conv_staging.h"
#include "conv/conv_weight_cache.h"
#include "matmul/gemm_kernels.h"

namespace torch_dnn {
namespace conv {
namespace tf32 {

inline bool applies(Pass pass, const ConvArgs& a) {
  return a.dtype == DType::Float32 && a.allow_tf32 && a.g.G == 1 && pass != Pass::Wgrad;
}

// `src` rounded to TF32 into a new buffer: of src's strides where it is dense, else channels-last.
inline at::Tensor rounded_copy(const at::Tensor& src, cudaStream_t stream) {
  const at::Tensor dense = src.is_non_overlapping_and_dense() ? src : src.contiguous(at::MemoryFormat::ChannelsLast3d);
  at::Tensor dst = at::empty_strided(dense.sizes(), dense.strides(), dense.options());
  TD_CHECK_LAUNCH(matmul::round_to_tf32(dense.const_data_ptr<float>(), dst.data_ptr<float>(), dense.numel(), stream));
  return dst;
}

// The weight's rounded copy (flipped: w' of dgrad), dense channels-last; kept per weight where `owner` is defined.
inline at::Tensor weight_copy(staging::CopyKind kind, const Operand5& w, const staging::Extents& we,
                              const at::TensorOptions& opts, const at::Tensor& owner, c10::Stream stream,
                              cudaStream_t cuda_stream) {
  const staging::WeightView view = staging::weight_view(kind, w, we, we.e[0], we.e[1], at::kFloat, stream);
  return staging::WeightCache::instance().find_or_make(owner, view, [&] {
    at::Tensor src = staging::view_of(w, we, opts);
    if (kind == staging::CopyKind::Tf32Flipped) src = src.flip({2, 3, 4}).transpose(0, 1);
    return rounded_copy(src.contiguous(at::MemoryFormat::ChannelsLast3d), cuda_stream);
  });
}

// Dense channels-last strides of a [K][C][T][R][S] weight (where its copy will be).
inline Operand5 channels_last_weight(const ConvGeometry& g, void* ptr) {
  Operand5 o;
  o.ptr = ptr;
  o.stride[1] = 1;
  o.stride[4] = g.C;
  o.stride[3] = g.ker[2] * g.C;
  o.stride[2] = g.ker[1] * o.stride[3];
  o.stride[0] = g.ker[0] * o.stride[2];
  return o;
}

// Runs `pass` (fprop or dgrad) on the Hopper path in TF32 through run_fprop(const ConvArgs&) -> bool (the launcher's
// call of conv_sm90_fprop); true when the path took the problem. owner: the caller's weight tensor (undefined: its
// copy is not kept); stream: the call's stream, as c10's and as CUDA's. For problems of which applies() holds.
template <class RunFprop>
bool run(Pass pass, const ConvArgs& a, const at::TensorOptions& opts, const at::Tensor& owner, c10::Stream stream,
         cudaStream_t cuda_stream, RunFprop&& run_fprop) {
  const ConvGeometry& g = a.g;
  ConvArgs b = a;
  if (pass == Pass::Dgrad) {
    for (int i = 0; i < 3; ++i)
      if (g.stride[i] != 1 || g.pad[i] > g.dil[i] * (g.ker[i] - 1)) return false;
    b.g.C = g.K;
    b.g.K = g.C;
    for (int i = 0; i < 3; ++i) {
      b.g.in[i] = g.out[i];
      b.g.out[i] = g.in[i];
      b.g.pad[i] = g.dil[i] * (g.ker[i] - 1) - g.pad[i];
    }
    b.x = a.y;  // dy is read
    b.y = a.x;  // dx is written
    b.bias = nullptr;
    b.residual = Operand5{};
    b.act = Act::Identity;
  }
  // would the path take it, with its weight's copy where it will be (the allocator's alignment)? Nothing is read.
  b.tf32_rounded = true;
  b.w = channels_last_weight(b.g, reinterpret_cast<void*>(uintptr_t(256)));
  if (conv_sm90_fprop_check(b) != cudaSuccess) return false;
  const staging::Extents we = staging::extents(g.K, g.C, g.ker);
  const at::Tensor w = weight_copy(pass == Pass::Dgrad ? staging::CopyKind::Tf32Flipped : staging::CopyKind::Tf32, a.w,
                                   we, opts, owner, stream, cuda_stream);
  b.w = staging::operand_of(w);
  const at::Tensor x = rounded_copy(staging::view_of(b.x, staging::extents(b.g.N, b.g.C, b.g.in), opts), cuda_stream);
  b.x = staging::operand_of(x);
  return run_fprop(b);
}

}  // namespace tf32
}  // namespace conv
}  // namespace torch_dnn
