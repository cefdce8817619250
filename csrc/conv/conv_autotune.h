// The route a convolution pass takes on CUDA, and its choice by measurement under torch.backends.cudnn.benchmark.
//
// Routes, in the order the heuristic tries them: the stem kernel (a first convolution of few input channels,
// forward only), the Hopper implicit GEMM, the portable implicit GEMM, either of them on a staged copy of the
// problem (conv_staging.h), the direct kernels (they take every problem). Without
// benchmark mode the first route that takes the problem runs. With it (as cuDNN's benchmark mode), the first call
// of a problem signature runs every route that takes the problem, times each (one warm-up run, then the best of
// kTimedRuns between CUDA events on the call's stream; the host waits), and keeps the fastest for the signature in
// this process (and in TORCH_DNN_CONV_ROUTES_FILE's file: conv_route_cache.h); later calls run it, or the
// heuristic's order if it declines them (its operands' alignment can differ between calls of one signature). Each
// run writes the whole result, so the last one leaves it right.
// Not measured under CUDA graph capture (no waiting there) nor with deterministic algorithms requested (the route
// measured fastest can differ between processes, and with it the result's rounding): the heuristic's route runs.
//
// The signature: the number of routes (a route measured among fewer, in a file written by an older build, is not
// kept over the new ones), the pass, dtype, TF32 and determinism switches, the geometry, the three operands' strides
// and 16-byte alignment, the epilogue (bias, residual and its strides and alignment, activation) and the device's
// kind (a number naming its model and compute capability, the same in every process).
#pragma once
#include <cstdint>
#include <vector>

#include "conv/conv_kernels.h"
#include "conv/conv_ops.h"
#include "conv/conv_route_cache.h"

namespace torch_dnn {
namespace conv {

// The numbers are kept in route files (conv_route_cache.h): a new route takes the next one.
enum class Route : int { Hopper = 0, ImplicitGemm = 1, Staged = 2, Direct = 3, Stem = 4 };
constexpr int kRoutes = 5;
constexpr int kTimedRuns = 3;

inline std::vector<int64_t> problem_signature(Pass pass, const ConvArgs& a, int64_t device_kind) {
  std::vector<int64_t> s{kRoutes, int64_t(pass), int64_t(a.dtype), a.allow_tf32, a.deterministic, device_kind,
                         a.g.N, a.g.C, a.g.K, a.g.G, a.bias != nullptr, int64_t(a.act)};
  for (int i = 0; i < 3; ++i)
    for (const int64_t v : {a.g.in[i], a.g.out[i], a.g.ker[i], a.g.stride[i], a.g.pad[i], a.g.dil[i]}) s.push_back(v);
  for (const Operand5* o : {&a.x, &a.w, &a.y, &a.residual}) {
    s.push_back(o->ptr == nullptr ? -1 : int64_t(reinterpret_cast<uintptr_t>(o->ptr) % 16 == 0));
    s.insert(s.end(), o->stride, o->stride + 5);
  }
  return s;
}

}  // namespace conv
}  // namespace torch_dnn
