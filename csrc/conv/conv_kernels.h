// Torch-free entry points of the convolution kernels: the contract between the op layer (conv_ops.h,
// conv_cuda.cpp) and the CUDA kernels. Every launch enqueues on `stream` and returns a cudaError_t;
// cudaErrorNotSupported means "this path cannot take the problem", and the caller tries the next path
// (the implicit-GEMM tensor-core path first, the direct kernels last: those take every problem).
//
// The kernels know one problem only, the cross-correlation that torch.nn.functional.conv3d computes, with
// 1-D and 2-D problems passed as 3-D ones with unit leading spatial sizes (kernel 1, stride 1, padding 0,
// dilation 1). Transposed convolutions are mapped onto it by the op layer (a transposed forward is the
// backward-data pass of the convolution whose output is the transposed input, and so on).
//
//   x  [N][C][D][H][W]            the convolution's input
//   w  [K][C/G][T][R][S]          its weight (K output channels, G groups)
//   y  [N][K][P][Q][O]            its output, with P = (D + 2 pad - dil (T - 1) - 1) / stride + 1 and so on
//
//   fprop:  y[n][k][p][q][o] = act(sum_{c in k's group, t, r, s} x[n][c][p*sd - pd + t*dd][...][...] w[k][c'][t][r][s]
//                                  + bias[k] + residual[n][k][p][q][o])      (taps outside x count as zero)
//   dgrad:  dx = the adjoint of fprop's sum with respect to x, given dy (in y's place)
//   wgrad:  dw = the adjoint of fprop's sum with respect to w, given dy and x
//
// Every operand is addressed through element strides (any strides: permuted, sliced, channels-last, zero);
// the tensor-core path takes only the layouts it was written for and says cudaErrorNotSupported otherwise.
// Accumulation is in float for Float16/BFloat16/Float32 and in double for Float64; the output is written
// (never accumulated into) with one rounding to its dtype.
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "activation/activation_math.h"
#include "common/hd.h"
#include "conv/conv_knobs.h"

namespace torch_dnn {
namespace conv {

using activation::Act;
using activation::ActParams;

// A 5-D operand: element [i0][i1][i2][i3][i4] lies at ptr + sum(i_j * stride[j]) (elements, not bytes).
struct Operand5 {
  void* ptr = nullptr;
  int64_t stride[5] = {0, 0, 0, 0, 0};
};

struct ConvGeometry {
  int64_t N = 0, C = 0, K = 0, G = 1;   // batch, input channels, output channels, groups
  int64_t in[3] = {1, 1, 1};            // D, H, W of x
  int64_t out[3] = {1, 1, 1};           // P, Q, O of y
  int64_t ker[3] = {1, 1, 1};           // T, R, S of w
  int64_t stride[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0};           // the same on both sides of each dimension
  int64_t dil[3] = {1, 1, 1};
  TD_HD int64_t c_per_group() const { return C / G; }
  TD_HD int64_t k_per_group() const { return K / G; }
};

// Device scratch memory, asked for only when a launch needs some: get(bytes) returns at least `bytes` that
// stay valid for the work queued on the launch's stream (the caching allocator's stream order), or null.
struct Workspace {
  void* (*fn)(void* ctx, int64_t bytes) = nullptr;
  void* ctx = nullptr;
  void* get(int64_t bytes) const { return bytes > 0 && fn != nullptr ? fn(ctx, bytes) : nullptr; }
};

struct ConvArgs {
  DType dtype = DType::Float32;  // of every operand
  bool allow_tf32 = false;       // Float32 only: TF32 tensor cores allowed (torch.backends.cudnn.allow_tf32)
  bool tf32_rounded = false;     // Float32 with allow_tf32: x (fprop) and w hold values rounded to TF32 already,
                                 // which the Hopper path needs (its wgmma would truncate them; conv_tf32.h)
  bool deterministic = false;    // bitwise-reproducible results (torch.use_deterministic_algorithms): no
                                 // atomics whose order varies, split reductions summed in a fixed order
  ConvKnobs knobs;               // the TORCH_DNN_CONV_* switches (conv_knobs.h), read once a call by the launcher
  ConvGeometry g;
  Operand5 x, w, y;  // fprop reads x, w and writes y; dgrad reads y (dy), w, writes x (dx); wgrad reads y (dy),
                     // x and writes w (dw). The written operand never overlaps a read one.
  // fprop's epilogue only (the other passes ignore them):
  const void* bias = nullptr;  // [K], contiguous, or null
  Operand5 residual;           // shaped as y, or ptr null
  Act act = Act::Identity;
  ActParams act_params;
  Workspace workspace;
};

// The direct kernels (conv_direct.cu): CUDA cores, every dtype, every geometry and stride pattern. The
// fallback that always takes the problem (and the reference the faster paths are tested against on the GPU).
cudaError_t conv_direct_fprop(const ConvArgs& a, cudaStream_t stream);
cudaError_t conv_direct_dgrad(const ConvArgs& a, cudaStream_t stream);
cudaError_t conv_direct_wgrad(const ConvArgs& a, cudaStream_t stream);

// The implicit-GEMM tensor-core path (conv_implicit_gemm.cu): Float16/BFloat16 (and Float32 with allow_tf32)
// in channels-last layouts; cudaErrorNotSupported for what it does not take.
cudaError_t conv_igemm_fprop(const ConvArgs& a, cudaStream_t stream);
cudaError_t conv_igemm_dgrad(const ConvArgs& a, cudaStream_t stream);
cudaError_t conv_igemm_wgrad(const ConvArgs& a, cudaStream_t stream);

// The Hopper implicit-GEMM path (conv_sm90.cu: CUTLASS's sm_90a conv kernels, TMA im2col + wgmma): Float16/BFloat16
// in channels-last layouts (and a TF32 fprop on tf32_rounded operands), on sm_90 devices of builds with CUTLASS and
// sm_90a; cudaErrorNotSupported otherwise and for what it does not take (the caller then tries conv_igemm_*).
cudaError_t conv_sm90_fprop(const ConvArgs& a, cudaStream_t stream);
// cudaSuccess where conv_sm90_fprop would take the problem: its checks alone (nothing read or launched).
cudaError_t conv_sm90_fprop_check(const ConvArgs& a);
cudaError_t conv_sm90_dgrad(const ConvArgs& a, cudaStream_t stream);
cudaError_t conv_sm90_wgrad(const ConvArgs& a, cudaStream_t stream);

// The stem forward (conv_stem.cu): a first convolution of few input channels (C <= 4, kernel up to 8 x 8, an even
// horizontal stride up to 4), Float16/BFloat16 on mma.sync tensor cores, any layouts; cudaErrorNotSupported
// otherwise; its weight gradient (conv_stem_wgrad, kernel rows 3, 4, 5 or 7). No input gradient.
cudaError_t conv_stem_fprop(const ConvArgs& a, cudaStream_t stream);
cudaError_t conv_stem_wgrad(const ConvArgs& a, cudaStream_t stream);

// Bias gradient: db[k] = sum over n and the spatial positions of dy[n][k][...] (Operand5 `dy`, shape of y),
// written to dense db [K] in the same dtype, accumulated in float (double for Float64), in a fixed order.
cudaError_t conv_bias_grad(DType dtype, const ConvGeometry& g, const Operand5& dy, void* db, const Workspace& ws,
                           cudaStream_t stream);

}  // namespace conv
}  // namespace torch_dnn
