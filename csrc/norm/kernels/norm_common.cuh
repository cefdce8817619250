// Pieces shared by the norm forward and backward kernels: typed arguments, the plans, and the row
// statistic that merges in any order (Chan et al.'s parallel variance) for rows too long for registers.
#pragma once
#include "common/cuda/device.cuh"
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

inline int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

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

// V elements of an optional parameter as accumulation-type values; `absent` (1 for a weight, 0 for a bias:
// exact no-ops) where there is none, so that the math has no branches and the arrays stay in registers.
template <int V, typename T, typename A>
__device__ __forceinline__ void load_param(const T* p, int64_t col, A absent, A (&out)[V]) {
  if (p) {
    const Vec<T, V> v = load_vec<T, V>(p + col);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_acc<A>(v.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = absent;
  }
}

// The V inputs of the norm at `off`: x, or x + res rounded to T (written to sum), as add-then-norm computes.
template <int V, typename T>
__device__ __forceinline__ Vec<T, V> load_input(const FwdParams<T>& p, int64_t off) {
  using A = acc_t<T>;
  Vec<T, V> v = load_vec<T, V>(p.x + off);
  if (p.res) {
    const Vec<T, V> r = load_vec<T, V>(p.res + off);
#pragma unroll
    for (int j = 0; j < V; ++j) v.v[j] = from_acc<T>(to_acc<A>(v.v[j]) + to_acc<A>(r.v[j]));
    store_vec<T, V>(p.sum + off, v);
  }
  return v;
}

// Writes y at `off` (column `col`) from V values in the accumulation type.
template <int V, typename T, typename A>
__device__ __forceinline__ void store_output(const FwdParams<T>& p, int64_t off, int64_t col, const A (&v)[V], A m, A rs) {
  A w[V], b[V];
  load_param<V>(p.w, col, A(1), w);
  load_param<V>(p.b, col, A(0), b);
  Vec<T, V> o;
#pragma unroll
  for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>((v[j] - m) * rs * w[j] + b[j]);
  store_vec<T, V>(p.y + off, o);
}

// 1/sqrt(var + eps). A row holding an infinity has var = inf: PyTorch's CUDA kernels make that row NaN
// (rms_norm too, where rsqrt(inf) = 0 would leave finite entries at 0), so ours do.
template <typename A>
__device__ __forceinline__ A rstd_of(A var, A eps) {
  return var == A(INFINITY) ? A(NAN) : td_rsqrt(var + eps);
}

}  // namespace norm
}  // namespace torch_dnn
