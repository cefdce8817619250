// Pieces shared by the group_norm forward and backward kernels: typed arguments, the group's addressing in
// both layouts, and the plan (one read through shared memory, or the chunked general path).
#pragma once
#include <algorithm>

#include "common/cuda/device.cuh"
#include "common/cuda/divmod.cuh"
#include "common/cuda/reduce.cuh"
#include "common/cuda/vec.cuh"
#include "group_norm/group_norm_kernels.h"
#include "norm/kernels/norm_common.cuh"  // MeanM2 (Chan's mergeable statistic), rstd_of

namespace torch_dnn {
namespace group_norm {

using norm::MeanM2;
using norm::rstd_of;

template <typename T>
struct GnParams {
  using A = acc_t<T>;
  const T* x;
  const T* dy;   // backward
  const T* w;
  const T* b;    // forward
  T* out;        // y or dx
  A* mean;       // [N, G]
  A* rstd;
  A eps;
  int64_t N, C, S, G, D, L;  // D = C / G channels a group, L = D * S elements a group
  bool cl;                   // channels-last memory: [N][S][C]
  bool out_nchw = false;     // forward, cl: y is written contiguous ([N][C][S]; the cluster plan alone does)
};

// Offset of element e (0 <= e < L) of group (n, g): group-local order is memory order within the group
// (NCHW: channel-major, contiguous; channels-last: [S][D], rows of D channels C apart).
template <typename T>
__device__ __forceinline__ int64_t group_offset(const GnParams<T>& p, int64_t n, int64_t g, int64_t e) {
  if (!p.cl) return (n * p.G + g) * p.L + e;
  const int64_t s = e / p.D, d = e - s * p.D;
  return (n * p.S + s) * p.C + g * p.D + d;
}
// Channel (within the group) of group-local element e.
template <typename T>
__device__ __forceinline__ int64_t group_channel(const GnParams<T>& p, int64_t e) {
  return p.cl ? e % p.D : e / p.S;
}

// Shared-memory plan: the whole group (forward: x; backward: x and dy) is loaded once into shared memory,
// reduced from there and written from there. Vectors (16 bytes) when every vector stays inside one row of
// the group (NCHW: S % V == 0; channels-last: D % V == 0) and the pointers are aligned.
constexpr int kSmemThreads = 512;

inline bool vec_ok(int64_t S, int64_t D, bool cl, int V) { return cl ? D % V == 0 : S % V == 0; }

// Chunked general path: each group is cut into K chunks of `chunk` elements (group-local order), one block a
// chunk; partial statistics go to a workspace and are merged per group in a fixed order.
constexpr int kChunkThreads = 256;
struct ChunkPlan {
  int64_t K, chunk;
};
inline ChunkPlan chunk_plan(int64_t NG, int64_t L) {
  const int64_t want_blocks = int64_t(sm_count()) * 8;
  int64_t K = std::max<int64_t>(1, (want_blocks + NG - 1) / NG);
  K = std::min<int64_t>(K, std::max<int64_t>(1, L / 4096));  // chunks of at least ~4K elements
  const int64_t chunk = (L + K - 1) / K;
  return {(L + chunk - 1) / chunk, chunk};
}

// The backward's per-channel sums over one x / dy vector pair: pc += dy (x - mean), qc += dy (every backward
// kernel takes them in this order, so that their results agree bitwise). The vectors are taken by value: with
// references into shared memory, ptxas read each 2-byte element by its own LDS.U16 (16 a pair instead of two
// LDS.128), which made the bulk and cluster backwards measurably slower (docs/group_norm.md).
template <typename T, int V, typename A>
__device__ __forceinline__ void add_dy_sums(const Vec<T, V> xv, const Vec<T, V> gv, A m, A& pc, A& qc) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const A g = to_acc<A>(gv.v[k]);
    pc += g * (to_acc<A>(xv.v[k]) - m);
    qc += g;
  }
}

}  // namespace group_norm
}  // namespace torch_dnn
