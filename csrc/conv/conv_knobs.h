// The convolution family's run-time knobs (TORCH_DNN_CONV_*), every one read here and documented here only:
//
//   knob                         read                choices
//   TORCH_DNN_CONV_SM90          every call          default: the Hopper implicit GEMM on (conv_sm90.cu), 1x1 stride-1
//                                                    problems left to the GEMM path; 0: the Hopper path off; all: it
//                                                    takes the 1x1 stride-1 problems too (to compare the two)
//   TORCH_DNN_CONV_STAGE         every call          default: staging on (conv_staging.h); 0: off, NCHW and channel
//                                                    counts not a multiple of 8 go to the direct kernels
//   TORCH_DNN_CONV_WEIGHT_CACHE  every call          default: a read weight's staged and TF32 copies kept per weight
//                                                    and version (conv_weight_cache.h); 0: made again at every call
//   TORCH_DNN_CONV_ROUTES_FILE   at the first        unset: benchmark mode's kept routes stay in the process; <path>:
//                                lookup              also appended to that file and read back by later processes
//                                                    (conv_route_cache.h)
// Any value not listed chooses the default.
//
// The per-call ones are read once a call into ConvArgs::knobs by the launcher (conv_cuda.cpp), so that one
// benchmark or test process can flip them between calls, and every route of the call sees the same choices.
// Torch-free, header-only.
#pragma once
#include "common/env.h"

namespace torch_dnn {
namespace conv {

// One byte: it lies in ConvArgs' padding, which the stem kernels take by value (their parameters keep their
// offsets).
struct ConvKnobs {
  bool sm90 : 1 = true;              // TORCH_DNN_CONV_SM90 is not 0
  bool sm90_plain_gemm : 1 = false;  // TORCH_DNN_CONV_SM90=all: the Hopper path takes the 1x1 stride-1 problems
  bool stage : 1 = true;             // TORCH_DNN_CONV_STAGE is not 0
  bool weight_cache : 1 = true;      // TORCH_DNN_CONV_WEIGHT_CACHE is not 0

  static ConvKnobs read() {
    ConvKnobs k;
    k.sm90 = !env::is("TORCH_DNN_CONV_SM90", "0");
    k.sm90_plain_gemm = env::is("TORCH_DNN_CONV_SM90", "all");
    k.stage = !env::is("TORCH_DNN_CONV_STAGE", "0");
    k.weight_cache = !env::is("TORCH_DNN_CONV_WEIGHT_CACHE", "0");
    return k;
  }
};
static_assert(sizeof(ConvKnobs) == 1, "ConvKnobs must fit ConvArgs' padding");

// TORCH_DNN_CONV_ROUTES_FILE: the route file's path, or null.
inline const char* routes_file_knob() { return env::get("TORCH_DNN_CONV_ROUTES_FILE"); }

}  // namespace conv
}  // namespace torch_dnn
