// Pieces shared by the softmax forward and backward kernels: row views, the kernel plan for a shape, and
// the running (max, sum-of-exp) statistic that merges in any order.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/cuda/device.cuh"
#include "common/cuda/int_math.h"
#include "common/cuda/reduce.cuh"
#include "common/cuda/vec.cuh"
#include "softmax/softmax_kernels.h"

namespace torch_dnn {
namespace softmax {

// Running max and sum of exp(x - max). Chunks whose max is -inf contribute nothing (so that -inf entries
// never turn the sum into NaN); a row that is all -inf ends with max -inf and sum 0, and the output formula
// then yields NaN exactly as PyTorch's softmax does.
template <typename A>
struct MaxSum {
  A m, s;
  __device__ __forceinline__ void add(A x) {
    if (x > m) {
      // exp(x - x) is 1, except at x = +inf, where PyTorch's exp(inf - inf) makes the row NaN
      s = (m == A(-INFINITY) ? A(0) : s * exp_acc(m - x)) + (x == A(INFINITY) ? A(NAN) : A(1));
      m = x;
    } else if (x == x) {
      s += m == A(-INFINITY) ? A(0) : exp_acc(x - m);
    } else {  // NaN: the row's output is NaN
      m = x;
      s = x;
    }
  }
  __device__ __forceinline__ static MaxSum merge(MaxSum a, MaxSum b) {
    const A m = MaxOp{}(a.m, b.m);
    // a side whose max is -inf adds s * 0: nothing, unless it carries a NaN
    const A sa = a.m == A(-INFINITY) ? a.s * A(0) : a.s * exp_acc(a.m - m);
    const A sb = b.m == A(-INFINITY) ? b.s * A(0) : b.s * exp_acc(b.m - m);
    return {m, sa + sb};
  }
  __device__ __forceinline__ static A exp_acc(A v) { return td_exp(v); }
};

template <typename A>
__device__ __forceinline__ MaxSum<A> block_reduce_maxsum(MaxSum<A> v, A* smem) {
  const A m = block_reduce(v.m, MaxOp{}, smem);
  A s = v.m == A(-INFINITY) ? v.s * A(0) : v.s * td_exp(v.m - m);  // s * 0 keeps a NaN
  s = block_reduce(s, SumOp{}, smem);
  return {m, s};
}

// exp(x - m). The hardware path folds the shift into the base-2 exponent: ex2(x log2e - m log2e), one FFMA
// and one MUFU. m = -inf (an all -inf row) gives NaN, as PyTorch's exp(-inf - -inf) does.
template <bool FAST, typename A>
struct ShiftedExp {
  A m, m_log2e;
  __device__ __forceinline__ explicit ShiftedExp(A max) : m(max), m_log2e(max * A(1.4426950408889634)) {}
  __device__ __forceinline__ A operator()(A x) const {
    if constexpr (FAST) return td_exp2_fast(fma(x, A(1.4426950408889634), -m_log2e));
    else return td_exp(x - m);
  }
};

// softmax / log_softmax of one value from the row statistic. For softmax, inv_s = 1 / sum.
template <bool LOG, typename A, bool FAST = false>
__device__ __forceinline__ A softmax_out(A x, A m, A s_or_log_s) {
  if constexpr (LOG) return x - m - s_or_log_s;
  else return ShiftedExp<FAST, A>(m)(x) * s_or_log_s;
}
template <bool LOG, typename A>
__device__ __forceinline__ A softmax_scale(A s) {
  if constexpr (LOG) return td_log(s);
  else return A(1) / s;
}

// How a shape is computed. Shared by forward and backward (and by the workspace size functions).
enum class Plan { Warp, BlockRegs, BlockTwoPass, SplitRow, Spatial };

constexpr int kWarpBlock = 128;     // threads per block of the warp-per-row kernels
constexpr int kMaxWarpRow = 1024;   // rows up to this length: a warp (or part of one) per row, in registers
constexpr int kSplitChunk = 16384;  // elements per block when one row is split over several blocks
constexpr int kStreamUnroll = 4;    // vectors each thread of a streaming pass loads before it uses them
// Two-pass rows: persistent blocks, few enough that the rows in flight stay in L2 for the second read.
constexpr int kTwoPassThreads = 512, kTwoPassBlocksPerSm = 2;

// Elements of a row each thread of a BlockRegs kernel holds in registers, kept as the raw 16-byte vectors
// (so 16-bit types hold more): 24-32 registers of data a thread in the forward, 2 x 16 in the
// backward (grad and output), 64 registers at most in all under __launch_bounds__(1024).
template <typename T> constexpr int kFwdRegElems = sizeof(T) == 2 ? 40 : sizeof(T) == 4 ? 32 : 8;
template <typename T> constexpr int kBwdRegElems = sizeof(T) == 2 ? 24 : sizeof(T) == 4 ? 16 : 4;

struct PlanInfo {
  Plan plan;
  bool vec;         // 16-byte vectors (row length a multiple of the vector and pointers aligned)
  int threads;      // threads per block (Warp: threads per row)
  int64_t chunks;   // SplitRow: blocks per row
};

// forced: Knobs::plan (softmax_plan.h), for rows longer than a warp's; a forced plan that cannot hold the row
// falls back to the default choice.
inline PlanInfo make_plan(SoftmaxShape s, int vec_elems, bool aligned, int reg_elems, ForcedPlan forced) {
  PlanInfo p{Plan::Spatial, false, 0, 1};
  if (s.inner != 1) return p;
  p.vec = aligned && s.dim % vec_elems == 0;
  const int V = p.vec ? vec_elems : 1;
  const int64_t nv = s.dim / V;
  if (s.dim <= kMaxWarpRow) {
    p.plan = Plan::Warp;
    p.threads = pow2_at_least((nv + 32 / V - 1) / (32 / V));  // lanes per row: each holds up to 32 elements
    if (p.threads > 32) p.threads = 32;
    return p;
  }
  // A row in registers with as few threads as hold it: many rows per SM keep loads in flight while other
  // rows sit in their block reductions. Past 256 threads a row, too few rows fit on an SM and the
  // persistent two-pass plan measured faster (docs/softmax.md).
  const bool fits_regs = p.vec && s.dim <= int64_t(256) * reg_elems;
  if (fits_regs && (forced == ForcedPlan::None || forced == ForcedPlan::Regs)) {
    p.plan = Plan::BlockRegs;
    p.threads = int(std::max<int64_t>(64, pow2_at_least((s.dim + reg_elems - 1) / reg_elems)));
    return p;
  }
  // Longer rows: a block per row reading twice (the second read mostly from L2), unless there are too few
  // rows to fill the chip; then each row is split over several blocks.
  p.threads = 512;
  const bool split = forced != ForcedPlan::None ? forced == ForcedPlan::Split && s.dim > kSplitChunk
                                               : s.outer < sm_count() && s.dim > 2 * kSplitChunk;
  if (split) {
    p.plan = Plan::SplitRow;
    p.chunks = (s.dim + kSplitChunk - 1) / kSplitChunk;
  } else {
    p.plan = Plan::BlockTwoPass;
  }
  return p;
}

}  // namespace softmax
}  // namespace torch_dnn
