// Pieces shared by the norm forward and backward kernels: typed arguments, the plans, and the row
// statistic that merges in any order (Chan et al.'s parallel variance) for rows too long for registers.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/cuda/cp_async.cuh"
#include "common/cuda/device.cuh"
#include "common/cuda/int_math.h"
#include "common/cuda/reduce.cuh"
#include "common/cuda/vec.cuh"
#include "norm/norm_kernels.h"

namespace torch_dnn {
namespace norm {

template <typename T>
struct FwdParams {
  using A = acc_t<T>;
  const T* x;
  const T* res;
  const T* w;
  const T* b;
  T* y;
  T* sum;
  A* mean;
  A* rstd;
  A eps;
  int64_t rows, N;
  bool fused_stats = true;  // LayerNorm block forward: one (count, mean, M2) reduction
};

template <typename T>
struct BwdParams {
  using A = acc_t<T>;
  const T* dy;
  const T* dsum;
  const T* x;
  const A* mean;
  const A* rstd;
  const T* w;
  T* dx;
  A* partial;  // [2][P][N]: dw then db partial sums, one row per block (row group); null: not wanted
  int64_t P, rows, N;
};

constexpr int kWarpBlock = 128;    // threads per block of the warp-per-row forward
constexpr int kMaxWarpRow = 1024;  // forward rows up to this length: (part of) a warp per row, in registers
constexpr int kTwoPassThreads = 512;

// Forward: elements of the row a thread holds in registers in the block-per-row kernel, as four raw 16-byte
// vectors (16 registers): rows up to 32K elements (16-bit), 16K (float), 8K (double) with 1024 threads.
template <typename T> constexpr int kFwdRegElems = 16 / sizeof(T) * 4;
// Backward: columns a thread owns in the block-per-row kernel; it keeps their weight/bias-gradient partial
// sums in registers (32 floats, 16 doubles), so rows up to 16K elements (8K double).
template <typename T> constexpr int kBwdCols = sizeof(T) == 8 ? 8 : 16;

enum class FwdPlan { Warp, BlockRegs, TwoPass };

struct FwdPlanInfo {
  FwdPlan plan;
  bool vec;     // 16-byte vectors (row length a multiple of the vector, every pointer aligned)
  int threads;  // threads per block (Warp: lanes per row)
};

inline FwdPlanInfo make_fwd_plan(int64_t N, int V, bool aligned, int reg_elems) {
  FwdPlanInfo p{FwdPlan::TwoPass, aligned && N % V == 0, kTwoPassThreads};
  const int Vu = p.vec ? V : 1;
  if (N <= kMaxWarpRow) {
    p.plan = FwdPlan::Warp;
    p.threads = std::min(32, pow2_at_least((N / Vu + 32 / Vu - 1) / (32 / Vu)));  // each lane holds <= 32 values
  } else if (p.vec && N <= int64_t(1024) * reg_elems) {
    // as few threads as hold the row: many rows per SM keep loads in flight while others reduce
    p.plan = FwdPlan::BlockRegs;
    p.threads = int(std::max<int64_t>(64, pow2_at_least((N + reg_elems - 1) / reg_elems)));
  }
  return p;
}

// A persistent grid of at most `resident` blocks that gives every block the same number of rows (within
// one), so that no last partial wave of rows runs on a mostly idle chip.
inline int64_t balanced_grid(int64_t rows, int64_t resident) {
  resident = std::max<int64_t>(1, resident);
  const int64_t per_block = (rows + resident - 1) / resident;
  return std::max<int64_t>(1, (rows + per_block - 1) / per_block);
}

// Backward: a block per row with the weight-gradient partials in registers when the row is vectorizable and
// short enough; otherwise a row kernel for dx and a column kernel for dw/db.
inline bool bwd_block_plan(int64_t N, int V, bool aligned, int cols_per_thread) {
  return aligned && N % V == 0 && N <= int64_t(1024) * cols_per_thread;
}
inline int bwd_block_threads(int64_t N, int cols_per_thread) {
  return std::max(32, pow2_at_least((N + cols_per_thread - 1) / cols_per_thread));
}

// Running (count, mean, sum of squared deviations), merged as Chan et al.: one pass over rows too long to
// keep, without the cancellation of sum-of-squares formulas.
template <typename A>
struct MeanM2 {
  A n, mean, m2;
  // Adds V values at once: their own mean and M2 first (exact two-pass over registers), one division.
  template <int V>
  __device__ __forceinline__ void add(const A (&v)[V]) {
    A vm = A(0);
#pragma unroll
    for (int j = 0; j < V; ++j) vm += v[j];
    vm /= A(V);
    A vm2 = A(0);
#pragma unroll
    for (int j = 0; j < V; ++j) vm2 += (v[j] - vm) * (v[j] - vm);
    merge({A(V), vm, vm2});
  }
  __device__ __forceinline__ void merge(MeanM2 o) {
    const A n2 = n + o.n;
    if (o.n == A(0)) return;
    const A d = o.mean - mean, f = o.n / n2;
    mean += d * f;
    m2 += o.m2 + d * d * n * f;
    n = n2;
  }
};

template <typename A>
__device__ __forceinline__ MeanM2<A> warp_reduce_meanm2(MeanM2<A> s) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    s.merge({__shfl_xor_sync(0xffffffffu, s.n, off), __shfl_xor_sync(0xffffffffu, s.mean, off),
             __shfl_xor_sync(0xffffffffu, s.m2, off)});
  return s;
}

// Every thread gets the block's statistic. `smem` holds at least 96 A's.
template <typename A>
__device__ __forceinline__ MeanM2<A> block_reduce_meanm2(MeanM2<A> s, A* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  s = warp_reduce_meanm2(s);
  __syncthreads();
  if (lane == 0) {
    smem[warp] = s.n;
    smem[32 + warp] = s.mean;
    smem[64 + warp] = s.m2;
  }
  __syncthreads();
  MeanM2<A> t{A(0), A(0), A(0)};
  if (lane < nwarps) t = {smem[lane], smem[32 + lane], smem[64 + lane]};
  return warp_reduce_meanm2(t);
}

// The forward's one-reduction statistic: Chan's merge with the count ratio from the fast division (2 ulp:
// the ratio only scales the partial means' difference) and lane 0's result broadcast, so that every thread
// of the block normalizes with the same bits. `smem` holds at least 96 A's.
template <typename A>
__device__ __forceinline__ void merge_meanm2_fast(MeanM2<A>& s, A n, A mean, A m2) {
  if (n == A(0)) return;
  if (s.n == A(0)) {
    s = {n, mean, m2};
    return;
  }
  const A n2 = s.n + n;
  A f;
  if constexpr (sizeof(A) == 4) f = __fdividef(n, n2);
  else f = n / n2;
  const A d = mean - s.mean;
  s.mean += d * f;
  s.m2 += m2 + d * d * s.n * f;
  s.n = n2;
}
template <typename A>
__device__ __forceinline__ MeanM2<A> warp_reduce_meanm2_fast(MeanM2<A> s) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    merge_meanm2_fast(s, __shfl_xor_sync(0xffffffffu, s.n, off), __shfl_xor_sync(0xffffffffu, s.mean, off),
                      __shfl_xor_sync(0xffffffffu, s.m2, off));
  return s;
}
template <typename A>
__device__ __forceinline__ MeanM2<A> block_reduce_meanm2_uniform(MeanM2<A> s, A* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  s = warp_reduce_meanm2_fast(s);
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) {
    smem[warp] = s.n;
    smem[32 + warp] = s.mean;
    smem[64 + warp] = s.m2;
  }
  __syncthreads();
  MeanM2<A> t{A(0), A(0), A(0)};
  if (lane < nwarps) t = {smem[lane], smem[32 + lane], smem[64 + lane]};
  t = warp_reduce_meanm2_fast(t);
  return {t.n, __shfl_sync(0xffffffffu, t.mean, 0), __shfl_sync(0xffffffffu, t.m2, 0)};
}

// A 16-bit input as a float: with SHIFT, bf16 by a shift (exact, NaN payloads kept) instead of cuda_bf16.hpp's
// inline asm; a vector's elements go through elem_acc below. Library-wide (to_acc) the shift added spills to bf16
// pooling kernels (docs/activation.md), so it stays a norm-local choice.
template <bool SHIFT, typename A, typename T>
__device__ __forceinline__ A in_acc(T v) {
  if constexpr (SHIFT && std::is_same_v<T, __nv_bfloat16> && std::is_same_v<A, float>)
    return __uint_as_float(uint32_t(__bfloat16_as_ushort(v)) << 16);
  else
    return to_acc<A>(v);
}

// Element j of v in the accumulation type: with SHIFT, bf16 from the vector's packed words (vec_elem).
template <bool SHIFT, typename A, typename T, int V>
__device__ __forceinline__ A elem_acc(const Vec<T, V>& v, int j) {
  if constexpr (SHIFT) return vec_elem<A>(v, j);
  else return in_acc<SHIFT, A>(v.v[j]);
}

// V elements of an optional parameter as accumulation-type values; `absent` (1 for a weight, 0 for a bias:
// exact no-ops) where there is none, so that the math has no branches and the arrays stay in registers.
template <int V, bool SHIFT = false, typename T, typename A>
__device__ __forceinline__ void load_param(const T* p, int64_t col, A absent, A (&out)[V]) {
  if (p) {
    const Vec<T, V> v = load_vec<T, V>(p + col);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = in_acc<SHIFT, A>(v.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = absent;
  }
}

// The V inputs of the norm at `off`: x, or x + res rounded to T (written to sum), as add-then-norm computes.
template <int V, bool SHIFT = false, typename T>
__device__ __forceinline__ Vec<T, V> load_input(const FwdParams<T>& p, int64_t off) {
  using A = acc_t<T>;
  Vec<T, V> v = load_vec<T, V>(p.x + off);
  if (p.res) {
    const Vec<T, V> r = load_vec<T, V>(p.res + off);
    A s[V];
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = elem_acc<SHIFT, A>(v, j) + elem_acc<SHIFT, A>(r, j);
    v = pack_vec<V, T>(s);  // rounded in pairs (the same rounding as one by one), the sum kept packed
    store_vec<T, V>(p.sum + off, v);
  }
  return v;
}

// Writes y at `off` (column `col`) from V values in the accumulation type.
template <int V, bool SHIFT = false, typename T, typename A>
__device__ __forceinline__ void store_output(const FwdParams<T>& p, int64_t off, int64_t col, const A (&v)[V], A m, A rs) {
  A w[V], b[V];
  load_param<V, SHIFT>(p.w, col, A(1), w);
  load_param<V, SHIFT>(p.b, col, A(0), b);
  if constexpr (SHIFT) {
    A o[V];
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = (v[j] - m) * rs * w[j] + b[j];
    store_vec<T, V>(p.y + off, pack_vec<V, T>(o));
  } else {
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>((v[j] - m) * rs * w[j] + b[j]);
    store_vec<T, V>(p.y + off, o);
  }
}

// 1/sqrt(var + eps). A row holding an infinity has var = inf: PyTorch's CUDA kernels make that row NaN
// (rms_norm too, where rsqrt(inf) = 0 would leave finite entries at 0), so ours do.
template <typename A>
__device__ __forceinline__ A rstd_of(A var, A eps) {
  return var == A(INFINITY) ? A(NAN) : td_rsqrt(var + eps);
}

}  // namespace norm
}  // namespace torch_dnn
