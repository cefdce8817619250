// The matmul family's run-time knobs, every one read here and documented here only:
//
//   knob                          used in              choices
//   TORCH_DNN_GEMM_PATH           matmul_cuda.cpp      auto (default): the Hopper path where it takes the problem,
//                                                      else the portable one; sm80: the portable path; sm90: the
//                                                      Hopper path, an error where it cannot take the problem. Any
//                                                      other value is an error
//   TORCH_DNN_GEMM_FP32           matmul_cuda.cpp      float32 without TF32: simt (default): the portable path's
//                                                      SIMT FFMA kernel; 3xtf32: 3xTF32 on the tensor cores. Any
//                                                      other value is an error (on the calls it applies to)
//   TORCH_DNN_SM90_TF32           matmul_cuda.cpp      default: float32 with TF32 on the Hopper kernel over operand
//                                                      copies rounded to TF32; off: on the portable path (not under
//                                                      TORCH_DNN_GEMM_PATH=sm90)
//   TORCH_DNN_TF32_ROUND_VEC      tf32_round.cu        default: the 16-byte kernel where aligned; 0: the scalar one
//   TORCH_DNN_SM90_SKINNY         gemm_sm90.cu         default: the skinny kernels take x @ w.T with M <= 256 and
//                                                      N >= 4 M; 0: the stream-K kernel takes those
//   TORCH_DNN_SM90_SKINNY_KERNEL  gemm_sm90_skinny.cu  default: skinny_shape's rule; swap16, swap64, swap64x64,
//                                                      swap256, narrow, mid12: that kernel
//   TORCH_DNN_SM90_SKINNY_SPLITS  gemm_sm90_skinny.cu  default: splits_for's rule; n > 0: n K ranges (made valid)
//   TORCH_DNN_SM90_SKINNY_OVERLAP gemm_sm90_skinny.cu  default: a partial second row tile of x run as an overlapped
//                                                      half (overlap_tile); 0: off
//   TORCH_DNN_SM90_TT_SPLITS      gemm_sm90.cu         default: tt_splits' rule for the split-K d_weight kernel;
//                                                      n > 0: n splits; n < 0: CUTLASS's stream-K heuristic
//   TORCH_DNN_SM90_SWIZZLE        sm90_gemm.cuh        the persistent scheduler's swizzle: 8 (default), 1, 2 or 4
//   TORCH_DNN_SM90_RASTER         sm90_gemm.cuh        its raster order: CUTLASS's heuristic (default); m; n
//   TORCH_DNN_SM90_PARAMS_CACHE   sm90_gemm.cuh        default: kernel parameters of problems without a workspace
//                                                      cached per host thread; 0: built at every call
//   TORCH_DNN_GEMM_SKINNY         gemm_sm80.cu         default: the portable skinny kernel on GPUs without the
//                                                      Hopper skinny kernels; 0: off; 1: preferred wherever it
//                                                      applies; counter: as 1, its K splits reduced through the
//                                                      workspace and a counter on sm_90 too (instead of clusters)
//   TORCH_DNN_GEMM_SKINNY_STAGES  gemm_sm80.cu         the portable skinny kernel's pipeline depth: 8 (default); 4
// Any value not listed chooses the default, unless its row says otherwise.
//
// All are read at every call, once a call: the CUDA launcher (matmul_cuda.cpp) reads them into GemmArgs::knobs,
// which every path and kernel choice below it takes from there; conv's GEMM route (conv_implicit_gemm.cu) reads
// them for its GemmArgs too. So one benchmark or test process can flip them between calls, and every route of a
// call sees the same choices. read() scans the environment once (env::Scope) for all of them.
// Torch-free, header-only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/env.h"

namespace torch_dnn {
namespace matmul {

enum class GemmPath : int8_t { Unknown = -1, Auto, Sm80, Sm90 };
constexpr const char* kGemmPathChoices[] = {"auto", "sm80", "sm90"};  // GemmPath's order

enum class GemmFp32 : int8_t { Unknown = -1, Simt, ThreeTf32 };
constexpr const char* kGemmFp32Choices[] = {"simt", "3xtf32"};  // GemmFp32's order

// gemm_sm90_skinny.cu's SkinnyKernel, in its order
constexpr const char* kSm90SkinnyKernelChoices[] = {"swap16", "swap64", "swap64x64", "swap256", "narrow", "mid12"};

enum class Sm90Raster : int8_t { Heuristic, AlongM, AlongN };

enum class GemmSkinny : int8_t { Auto, Off, On, Counter };

// The index of a knob's value in `choices`: `unset` when the knob is unset or empty, `other` for any other value.
template <size_t N>
int knob_index(const char* name, const char* const (&choices)[N], int unset, int other) {
  const char* v = env::get(name);
  if (v == nullptr || *v == '\0') return unset;
  for (size_t i = 0; i < N; ++i)
    if (std::strcmp(v, choices[i]) == 0) return int(i);
  return other;
}

struct MatmulKnobs {
  GemmPath path = GemmPath::Auto;            // TORCH_DNN_GEMM_PATH (Unknown: a value not listed)
  GemmFp32 fp32 = GemmFp32::Simt;            // TORCH_DNN_GEMM_FP32 (Unknown: a value not listed)
  bool sm90_tf32 = true;                     // TORCH_DNN_SM90_TF32 is not off
  bool tf32_round_vec = true;                // TORCH_DNN_TF32_ROUND_VEC is not 0
  bool sm90_skinny = true;                   // TORCH_DNN_SM90_SKINNY is not 0
  int8_t sm90_skinny_kernel = -1;            // TORCH_DNN_SM90_SKINNY_KERNEL: index in kSm90SkinnyKernelChoices
  bool sm90_skinny_overlap = true;           // TORCH_DNN_SM90_SKINNY_OVERLAP is not 0
  int sm90_skinny_splits = 0;                // TORCH_DNN_SM90_SKINNY_SPLITS, 0: the rule
  int sm90_tt_splits = 0;                    // TORCH_DNN_SM90_TT_SPLITS, 0: the rule
  int sm90_swizzle = 8;                      // TORCH_DNN_SM90_SWIZZLE
  Sm90Raster sm90_raster = Sm90Raster::Heuristic;  // TORCH_DNN_SM90_RASTER
  bool sm90_params_cache = true;             // TORCH_DNN_SM90_PARAMS_CACHE is not 0
  GemmSkinny gemm_skinny = GemmSkinny::Auto;  // TORCH_DNN_GEMM_SKINNY
  int gemm_skinny_stages = 8;                // TORCH_DNN_GEMM_SKINNY_STAGES

  static MatmulKnobs read() {
    const env::Scope snapshot;  // one scan of the environment (none where the caller holds a scope)
    MatmulKnobs k;
    k.path = GemmPath(knob_index("TORCH_DNN_GEMM_PATH", kGemmPathChoices, 0, -1));
    k.fp32 = GemmFp32(knob_index("TORCH_DNN_GEMM_FP32", kGemmFp32Choices, 0, -1));
    k.sm90_tf32 = !env::is("TORCH_DNN_SM90_TF32", "off");
    k.tf32_round_vec = !env::is("TORCH_DNN_TF32_ROUND_VEC", "0");
    k.sm90_skinny = !env::is("TORCH_DNN_SM90_SKINNY", "0");
    k.sm90_skinny_kernel = int8_t(knob_index("TORCH_DNN_SM90_SKINNY_KERNEL", kSm90SkinnyKernelChoices, -1, -1));
    k.sm90_skinny_overlap = !env::is("TORCH_DNN_SM90_SKINNY_OVERLAP", "0");
    k.sm90_skinny_splits = env::get_int("TORCH_DNN_SM90_SKINNY_SPLITS", 0);
    k.sm90_tt_splits = env::get_int("TORCH_DNN_SM90_TT_SPLITS", 0);
    const int swizzle = env::get_int("TORCH_DNN_SM90_SWIZZLE", 8);
    k.sm90_swizzle = swizzle == 1 || swizzle == 2 || swizzle == 4 || swizzle == 8 ? swizzle : 8;
    k.sm90_raster = env::is("TORCH_DNN_SM90_RASTER", "m")   ? Sm90Raster::AlongM
                    : env::is("TORCH_DNN_SM90_RASTER", "n") ? Sm90Raster::AlongN
                                                            : Sm90Raster::Heuristic;
    k.sm90_params_cache = !env::is("TORCH_DNN_SM90_PARAMS_CACHE", "0");
    k.gemm_skinny = env::is("TORCH_DNN_GEMM_SKINNY", "0")         ? GemmSkinny::Off
                    : env::is("TORCH_DNN_GEMM_SKINNY", "1")       ? GemmSkinny::On
                    : env::is("TORCH_DNN_GEMM_SKINNY", "counter") ? GemmSkinny::Counter
                                                                  : GemmSkinny::Auto;
    k.gemm_skinny_stages = env::is("TORCH_DNN_GEMM_SKINNY_STAGES", "4") ? 4 : 8;
    return k;
  }
};

}  // namespace matmul
}  // namespace torch_dnn
