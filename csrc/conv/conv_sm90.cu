// The Hopper implicit-GEMM path of convolution (conv_kernels.h: conv_sm90_fprop / _dgrad / _wgrad): CUTLASS 3.x's
// sm_90a implicit-GEMM conv kernels (cutlass/conv/collective/sm90_implicit_gemm_gmma_ss_warpspecialized.hpp): the
// activation gathered by TMA in im2col mode (the filter by tiled TMA), wgmma on operands in shared memory, one
// producer and one consumer warpgroup a CTA (CUTLASS has no persistent schedule for conv on sm_90), float
// accumulation, the output stored by TMA. Built only when setup.py finds the CUTLASS headers
// (TORCH_DNN_WITH_SM90_GEMM); the kernels' bodies exist only in the sm_90a device code, and every entry point
// answers cudaErrorNotSupported on any other device, in a build without sm_90a, or without CUTLASS.
//
// Instantiations (12): bf16 and fp16, 2-D (NHWC), CTA tile 128 x 128 x 64 (fprop and dgrad also 128 x 64 x 64,
// where the GEMM's N, fprop's K or dgrad's C, is at most 64), cluster 1x1; fprop in TF32 (float32, tiles 128 x 128
// x 32 and 128 x 64 x 32):
//   fprop  y = act(x * w + bias + residual): the epilogue is one visitor tree (matmul's kernels/sm90_epilogue.cuh
//          nodes: bias broadcast, the residual read through the epilogue's C operand only when there is one;
//          the activation a run-time switch inside one node), applied in float with one rounding.
//   dgrad  dx = dy *^T w, stride 1 only (CUTLASS's sm_90 dgrad has no strided form: the sm_80 path's residue
//          classes take strided problems).
//   wgrad  dw = dy^T * im2col(x), only where its output tiles fill the GPU (no split of the pixel reduction:
//          the sm_80 path's split-K takes the others).
// TF32 (float32 with allow_tf32): fprop only, and only on operands the caller rounded to TF32 (tf32_rounded:
// wgmma truncates raw fp32 operands, 2.6x the error of cuDNN's fprop and dgrad, which round to nearest:
// research/conv/tf32_cudnn_rounding_probe.py). TF32's wgmma reads both operands K-major, which dgrad's filter
// and wgrad's two operands are not: the launcher (conv_tf32.h) runs a stride-1 dgrad as this fprop over a
// flipped, transposed weight.
// 1-D problems run as 2-D with H = 1; 3-D problems whose depth is not convolved (kernel depth 1, stride 1,
// padding 0) with the depth folded into the batch where the strides allow it; other 3-D problems are refused.
// 1x1 convolutions with stride 1 and no padding are refused (conv_igemm_* runs them as GEMMs on the matmul
// family's persistent Hopper kernels), unless TORCH_DNN_CONV_SM90=all, except: fprop with both a residual and an
// activation, which that GEMM's epilogue cannot take, and a 16-bit fprop whose GEMM has at most 64 columns
// (fprop_to_gemm).
//
// Taken: Float16 and BFloat16 (and Float32 as above); groups 1; C and K multiples of 8; x, y, dx, dy and residual
// with the channel stride 1 and every other stride a positive multiple of 16 bytes (TMA), any order; the weight in
// [K][R][S][C] order with channel stride 1 (wgrad: dw dense, dy dense); 16-byte aligned pointers and bias;
// stride <= 8, padding and dilation within TMA's im2col corner ranges (CUTLASS's can_implement); extents below
// 2^31; bias / residual / activation in fprop only, activations of sm90::epilogue_act_supported.
// ConvArgs::knobs (TORCH_DNN_CONV_SM90, conv_knobs.h) turns the path off, or gives it the 1x1 convolutions too.
//
// NDEBUG before any include: CUTLASS's device-side asserts become calls to __assertfail, and a call inside the
// mainloop makes ptxas serialise the wgmma pipeline (warning C7510).
#ifndef NDEBUG
#define NDEBUG 1
#endif
#include "conv/conv_kernels.h"

#ifndef TORCH_DNN_WITH_SM90_GEMM

namespace torch_dnn {
namespace conv {
cudaError_t conv_sm90_fprop(const ConvArgs&, cudaStream_t) { return cudaErrorNotSupported; }
cudaError_t conv_sm90_fprop_check(const ConvArgs&) { return cudaErrorNotSupported; }
cudaError_t conv_sm90_dgrad(const ConvArgs&, cudaStream_t) { return cudaErrorNotSupported; }
cudaError_t conv_sm90_wgrad(const ConvArgs&, cudaStream_t) { return cudaErrorNotSupported; }
}  // namespace conv
}  // namespace torch_dnn

#else

#include <algorithm>
#include <cstdint>

#include "common/driver_api.h"

// CUTLASS makes its TMA descriptors through the driver's cuTensorMapEncodeTiled / cuTensorMapEncodeIm2col, which
// it looks up by name at every call, and under NDEBUG ignores their results. With its direct driver calls on, both
// names are routed here (as matmul/kernels/sm90_gemm.cuh routes the tiled one; that header cannot be included
// here: its GEMM adapter brings CUTLASS 2.x's GemmUniversal, whose partial specialization also matches the conv
// kernels): each function is looked up once (common/driver_api.h), and a failed encoding is
// recorded so that the launch answers cudaErrorNotSupported instead of running with a bad descriptor.
#define CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL 1

namespace torch_dnn {
namespace conv {
namespace sm90 {
inline thread_local bool encode_failed = false;

inline CUresult encode_tensor_map_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                        const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                        CUtensorMapFloatOOBfill oob_fill) {
  const auto fn = tensor_map_encode_tiled();
  const CUresult r = fn == nullptr ? CUDA_ERROR_NOT_FOUND
                                   : fn(map, type, rank, address, dims, strides, box, element_strides, interleave,
                                        swizzle, l2, oob_fill);
  if (r != CUDA_SUCCESS) encode_failed = true;
  return r;
}

inline CUresult encode_tensor_map_im2col(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                         const cuuint64_t* dims, const cuuint64_t* strides, const int* lower,
                                         const int* upper, cuuint32_t channels, cuuint32_t pixels,
                                         const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                         CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                         CUtensorMapFloatOOBfill oob_fill) {
  const auto fn = tensor_map_encode_im2col();
  const CUresult r = fn == nullptr ? CUDA_ERROR_NOT_FOUND
                                   : fn(map, type, rank, address, dims, strides, lower, upper, channels, pixels,
                                        element_strides, interleave, swizzle, l2, oob_fill);
  if (r != CUDA_SUCCESS) encode_failed = true;
  return r;
}
}  // namespace sm90
}  // namespace conv
}  // namespace torch_dnn
#define cuTensorMapEncodeIm2col ::torch_dnn::conv::sm90::encode_tensor_map_im2col
#define cuTensorMapEncodeTiled ::torch_dnn::conv::sm90::encode_tensor_map_tiled

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/dispatch_policy.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "common/cuda/vec.cuh"  // aligned16
#include "matmul/kernels/sm90_epilogue.cuh"
#include "matmul/kernels/sm90_launch.cuh"

namespace torch_dnn {
namespace conv {
namespace sm90 {
namespace {

using namespace cute;
namespace msm90 = ::torch_dnn::matmul::sm90;
using cutlass::conv::Operator;

// ---- fprop's epilogue: y = act(acc + bias + residual) ---------------------------------------------------------

// out = act(pre + res), elementwise over one register fragment (conv_kernels.h: the residual is added before the
// activation, where matmul's epilogue adds it after). FAST: the result is stored in 16 bits.
template <bool FAST>
struct ActOfSum {
  template <class T>
  struct Fn : msm90::ActSwitch<Fn<T>> {
    template <Act K, int N>
    CUTLASS_DEVICE static void apply(cutlass::Array<float, N>& out, cutlass::Array<float, N> const& pre,
                                     cutlass::Array<float, N> const& res, float a, float b) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) out[i] = activation::act_forward<K, float, FAST>(pre[i] + res[i], a, b);
    }
  };
};

template <class Tile, class T>
using FpropEpilogueTree = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<ActOfSum<cutlass::sizeof_bits_v<T> == 16>::template Fn, T, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,  // act(pre + res)
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::plus, float, float,
                                               cutlass::FloatRoundStyle::round_to_nearest>,  // acc + bias
        cutlass::epilogue::fusion::Sm90AccFetch, msm90::BiasBroadcast<Tile, T, false>>,
    msm90::OptionalSrcFetch<T>>;

struct FpropEpilogueParams {
  const void* bias = nullptr;
  bool residual = false;
  msm90::ActResidualArgs act;
};

template <class Tile, class T>
struct FpropEpilogue : FpropEpilogueTree<Tile, T> {
  using Impl = FpropEpilogueTree<Tile, T>;

  struct Arguments {
    FpropEpilogueParams p;

    operator typename Impl::Arguments() const {
      using StrideBias = typename msm90::BiasBroadcast<Tile, T, false>::StrideMNL;
      return {
          {
              {},                                                              // acc
              {static_cast<T const*>(p.bias), T(0), StrideBias{}},             // bias[k] (null: 0)
              {}                                                               // plus
          },
          {p.residual},  // C = residual, loaded only when present
          p.act          // activation
      };
    }
  };

  using Impl::Impl;
};

// ---- the kernels -----------------------------------------------------------------------------------------------

using Cluster11 = Shape<_1, _1, _1>;
using Nhwc = cutlass::layout::TensorNHWC;
template <class T>
constexpr int kAlignOf = 128 / cutlass::sizeof_bits_v<T>;  // 16 bytes: TMA's unit

// fprop / dgrad: M = output (dgrad: input) pixels, N = output (dgrad: input) channels, K = (channels, taps), the
// channel block the tile's K extent (Shape<_64>: the channel mode alone is tiled, the taps walked one by one).
using TileMN = Shape<_128, _128, Shape<_64>>;
// where N is at most 64 (ResNet's 64-channel layers): 128 x 64, instead of half a tile of zeros
using TileNarrow = Shape<_128, _64, Shape<_64>>;
constexpr int64_t kNarrow = 64;
// wgrad: M = K, N = (C, S, R) with the channel mode tiled, K = the pixels.
using TileW = Shape<_128, Shape<_128>, Shape<_64>>;
// TF32 (float32 in memory): a channel block of 32, the same 128 bytes a row
using TileMN32 = Shape<_128, _128, Shape<_32>>;
using TileNarrow32 = Shape<_128, _64, Shape<_32>>;

template <class T, class Tile>
struct FpropKernel {
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster11,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, T, Nhwc, kAlignOf<T>, T, Nhwc, kAlignOf<T>,
      cutlass::epilogue::TmaWarpSpecialized, FpropEpilogue<Tile, T>>::CollectiveOp;
  // float operands: the builder takes them as TF32 (wgmma's kind::tf32)
  using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Operator::kFprop, T, Nhwc, kAlignOf<T>, T, Nhwc,
      kAlignOf<T>, float, Tile, Cluster11,
      cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::conv::collective::KernelScheduleAuto>::CollectiveOp;
  using ProblemShape = cutlass::conv::ConvProblemShape<Operator::kFprop, 2>;
  using Kernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
};

// dgrad and wgrad store the accumulator alone (alpha 1, no source operand).
template <class T, Operator Op, class TileFD = TileMN>
struct GradKernel {
  static constexpr bool kWgrad = Op == Operator::kWgrad;
  using Tile = cute::conditional_t<kWgrad, TileW, TileFD>;
  using LayoutOut = cute::conditional_t<kWgrad, cutlass::layout::TensorKCSR, Nhwc>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster11,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutOut, kAlignOf<T>, T, LayoutOut,
      kAlignOf<T>, cutlass::epilogue::TmaWarpSpecialized>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Op, T, Nhwc, kAlignOf<T>, T, Nhwc, kAlignOf<T>, float, Tile,
      Cluster11,
      cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::conv::collective::KernelScheduleAuto>::CollectiveOp;
  using ProblemShape = cutlass::conv::ConvProblemShape<Op, 2>;
  using Kernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
};

// ---- the problem as CUTLASS's 2-D one --------------------------------------------------------------------------

// One NHWC operand: extents and element strides in n, h, w, c order.
struct Nhwc4 {
  const void* ptr = nullptr;
  int64_t ext[4] = {1, 1, 1, 1};
  int64_t st[4] = {0, 0, 0, 1};
};

// The 2-D problem: x [n][h][w][c], w [k][r][s][c], y [n][p][q][k].
struct Problem2d {
  int64_t n = 0, h = 0, w = 0, c = 0, k = 0, r = 1, s = 1, p = 0, q = 0;
  int64_t pad[2] = {0, 0}, stride[2] = {1, 1}, dil[2] = {1, 1};
  Nhwc4 x, wt, y, res;
};

bool fits_int(int64_t v) { return v >= 1 && v <= int64_t(INT32_MAX); }

// A [n][c][d][h][w] Operand5 as [n'][h][w][c], with the depth (extent `d`, not convolved) folded into the batch:
// false where the strides do not allow it. Strides of unit extents are replaced by the packed value (TMA wants
// every stride a multiple of 16 bytes, and a unit extent's stride is never stepped along).
bool to_nhwc(const Operand5& o, int64_t n, int64_t c, int64_t d, int64_t h, int64_t w, Nhwc4* out) {
  int64_t sn = o.stride[0];
  if (d > 1) {
    if (n > 1 && sn != d * o.stride[2]) return false;
    sn = o.stride[2];
  }
  out->ptr = o.ptr;
  const int64_t ext[4] = {n * d, h, w, c};
  const int64_t st[4] = {sn, o.stride[3], o.stride[4], o.stride[1]};
  if (c > 1 && st[3] != 1) return false;
  out->ext[3] = c, out->st[3] = 1;
  for (int j = 2; j >= 0; --j) {
    out->ext[j] = ext[j];
    out->st[j] = ext[j] == 1 ? out->ext[j + 1] * out->st[j + 1] : st[j];
  }
  return true;
}

// TMA's rules for an NHWC operand of `bytes`-byte elements: 16-byte aligned base, every stride but the channel
// one a positive multiple of 16 bytes and below 2^40 bytes.
bool tma_operand_ok(const Nhwc4& o, int64_t bytes) {
  if (o.ptr == nullptr || !aligned16(o.ptr)) return false;
  for (int j = 0; j < 3; ++j)
    if (o.st[j] <= 0 || (o.st[j] * bytes) % 16 != 0 || o.st[j] * bytes >= (int64_t(1) << 40)) return false;
  for (int j = 0; j < 4; ++j)
    if (!fits_int(o.ext[j])) return false;
  return true;
}

// 1x1 convolutions (stride 1, no padding) are plain GEMMs, which conv_igemm_* runs on the matmul family's
// persistent kernels; knobs.sm90_plain_gemm takes them here too (to compare the two).
bool plain_gemm(const Problem2d& pb, const ConvKnobs& knobs) {
  return pb.r == 1 && pb.s == 1 && pb.stride[0] == 1 && pb.stride[1] == 1 && pb.pad[0] == 0 && pb.pad[1] == 0 &&
         !knobs.sm90_plain_gemm;
}

// Whether fprop leaves a plain GEMM to that route. Not a 16-bit one of at most 64 output channels: the GEMM's tiles
// are 256 columns wide, three quarters of their MMAs on zero columns, where this path's 128 x 64 tile wastes none
// (1x1 256->64 @56, N 64, bf16 on the H200: 0.0515 ms here, 0.0766 on the GEMM route). dgrad's narrow 1x1 problems
// stay with the GEMM (1x1 64->256 @56 forward + backward measured 0.28 ms with its input gradient here, 0.23
// there). TF32 leaves them all to the GEMM: they are memory-bound, and the rounded copy of x this path needs
// doubles their traffic (1x1 256->64 @56: 0.174 ms here against the GEMM route's 0.160).
bool fprop_to_gemm(const Problem2d& pb, const ConvArgs& a) {
  return plain_gemm(pb, a.knobs) && (a.dtype == DType::Float32 || pb.k > kNarrow);
}

// The checks common to the three passes, and the 2-D problem (the device aside: path_on).
bool make_problem(const ConvArgs& a, Problem2d* pb) {
  const bool tf32 = a.dtype == DType::Float32 && a.allow_tf32 && a.tf32_rounded;
  if (a.dtype != DType::Float16 && a.dtype != DType::BFloat16 && !tf32) return false;
  const int64_t bytes = tf32 ? 4 : 2;
  const ConvGeometry& g = a.g;
  if (g.G != 1 || g.C % 8 != 0 || g.K % 8 != 0 || g.N < 1) return false;
  // the depth is folded into the batch where it is not convolved
  if (g.ker[0] != 1 || g.stride[0] != 1 || g.pad[0] != 0 || g.in[0] != g.out[0]) return false;
  const int64_t d = g.in[0];
  pb->n = g.N * d, pb->h = g.in[1], pb->w = g.in[2], pb->c = g.C, pb->k = g.K;
  pb->r = g.ker[1], pb->s = g.ker[2], pb->p = g.out[1], pb->q = g.out[2];
  for (int i = 0; i < 2; ++i) {
    pb->pad[i] = g.pad[i + 1], pb->stride[i] = g.stride[i + 1], pb->dil[i] = g.dil[i + 1];
    // TMA im2col's traversal stride is at most 8
    if (pb->stride[i] < 1 || pb->stride[i] > 8 || pb->dil[i] < 1 || pb->pad[i] < 0) return false;
  }
  // the output extents CUTLASS derives must be the problem's
  if ((pb->h + 2 * pb->pad[0] - pb->dil[0] * (pb->r - 1) - 1) / pb->stride[0] + 1 != pb->p) return false;
  if ((pb->w + 2 * pb->pad[1] - pb->dil[1] * (pb->s - 1) - 1) / pb->stride[1] + 1 != pb->q) return false;
  if (!fits_int(pb->n) || !fits_int(pb->h) || !fits_int(pb->w) || !fits_int(pb->p) || !fits_int(pb->q)) return false;
  if (!fits_int(pb->n * pb->p * pb->q) || !fits_int(pb->n * pb->h * pb->w)) return false;
  if (!to_nhwc(a.x, g.N, g.C, d, pb->h, pb->w, &pb->x) || !tma_operand_ok(pb->x, bytes)) return false;
  if (!to_nhwc(a.y, g.N, g.K, d, pb->p, pb->q, &pb->y) || !tma_operand_ok(pb->y, bytes)) return false;
  // the weight [K][C][1][R][S] as [K][R][S][C]
  if (!to_nhwc(a.w, g.K, g.C, 1, pb->r, pb->s, &pb->wt) || !tma_operand_ok(pb->wt, bytes)) return false;
  return true;
}

template <class Shape>
Shape extent4(int64_t a0, int64_t a1, int64_t a2, int64_t a3) {
  Shape s{};
  s[0] = int(a0), s[1] = int(a1), s[2] = int(a2), s[3] = int(a3);
  return s;
}

template <class Stride>
Stride strides4(const Nhwc4& o) {
  Stride s{};
  for (int j = 0; j < 4; ++j) s[j] = o.st[j];
  return s;
}

// CUTLASS's problem: activation x, filter w, and the transformed activation (y, or dy) with its own strides.
template <class PS>
PS problem_shape(const Problem2d& pb) {
  using Ext = typename PS::TensorExtent;
  using Str = typename PS::TensorStride;
  using Sp = typename PS::SpatialExtent;
  Sp pad{}, stride{}, dil{};
  for (int i = 0; i < 2; ++i) pad[i] = int(pb.pad[i]), stride[i] = int(pb.stride[i]), dil[i] = int(pb.dil[i]);
  return PS(cutlass::conv::Mode::kCrossCorrelation, extent4<Ext>(pb.n, pb.h, pb.w, pb.c), strides4<Str>(pb.x),
            extent4<Ext>(pb.k, pb.r, pb.s, pb.c), strides4<Str>(pb.wt), strides4<Str>(pb.y), pad, pad, stride, dil, 1);
}

// The ((w, h, n), c) stride of an NHWC output or source operand of the epilogue.
template <class StrideC>
StrideC epilogue_stride(const Nhwc4& o) {
  StrideC s{};
  get<0, 0>(s) = o.st[2];
  get<0, 1>(s) = o.st[1];
  get<0, 2>(s) = o.st[0];
  return s;
}

bool path_on(const ConvKnobs& knobs) { return knobs.sm90 && msm90::device_info().sm90; }

cutlass::KernelHardwareInfo hw_info() {
  cutlass::KernelHardwareInfo hw;
  cudaGetDevice(&hw.device_id);
  hw.sm_count = msm90::sm_count_or_h100();
  return hw;
}

// can_implement, the kernel parameters (TMA descriptors), and the launch of ConvUniversalAdapter::run without its
// per-call cudaFuncSetAttribute (the shared-memory limit is raised once; the cluster is within the portable size).
// dry: the checks alone (no descriptor is made, nothing read or launched).
template <class Kernel>
cudaError_t run(const typename Kernel::Arguments& args, cudaStream_t stream, bool dry = false) {
  if (!Kernel::can_implement(args)) return cudaErrorNotSupported;
  if (Kernel::get_workspace_size(args) != 0) return cudaErrorNotSupported;
  if (dry) return cudaSuccess;
  if (cudaError_t e = msm90::raise_smem_limit<Kernel>(); e != cudaSuccess) return e;
  encode_failed = false;
  typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  if (encode_failed) return cudaErrorNotSupported;
  return msm90::launch<Kernel>(params, stream);
}

// CUTLASS's arguments of each pass (host only: the harness of can_implement needs no GPU).
template <class T, class Tile>
typename FpropKernel<T, Tile>::Kernel::Arguments fprop_arguments(const ConvArgs& a, const Problem2d& pb) {
  using Kernel = typename FpropKernel<T, Tile>::Kernel;
  using PS = typename FpropKernel<T, Tile>::ProblemShape;
  FpropEpilogueParams ep;
  ep.bias = a.bias;
  ep.residual = a.residual.ptr != nullptr;
  ep.act.act = static_cast<int>(a.act);
  ep.act.a = static_cast<float>(a.act_params.a);
  ep.act.b = static_cast<float>(a.act_params.b);
  typename Kernel::MainloopArguments mainloop{static_cast<T const*>(pb.x.ptr), static_cast<T const*>(pb.wt.ptr)};
  // C is the residual; without one its load is skipped, and y stands in for a valid descriptor.
  const Nhwc4& src = ep.residual ? pb.res : pb.y;
  typename Kernel::EpilogueArguments epilogue{{ep},
                                              static_cast<T const*>(src.ptr),
                                              epilogue_stride<typename Kernel::StrideC>(src),
                                              static_cast<T*>(const_cast<void*>(pb.y.ptr)),
                                              epilogue_stride<typename Kernel::StrideD>(pb.y)};
  return typename Kernel::Arguments(problem_shape<PS>(pb), mainloop, epilogue, hw_info());
}

template <class T, class Tile>
typename GradKernel<T, Operator::kDgrad, Tile>::Kernel::Arguments dgrad_arguments(const Problem2d& pb) {
  using K = GradKernel<T, Operator::kDgrad, Tile>;
  using Kernel = typename K::Kernel;
  // A = dy (in y's place), B = w, D = dx (in x's place)
  typename Kernel::MainloopArguments mainloop{static_cast<T const*>(pb.y.ptr), static_cast<T const*>(pb.wt.ptr)};
  typename Kernel::EpilogueArguments epilogue{{},
                                              nullptr,
                                              epilogue_stride<typename Kernel::StrideC>(pb.x),
                                              static_cast<T*>(const_cast<void*>(pb.x.ptr)),
                                              epilogue_stride<typename Kernel::StrideD>(pb.x)};
  epilogue.thread.alpha = 1.f;
  epilogue.thread.beta = 0.f;
  return typename Kernel::Arguments(problem_shape<typename K::ProblemShape>(pb), mainloop, epilogue, hw_info());
}

template <class T>
typename GradKernel<T, Operator::kWgrad>::Kernel::Arguments wgrad_arguments(const Problem2d& pb) {
  using K = GradKernel<T, Operator::kWgrad>;
  using Kernel = typename K::Kernel;
  // A = dy, B = x (im2col), D = dw [K][(C, S, R)], dense
  typename Kernel::MainloopArguments mainloop{static_cast<T const*>(pb.y.ptr), static_cast<T const*>(pb.x.ptr)};
  typename Kernel::StrideD dw{};
  get<0>(dw) = pb.wt.st[0];
  get<1, 1>(dw) = pb.wt.st[2];
  get<1, 2>(dw) = pb.wt.st[1];
  typename Kernel::EpilogueArguments epilogue{{}, nullptr, dw, static_cast<T*>(const_cast<void*>(pb.wt.ptr)), dw};
  epilogue.thread.alpha = 1.f;
  epilogue.thread.beta = 0.f;
  return typename Kernel::Arguments(problem_shape<typename K::ProblemShape>(pb), mainloop, epilogue, hw_info());
}

template <class T>
cudaError_t fprop(const ConvArgs& a, const Problem2d& pb, cudaStream_t stream, bool dry) {
  constexpr bool kTf32 = cute::is_same_v<T, float>;
  using Narrow = cute::conditional_t<kTf32, TileNarrow32, TileNarrow>;
  using Wide = cute::conditional_t<kTf32, TileMN32, TileMN>;
  if (pb.k <= kNarrow)
    return run<typename FpropKernel<T, Narrow>::Kernel>(fprop_arguments<T, Narrow>(a, pb), stream, dry);
  return run<typename FpropKernel<T, Wide>::Kernel>(fprop_arguments<T, Wide>(a, pb), stream, dry);
}

template <class T>
cudaError_t dgrad(const Problem2d& pb, cudaStream_t stream) {
  using Narrow = GradKernel<T, Operator::kDgrad, TileNarrow>;
  using Wide = GradKernel<T, Operator::kDgrad, TileMN>;
  if (pb.c <= kNarrow) return run<typename Narrow::Kernel>(dgrad_arguments<T, TileNarrow>(pb), stream);
  return run<typename Wide::Kernel>(dgrad_arguments<T, TileMN>(pb), stream);
}

template <class T>
cudaError_t wgrad(const Problem2d& pb, cudaStream_t stream) {
  return run<typename GradKernel<T, Operator::kWgrad>::Kernel>(wgrad_arguments<T>(pb), stream);
}

bool dense(const Nhwc4& o) {
  return o.st[3] == 1 && o.st[2] == o.ext[3] && o.st[1] == o.ext[2] * o.st[2] && o.st[0] == o.ext[1] * o.st[1];
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// conv_sm90_fprop, or its checks alone (dry).
cudaError_t fprop_entry(const ConvArgs& a, cudaStream_t stream, bool dry) {
  Problem2d pb;
  if (!path_on(a.knobs) || !make_problem(a, &pb)) return cudaErrorNotSupported;
  if (!matmul::sm90::epilogue_act_supported(a.act)) return cudaErrorNotSupported;
  // the GEMM's epilogue adds the residual after the activation: it takes a residual only without one
  if (fprop_to_gemm(pb, a) && (a.residual.ptr == nullptr || a.act == Act::Identity)) return cudaErrorNotSupported;
  // the bias is read in 16-byte vectors
  if (a.bias != nullptr && !aligned16(a.bias)) return cudaErrorNotSupported;
  if (a.residual.ptr != nullptr) {
    if (!to_nhwc(a.residual, a.g.N, a.g.K, a.g.in[0], pb.p, pb.q, &pb.res) ||
        !tma_operand_ok(pb.res, a.dtype == DType::Float32 ? 4 : 2))
      return cudaErrorNotSupported;
  }
  switch (a.dtype) {
    case DType::BFloat16: return fprop<cutlass::bfloat16_t>(a, pb, stream, dry);
    case DType::Float16: return fprop<cutlass::half_t>(a, pb, stream, dry);
    default: return fprop<float>(a, pb, stream, dry);
  }
}

}  // namespace
}  // namespace sm90

cudaError_t conv_sm90_fprop(const ConvArgs& a, cudaStream_t stream) { return sm90::fprop_entry(a, stream, false); }

cudaError_t conv_sm90_fprop_check(const ConvArgs& a) { return sm90::fprop_entry(a, nullptr, true); }

cudaError_t conv_sm90_dgrad(const ConvArgs& a, cudaStream_t stream) {
  sm90::Problem2d pb;
  if (a.dtype == DType::Float32 || !sm90::path_on(a.knobs) || !sm90::make_problem(a, &pb))
    return cudaErrorNotSupported;
  if (pb.stride[0] != 1 || pb.stride[1] != 1 || sm90::plain_gemm(pb, a.knobs)) return cudaErrorNotSupported;
  return a.dtype == DType::BFloat16 ? sm90::dgrad<cutlass::bfloat16_t>(pb, stream)
                                    : sm90::dgrad<cutlass::half_t>(pb, stream);
}

cudaError_t conv_sm90_wgrad(const ConvArgs& a, cudaStream_t stream) {
  sm90::Problem2d pb;
  if (a.dtype == DType::Float32 || !sm90::path_on(a.knobs) || !sm90::make_problem(a, &pb))
    return cudaErrorNotSupported;
  // CUTLASS's wgrad wants dy and dw dense (x, gathered by im2col, may be strided)
  if (!sm90::dense(pb.y) || !sm90::dense(pb.wt) || sm90::plain_gemm(pb, a.knobs)) return cudaErrorNotSupported;
  // no split of the pixel reduction: only problems whose output tiles fill the GPU
  const int64_t tiles = sm90::cdiv(pb.k, 128) * sm90::cdiv(pb.c, 128) * pb.r * pb.s;
  if (tiles < std::max(matmul::sm90::device_info().sm_count, 1)) return cudaErrorNotSupported;
  return a.dtype == DType::BFloat16 ? sm90::wgrad<cutlass::bfloat16_t>(pb, stream)
                                    : sm90::wgrad<cutlass::half_t>(pb, stream);
}

}  // namespace conv
}  // namespace torch_dnn

#endif  // TORCH_DNN_WITH_SM90_GEMM
