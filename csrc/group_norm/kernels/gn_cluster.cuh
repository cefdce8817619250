// group_norm through thread-block clusters (sm_90): the "cluster" plan, forward and backward.
//
// An item is (n, W channels): NCHW one group (W = D); channels-last gw whole groups whose W channels make a
// row of up to 128 bytes (C = 256 bf16, D = 8: W = 64, 8 groups), so that every warp reads whole 128-byte
// lines instead of 16-byte pieces at a 512-byte stride. A cluster of K CTAs takes an item; CTA r holds the
// spatial range [r * chunk, (r + 1) * chunk) of the item's W channels in shared memory, loaded ONCE with
// cp.async (every 16-byte piece of the tile in flight at once, no registers), so a CTA tile stays ~50 KB and 4
// CTAs fit on an SM. Per-group (forward) or per-channel (backward) partial sums of each CTA are exchanged
// through distributed shared memory and added in rank order: deterministic, no atomics. DRAM: forward 1 read +
// 1 write, backward 2 reads + 1 write, the minimum.
//
// Thread mapping (kept identical in every phase, so a thread reads back only the tile pieces it loaded: no
// barrier around the tile):
//   channels-last  tile [rows][W], CV = W / V vectors a row; thread t always holds column vector t % CV
//                  (blockDim % CV == 0), so its V channels and its group are fixed.
//   NCHW           tile [W][rows] (W = D channel rows of `rows` contiguous elements); loops over rows d, the
//                  row's vectors j = t, t + blockDim, ...
//   The forward's Y_NCHW variant (channels-last x, y written contiguous) reads the tile down its columns in the
//   write phase instead: a barrier before each item's load.
// Exchange protocol: each phase writes its CTA's partials to `part`, cluster.sync() (release/acquire across
// the cluster), then a few threads add the K ranks' partials in rank order into local `tot`. The forward's two
// phases use separate halves of `part`; the backward alternates halves by item parity. A remote CTA reads a
// half only between the sync that published it and its next sync, which the writer must pass before it
// rewrites that half. A final cluster.sync() keeps every CTA's shared memory alive until the others are done.
#pragma once
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/cuda/cp_async.cuh"
#include "group_norm/group_norm_plan.h"
#include "group_norm/kernels/gn_common.cuh"

// The kernels' cluster, dynamic shared memory and device-code guard; tests/emulation/gn_cluster_emulation.cpp
// replaces them to run the kernels on the CPU (TORCH_DNN_EMULATE_CUDA).
#ifdef TORCH_DNN_EMULATE_CUDA
#define GN_CLUSTER_DEVICE_CODE 1
#define GN_THIS_CLUSTER() emu_this_cluster()
#define GN_DYNAMIC_SMEM(name) unsigned char* name = emu_dynamic_smem()
#define GN_STORE_V4(p, v) store_vec(p, v)
#else
#include <cooperative_groups.h>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GN_CLUSTER_DEVICE_CODE 1
#else
#define GN_CLUSTER_DEVICE_CODE 0
#endif
#define GN_THIS_CLUSTER() cooperative_groups::this_cluster()
#define GN_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
// One st.global.v4 for a 16-byte vector of y (as a plain store, NVVM split the channels-last-to-contiguous
// forward's stores into 4- and 8-byte pieces); a plain store in the emulation.
#define GN_STORE_V4(p, v) store_vec_global_v4(p, v)
#endif

namespace torch_dnn {
namespace group_norm {

constexpr int kClusterThreads = 256;

// Geometry of one launch (host-chosen, identical in every CTA).
struct ClusterGeo {
  int64_t W;      // channels an item
  int64_t chunk;  // spatial elements (NCHW) / rows (channels-last) a CTA
};

// The CTA's tile: x (and dy) -> shared memory, all pieces in flight, then waited for.
template <typename T, bool CL>
__device__ __forceinline__ void tile_load(const T* src, T* dst, const GnParams<T>& p, int64_t n, int64_t c0,
                                          unsigned W, int64_t s0, unsigned rows) {
  constexpr int V = kVec16<T>;
  if constexpr (CL) {
    const unsigned CV = W / V, nvec = rows * CV;
    for (unsigned i = threadIdx.x; i < nvec; i += blockDim.x) {
      const unsigned row = i / CV, cv = i - row * CV;
      cp_async16(dst + size_t(i) * V, src + (n * p.S + s0 + row) * p.C + c0 + cv * V);
    }
  } else {
    const unsigned RV = rows / V;
    for (unsigned d = 0; d < W; ++d)
      for (unsigned j = threadIdx.x; j < RV; j += blockDim.x)
        cp_async16(dst + size_t(d * RV + j) * V, src + (n * p.C + c0 + d) * p.S + s0 + int64_t(j) * V);
  }
}

// Per-thread sums -> per-slot CTA sums (fixed order). A slot is a group (forward) or a channel (backward,
// two values a slot). Channels-last: a thread's values belong to column vector t % CV (xor shuffles over the
// lanes of one column, then warps in order). red: [nwarps][ncols * NV]; out: [slots][NV] written by threads
// t < slots, each summing `span` consecutive columns.
template <int NV, typename A>
__device__ __forceinline__ void cta_slot_sums(A (&v)[NV], unsigned ncols, unsigned slots, unsigned span, A* red,
                                              A* out) {
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (unsigned o = ncols; o < 32; o <<= 1)
#pragma unroll
    for (int k = 0; k < NV; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
  if (lane < ncols)
#pragma unroll
    for (int k = 0; k < NV; ++k) red[(warp * ncols + lane) * NV + k] = v[k];
  __syncthreads();
  if (threadIdx.x < slots) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      A t = A(0);
      for (unsigned w = 0; w < nwarps; ++w)
        for (unsigned c = threadIdx.x * span; c < (threadIdx.x + 1) * span; ++c) t += red[(w * ncols + c) * NV + k];
      out[threadIdx.x * NV + k] = t;
    }
  }
}

// tot[i] = sum over the cluster's ranks, in rank order, of part[i] (i < count): after cluster.sync().
template <typename Cluster, typename A>  // Cluster: cooperative_groups::cluster_group (sm_80 passes lack the type)
__device__ __forceinline__ void cluster_add(Cluster& cluster, A* part, A* tot, unsigned count) {
  const unsigned K = cluster.num_blocks();
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) {
    A t = A(0);
    for (unsigned q = 0; q < K; ++q) t += cluster.map_shared_rank(part, q)[i];
    tot[i] = t;
  }
}

// Dynamic shared memory: tile(s) [chunk * W] T, then red [nwarps * W * 2], part [2][W * 2], tot [W * 2],
// coef [W * 2] accumulation values.
template <typename T>
__device__ __forceinline__ acc_t<T>* cluster_scratch(unsigned char* smem, int64_t tile_elems, int tiles) {
  return reinterpret_cast<acc_t<T>*>(smem + size_t(tile_elems) * tiles * sizeof(T));
}

// Y_NCHW (with CL): y is written contiguous ([N][C][S]), PyTorch's CUDA layout, from the channels-last tile.
template <typename T, bool CL, bool Y_NCHW = false>
__global__ void __launch_bounds__(kClusterThreads, 4) gn_cluster_fwd(GnParams<T> p, ClusterGeo geo) {
#if GN_CLUSTER_DEVICE_CODE
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  auto cluster = GN_THIS_CLUSTER();
  const unsigned K = cluster.num_blocks(), r = cluster.block_rank();
  GN_DYNAMIC_SMEM(smem_raw);
  const unsigned W = unsigned(geo.W), D = unsigned(p.D), gw = W / D, nwarps = blockDim.x >> 5;
  T* buf = reinterpret_cast<T*>(smem_raw);
  A* red = cluster_scratch<T>(smem_raw, geo.chunk * geo.W, 1);
  A* part = red + nwarps * W * 2;  // [0, W): sums; [W, 2W): squared deviations
  A* tot = part + 4 * W;           // [gw][2]: mean, rstd
  const int64_t s0 = std::min<int64_t>(p.S, int64_t(r) * geo.chunk);
  const unsigned rows = unsigned(std::min<int64_t>(p.S, s0 + geo.chunk) - s0);  // 0 for trailing ranks
  const int64_t per_n = p.C / W, items = p.N * per_n;
  // channels-last: column vector and group of this thread; NCHW: one column, one group
  const unsigned CV = CL ? W / V : 1, cv = CL ? threadIdx.x % CV : 0, grp = CL ? cv * V / D : 0;
  const unsigned span = CL ? D / V : 1, nvec = CL ? rows * CV : 0, RV = CL ? 0 : rows / V;
  const Vec<T, V>* bv = reinterpret_cast<const Vec<T, V>*>(buf);
  for (int64_t item = blockIdx.x / K; item < items; item += gridDim.x / K) {
    const int64_t n = item / per_n, c0 = (item - n * per_n) * W, ng0 = n * p.G + c0 / D;
    // Y_NCHW reads the tile down its columns, not by the pieces a thread loaded: a barrier before it is overwritten
    if constexpr (Y_NCHW) __syncthreads();
    tile_load<T, CL>(p.x, buf, p, n, c0, W, s0, rows);
    cp_async_wait_all();
    // mean: per-thread sums -> per-group CTA sums -> cluster sums in rank order
    A s[1] = {A(0)};
    if constexpr (CL) {
      for (unsigned i = threadIdx.x; i < nvec; i += blockDim.x) {
        const Vec<T, V> v = bv[i];
#pragma unroll
        for (int j = 0; j < V; ++j) s[0] += to_acc<A>(v.v[j]);
      }
    } else {
      for (unsigned d = 0; d < W; ++d)
        for (unsigned j = threadIdx.x; j < RV; j += blockDim.x) {
          const Vec<T, V> v = bv[d * RV + j];
#pragma unroll
          for (int k = 0; k < V; ++k) s[0] += to_acc<A>(v.v[k]);
        }
    }
    cta_slot_sums<1>(s, CV, gw, span, red, part);
    cluster.sync();
    if (threadIdx.x < gw) {
      A t = A(0);
      for (unsigned q = 0; q < K; ++q) t += cluster.map_shared_rank(part, q)[threadIdx.x];
      tot[2 * threadIdx.x] = t / A(p.L);
    }
    __syncthreads();
    // variance: exact second pass over the tile
    const A m = tot[2 * grp];
    s[0] = A(0);
    if constexpr (CL) {
      for (unsigned i = threadIdx.x; i < nvec; i += blockDim.x) {
        const Vec<T, V> v = bv[i];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A dv = to_acc<A>(v.v[j]) - m;
          s[0] += dv * dv;
        }
      }
    } else {
      for (unsigned d = 0; d < W; ++d)
        for (unsigned j = threadIdx.x; j < RV; j += blockDim.x) {
          const Vec<T, V> v = bv[d * RV + j];
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const A dv = to_acc<A>(v.v[k]) - m;
            s[0] += dv * dv;
          }
        }
    }
    cta_slot_sums<1>(s, CV, gw, span, red, part + W);
    cluster.sync();
    if (threadIdx.x < gw) {
      A t = A(0);
      for (unsigned q = 0; q < K; ++q) t += cluster.map_shared_rank(part + W, q)[threadIdx.x];
      const A rs = rstd_of(t / A(p.L), p.eps);
      tot[2 * threadIdx.x + 1] = rs;
      if (r == 0) {
        p.mean[ng0 + threadIdx.x] = tot[2 * threadIdx.x];
        p.rstd[ng0 + threadIdx.x] = rs;
      }
    }
    __syncthreads();
    const A rs = tot[2 * grp + 1];
    if constexpr (CL && Y_NCHW) {
      // a thread takes channel c of the item (fixed: W divides blockDim) and V rows at a time: reads the tile down
      // column c (a warp's lanes on consecutive channels: conflict-free where W >= 32) and stores one vector to the
      // channel's row of y (rows, s0 and S are multiples of V: cluster_choice)
      const unsigned c = threadIdx.x % W, g = c / D;
      const A mc = tot[2 * g], rc = tot[2 * g + 1];
      const A wc = p.w ? to_acc<A>(p.w[c0 + c]) : A(1), bc = p.b ? to_acc<A>(p.b[c0 + c]) : A(0);
      T* yc = p.out + (n * p.C + c0 + c) * p.S + s0;
      for (unsigned rv = threadIdx.x / W; rv < rows / V; rv += blockDim.x / W) {
        Vec<T, V> o;
#pragma unroll
        for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>((to_acc<A>(buf[(rv * V + j) * W + c]) - mc) * rc * wc + bc);
        GN_STORE_V4(yc + rv * V, o);
      }
    } else if constexpr (CL) {
      A wv[V], bb[V];
      norm::load_param<V>(p.w, c0 + cv * V, A(1), wv);
      norm::load_param<V>(p.b, c0 + cv * V, A(0), bb);
      for (unsigned i = threadIdx.x; i < nvec; i += blockDim.x) {
        const Vec<T, V> v = bv[i];
        Vec<T, V> o;
#pragma unroll
        for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>((to_acc<A>(v.v[j]) - m) * rs * wv[j] + bb[j]);
        const unsigned row = i / CV;
        store_vec<T, V>(p.out + (n * p.S + s0 + row) * p.C + c0 + cv * V, o);
      }
    } else {
      for (unsigned d = 0; d < W; ++d) {
        const A wc = p.w ? to_acc<A>(p.w[c0 + d]) : A(1), bc = p.b ? to_acc<A>(p.b[c0 + d]) : A(0);
        for (unsigned j = threadIdx.x; j < RV; j += blockDim.x) {
          const Vec<T, V> v = bv[d * RV + j];
          Vec<T, V> o;
#pragma unroll
          for (int k = 0; k < V; ++k) o.v[k] = from_acc<T>((to_acc<A>(v.v[k]) - m) * rs * wc + bc);
          store_vec<T, V>(p.out + (n * p.C + c0 + d) * p.S + s0 + int64_t(j) * V, o);
        }
      }
    }
  }
  cluster.sync();
#endif
}

// Backward: per-channel P = sum dy * xhat, Q = sum dy over the cluster, then
// dx = rstd * (w dy - xhat * sum_c(w P) / L - sum_c(w Q) / L) from the tiles.
template <typename T, bool CL>
__global__ void __launch_bounds__(kClusterThreads, 4) gn_cluster_bwd(GnParams<T> p, ClusterGeo geo, acc_t<T>* wsP,
                                                                      acc_t<T>* wsQ) {
#if GN_CLUSTER_DEVICE_CODE
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  auto cluster = GN_THIS_CLUSTER();
  const unsigned K = cluster.num_blocks(), r = cluster.block_rank();
  GN_DYNAMIC_SMEM(smem_raw);
  const unsigned W = unsigned(geo.W), D = unsigned(p.D), gw = W / D, nwarps = blockDim.x >> 5;
  const int64_t tile = geo.chunk * geo.W;
  T* bx = reinterpret_cast<T*>(smem_raw);
  T* bdy = bx + tile;
  A* red = cluster_scratch<T>(smem_raw, tile, 2);
  A* part = red + nwarps * W * 2;  // two halves of [W][2], alternating by item
  A* tot = part + 4 * W;           // [W][2]: cluster P, Q of each channel
  A* coef = tot + 2 * W;           // [gw][2]: sum(w P) / L, sum(w Q) / L
  const int64_t s0 = std::min<int64_t>(p.S, int64_t(r) * geo.chunk);
  const unsigned rows = unsigned(std::min<int64_t>(p.S, s0 + geo.chunk) - s0);
  const int64_t per_n = p.C / W, items = p.N * per_n;
  const unsigned CV = CL ? W / V : 1, cv = CL ? threadIdx.x % CV : 0, grp = CL ? cv * V / D : 0;
  const unsigned nvec = CL ? rows * CV : 0, RV = CL ? 0 : rows / V;
  const Vec<T, V>* vx = reinterpret_cast<const Vec<T, V>*>(bx);
  const Vec<T, V>* vdy = reinterpret_cast<const Vec<T, V>*>(bdy);
  unsigned parity = 0;
  for (int64_t item = blockIdx.x / K; item < items; item += gridDim.x / K, parity ^= 1u) {
    const int64_t n = item / per_n, c0 = (item - n * per_n) * W, ng0 = n * p.G + c0 / D;
    A* half = part + parity * 2 * W;
    // NCHW reads the tile by channel rows (a warp a channel), not by the pieces a thread loaded: barriers
    // before the tile is overwritten and after it has landed
    if constexpr (!CL) __syncthreads();
    tile_load<T, CL>(p.x, bx, p, n, c0, W, s0, rows);
    tile_load<T, CL>(p.dy, bdy, p, n, c0, W, s0, rows);
    cp_async_wait_all();
    if constexpr (!CL) __syncthreads();
    const A m = p.mean[ng0 + grp], rs = p.rstd[ng0 + grp];
    if constexpr (CL) {
      A pq[2 * V];  // P, Q of the thread's V channels
#pragma unroll
      for (int k = 0; k < 2 * V; ++k) pq[k] = A(0);
      for (unsigned i = threadIdx.x; i < nvec; i += blockDim.x) {
        const Vec<T, V> xv = vx[i], gv = vdy[i];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A g = to_acc<A>(gv.v[j]);
          pq[2 * j] += g * (to_acc<A>(xv.v[j]) - m) * rs;
          pq[2 * j + 1] += g;
        }
      }
      // the thread's column holds V channels: slots are channels, 2 values each ([ncols * V][2] per warp)
      // slots = 0: cta_slot_sums leaves red [nwarps][W][2] complete (after its barrier); channels summed here
      cta_slot_sums<2 * V>(pq, CV, 0, 1, red, half);
      if (threadIdx.x < W) {
        A t0 = A(0), t1 = A(0);
        for (unsigned w = 0; w < nwarps; ++w) {
          t0 += red[(w * CV) * 2 * V + 2 * threadIdx.x];
          t1 += red[(w * CV) * 2 * V + 2 * threadIdx.x + 1];
        }
        half[2 * threadIdx.x] = t0;
        half[2 * threadIdx.x + 1] = t1;
      }
    } else {
      // wpr warps take each channel row (a warp a row when W >= 8 warps, as here: W = D = 8): the rows' 196
      // vectors kept a quarter of a 256-thread block idle when the whole block walked one row at a time.
      // rstd is applied once to the channel's sum.
      const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
      const unsigned wpr = nwarps > W ? nwarps / W : 1, part_of = warp % wpr;
      for (unsigned d = warp / wpr; d < W; d += nwarps / wpr) {
        A pc = A(0), qc = A(0);
        for (unsigned j = part_of * 32 + lane; j < RV; j += wpr * 32) {
          add_dy_sums(vx[d * RV + j], vdy[d * RV + j], m, pc, qc);
        }
        pc = warp_reduce(pc, SumOp{});
        qc = warp_reduce(qc, SumOp{});
        if (lane == 0) {  // slot (row, part): red holds nwarps * W pairs, W * wpr <= max(W, nwarps) are used
          red[2 * (d * wpr + part_of)] = pc;
          red[2 * (d * wpr + part_of) + 1] = qc;
        }
      }
      __syncthreads();
      for (unsigned d = threadIdx.x; d < W; d += blockDim.x) {
        A t0 = A(0), t1 = A(0);
        for (unsigned q = d * wpr; q < (d + 1) * wpr; ++q) {
          t0 += red[2 * q];
          t1 += red[2 * q + 1];
        }
        half[2 * d] = t0 * rs;
        half[2 * d + 1] = t1;
      }
    }
    cluster.sync();
    cluster_add(cluster, half, tot, 2 * W);
    __syncthreads();
    for (unsigned t = threadIdx.x; t < W; t += blockDim.x) {
      if (r == 0 && wsP) {
        wsP[n * p.C + c0 + t] = tot[2 * t];
        wsQ[n * p.C + c0 + t] = tot[2 * t + 1];
      }
    }
    for (unsigned t = threadIdx.x; t < gw; t += blockDim.x) {
      A c1 = A(0), c2 = A(0);
      for (unsigned d = t * D; d < (t + 1) * D; ++d) {
        const A wc = p.w ? to_acc<A>(p.w[c0 + d]) : A(1);
        c1 += wc * tot[2 * d];
        c2 += wc * tot[2 * d + 1];
      }
      coef[2 * t] = c1 / A(p.L);
      coef[2 * t + 1] = c2 / A(p.L);
    }
    __syncthreads();
    if (!p.out) continue;
    const A c1 = coef[2 * grp], c2 = coef[2 * grp + 1];
    if constexpr (CL) {
      A wv[V];
      norm::load_param<V>(p.w, c0 + cv * V, A(1), wv);
      for (unsigned i = threadIdx.x; i < nvec; i += blockDim.x) {
        const Vec<T, V> xv = vx[i], gv = vdy[i];
        Vec<T, V> o;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const A xh = (to_acc<A>(xv.v[j]) - m) * rs;
          o.v[j] = from_acc<T>(rs * (to_acc<A>(gv.v[j]) * wv[j] - xh * c1 - c2));
        }
        const unsigned row = i / CV;
        store_vec<T, V>(p.out + (n * p.S + s0 + row) * p.C + c0 + cv * V, o);
      }
    } else {
      // dx = rstd (dy w - xhat c1 - c2) = a dy - b (x - mean) - e, a = rstd w, b = rstd^2 c1, e = rstd c2
      const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
      const unsigned wpr = nwarps > W ? nwarps / W : 1, part_of = warp % wpr;
      const A b = rs * rs * c1, e = rs * c2;
      for (unsigned d = warp / wpr; d < W; d += nwarps / wpr) {
        const A a = rs * (p.w ? to_acc<A>(p.w[c0 + d]) : A(1));
        T* out = p.out + (n * p.C + c0 + d) * p.S + s0;
        for (unsigned j = part_of * 32 + lane; j < RV; j += wpr * 32) {
          const Vec<T, V> xv = vx[d * RV + j], gv = vdy[d * RV + j];
          Vec<T, V> o;
#pragma unroll
          for (int k = 0; k < V; ++k)
            o.v[k] = from_acc<T>(a * to_acc<A>(gv.v[k]) - (b * (to_acc<A>(xv.v[k]) - m) + e));
          store_vec<T, V>(out + int64_t(j) * V, o);
        }
      }
    }
  }
  cluster.sync();
#endif
}

// ---- host: the cluster plan's choice and launch ----

struct ClusterChoice {
  bool ok = false;
  int K = 1;
  ClusterGeo geo{0, 0};
  size_t smem = 0;
  int64_t items = 0;
};

// Item width W (see the top of this file), then the smallest power-of-two cluster whose CTA tile fits the
// budget. tiles: 1 (x) forward, 2 (x, dy) backward.
template <typename T>
ClusterChoice cluster_choice(const GnParams<T>& p, int tiles, int K) {
  using A = acc_t<T>;
  constexpr int V = kVec16<T>;
  ClusterChoice c;
  int64_t W = 0;
  if (p.cl) {
    if (p.D % V != 0 || (p.out_nchw && p.S % V != 0)) return c;
    for (int64_t gw = 1; gw <= p.G; ++gw) {
      if (p.G % gw != 0) continue;
      const int64_t w = gw * p.D, cv = w / V;
      if (cv > 32) break;
      if ((cv & (cv - 1)) == 0 && (W == 0 || w * int64_t(sizeof(T)) <= 128)) W = w;
    }
  } else {
    if (p.S % V != 0) return c;
    W = p.D;
  }
  if (W == 0) return c;  // c.geo.W == 0: the plan does not apply
  int64_t chunk = (p.S + K - 1) / K;
  if (!p.cl || p.out_nchw) chunk = (chunk + V - 1) / V * V;  // whole vectors of y's (x's) contiguous rows
  const int64_t tile = chunk * W * int64_t(sizeof(T)) * tiles;
  const int64_t scratch = W * (2 * (kClusterThreads / 32) + 8) * int64_t(sizeof(A));
  c.K = K;
  c.geo = {W, chunk};
  c.smem = size_t(tile + scratch);
  c.ok = tile + scratch + 1024 <= max_smem_optin();
  c.items = p.N * (p.C / W);
  return c;
}

// Resident clusters of (device, kernel, K, smem), or 0 where the plan cannot run: cached, because the
// attribute and occupancy queries cost more host time than a launch. The kernel's dynamic shared-memory limit
// is raised to the device's opt-in maximum (a cap, not a request: occupancy follows each launch's own size), so
// no launch has to set it again.
template <typename Kern>
int resident_clusters(Kern* kernel, int K, size_t smem, cudaStream_t stream) {
  struct Entry {
    int dev;
    const void* fn;
    int K;
    size_t smem;
    int clusters;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  int dev = 0;
  cudaGetDevice(&dev);
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Entry& e : cache)
      if (e.dev == dev && e.fn == reinterpret_cast<const void*>(kernel) && e.K == K && e.smem == smem) return e.clusters;
  }
  int clusters = 0;
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.binaryVersion >= 90 &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_optin()) == cudaSuccess &&
      (K <= 8 || cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess)) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(K);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    // {gridDim, blockDim, dynamicSmemBytes, stream, attrs, numAttrs} (positional: the emulation macro-renames
    // the grid and block fields' names)
    const cudaLaunchConfig_t query = {dim3(unsigned(K)), dim3(kClusterThreads), smem, stream, attr, 1};
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &query) != cudaSuccess) clusters = -1;
  } else {
    clusters = -1;
  }
  if (clusters < 0) {
    cudaGetLastError();  // a failed query leaves no error behind
    clusters = 0;
  }
  std::lock_guard<std::mutex> lock(mu);
  cache.push_back({dev, reinterpret_cast<const void*>(kernel), K, smem, clusters});
  return clusters;
}

// Launches kernel in clusters of c.K CTAs, as many clusters as fit at once (persistent), at most one an item.
// false (nothing launched, no error left behind) where this build or device cannot run it.
// Launches kernel in clusters of c.K CTAs, as many clusters as fit at once (persistent), at most one an item.
// false (nothing launched, no error left behind) where this build or device cannot run it.
template <typename Kern, typename... Args>
bool launch_clustered(Kern* kernel, const ClusterChoice& c, cudaStream_t stream, Args... args) {
  const int clusters = resident_clusters(kernel, c.K, c.smem, stream);
  if (clusters < 1) return false;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(c.K);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  const cudaLaunchConfig_t cfg = {dim3(unsigned(std::min<int64_t>(c.items, clusters) * c.K)), dim3(kClusterThreads),
                                  c.smem, stream, attr, 1};
  cudaLaunchKernelEx(&cfg, kernel, args...);  // a launch error stays for the entry point to report
  return true;
}

// Tries cluster sizes from the budget's choice down to 1 (a larger cluster may not be schedulable).
// knobs (group_norm_plan.h): the plan, the cluster size cap and the CTA tile budget.
template <typename T, typename Launch>
bool run_cluster_plan(const GnParams<T>& p, int tiles, const Knobs& knobs, Launch&& launch) {
  const GnPlan plan = knobs.plan;
  if (plan == GnPlan::Smem) return false;
  const int kmax = knobs.cluster_max;
  const int64_t budget = int64_t(knobs.tile_kb) * 1024;
  int K = 1;
  for (;; K *= 2) {
    const ClusterChoice c = cluster_choice(p, tiles, K);
    if (c.geo.W == 0) return false;
    if (K * 2 > kmax || c.geo.chunk * c.geo.W * int64_t(sizeof(T)) * tiles <= budget) break;
  }
  if (plan == GnPlan::Auto && !p.cl && K == 1) return false;
  for (; K >= 1; K /= 2) {
    const ClusterChoice c = cluster_choice(p, tiles, K);
    if (c.ok && launch(c)) return true;
  }
  return false;
}

// aligned: every pointer the kernels read or write by 16-byte vectors.
template <typename T>
bool try_cluster_fwd(const GnParams<T>& p, bool aligned, const Knobs& knobs, cudaStream_t stream) {
  if (!aligned) return false;
  return run_cluster_plan(p, 1, knobs, [&](const ClusterChoice& c) {
    if (p.cl && p.out_nchw) return launch_clustered(gn_cluster_fwd<T, true, true>, c, stream, p, c.geo);
    return p.cl ? launch_clustered(gn_cluster_fwd<T, true>, c, stream, p, c.geo)
                : launch_clustered(gn_cluster_fwd<T, false>, c, stream, p, c.geo);
  });
}

template <typename T>
bool try_cluster_bwd(const GnParams<T>& p, acc_t<T>* P, acc_t<T>* Q, bool aligned, const Knobs& knobs,
                     cudaStream_t stream) {
  if (!aligned) return false;
  return run_cluster_plan(p, 2, knobs, [&](const ClusterChoice& c) {
    return p.cl ? launch_clustered(gn_cluster_bwd<T, true>, c, stream, p, c.geo, P, Q)
                : launch_clustered(gn_cluster_bwd<T, false>, c, stream, p, c.geo, P, Q);
  });
}

}  // namespace group_norm
}  // namespace torch_dnn
