// group_norm forward.
//   gn_smem_fwd      the group fits in shared memory (64x256x56x56 bf16, 32 groups: 8 x 3136 values = 50 KB):
//                    a persistent block per (n, g) loads the group ONCE (16-byte vectors) into shared memory,
//                    takes the exact two-pass mean / variance from there, and writes y from there. Both layouts:
//                    NCHW groups are contiguous; channels-last groups are rows of D channels, C apart.
//   gn_cluster_fwd   (gn_cluster.cuh, sm_90; TORCH_DNN_GN_PLAN says where) a cluster of CTAs per (n, W channels):
//                    whole 128-byte rows in channels-last; TORCH_DNN_GN_PLAN=smem selects gn_smem_fwd instead.
//   gn_smem_fwd_cl_small  channels-last groups narrower than a 16-byte vector (instance_norm: D = 1): a block
//                    per (n, V / D groups) so that every row is one vector; per-lane sums reduced as vectors.
//   otherwise        gn_chunk_stats (a block per chunk of a group: Chan-mergeable (count, mean, M2) partials) +
//                    gn_finalize_fwd (a thread per group merges its chunks in order) + gn_apply_fwd
//                    (elementwise); also the whole forward when the statistics are given (gn_apply_fwd alone).
#pragma once
#include "group_norm/kernels/gn_cluster.cuh"
#include "group_norm/kernels/gn_common.cuh"

namespace torch_dnn {
namespace group_norm {

// V parameters of the channels starting at c (channels-last vectors span V channels; NCHW vectors one).
template <int V, typename T, typename A>
__device__ __forceinline__ void load_params(const T* w, const T* b, int64_t c, bool one_channel, A (&wv)[V], A (&bv)[V]) {
  if (one_channel) {
    const A wc = w ? to_acc<A>(w[c]) : A(1), bc = b ? to_acc<A>(b[c]) : A(0);
#pragma unroll
    for (int j = 0; j < V; ++j) wv[j] = wc, bv[j] = bc;
  } else {
    norm::load_param<V>(w, c, A(1), wv);
    norm::load_param<V>(b, c, A(0), bv);
  }
}

// Global offset of the group's vector i (group-local element i * V), 32-bit group-local arithmetic (the group
// fits in shared memory).
template <typename T, int V>
__device__ __forceinline__ int64_t smem_vec_offset(const GnParams<T>& p, int64_t n, int64_t g, unsigned i,
                                                   unsigned dv_count) {
  if (!p.cl) return (n * p.G + g) * p.L + int64_t(i) * V;
  const unsigned s = i / dv_count, dv = i - s * dv_count;
  return (n * p.S + s) * p.C + g * p.D + int64_t(dv) * V;
}

// Bytes of gn_smem_fwd's dynamic shared memory: the group, then (scale, shift) of its D channels.
template <typename T>
size_t smem_fwd_bytes(int64_t L, int64_t D) {
  const size_t group = (size_t(L) * sizeof(T) + 15) / 16 * 16;
  return group + size_t(D) * 2 * sizeof(acc_t<T>);
}

// vec_div divides a group-local vector index by the vectors of one row of the group: S / V (NCHW: the
// quotient is the channel) or D / V (channels-last: the quotient is the spatial row, the remainder the
// channel vector). The loads keep kLoads vectors in flight a thread (one at a time left the load phase
// latency-bound: a dozen dependent DRAM round trips a group); the write pass reads each channel's
// (scale, shift) from shared memory, one FMA an element, instead of a division and two global loads a vector.
// 256 threads and 4 blocks an SM (shared memory allows no more for 50 KB groups) give 64 registers: the loads
// in flight spilled at 512 threads' 32.
constexpr int kSmemFwdThreads = 256;
template <typename T, int V>
__global__ void __launch_bounds__(kSmemFwdThreads, 4) gn_smem_fwd(GnParams<T> p, FastDivmod32 vec_div) {
  using A = acc_t<T>;
  constexpr int kLoads = 4;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Vec<T, V>* buf = reinterpret_cast<Vec<T, V>*>(smem_raw);
  A* coef = reinterpret_cast<A*>(smem_raw + (size_t(p.L) * sizeof(T) + 15) / 16 * 16);  // [D][scale, shift]
  __shared__ A red[32];
  const unsigned nv = unsigned(p.L / V), step = blockDim.x;
  const int64_t NG = p.N * p.G;
  auto offset = [&](int64_t n, int64_t g, unsigned i) -> int64_t {
    if (!p.cl) return (n * p.G + g) * p.L + int64_t(i) * V;
    uint32_t s, dv;
    vec_div.divmod(i, s, dv);
    return (n * p.S + s) * p.C + g * p.D + int64_t(dv) * V;
  };
  // Each thread reads back only the vectors it stored (i = threadIdx.x + k * step in every pass): no barrier
  // around `buf`. `coef` is rewritten only after the next group's reductions, whose barriers follow every
  // read of the previous group's.
  for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x) {
    const int64_t n = ng / p.G, g = ng - n * p.G;
    A s = A(0);
    for (unsigned i0 = threadIdx.x; i0 < nv; i0 += kLoads * step) {
      Vec<T, V> r[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u)
        if (i0 + u * step < nv) r[u] = load_vec<T, V>(p.x + offset(n, g, i0 + u * step));
#pragma unroll
      for (int u = 0; u < kLoads; ++u)
        if (i0 + u * step < nv) {
          buf[i0 + u * step] = r[u];
#pragma unroll
          for (int j = 0; j < V; ++j) s += to_acc<A>(r[u].v[j]);
        }
    }
    const A m = block_reduce(s, SumOp{}, red) / A(p.L);
    A q = A(0);
    for (unsigned i = threadIdx.x; i < nv; i += step) {
      const Vec<T, V> v = buf[i];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A d = to_acc<A>(v.v[j]) - m;
        q += d * d;
      }
    }
    const A rs = rstd_of(block_reduce(q, SumOp{}, red) / A(p.L), p.eps);
    if (threadIdx.x == 0) {
      p.mean[ng] = m;
      p.rstd[ng] = rs;
    }
    for (int64_t d = threadIdx.x; d < p.D; d += step) {
      const int64_t c = g * p.D + d;
      const A sc = rs * (p.w ? to_acc<A>(p.w[c]) : A(1));
      coef[2 * d] = sc;
      coef[2 * d + 1] = (p.b ? to_acc<A>(p.b[c]) : A(0)) - m * sc;
    }
    __syncthreads();
#pragma unroll 2
    for (unsigned i = threadIdx.x; i < nv; i += step) {
      const Vec<T, V> v = buf[i];
      Vec<T, V> o;
      if (!p.cl) {
        const unsigned d = vec_div.div(i);
        const A sc = coef[2 * d], sh = coef[2 * d + 1];
#pragma unroll
        for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>(to_acc<A>(v.v[j]) * sc + sh);
      } else {
        uint32_t srow, dv;
        vec_div.divmod(i, srow, dv);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const unsigned d = dv * V + j;
          o.v[j] = from_acc<T>(to_acc<A>(v.v[j]) * coef[2 * d] + coef[2 * d + 1]);
        }
      }
      store_vec<T, V>(p.out + offset(n, g, i), o);
    }
  }
}

// Block-wide sums of V values a thread (fixed order: warp trees, then warps in order); every thread gets them.
// `smem` holds 32 * V values. Safe to call back to back.
template <int V, typename A>
__device__ __forceinline__ void block_reduce_vec(A (&v)[V], A* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = warp_reduce(v[j], SumOp{});
  __syncthreads();
  if (lane == 0)
#pragma unroll
    for (int j = 0; j < V; ++j) smem[warp * V + j] = v[j];
  __syncthreads();
#pragma unroll
  for (int j = 0; j < V; ++j) {
    A t = A(0);
    for (int w = 0; w < nwarps; ++w) t += smem[w * V + j];
    v[j] = t;
  }
}

// Per-element sums -> per-group sums over the lanes j of one group (V / D groups of D lanes in a vector).
template <int V, typename A>
__device__ __forceinline__ void group_sums(A (&v)[V], int D) {
  A out[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    A t = A(0);
#pragma unroll
    for (int q = 0; q < V; ++q)
      if (q / D == j / D) t += v[q];
    out[j] = t;
  }
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = out[j];
}

// Channels-last groups of fewer channels than a 16-byte vector (instance_norm: D = 1): a block per (n, set of
// V / D consecutive groups), whose rows are exactly one vector (V channels), loaded ONCE into shared memory;
// each thread keeps per-lane sums, reduced over the block as V values, combined per group.
template <typename T>
__global__ void __launch_bounds__(kSmemThreads, 2) gn_smem_fwd_cl_small(GnParams<T> p) {
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Vec<T, V>* buf = reinterpret_cast<Vec<T, V>*>(smem_raw);
  __shared__ A red[32 * V];
  const int D = int(p.D);
  const int64_t sets = p.C / V, items = p.N * sets;
  const unsigned S = unsigned(p.S);
  for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
    const int64_t n = it / sets, c0 = (it - n * sets) * V;
    A sum[V];
#pragma unroll
    for (int j = 0; j < V; ++j) sum[j] = A(0);
    for (unsigned s = threadIdx.x; s < S; s += blockDim.x) {
      const Vec<T, V> v = load_vec<T, V>(p.x + (n * p.S + s) * p.C + c0);
      buf[s] = v;
#pragma unroll
      for (int j = 0; j < V; ++j) sum[j] += to_acc<A>(v.v[j]);
    }
    block_reduce_vec<V>(sum, red);
    group_sums<V>(sum, D);
    A m[V], q[V];
#pragma unroll
    for (int j = 0; j < V; ++j) m[j] = sum[j] / A(p.L), q[j] = A(0);
    for (unsigned s = threadIdx.x; s < S; s += blockDim.x) {
      const Vec<T, V> v = buf[s];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A d = to_acc<A>(v.v[j]) - m[j];
        q[j] += d * d;
      }
    }
    block_reduce_vec<V>(q, red);
    group_sums<V>(q, D);
    A rs[V];
#pragma unroll
    for (int j = 0; j < V; ++j) rs[j] = rstd_of(q[j] / A(p.L), p.eps);
    if (threadIdx.x == 0) {
#pragma unroll
      for (int j = 0; j < V; j += 1)
        if (j % D == 0) {
          const int64_t ng = n * p.G + (c0 + j) / D;
          p.mean[ng] = m[j];
          p.rstd[ng] = rs[j];
        }
    }
    A wv[V], bv[V];
    norm::load_param<V>(p.w, c0, A(1), wv);
    norm::load_param<V>(p.b, c0, A(0), bv);
    for (unsigned s = threadIdx.x; s < S; s += blockDim.x) {
      const Vec<T, V> v = buf[s];
      Vec<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>((to_acc<A>(v.v[j]) - m[j]) * rs[j] * wv[j] + bv[j]);
      store_vec<T, V>(p.out + (n * p.S + s) * p.C + c0, o);
    }
  }
}

// The channels-last small-group plan: D divides the vector, whole sets of groups, aligned pointers.
template <typename T>
bool cl_small_ok(const GnParams<T>& p, bool aligned) {
  constexpr int V = kVec16<T>;
  return p.cl && aligned && p.D < V && V % p.D == 0 && p.C % V == 0;
}

// (count, mean, M2) of chunk k of group ng, for every (ng, k) work item.
template <typename T>
__global__ void __launch_bounds__(kChunkThreads) gn_chunk_stats(GnParams<T> p, acc_t<T>* partial, int64_t K,
                                                                 int64_t chunk) {
  using A = acc_t<T>;
  __shared__ A smem[96];
  const int64_t items = p.N * p.G * K;
  for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
    const int64_t ng = it / K, k = it - ng * K;
    const int64_t n = ng / p.G, g = ng - n * p.G;
    const int64_t e_end = std::min(p.L, (k + 1) * chunk);
    MeanM2<A> st{A(0), A(0), A(0)};
    for (int64_t e = k * chunk + threadIdx.x; e < e_end; e += blockDim.x) {
      const A v[1] = {to_acc<A>(p.x[group_offset(p, n, g, e)])};
      st.add(v);
    }
    st = norm::block_reduce_meanm2(st, smem);
    if (threadIdx.x == 0) {
      partial[it * 3] = st.n;
      partial[it * 3 + 1] = st.mean;
      partial[it * 3 + 2] = st.m2;
    }
  }
}

template <typename T>
__global__ void gn_finalize_fwd(GnParams<T> p, const acc_t<T>* partial, int64_t K) {
  using A = acc_t<T>;
  const int64_t ng = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ng >= p.N * p.G) return;
  MeanM2<A> st{A(0), A(0), A(0)};
  for (int64_t k = 0; k < K; ++k) {
    const A* q = partial + (ng * K + k) * 3;
    st.merge({q[0], q[1], q[2]});
  }
  p.mean[ng] = st.mean;
  p.rstd[ng] = rstd_of(st.m2 / A(p.L), p.eps);
}

// y = (x - mean) * rstd * w + b elementwise. Vectors of V elements: NCHW, one channel (S % V == 0);
// channels-last, V consecutive channels (C % V == 0), possibly of several groups.
template <typename T, int V>
__global__ void __launch_bounds__(256) gn_apply_fwd(GnParams<T> p) {
  using A = acc_t<T>;
  const int64_t numel = p.N * p.C * p.S, nv = numel / V;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nv; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * V;
    const int64_t n = e / (p.C * p.S);
    const int64_t c0 = p.cl ? e % p.C : (e / p.S) % p.C;
    const Vec<T, V> v = load_vec<T, V>(p.x + e);
    A wv[V], bv[V];
    load_params<V>(p.w, p.b, c0, !p.cl, wv, bv);
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t ng = n * p.G + (p.cl ? c0 + j : c0) / p.D;
      o.v[j] = from_acc<T>((to_acc<A>(v.v[j]) - p.mean[ng]) * p.rstd[ng] * wv[j] + bv[j]);
    }
    store_vec<T, V>(p.out + e, o);
  }
}

// Threads of a shared-memory block: ~4 vectors a thread, 64 to 512.
inline int smem_threads(int64_t nv, int max_threads = kSmemThreads) {
  return int(std::min<int64_t>(max_threads, std::max<int64_t>(64, pow2_at_least((nv + 3) / 4))));
}

template <typename T, int V>
void launch_smem_fwd(const GnParams<T>& p, cudaStream_t stream) {
  const int64_t nv = p.L / V;
  const size_t smem = smem_fwd_bytes<T>(p.L, p.D);
  const int threads = smem_threads(nv, kSmemFwdThreads);
  allow_max_dynamic_smem<gn_smem_fwd<T, V>>();  // once per device
  const int64_t grid = resident_grid<gn_smem_fwd<T, V>>(p.N * p.G, threads, smem);
  const FastDivmod32 vec_div(uint32_t(p.cl ? p.D / V : p.S / V));
  gn_smem_fwd<T, V><<<unsigned(grid), threads, smem, stream>>>(p, vec_div);
}

inline int64_t forward_workspace_elems(const GnShape& s, bool stats_given) {
  if (stats_given) return 0;
  const ChunkPlan c = chunk_plan(s.N * s.G, (s.C / s.G) * s.S);
  return s.N * s.G * c.K * 3;
}

// The group (dynamic shared memory) plus the static reduction space and the 1 KB the driver reserves.
template <typename T>
bool smem_fwd_fits(const GnParams<T>& p) {
  return int64_t(smem_fwd_bytes<T>(p.L, p.D)) + 32 * int64_t(sizeof(acc_t<T>)) + 1024 <= max_smem_optin();
}

template <typename T>
void run_forward(GnParams<T> p, bool stats_given, acc_t<T>* ws, const Knobs& knobs, cudaStream_t stream) {
  constexpr int V = kVec16<T>;
  const bool aligned = aligned16(p.x) && aligned16(p.out) && (!p.w || aligned16(p.w)) && (!p.b || aligned16(p.b));
  if (!stats_given) {
    if (cl_small_ok(p, aligned) && smem_fwd_fits(p) && p.S * int64_t(kVec16<T> * sizeof(T)) + 1024 +
                                                           32 * kVec16<T> * int64_t(sizeof(acc_t<T>)) <=
                                                       max_smem_optin()) {
      const size_t smem = size_t(p.S) * kVec16<T> * sizeof(T);
      const int threads = smem_threads(p.S);
      allow_max_dynamic_smem<gn_smem_fwd_cl_small<T>>();  // once per device
      const int64_t grid = resident_grid<gn_smem_fwd_cl_small<T>>(p.N * (p.C / kVec16<T>), threads, smem);
      gn_smem_fwd_cl_small<T><<<unsigned(grid), threads, smem, stream>>>(p);
      return;
    }
    if (try_cluster_fwd(p, aligned, knobs, stream)) return;
    if (smem_fwd_fits(p)) {
      if (aligned && vec_ok(p.S, p.D, p.cl, V)) launch_smem_fwd<T, V>(p, stream);
      else launch_smem_fwd<T, 1>(p, stream);
      return;
    }
    const int64_t NG = p.N * p.G;
    const ChunkPlan c = chunk_plan(NG, p.L);
    gn_chunk_stats<T><<<grid_for(NG * c.K, 1, 4, 8), kChunkThreads, 0, stream>>>(p, ws, c.K, c.chunk);
    gn_finalize_fwd<T><<<unsigned((NG + 255) / 256), 256, 0, stream>>>(p, ws, c.K);
  }
  const int64_t numel = p.N * p.C * p.S;
  if (aligned && (p.cl ? p.C % V == 0 : p.S % V == 0))
    gn_apply_fwd<T, V><<<grid_for(numel / V, 256, 4, 8), 256, 0, stream>>>(p);
  else
    gn_apply_fwd<T, 1><<<grid_for(numel, 256, 4, 8), 256, 0, stream>>>(p);
}

}  // namespace group_norm
}  // namespace torch_dnn
