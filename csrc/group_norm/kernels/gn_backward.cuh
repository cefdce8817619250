// group_norm backward. With xhat = (x - mean) * rstd, g = dy * w and L elements a group:
//   dx = rstd * (g - xhat * sum(g * xhat) / L - sum(g) / L)       [statistics given: dx = rstd * g]
//   dw[c] = sum over n, s of dy * xhat,  db[c] = sum over n, s of dy
// Weight/bias gradients: per-(n, c) sums P (dy * xhat) and Q (dy) into a [N, C] workspace, then the
// fixed-order column sum over n (csrc/common/cuda/column_sum.cuh): deterministic.
//   gn_smem_bwd      x and dy of the group fit in shared memory together: a persistent block per (n, g) loads
//                    both ONCE, takes the per-channel sums P, Q from shared memory (warps over (channel, slice)
//                    items, fixed order), and writes dx from shared memory: 2 reads + 1 write, the minimum.
//   gn_bulk_bwd      (sm_90, NCHW, the default where the group fits; TORCH_DNN_GN_PLAN=smem selects gn_smem_bwd)
//                    the same sums and writes, the group's x and dy loaded by two 1-D bulk copies.
//   gn_cluster_bwd   (gn_cluster.cuh, sm_90; TORCH_DNN_GN_PLAN says where) a cluster of CTAs per (n, W channels)
//                    holding x and dy once; TORCH_DNN_GN_PLAN=smem selects gn_smem_bwd instead.
//   gn_smem_bwd_cl_small  channels-last groups narrower than a vector (instance_norm NHWC): a block per (n, V / D
//                    groups), per-lane (= per-channel) sums reduced as vectors.
//   otherwise        gn_chunk_bwd (sum(g * xhat), sum(g) per chunk) + gn_finalize_bwd + gn_apply_bwd
//                    (elementwise), and gn_channel_sums (a block per (n, c)) for P and Q.
#pragma once
#include "common/cuda/bulk_copy.cuh"
#include "common/cuda/column_sum.cuh"
#include "group_norm/kernels/gn_forward.cuh"

namespace torch_dnn {
namespace group_norm {

template <typename T>
struct GnBwdWs {
  using A = acc_t<T>;
  A* P;        // [N, C] sum of dy * xhat (null: weight/bias gradients not wanted)
  A* Q;        // [N, C] sum of dy
  A* partial;  // [N * G, K, 2] chunk sums of g * xhat and g
  A* coef;     // [N * G, 2] sum(g * xhat) / L, sum(g) / L
};

// gn_smem_bwd / gn_bulk_bwd, once the (channel, slice) sums of group (n, g) are in red ([D * SP][2]: sum(dy *
// xhat), sum(dy)): the channel totals (into tot, and P / Q when wanted) and c12 = (sum(w dy xhat) / L, sum(w dy)
// / L). Ends with a __syncthreads.
template <typename T, typename A>
__device__ __forceinline__ void group_coefficients(const GnParams<T>& p, const GnBwdWs<T>& ws, int64_t n, int64_t g,
                                                   int SP, const A* red, A* tot, A* c12) {
  const unsigned D = unsigned(p.D);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (unsigned d = threadIdx.x; d < D; d += blockDim.x) {
    A pc = A(0), qc = A(0);
    for (int sp = 0; sp < SP; ++sp) {
      pc += red[2 * (d * SP + sp)];
      qc += red[2 * (d * SP + sp) + 1];
    }
    tot[2 * d] = pc;
    tot[2 * d + 1] = qc;
    if (ws.P) {
      ws.P[n * p.C + g * p.D + d] = pc;
      ws.Q[n * p.C + g * p.D + d] = qc;
    }
  }
  __syncthreads();
  if (warp == 0) {
    A s1 = A(0), s2 = A(0);
    for (unsigned d = lane; d < D; d += 32) {
      const A wc = p.w ? to_acc<A>(p.w[g * p.D + d]) : A(1);
      s1 += wc * tot[2 * d];
      s2 += wc * tot[2 * d + 1];
    }
    s1 = warp_reduce(s1, SumOp{});
    s2 = warp_reduce(s2, SumOp{});
    if (lane == 0) {
      c12[0] = s1 / A(p.L);
      c12[1] = s2 / A(p.L);
    }
  }
  __syncthreads();
}

// dx of an NCHW group from its x and dy vectors in shared memory (bx, bdy; channel row d = vectors d * S / V ...):
// dx = rstd (dy w - xhat c1 - c2) = a dy - b (x - mean) - e, a = rstd w, b = rstd^2 c1, e = rstd c2. Warps walk
// the (channel, slice) items of the sums, so that each thread reads back what it loaded (gn_smem_bwd).
template <typename T, int V, typename A>
__device__ __forceinline__ void write_dx_nchw(const GnParams<T>& p, int64_t g, int64_t gbase, int SP, A m, A rs,
                                              A c1, A c2, const Vec<T, V>* bx, const Vec<T, V>* bdy) {
  const unsigned D = unsigned(p.D), SV = unsigned(p.S) / unsigned(V);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const A b = rs * rs * c1, e = rs * c2;
  for (unsigned it = warp; it < D * unsigned(SP); it += nwarps) {
    const unsigned d = it / unsigned(SP), sp = it - d * unsigned(SP);
    const A a = rs * (p.w ? to_acc<A>(p.w[g * p.D + d]) : A(1));
    for (unsigned j = sp * 32 + lane; j < SV; j += unsigned(SP) * 32) {
      const unsigned i = d * SV + j;
      const Vec<T, V> xv = bx[i], gv = bdy[i];
      Vec<T, V> o;
#pragma unroll
      for (int k = 0; k < V; ++k) o.v[k] = from_acc<T>(a * to_acc<A>(gv.v[k]) - (b * (to_acc<A>(xv.v[k]) - m) + e));
      store_vec<T, V>(p.out + gbase + int64_t(i) * V, o);
    }
  }
}

// Dynamic shared memory: x vectors, dy vectors, then 2 * D * SP partial sums and 2 * D channel totals.
template <typename T, int V>
__global__ void __launch_bounds__(kSmemThreads) gn_smem_bwd(GnParams<T> p, GnBwdWs<T> ws, int SP) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const unsigned nv = unsigned(p.L / V), dv_count = unsigned(p.D / V), S = unsigned(p.S), D = unsigned(p.D);
  Vec<T, V>* bx = reinterpret_cast<Vec<T, V>*>(smem_raw);
  Vec<T, V>* bdy = bx + nv;
  A* red = reinterpret_cast<A*>(bdy + nv);  // [D * SP][2]
  A* tot = red + 2 * D * SP;                 // [D][2]
  __shared__ A c12[2];
  const T* sx = reinterpret_cast<const T*>(bx);
  const T* sdy = reinterpret_cast<const T*>(bdy);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t NG = p.N * p.G;
  for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x) {
    const int64_t n = ng / p.G, g = ng - n * p.G;
    const A m = p.mean[ng], rs = p.rstd[ng];
    const unsigned SV = S / unsigned(V);  // NCHW: vectors a channel row
    const int64_t gbase = (n * p.G + g) * p.L;
    if (!p.cl) {
      // NCHW: the per-channel sums are taken while loading. Item (d, sp) = vectors sp * 32 + lane (step SP * 32)
      // of channel row d, two of x and of dy in flight a lane; the write pass walks the same items, so each
      // thread reads back only what it stored (the separate sum pass re-read shared memory as 2-byte elements
      // after one vector a thread in flight, which left the load phase latency-bound)
      const unsigned step = unsigned(SP) * 32;
      for (unsigned it = warp; it < D * unsigned(SP); it += nwarps) {
        const unsigned d = it / unsigned(SP), sp = it - d * unsigned(SP);
        A pc = A(0), qc = A(0);
        auto add = [&](const Vec<T, V>& xv, const Vec<T, V>& gv) { add_dy_sums(xv, gv, m, pc, qc); };
        unsigned j = sp * 32 + lane;
        for (; j + step < SV; j += 2 * step) {
          const unsigned i0 = d * SV + j, i1 = i0 + step;
          const Vec<T, V> x0 = load_vec<T, V>(p.x + gbase + int64_t(i0) * V);
          const Vec<T, V> g0 = load_vec<T, V>(p.dy + gbase + int64_t(i0) * V);
          const Vec<T, V> x1 = load_vec<T, V>(p.x + gbase + int64_t(i1) * V);
          const Vec<T, V> g1 = load_vec<T, V>(p.dy + gbase + int64_t(i1) * V);
          bx[i0] = x0, bdy[i0] = g0, bx[i1] = x1, bdy[i1] = g1;
          add(x0, g0);
          add(x1, g1);
        }
        if (j < SV) {
          const unsigned i0 = d * SV + j;
          const Vec<T, V> x0 = load_vec<T, V>(p.x + gbase + int64_t(i0) * V);
          const Vec<T, V> g0 = load_vec<T, V>(p.dy + gbase + int64_t(i0) * V);
          bx[i0] = x0, bdy[i0] = g0;
          add(x0, g0);
        }
        pc = warp_reduce(pc, SumOp{});
        qc = warp_reduce(qc, SumOp{});
        if (lane == 0) {
          red[2 * it] = pc * rs;
          red[2 * it + 1] = qc;
        }
      }
    } else {
    for (unsigned i = threadIdx.x; i < nv; i += blockDim.x) {
      const int64_t off = smem_vec_offset<T, V>(p, n, g, i, dv_count);
      bx[i] = load_vec<T, V>(p.x + off);
      bdy[i] = load_vec<T, V>(p.dy + off);
    }
    __syncthreads();
    // per-channel sums: item (d, sp) sums the elements s = sp * 32 + lane (step SP * 32) of channel d
    for (unsigned it = warp; it < D * unsigned(SP); it += nwarps) {
      const unsigned d = it / unsigned(SP), sp = it - d * unsigned(SP);
      A pc = A(0), qc = A(0);
      for (unsigned s = sp * 32 + lane; s < S; s += unsigned(SP) * 32) {
        const unsigned e = p.cl ? s * D + d : d * S + s;
        const A dyv = to_acc<A>(sdy[e]);
        pc += dyv * (to_acc<A>(sx[e]) - m) * rs;
        qc += dyv;
      }
      pc = warp_reduce(pc, SumOp{});
      qc = warp_reduce(qc, SumOp{});
      if (lane == 0) {
        red[2 * it] = pc;
        red[2 * it + 1] = qc;
      }
    }
    }
    __syncthreads();
    group_coefficients(p, ws, n, g, SP, red, tot, c12);
    if (!p.out) continue;
    const A c1 = c12[0], c2 = c12[1];
    if (!p.cl) {
      write_dx_nchw<T, V>(p, g, gbase, SP, m, rs, c1, c2, bx, bdy);
      continue;
    }
    for (unsigned i = threadIdx.x; i < nv; i += blockDim.x) {
      const Vec<T, V> xv = bx[i], gv = bdy[i];
      const int64_t c = g * p.D + (p.cl ? int64_t((i % dv_count) * V) : int64_t((i * V) / S));
      A wv[V], unused[V];
      load_params<V, T, A>(p.w, nullptr, c, !p.cl, wv, unused);
      Vec<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A xh = (to_acc<A>(xv.v[j]) - m) * rs;
        o.v[j] = from_acc<T>(rs * (to_acc<A>(gv.v[j]) * wv[j] - xh * c1 - c2));
      }
      store_vec<T, V>(p.out + smem_vec_offset<T, V>(p, n, g, i, dv_count), o);
    }
  }
}

// NCHW groups whose x and dy fit in shared memory, on sm_90: thread 0 copies the group's x and dy (contiguous in
// NCHW) into shared memory by two 1-D bulk copies (the whole group in flight for two instructions), then the block
// sums and writes dx from there as gn_smem_bwd does. bufs = 1 (the default): a block a group, two blocks an SM,
// each one's loads overlapping the other's sums and stores (faster than gn_smem_bwd, whose loads keep two vectors
// a lane in flight: docs/group_norm.md). bufs = 2 (TORCH_DNN_GN_BULK_BUFS=2): one persistent block an SM walking
// groups ng = blockIdx.x, + gridDim.x, ... with the NEXT group's copies in flight in the other half of a double
// buffer while it works on the current one; slower, since the SM's one block waits at every group's barriers
// with nothing else to run. Dynamic shared memory: bufs halves of
// bulk_bwd_half() bytes (x, then dy), then the (channel, slice) sums [D * SP][2] and channel totals [D][2].
template <typename T>
__host__ __device__ inline size_t bulk_bwd_half(int64_t L) { return (size_t(L) * 2 * sizeof(T) + 127) / 128 * 128; }

template <typename T, int V>
__global__ void __launch_bounds__(kSmemThreads, 2) gn_bulk_bwd(GnParams<T> p, GnBwdWs<T> ws, int SP, int bufs) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];  // 16-byte aligned: the bulk copies' rule
  __shared__ uint64_t bars[2];
  __shared__ A c12[2];
  const unsigned D = unsigned(p.D), SV = unsigned(p.S) / unsigned(V);
  const size_t half = bulk_bwd_half<T>(p.L);
  const unsigned bytes = unsigned(p.L) * unsigned(sizeof(T));
  A* red = reinterpret_cast<A*>(smem_raw + bufs * half);  // [D * SP][2]
  A* tot = red + 2 * D * SP;                            // [D][2]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t NG = p.N * p.G;
  if (threadIdx.x == 0) {
    mbar_init(&bars[0], 1);
    mbar_init(&bars[1], 1);
    mbar_fence_init();
  }
  __syncthreads();
  const uint64_t pol = l2_policy_evict_first();
  auto fetch = [&](int64_t ng, int buf) {  // thread 0
    unsigned char* dst = smem_raw + buf * half;
    mbar_arrive_expect_tx(&bars[buf], 2 * bytes);
    bulk_copy_g2s(dst, p.x + ng * p.L, bytes, &bars[buf], pol);
    bulk_copy_g2s(dst + bytes, p.dy + ng * p.L, bytes, &bars[buf], pol);
  };
  if (threadIdx.x == 0 && int64_t(blockIdx.x) < NG) fetch(blockIdx.x, 0);
  unsigned k = 0;
  for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x, ++k) {
    const int buf = bufs == 2 ? int(k & 1) : 0;
    // the other half was last read in the previous iteration, which ended with a __syncthreads
    if (threadIdx.x == 0 && bufs == 2 && ng + gridDim.x < NG) fetch(ng + gridDim.x, buf ^ 1);
    const int64_t n = ng / p.G, g = ng - n * p.G;
    const A m = p.mean[ng], rs = p.rstd[ng];
    const int64_t gbase = ng * p.L;
    const Vec<T, V>* bx = reinterpret_cast<const Vec<T, V>*>(smem_raw + buf * half);
    const Vec<T, V>* bdy = reinterpret_cast<const Vec<T, V>*>(smem_raw + buf * half + bytes);
    if (bufs == 1 && k > 0 && threadIdx.x == 0) fetch(ng, 0);  // (single buffer: after the last reads of it)
    mbar_wait(&bars[buf], bufs == 2 ? (k >> 1) & 1 : k & 1);
    for (unsigned it = warp; it < D * unsigned(SP); it += nwarps) {
      const unsigned d = it / unsigned(SP), sp = it - d * unsigned(SP);
      A pc = A(0), qc = A(0);
      for (unsigned j = sp * 32 + lane; j < SV; j += unsigned(SP) * 32) {
        add_dy_sums(bx[d * SV + j], bdy[d * SV + j], m, pc, qc);
      }
      pc = warp_reduce(pc, SumOp{});
      qc = warp_reduce(qc, SumOp{});
      if (lane == 0) {
        red[2 * it] = pc * rs;
        red[2 * it + 1] = qc;
      }
    }
    __syncthreads();
    group_coefficients(p, ws, n, g, SP, red, tot, c12);
    if (p.out) write_dx_nchw<T, V>(p, g, gbase, SP, m, rs, c12[0], c12[1], bx, bdy);
    __syncthreads();
  }
}

// Channels-last groups of fewer channels than a vector (see gn_smem_fwd_cl_small): a block per (n, set of V / D
// groups) loads x and dy once into shared memory; each thread's per-lane sums are per-channel sums, reduced
// over the block as V values; dx from shared memory.
template <typename T>
__global__ void __launch_bounds__(kSmemThreads) gn_smem_bwd_cl_small(GnParams<T> p, GnBwdWs<T> ws) {
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const unsigned S = unsigned(p.S);
  Vec<T, V>* bx = reinterpret_cast<Vec<T, V>*>(smem_raw);
  Vec<T, V>* bdy = bx + S;
  __shared__ A red[32 * V];
  const int D = int(p.D);
  const int64_t sets = p.C / V, items = p.N * sets;
  for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
    const int64_t n = it / sets, c0 = (it - n * sets) * V;
    const int64_t ng0 = n * p.G + c0 / D;  // group of lane j: ng0 + j / D
    A P[V], Q[V];
#pragma unroll
    for (int j = 0; j < V; ++j) P[j] = Q[j] = A(0);
    for (unsigned s = threadIdx.x; s < S; s += blockDim.x) {
      const int64_t off = (n * p.S + s) * p.C + c0;
      const Vec<T, V> xv = load_vec<T, V>(p.x + off), gv = load_vec<T, V>(p.dy + off);
      bx[s] = xv;
      bdy[s] = gv;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A dyv = to_acc<A>(gv.v[j]);
        P[j] += dyv * (to_acc<A>(xv.v[j]) - p.mean[ng0 + j / D]) * p.rstd[ng0 + j / D];
        Q[j] += dyv;
      }
    }
    block_reduce_vec<V>(P, red);
    block_reduce_vec<V>(Q, red);
    if (ws.P && threadIdx.x == 0) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        ws.P[n * p.C + c0 + j] = P[j];
        ws.Q[n * p.C + c0 + j] = Q[j];
      }
    }
    if (!p.out) continue;
    A wv[V];
    norm::load_param<V>(p.w, c0, A(1), wv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      P[j] *= wv[j];
      Q[j] *= wv[j];
    }
    group_sums<V>(P, D);  // sum(g * xhat) of lane j's group
    group_sums<V>(Q, D);  // sum(g)
    for (unsigned s = threadIdx.x; s < S; s += blockDim.x) {
      const Vec<T, V> xv = bx[s], gv = bdy[s];
      Vec<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A m = p.mean[ng0 + j / D], rs = p.rstd[ng0 + j / D];
        const A xh = (to_acc<A>(xv.v[j]) - m) * rs;
        o.v[j] = from_acc<T>(rs * (to_acc<A>(gv.v[j]) * wv[j] - xh * P[j] / A(p.L) - Q[j] / A(p.L)));
      }
      store_vec<T, V>(p.out + (n * p.S + s) * p.C + c0, o);
    }
  }
}

// sum(g * xhat), sum(g) of chunk k of group ng, for every (ng, k) work item.
template <typename T>
__global__ void __launch_bounds__(kChunkThreads) gn_chunk_bwd(GnParams<T> p, acc_t<T>* partial, int64_t K,
                                                               int64_t chunk) {
  using A = acc_t<T>;
  __shared__ A smem[64];
  const int64_t items = p.N * p.G * K;
  for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
    const int64_t ng = it / K, k = it - ng * K;
    const int64_t n = ng / p.G, g = ng - n * p.G;
    const A m = p.mean[ng], rs = p.rstd[ng];
    const int64_t e_end = std::min(p.L, (k + 1) * chunk);
    A s1 = A(0), s2 = A(0);
    for (int64_t e = k * chunk + threadIdx.x; e < e_end; e += blockDim.x) {
      const int64_t off = group_offset(p, n, g, e);
      const int64_t c = g * p.D + group_channel(p, e);
      const A gv = to_acc<A>(p.dy[off]) * (p.w ? to_acc<A>(p.w[c]) : A(1));
      s1 += gv * (to_acc<A>(p.x[off]) - m) * rs;
      s2 += gv;
    }
    block_reduce_sum2(s1, s2, smem);
    if (threadIdx.x == 0) {
      partial[it * 2] = s1;
      partial[it * 2 + 1] = s2;
    }
  }
}

template <typename T>
__global__ void gn_finalize_bwd(GnParams<T> p, const acc_t<T>* partial, acc_t<T>* coef, int64_t K) {
  using A = acc_t<T>;
  const int64_t ng = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ng >= p.N * p.G) return;
  A s1 = A(0), s2 = A(0);
  for (int64_t k = 0; k < K; ++k) {
    s1 += partial[(ng * K + k) * 2];
    s2 += partial[(ng * K + k) * 2 + 1];
  }
  coef[ng * 2] = s1 / A(p.L);
  coef[ng * 2 + 1] = s2 / A(p.L);
}

// dx elementwise (vectors as gn_apply_fwd's). STATS_GIVEN: dx = rstd * w * dy (x is not read).
template <typename T, int V, bool STATS_GIVEN>
__global__ void __launch_bounds__(256) gn_apply_bwd(GnParams<T> p, const acc_t<T>* coef) {
  using A = acc_t<T>;
  const int64_t numel = p.N * p.C * p.S, nv = numel / V;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nv; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * V;
    const int64_t n = e / (p.C * p.S);
    const int64_t c0 = p.cl ? e % p.C : (e / p.S) % p.C;
    const Vec<T, V> gv = load_vec<T, V>(p.dy + e);
    Vec<T, V> xv;
    if constexpr (!STATS_GIVEN) xv = load_vec<T, V>(p.x + e);
    A wv[V], unused[V];
    load_params<V, T, A>(p.w, nullptr, c0, !p.cl, wv, unused);
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t ng = n * p.G + (p.cl ? c0 + j : c0) / p.D;
      const A rs = p.rstd[ng];
      A d = rs * to_acc<A>(gv.v[j]) * wv[j];
      if constexpr (!STATS_GIVEN) {
        const A xh = (to_acc<A>(xv.v[j]) - p.mean[ng]) * rs;
        d -= rs * (xh * coef[ng * 2] + coef[ng * 2 + 1]);
      }
      o.v[j] = from_acc<T>(d);
    }
    store_vec<T, V>(p.out + e, o);
  }
}

// P[n, c] = sum over s of dy * xhat, Q[n, c] = sum of dy: a block per (n, c).
template <typename T>
__global__ void __launch_bounds__(256) gn_channel_sums(GnParams<T> p, acc_t<T>* P, acc_t<T>* Q) {
  using A = acc_t<T>;
  __shared__ A smem[64];
  for (int64_t nc = blockIdx.x; nc < p.N * p.C; nc += gridDim.x) {
    const int64_t n = nc / p.C, c = nc - n * p.C;
    const int64_t ng = n * p.G + c / p.D;
    const A m = p.mean[ng], rs = p.rstd[ng];
    A pc = A(0), qc = A(0);
    for (int64_t s = threadIdx.x; s < p.S; s += blockDim.x) {
      const int64_t off = p.cl ? (n * p.S + s) * p.C + c : nc * p.S + s;
      const A dyv = to_acc<A>(p.dy[off]);
      pc += dyv * (to_acc<A>(p.x[off]) - m) * rs;
      qc += dyv;
    }
    block_reduce_sum2(pc, qc, smem);
    if (threadIdx.x == 0) {
      P[nc] = pc;
      Q[nc] = qc;
    }
  }
}

// Work items (channel, slice) of gn_smem_bwd: enough slices that every warp has a channel to sum.
inline int smem_bwd_slices(int64_t D, int threads) {
  const int64_t warps = threads / 32;
  return int(std::max<int64_t>(1, std::min<int64_t>(32, warps / std::max<int64_t>(D, 1))));
}

// Dynamic shared memory of gn_smem_bwd: x and dy of the group, the (channel, slice) sums, the channel totals.
template <typename T>
int64_t smem_bwd_bytes(const GnParams<T>& p, int V) {
  const int SP = smem_bwd_slices(p.D, smem_threads(p.L / V));
  return 2 * p.L * int64_t(sizeof(T)) + (2 * p.D * SP + 2 * p.D) * int64_t(sizeof(acc_t<T>));
}

template <typename T, int V>
void launch_smem_bwd(const GnParams<T>& p, const GnBwdWs<T>& ws, cudaStream_t stream) {
  const int threads = smem_threads(p.L / V);
  const int SP = smem_bwd_slices(p.D, threads);
  const size_t smem = size_t(smem_bwd_bytes(p, V));
  allow_max_dynamic_smem<gn_smem_bwd<T, V>>();  // once per device
  const int64_t grid = resident_grid<gn_smem_bwd<T, V>>(p.N * p.G, threads, smem);
  gn_smem_bwd<T, V><<<unsigned(grid), threads, smem, stream>>>(p, ws, SP);
}

// gn_bulk_bwd where it applies (sm_90+, NCHW, 16-byte vectors, two groups of x and dy in shared memory, the
// default plan); false: the caller takes gn_smem_bwd.
template <typename T>
bool try_bulk_bwd(const GnParams<T>& p, const GnBwdWs<T>& ws, bool vec, const Knobs& knobs, cudaStream_t stream) {
  constexpr int V = kVec16<T>;
  if (p.cl || !vec || knobs.plan != GnPlan::Auto) return false;
  if (cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(0) < 9) return false;
  if ((p.L * int64_t(sizeof(T))) % 16 != 0) return false;  // each group's copy starts 16-byte aligned
  const int SP = smem_bwd_slices(p.D, kSmemThreads);
  const int bufs = knobs.bulk_bufs;
  const int64_t smem = bufs * int64_t(bulk_bwd_half<T>(p.L)) + (2 * p.D * SP + 2 * p.D) * int64_t(sizeof(acc_t<T>));
  if (smem + 2 * 8 + 2 * int64_t(sizeof(acc_t<T>)) + 1024 > max_smem_optin()) return false;
  if (allow_max_dynamic_smem<gn_bulk_bwd<T, V>>() < smem) return false;  // the limit raised once per device
  const int64_t grid = bufs == 2 ? std::min<int64_t>(p.N * p.G, sm_count()) : std::min<int64_t>(p.N * p.G, INT32_MAX);
  gn_bulk_bwd<T, V><<<unsigned(grid), kSmemThreads, size_t(smem), stream>>>(p, ws, SP, bufs);
  return true;
}

inline int64_t backward_workspace_elems(const GnShape& s) {
  const int64_t NG = s.N * s.G;
  const ChunkPlan c = chunk_plan(NG, (s.C / s.G) * s.S);
  return 2 * s.N * s.C + NG * c.K * 2 + NG * 2;
}

// Static shared memory of gn_smem_bwd is 2 values; 1 KB more is the driver's reservation.
template <typename T>
bool smem_bwd_fits(const GnParams<T>& p, int V) {
  return smem_bwd_bytes(p, V) + 2 * int64_t(sizeof(acc_t<T>)) + 1024 <= max_smem_optin();
}

// ws: backward_workspace_elems(); dw, db null when not wanted; p.out (dx) null when not wanted.
template <typename T>
void run_backward(GnParams<T> p, bool stats_given, acc_t<T>* ws, T* dw, T* db, const Knobs& knobs,
                  cudaStream_t stream) {
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  const int64_t NG = p.N * p.G;
  const ChunkPlan c = chunk_plan(NG, p.L);
  GnBwdWs<T> w{(dw || db) ? ws : nullptr, (dw || db) ? ws + p.N * p.C : nullptr, ws + 2 * p.N * p.C,
               ws + 2 * p.N * p.C + NG * c.K * 2};
  const bool aligned = aligned16(p.x) && aligned16(p.dy) && (!p.out || aligned16(p.out)) && (!p.w || aligned16(p.w));
  const bool vec = aligned && vec_ok(p.S, p.D, p.cl, V);
  const bool smem_fits = smem_bwd_fits(p, vec ? V : 1);
  const int64_t cl_small_smem = 2 * p.S * V * int64_t(sizeof(T));
  if (!stats_given && cl_small_ok(p, aligned) &&
      cl_small_smem + 32 * V * int64_t(sizeof(A)) + 1024 <= max_smem_optin()) {
    const int threads = smem_threads(p.S);
    allow_max_dynamic_smem<gn_smem_bwd_cl_small<T>>();  // once per device
    const int64_t grid = resident_grid<gn_smem_bwd_cl_small<T>>(p.N * (p.C / V), threads, size_t(cl_small_smem));
    gn_smem_bwd_cl_small<T><<<unsigned(grid), threads, size_t(cl_small_smem), stream>>>(p, w);
  } else if (!stats_given && !(!p.cl && smem_fits && knobs.plan == GnPlan::Auto) &&
             try_cluster_bwd(p, w.P, w.Q, vec, knobs, stream)) {
    // (NCHW groups that fit shared memory take the per-(n, group) kernels below by default, gn_bulk_bwd on sm_90:
    // both measured faster than the K = 2 cluster plan; docs/group_norm.md)
  } else if (!stats_given && try_bulk_bwd(p, w, vec, knobs, stream)) {
  } else if (!stats_given && smem_fits) {
    if (vec) launch_smem_bwd<T, V>(p, w, stream);
    else launch_smem_bwd<T, 1>(p, w, stream);
  } else {
    if (p.out) {
      if (!stats_given) {
        gn_chunk_bwd<T><<<grid_for(NG * c.K, 1, 4, 8), kChunkThreads, 0, stream>>>(p, w.partial, c.K, c.chunk);
        gn_finalize_bwd<T><<<unsigned((NG + 255) / 256), 256, 0, stream>>>(p, w.partial, w.coef, c.K);
      }
      const int64_t numel = p.N * p.C * p.S;
      const bool vec_apply = aligned && (p.cl ? p.C % V == 0 : p.S % V == 0);
      const unsigned grid = vec_apply ? grid_for(numel / V, 256, 4, 8) : grid_for(numel, 256, 4, 8);
      if (stats_given) {
        if (vec_apply) gn_apply_bwd<T, V, true><<<grid, 256, 0, stream>>>(p, w.coef);
        else gn_apply_bwd<T, 1, true><<<grid, 256, 0, stream>>>(p, w.coef);
      } else {
        if (vec_apply) gn_apply_bwd<T, V, false><<<grid, 256, 0, stream>>>(p, w.coef);
        else gn_apply_bwd<T, 1, false><<<grid, 256, 0, stream>>>(p, w.coef);
      }
    }
    if (w.P) gn_channel_sums<T><<<grid_for(p.N * p.C, 1, 4, 8), 256, 0, stream>>>(p, w.P, w.Q);
  }
  if (dw) launch_column_sum<T>(w.P, dw, p.N, p.C, stream);
  if (db) launch_column_sum<T>(w.Q, db, p.N, p.C, stream);
}

}  // namespace group_norm
}  // namespace torch_dnn
