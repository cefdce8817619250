// CUDA backend of the batch_norm family: the four primitives of batch_norm_ops.h on the kernels of
// batch_norm_kernels.cu. Any dense layout is walked in place as [outer][C][inner] (NCHW: inner = H*W;
// channels_last: inner = 1); other strides are copied to a dense layout first. Registered for CUDA only.
#include "batch_norm/batch_norm_kernels.h"
#include "batch_norm/batch_norm_ops.h"
#include "common/cuda_utils.h"
#include "common/env.h"

namespace torch_dnn {
namespace batch_norm {
namespace {

const void* cptr(const at::Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }

BnShape shape_of(const at::Tensor& xd) {
  const DimSplit d = split_at_dim(xd, 1);
  return BnShape{d.outer, d.size, d.inner};
}

// An input in xd's layout (undefined stays undefined).
at::Tensor like(const at::Tensor& t, const at::Tensor& xd) { return t.defined() ? same_layout_as(t, xd) : t; }

// Runs `write(out)` on an output laid out as xd: `out` itself when it already is, else a temporary copied back.
template <class F>
void write_as(at::Tensor& out, const at::Tensor& xd, F&& write) {
  if (!out.defined()) {
    write(out);
    return;
  }
  if (out.strides() == xd.strides()) {
    write(out);
    return;
  }
  at::Tensor tmp = at::empty_like(xd);
  write(tmp);
  out.copy_(tmp);
}

at::Tensor stat(const at::Tensor& t) { return t.defined() ? t.contiguous() : t; }
at::Tensor workspace(int64_t n, const at::Tensor& x) {
  return at::empty({n > 0 ? n : 1}, x.options().dtype(stat_type(x.scalar_type())));
}

// A per-channel tensor for the per-channel kernels (contiguous by the ops layer's checks).
ChannelVec vec(const at::Tensor& t) {
  if (!t.defined()) return ChannelVec{};
  TORCH_INTERNAL_ASSERT(t.is_contiguous());
  return ChannelVec{t.data_ptr(), to_dtype(t.scalar_type())};
}

// A persistent launch's outcome: true when it ran; false when the device could not hold the whole grid at once
// (fewer SMs available than the device reports, e.g. under MPS limits): the caller runs the separate passes.
// Any other error is raised.
bool launched(cudaError_t err) {
  if (err == cudaErrorCooperativeLaunchTooLarge) {
    cudaGetLastError();
    return false;
  }
  TD_CHECK_LAUNCH(err);
  return true;
}

// The plan and workspace of a persistent launch over xd's layout that writes `out`; plan.ok false: it cannot
// run (the caller runs the separate passes).
PersistPlan plan_for(const at::Tensor& xd, const at::Tensor& out, PersistKind kind,
                     std::initializer_list<const void*> ptrs, at::Tensor& ws) {
  if (out.strides() != xd.strides()) return {};
  const PersistPlan plan = plan_persist(to_dtype(xd.scalar_type()), shape_of(xd), kind, ptrs);
  if (plan.ok) ws = at::empty({plan.ws_floats}, xd.options().dtype(at::kFloat));
  return plan;
}

FwdCoeffPtrs fwd_ptrs(const FwdCoeffArgs& a) {
  FwdCoeffPtrs p;
  p.stat_mean = vec(a.stat_mean);
  p.stat_var = vec(a.stat_var);
  p.weight = vec(a.weight);
  p.bias = vec(a.bias);
  p.running_mean = vec(a.running_mean);
  p.running_var = vec(a.running_var);
  p.training = a.training;
  p.momentum = a.momentum;
  p.eps = a.eps;
  p.count = a.count;
  p.mean = vec(a.mean);
  p.invstd = vec(a.invstd);
  p.scale = vec(a.scale);
  p.shift = vec(a.shift);
  return p;
}

BwdCoeffPtrs bwd_ptrs(const BwdCoeffArgs& a) {
  BwdCoeffPtrs p;
  p.sum_dz = vec(a.sum_dz);
  p.sum_dz_xmu = vec(a.sum_dz_xmu);
  p.invstd = vec(a.invstd);
  p.weight = vec(a.weight);
  p.training = a.training;
  p.count = a.count;
  p.dw = vec(a.dw);
  p.db = vec(a.db);
  p.k = vec(a.k);
  p.a = vec(a.a);
  p.b = vec(a.b);
  return p;
}

struct CudaBackend {
  static void fwd_coeffs(FwdCoeffArgs& a) {
    c10::cuda::CUDAGuard guard(a.mean.device());
    TD_CHECK_LAUNCH(launch_fwd_coeffs(fwd_ptrs(a), a.mean.numel(), current_stream()));
  }
  static void affine(const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& w, const at::Tensor& b,
                     at::Tensor& scale, at::Tensor& shift) {
    c10::cuda::CUDAGuard guard(mean.device());
    TD_CHECK_LAUNCH(launch_affine(vec(mean), vec(invstd), vec(w), vec(b), vec(scale), vec(shift), mean.numel(),
                                  current_stream()));
  }
  static void bwd_coeffs(BwdCoeffArgs& a) {
    c10::cuda::CUDAGuard guard(a.invstd.device());
    TD_CHECK_LAUNCH(launch_bwd_coeffs(bwd_ptrs(a), a.invstd.numel(), current_stream()));
  }
  // Training forward in one persistent kernel when the shape allows (launch_persist_forward): writes a.mean,
  // a.invstd, the running statistics and y. False: nothing done, the caller runs the separate passes.
  static bool fused_forward(const at::Tensor& x, const at::Tensor& res, int64_t act, FwdCoeffArgs& a, at::Tensor& y) {
    if (x.numel() == 0) return false;
    c10::cuda::CUDAGuard guard(x.device());
    const env::Scope knobs;  // the plans and the launch read several knobs: one scan of the environment
    const at::Tensor xd = dense_like(x), rd = like(res, xd);
    const DType dt = to_dtype(x.scalar_type());
    const BnShape s = shape_of(xd);
    const FwdCoeffPtrs p = fwd_ptrs(a);  // scale and shift undefined: the one-kernel paths keep their own
    if (!rd.defined() && act == 0 && y.strides() == xd.strides() && channel_passes_fit(dt, s)) {
      TD_CHECK_LAUNCH(launch_channel_forward(dt, s, xd.const_data_ptr(), y.data_ptr(), p, current_stream()));
      return true;
    }
    const PersistKind kind = rd.defined() || act != 0 ? PersistKind::ForwardAct : PersistKind::Forward;
    at::Tensor ws;
    const PersistPlan plan = plan_for(xd, y, kind, {xd.const_data_ptr(), cptr(rd), y.data_ptr()}, ws);
    if (!plan.ok) return false;
    return launched(launch_persist_forward(plan, xd.const_data_ptr(), cptr(rd), y.data_ptr(), int(act), p,
                                           ws.data_ptr(), current_stream()));
  }
  // The evaluation forward in one launch (launch_eval_apply: the coefficients computed where they are used): writes
  // a.mean, a.invstd and y. False (an empty input): the caller runs the separate passes.
  static bool eval_forward(const at::Tensor& x, const at::Tensor& res, int64_t act, FwdCoeffArgs& a, at::Tensor& y) {
    if (x.numel() == 0) return false;
    c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xd = dense_like(x), rd = like(res, xd);
    const BnShape s = shape_of(xd);
    const FwdCoeffPtrs p = fwd_ptrs(a);
    write_as(y, xd, [&](at::Tensor& out) {
      TD_CHECK_LAUNCH(launch_eval_apply(to_dtype(x.scalar_type()), s, xd.const_data_ptr(), cptr(rd), out.data_ptr(),
                                        int(act), p, current_stream()));
    });
    return true;
  }
  // The training backward in one persistent kernel (launch_persist_backward): writes a.dw, a.db (those defined)
  // and dx; for batch_norm_add_act (res defined or act != 0) also dz = dy * act'(x * scale + shift + res), from
  // which dx is computed (dz: d_residual or the activation's scratch; undefined: a scratch is made here, once the
  // kernel is known to run). False: nothing done.
  static bool fused_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& res, const at::Tensor& scale,
                             const at::Tensor& shift, const at::Tensor& mean, int64_t act, BwdCoeffArgs& a,
                             const at::Tensor& dz, at::Tensor& dx) {
    if (x.numel() == 0) return false;
    c10::cuda::CUDAGuard guard(x.device());
    const env::Scope knobs;
    const at::Tensor xd = dense_like(x), dyd = like(dy, xd), rd = like(res, xd), mu = stat(mean);
    const bool plain = act == 0 && !rd.defined();
    const DType dt = to_dtype(x.scalar_type());
    const BnShape s = shape_of(xd);
    const BwdCoeffPtrs p = bwd_ptrs(a);  // k, a, b undefined: the one-kernel paths keep their own
    if (plain && dx.strides() == xd.strides() && channel_passes_fit(dt, s)) {
      TD_CHECK_LAUNCH(launch_channel_backward(dt, s, dyd.const_data_ptr(), xd.const_data_ptr(), mu.const_data_ptr(), p,
                                              dx.data_ptr(), current_stream()));
      return true;
    }
    if (mean.scalar_type() != at::kFloat) return false;
    if (!plain && ((dz.defined() && dz.strides() != xd.strides()) || (act != 0 && scale.scalar_type() != at::kFloat)))
      return false;
    const PersistKind kind = plain ? PersistKind::Backward
                                   : (rd.defined() ? PersistKind::BackwardActRes : PersistKind::BackwardAct);
    at::Tensor ws;
    const PersistPlan plan = plan_for(
        xd, dx, kind, {dyd.const_data_ptr(), xd.const_data_ptr(), dx.data_ptr(), cptr(rd), plain ? nullptr : cptr(dz)},
        ws);
    if (!plan.ok) return false;
    BwdActArgs act_args;  // plain batch_norm: the defaults
    at::Tensor z, sc, sh;
    if (!plain) {
      z = dz.defined() ? dz : at::empty_like(xd);
      sc = stat(scale);
      sh = stat(shift);
      act_args.res = cptr(rd);
      act_args.scale = act != 0 ? static_cast<const float*>(sc.const_data_ptr()) : nullptr;
      act_args.shift = act != 0 ? static_cast<const float*>(sh.const_data_ptr()) : nullptr;
      act_args.act = int(act);
      act_args.dz = z.data_ptr();
    }
    return launched(launch_persist_backward(plan, dyd.const_data_ptr(), xd.const_data_ptr(), mu.const_data_ptr(), p,
                                            dx.data_ptr(), ws.data_ptr(), current_stream(), act_args));
  }
  static void stats(const at::Tensor& x, at::Tensor& mean, at::Tensor& m2) {
    c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xd = dense_like(x);
    const BnShape s = shape_of(xd);
    const DType dt = to_dtype(x.scalar_type());
    at::Tensor ws = workspace(stats_workspace(dt, s), x);
    TD_CHECK_LAUNCH(launch_stats(dt, s, xd.const_data_ptr(), mean.data_ptr(), m2.data_ptr(), ws.data_ptr(),
                                 current_stream()));
  }
  // stats then fwd_coeffs, the coefficients computed where the statistics are merged (no launch, no tensors
  // between them).
  static void stats_coeffs(const at::Tensor& x, FwdCoeffArgs& a) {
    c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xd = dense_like(x);
    const BnShape s = shape_of(xd);
    const DType dt = to_dtype(x.scalar_type());
    at::Tensor ws = workspace(stats_workspace(dt, s), x);
    const FwdCoeffPtrs p = fwd_ptrs(a);
    TD_CHECK_LAUNCH(launch_stats(dt, s, xd.const_data_ptr(), nullptr, nullptr, ws.data_ptr(), current_stream(), &p));
  }
  static void apply(const at::Tensor& x, const at::Tensor& res, const at::Tensor& scale, const at::Tensor& shift,
                    at::Tensor& y, int64_t act) {
    c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xd = dense_like(x), rd = like(res, xd), sc = stat(scale), sh = stat(shift);
    const BnShape s = shape_of(xd);
    write_as(y, xd, [&](at::Tensor& out) {
      TD_CHECK_LAUNCH(launch_apply(to_dtype(x.scalar_type()), s, xd.const_data_ptr(), cptr(rd), sc.const_data_ptr(),
                                   sh.const_data_ptr(), out.data_ptr(), int(act), current_stream()));
    });
  }
  static void reduce(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& res, const at::Tensor& scale,
                     const at::Tensor& shift, const at::Tensor& mean, int64_t act, at::Tensor& dz,
                     at::Tensor& sum_dz, at::Tensor& sum_dz_xmu) {
    reduce_impl(dy, x, res, scale, shift, mean, act, dz, sum_dz.data_ptr(), sum_dz_xmu.data_ptr(), nullptr);
  }
  // reduce then bwd_coeffs, the coefficients computed where the sums are merged.
  static void reduce_coeffs(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& res, const at::Tensor& scale,
                            const at::Tensor& shift, const at::Tensor& mean, int64_t act, at::Tensor& dz,
                            BwdCoeffArgs& a) {
    const BwdCoeffPtrs p = bwd_ptrs(a);
    reduce_impl(dy, x, res, scale, shift, mean, act, dz, nullptr, nullptr, &p);
  }
  static void reduce_impl(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& res, const at::Tensor& scale,
                          const at::Tensor& shift, const at::Tensor& mean, int64_t act, at::Tensor& dz, void* sum_dz,
                          void* sum_dz_xmu, const BwdCoeffPtrs* coeffs) {
    c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xd = dense_like(x), dyd = like(dy, xd), rd = like(res, xd);
    const at::Tensor sc = stat(scale), sh = stat(shift), mu = stat(mean);
    const BnShape s = shape_of(xd);
    const DType dt = to_dtype(x.scalar_type());
    at::Tensor ws = workspace(reduce_workspace(dt, s), x);
    write_as(dz, xd, [&](at::Tensor& out) {
      TD_CHECK_LAUNCH(launch_reduce(dt, s, dyd.const_data_ptr(), xd.const_data_ptr(), cptr(rd), cptr(sc), cptr(sh),
                                    mu.const_data_ptr(), int(act),
                                    out.defined() ? out.data_ptr() : nullptr, sum_dz, sum_dz_xmu, ws.data_ptr(),
                                    current_stream(), coeffs));
    });
  }
  static void elemt(const at::Tensor& dz, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& k,
                    const at::Tensor& a, const at::Tensor& b, at::Tensor& dx) {
    c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xd = dense_like(x), dzd = like(dz, xd);
    const at::Tensor mu = stat(mean), kk = stat(k), aa = stat(a), bb = stat(b);
    const BnShape s = shape_of(xd);
    write_as(dx, xd, [&](at::Tensor& out) {
      TD_CHECK_LAUNCH(launch_elemt(to_dtype(x.scalar_type()), s, dzd.const_data_ptr(), xd.const_data_ptr(),
                                   mu.const_data_ptr(), kk.const_data_ptr(), aa.const_data_ptr(), bb.const_data_ptr(),
                                   out.data_ptr(), current_stream()));
    });
  }
};

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::batch_norm::register_batch_norm_impls<torch_dnn::batch_norm::CudaBackend>(m);
}
