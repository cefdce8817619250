// batch_norm CUDA launchers. The kernels are in kernels/ (bn_common.cuh says how the tensor is walked): bn_stats,
// bn_reduce, bn_elementwise, bn_coeffs, bn_channel, bn_persistent; the launch geometry and plans in
// batch_norm_plan.h.
#include "batch_norm/batch_norm_kernels.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "batch_norm/batch_norm_plan.h"
#include "batch_norm/kernels/bn_channel.cuh"
#include "batch_norm/kernels/bn_coeffs.cuh"
#include "batch_norm/kernels/bn_elementwise.cuh"
#include "batch_norm/kernels/bn_persistent.cuh"
#include "batch_norm/kernels/bn_reduce.cuh"
#include "batch_norm/kernels/bn_stats.cuh"
#include "common/cuda/device.cuh"
#include "common/cuda/int_math.h"
#include "common/cuda/vec.cuh"
#include "common/env.h"

namespace torch_dnn {
namespace batch_norm {
namespace {

template <typename T, int V, class Op>
void launch_elementwise(const Op& op, const BnShape& s, cudaStream_t stream) {
  if (s.inner == 1) {
    const RowsGeom g = rows_geom<T>(s, V > 1);
    const int64_t most = ceil_div(s.outer, g.TY);
    int64_t gy = ceil_div(int64_t(sm_count()) * 8, g.gx);
    gy = gy < most ? gy : most;
    gy = gy < 65535 ? gy : 65535;
    elementwise_rows<V><<<dim3(unsigned(g.gx), unsigned(gy < 1 ? 1 : gy)), kThreads, 0, stream>>>(op, s.outer, s.C,
                                                                                                    g.TX);
  } else {
    const int64_t planes = s.outer * s.C, pieces = pieces_of<T>(s, V > 1);
    elementwise_planes<V><<<grid_for(planes * pieces, kWarps, 1), kThreads, 0, stream>>>(op, planes, s.C, s.inner,
                                                                                         pieces);
  }
}

template <class K, class Args>
cudaError_t launch_cooperative_once(K kernel, const PersistGeom& g, const Args& args, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(g.G));
  cfg.blockDim = dim3(kPersistThreads);
  cfg.dynamicSmemBytes = g.smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args);
}

// The launch; with TORCH_DNN_BN_TRACE=1 it also waits for the kernel and prints each phase's end (min / max
// over the blocks, microseconds from the first block's start) to stderr.
template <class K, class Args>
cudaError_t launch_cooperative(K kernel, const PersistGeom& g, Args args, cudaStream_t stream) {
  if (env::get_int("TORCH_DNN_BN_TRACE", 0) != 1) return launch_cooperative_once(kernel, g, args, stream);
  const size_t n = size_t(g.G) * kTracePoints;
  cudaError_t err = cudaMalloc(&args.trace, n * sizeof(unsigned long long));
  if (err != cudaSuccess) return err;
  err = launch_cooperative_once(kernel, g, args, stream);
  std::vector<unsigned long long> t(n);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess) err = cudaMemcpy(t.data(), args.trace, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
  cudaFree(args.trace);
  if (err != cudaSuccess) return err;
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < g.G; ++b) t0 = std::min(t0, t[size_t(b) * kTracePoints]);
  std::fprintf(stderr, "bn persistent trace (us from the first start, min..max over %d blocks):", g.G);
  for (int k = 0; k < kTracePoints; ++k) {
    unsigned long long lo = ~0ull, hi = 0;
    for (int b = 0; b < g.G; ++b) {
      lo = std::min(lo, t[size_t(b) * kTracePoints + k]);
      hi = std::max(hi, t[size_t(b) * kTracePoints + k]);
    }
    std::fprintf(stderr, " [%d] %.1f..%.1f", k, (lo - t0) * 1e-3, (hi - t0) * 1e-3);
  }
  std::fprintf(stderr, "\n");
  return cudaSuccess;
}

// The whole-channel kernels' grids: every channel at once where the device holds that many blocks, else as many
// blocks as it holds, each taking channels in turn.
template <typename T, int V>
void run_channel_forward(const BnShape& s, const T* x, T* y, const FwdCoeffPtrs& p, cudaStream_t stream) {
  const unsigned grid = unsigned(resident_grid<channel_forward<T, V>>(s.C, kThreads));
  channel_forward<T, V><<<grid, kThreads, 0, stream>>>(x, y, s.outer, s.C, s.inner, pieces_of<T>(s, V > 1), p);
}
template <typename T, int V>
void run_channel_backward(const BnShape& s, const T* dy, const T* x, const acc_t<T>* mean, T* dx,
                          const BwdCoeffPtrs& p, cudaStream_t stream) {
  const unsigned grid = unsigned(resident_grid<channel_backward<T, V>>(s.C, kThreads));
  channel_backward<T, V><<<grid, kThreads, 0, stream>>>(dy, x, mean, dx, s.outer, s.C, s.inner,
                                                        pieces_of<T>(s, V > 1), p);
}

}  // namespace

int64_t stats_workspace(DType dtype, const BnShape& s) {
  if (empty(s)) return 0;
  int64_t n = 0;
  dispatch_dtype(dtype, [&](auto tag) { n = int64_t(reduction_splits<decltype(tag), true>(s)) * s.C * 3; });
  return n;
}

cudaError_t launch_stats(DType dtype, const BnShape& s, const void* x, void* mean, void* m2, void* ws,
                         cudaStream_t stream, const FwdCoeffPtrs* coeffs) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const int splits = reduction_splits<T, true>(s);
    const T* xp = static_cast<const T*>(x);
    A* part = static_cast<A*>(ws);
    constexpr int VM = kVec16<T>;
    const bool vec = use_vectors<T>(s, {x});
    if (s.inner == 1) {
      const RowsGeom g = rows_geom<T>(s, vec);
      const dim3 grid(unsigned(g.gx), unsigned(splits));
      if (vec)
        stats_rows<T, VM><<<grid, kThreads, 0, stream>>>(xp, s.outer, s.C, g.TX, part);
      else
        stats_rows<T, 1><<<grid, kThreads, 0, stream>>>(xp, s.outer, s.C, g.TX, part);
    } else {
      const dim3 grid(unsigned(s.C), unsigned(splits));
      if (vec)
        stats_planes<T, VM><<<grid, kThreads, 0, stream>>>(xp, s.outer, s.C, s.inner, pieces_of<T>(s, vec), part);
      else
        stats_planes<T, 1><<<grid, kThreads, 0, stream>>>(xp, s.outer, s.C, s.inner, pieces_of<T>(s, vec), part);
    }
    const unsigned blocks = unsigned(ceil_div(s.C, kWarps));
    if (coeffs != nullptr)
      stats_finalize<A, true><<<blocks, kThreads, 0, stream>>>(part, splits, s.C, nullptr, nullptr, *coeffs);
    else
      stats_finalize<A, false><<<blocks, kThreads, 0, stream>>>(part, splits, s.C, static_cast<A*>(mean),
                                                                 static_cast<A*>(m2), FwdCoeffPtrs{});
  });
  return cudaGetLastError();
}

bool channel_passes_fit(DType dtype, const BnShape& s) {
  bool fits = false;
  dispatch_dtype(dtype, [&](auto tag) { fits = channel_fits<decltype(tag)>(s); });
  return fits;
}

cudaError_t launch_channel_forward(DType dtype, const BnShape& s, const void* x, void* y, const FwdCoeffPtrs& p,
                                   cudaStream_t stream) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    if (use_vectors<T>(s, {x, y}))
      run_channel_forward<T, kVec16<T>>(s, xp, yp, p, stream);
    else
      run_channel_forward<T, 1>(s, xp, yp, p, stream);
  });
  return cudaGetLastError();
}

cudaError_t launch_channel_backward(DType dtype, const BnShape& s, const void* dy, const void* x, const void* mean,
                                    const BwdCoeffPtrs& p, void* dx, cudaStream_t stream) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T *dyp = static_cast<const T*>(dy), *xp = static_cast<const T*>(x);
    const A* mp = static_cast<const A*>(mean);
    T* dxp = static_cast<T*>(dx);
    if (use_vectors<T>(s, {dy, x, dx}))
      run_channel_backward<T, kVec16<T>>(s, dyp, xp, mp, dxp, p, stream);
    else
      run_channel_backward<T, 1>(s, dyp, xp, mp, dxp, p, stream);
  });
  return cudaGetLastError();
}

cudaError_t launch_apply(DType dtype, const BnShape& s, const void* x, const void* res, const void* scale,
                         const void* shift, void* y, int act, cudaStream_t stream) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const ApplyOp<T> op{static_cast<const T*>(x), static_cast<const T*>(res), static_cast<const A*>(scale),
                        static_cast<const A*>(shift), static_cast<T*>(y), act};
    if (use_vectors<T>(s, {x, res, y}))
      launch_elementwise<T, kVec16<T>>(op, s, stream);
    else
      launch_elementwise<T, 1>(op, s, stream);
  });
  return cudaGetLastError();
}

cudaError_t launch_eval_apply(DType dtype, const BnShape& s, const void* x, const void* res, void* y, int act,
                              const FwdCoeffPtrs& p, cudaStream_t stream) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const EvalApplyOp<T> op{{static_cast<const T*>(x), static_cast<const T*>(res), nullptr, nullptr, static_cast<T*>(y),
                             act},
                            p};
    if (use_vectors<T>(s, {x, res, y}))
      launch_elementwise<T, kVec16<T>>(op, s, stream);
    else
      launch_elementwise<T, 1>(op, s, stream);
  });
  return cudaGetLastError();
}

int64_t reduce_workspace(DType dtype, const BnShape& s) {
  if (empty(s)) return 0;
  int64_t n = 0;
  dispatch_dtype(dtype, [&](auto tag) { n = int64_t(reduction_splits<decltype(tag), false>(s)) * s.C * 2; });
  return n;
}

cudaError_t launch_reduce(DType dtype, const BnShape& s, const void* dy, const void* x, const void* res,
                          const void* scale, const void* shift, const void* mean, int act, void* dz, void* sum_dz,
                          void* sum_dz_xmu, void* ws, cudaStream_t stream, const BwdCoeffPtrs* coeffs) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const int splits = reduction_splits<T, false>(s);
    const GradArgs<T> g{static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(res),
                        static_cast<const A*>(scale), static_cast<const A*>(shift), static_cast<const A*>(mean),
                        static_cast<T*>(dz), act};
    A* part = static_cast<A*>(ws);
    constexpr int VM = kVec16<T>;
    const bool vec = use_vectors<T>(s, {dy, x, res, dz});
    const auto run = [&](auto act_tag) {
      constexpr bool ACT = decltype(act_tag)::value;
      if (s.inner == 1) {
        const RowsGeom geo = rows_geom<T>(s, vec);
        const dim3 grid(unsigned(geo.gx), unsigned(splits));
        if (vec)
          reduce_rows<T, VM, ACT><<<grid, kThreads, 0, stream>>>(g, s.outer, s.C, geo.TX, part);
        else
          reduce_rows<T, 1, ACT><<<grid, kThreads, 0, stream>>>(g, s.outer, s.C, geo.TX, part);
      } else {
        const dim3 grid(unsigned(s.C), unsigned(splits));
        if (vec)
          reduce_planes<T, VM, ACT><<<grid, kThreads, 0, stream>>>(g, s.outer, s.C, s.inner, pieces_of<T>(s, vec), part);
        else
          reduce_planes<T, 1, ACT><<<grid, kThreads, 0, stream>>>(g, s.outer, s.C, s.inner, pieces_of<T>(s, vec), part);
      }
    };
    if (act != 0)
      run(std::true_type{});
    else
      run(std::false_type{});
    const unsigned blocks = unsigned(ceil_div(s.C, kWarps));
    if (coeffs != nullptr)
      reduce_finalize<A, true><<<blocks, kThreads, 0, stream>>>(part, splits, s.C, nullptr, nullptr, *coeffs);
    else
      reduce_finalize<A, false><<<blocks, kThreads, 0, stream>>>(part, splits, s.C, static_cast<A*>(sum_dz),
                                                                 static_cast<A*>(sum_dz_xmu), BwdCoeffPtrs{});
  });
  return cudaGetLastError();
}

cudaError_t launch_elemt(DType dtype, const BnShape& s, const void* dz, const void* x, const void* mean,
                         const void* k, const void* a, const void* b, void* dx, cudaStream_t stream) {
  if (empty(s)) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const ElemtOp<T> op{static_cast<const T*>(dz), static_cast<const T*>(x), static_cast<const A*>(mean),
                        static_cast<const A*>(k), static_cast<const A*>(a), static_cast<const A*>(b),
                        static_cast<T*>(dx)};
    if (use_vectors<T>(s, {dz, x, dx}))
      launch_elementwise<T, kVec16<T>>(op, s, stream);
    else
      launch_elementwise<T, 1>(op, s, stream);
  });
  return cudaGetLastError();
}

PersistPlan plan_persist(DType dtype, const BnShape& s, PersistKind kind, std::initializer_list<const void*> ptrs) {
  PersistPlan plan;
  if (empty(s) || dtype == DType::Float64) return plan;
  for (const void* q : ptrs)
    if (!aligned16(q)) return plan;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      switch (kind) {
        case PersistKind::Forward: plan.ok = persist_geom<T, bn_persist_fwd<T, false>>(s, 1, plan.geo); break;
        case PersistKind::ForwardAct: plan.ok = persist_geom<T, bn_persist_fwd<T, true>>(s, 1, plan.geo); break;
        case PersistKind::Backward: plan.ok = persist_geom<T, bn_persist_bwd<T>>(s, 2, plan.geo); break;
        case PersistKind::BackwardAct: plan.ok = persist_geom<T, bn_persist_bwd<T, true>>(s, 2, plan.geo); break;
        case PersistKind::BackwardActRes:
          plan.ok = persist_geom<T, bn_persist_bwd<T, true, true>>(s, 3, plan.geo);
          break;
      }
    }
  });
  if (plan.ok) {
    plan.kind = kind;
    plan.dtype = dtype;
    plan.s = s;
    plan.ws_floats = persist_ws_floats(s, plan.geo.G);
  }
  return plan;
}

cudaError_t launch_persist_forward(const PersistPlan& plan, const void* x, const void* res, void* y, int act,
                                   const FwdCoeffPtrs& p, void* ws, cudaStream_t stream) {
  const bool with_act = plan.kind == PersistKind::ForwardAct;
  if (!plan.ok || (plan.kind != PersistKind::Forward && !with_act) || (!with_act && (res != nullptr || act != 0)))
    return cudaErrorInvalidValue;
  cudaError_t err = cudaErrorInvalidValue;
  dispatch_dtype(plan.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      PersistFwdArgs<T> a{};
      a.geo = plan.geo;
      a.x = static_cast<const T*>(x);
      a.res = static_cast<const T*>(res);
      a.y = static_cast<T*>(y);
      a.act = act;
      a.prefetch = env::get_int("TORCH_DNN_BN_RES_PREFETCH", 1) != 0;
      a.res_ahead = std::max(env::get_int("TORCH_DNN_BN_RES_AHEAD", 1), 0);
      a.R = plan.s.outer;
      a.C = plan.s.C;
      a.part = static_cast<float*>(ws);
      a.coef = a.part + 2 * a.C * a.geo.G;
      a.p = p;
      err = with_act ? launch_cooperative(bn_persist_fwd<T, true>, a.geo, a, stream)
                       : launch_cooperative(bn_persist_fwd<T, false>, a.geo, a, stream);
    }
  });
  return err;
}

cudaError_t launch_persist_backward(const PersistPlan& plan, const void* dy, const void* x, const void* mean,
                                    const BwdCoeffPtrs& p, void* dx, void* ws, cudaStream_t stream,
                                    const BwdActArgs& act) {
  const bool plain = plan.kind == PersistKind::Backward, with_res = plan.kind == PersistKind::BackwardActRes;
  if (!plan.ok || !(plain || with_res || plan.kind == PersistKind::BackwardAct)) return cudaErrorInvalidValue;
  if (plain ? (act.res || act.act != 0 || act.dz) : (!act.dz || with_res != (act.res != nullptr) ||
                                                      (act.act != 0 && (!act.scale || !act.shift))))
    return cudaErrorInvalidValue;
  cudaError_t err = cudaErrorInvalidValue;
  dispatch_dtype(plan.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      PersistBwdArgs<T> a{};
      a.geo = plan.geo;
      a.dy = static_cast<const T*>(dy);
      a.x = static_cast<const T*>(x);
      a.mean = static_cast<const float*>(mean);
      a.dx = static_cast<T*>(dx);
      a.R = plan.s.outer;
      a.C = plan.s.C;
      a.part = static_cast<float*>(ws);
      a.coef = a.part + 2 * a.C * a.geo.G;
      a.p = p;
      a.res = static_cast<const T*>(act.res);
      a.scale = act.scale;
      a.shift = act.shift;
      a.act = act.act;
      a.dz = static_cast<T*>(act.dz);
      err = plain      ? launch_cooperative(bn_persist_bwd<T>, a.geo, a, stream)
            : with_res ? launch_cooperative(bn_persist_bwd<T, true, true>, a.geo, a, stream)
                       : launch_cooperative(bn_persist_bwd<T, true>, a.geo, a, stream);
    }
  });
  return err;
}

cudaError_t launch_fwd_coeffs(const FwdCoeffPtrs& p, int64_t C, cudaStream_t stream) {
  if (C > 0) fwd_coeffs_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(p, C);
  return cudaGetLastError();
}

cudaError_t launch_affine(ChannelVec mean, ChannelVec invstd, ChannelVec weight, ChannelVec bias, ChannelVec scale,
                          ChannelVec shift, int64_t C, cudaStream_t stream) {
  if (C > 0) affine_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(mean, invstd, weight, bias, scale, shift, C);
  return cudaGetLastError();
}

cudaError_t launch_bwd_coeffs(const BwdCoeffPtrs& p, int64_t C, cudaStream_t stream) {
  if (C > 0) bwd_coeffs_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(p, C);
  return cudaGetLastError();
}

}  // namespace batch_norm
}  // namespace torch_dnn
