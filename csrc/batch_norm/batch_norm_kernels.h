// Torch-free entry points of the batch_norm family's CUDA kernels: the four primitives of batch_norm_ops.h's
// Backend contract. Every tensor is dense and seen in memory as [outer][C][inner] (channel dim 1 of the
// input; outer and inner are whatever dims come before and after it in memory order: NCHW has inner = H*W,
// channels_last has inner = 1). Per-channel vectors (mean, m2, scale, shift, k, a, b, sums) are C contiguous
// elements of the accumulation type (float; double for double). Every call enqueues on `stream` and returns
// cudaGetLastError().
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>
#include <initializer_list>

#include "common/hd.h"

namespace torch_dnn {
namespace batch_norm {

struct BnShape {
  int64_t outer = 0, C = 0, inner = 1;
};

struct FwdCoeffPtrs;
struct BwdCoeffPtrs;

// Per-channel mean and m2 (sum of squared deviations): per-block partial moments merged (Chan et al.) in a
// fixed order, so the result is deterministic. ws: stats_workspace() accumulation-type elements. coeffs given:
// the forward coefficients of launch_fwd_coeffs are computed from the statistics instead (its stat_mean and
// stat_var unused; mean and m2 may be null).
int64_t stats_workspace(DType dtype, const BnShape& s);
cudaError_t launch_stats(DType dtype, const BnShape& s, const void* x, void* mean, void* m2, void* ws,
                         cudaStream_t stream, const FwdCoeffPtrs* coeffs = nullptr);

// y = act(x * scale[c] + shift[c] + res); res may be null. act: 0 identity, 1 relu, 2 silu.
cudaError_t launch_apply(DType dtype, const BnShape& s, const void* x, const void* res, const void* scale,
                         const void* shift, void* y, int act, cudaStream_t stream);

// dz = dy * act'(x * scale + shift + res) (act 0: dz = dy); writes dz when dz is not null; per-channel
// sum_dz and sum_dz_xmu = sum(dz * (x - mean[c])), deterministic. ws: reduce_workspace() elements. coeffs given:
// the backward coefficients of launch_bwd_coeffs are computed from the sums instead (its sum_dz and sum_dz_xmu
// unused; sum_dz and sum_dz_xmu may be null).
int64_t reduce_workspace(DType dtype, const BnShape& s);
cudaError_t launch_reduce(DType dtype, const BnShape& s, const void* dy, const void* x, const void* res,
                          const void* scale, const void* shift, const void* mean, int act, void* dz, void* sum_dz,
                          void* sum_dz_xmu, void* ws, cudaStream_t stream, const BwdCoeffPtrs* coeffs = nullptr);

// dx = k[c] * (dz - a[c] - (x - mean[c]) * b[c]).
cudaError_t launch_elemt(DType dtype, const BnShape& s, const void* dz, const void* x, const void* mean,
                         const void* k, const void* a, const void* b, void* dx, cudaStream_t stream);

// ---- per-channel steps (batch_norm_coeffs.h's math, one thread per channel) ----

// C contiguous elements of any floating dtype; p == nullptr: absent.
struct ChannelVec {
  void* p = nullptr;
  DType t = DType::Float32;
};

struct FwdCoeffPtrs {
  ChannelVec stat_mean, stat_var, weight, bias, running_mean, running_var;
  bool training = true;
  double momentum = 0.1, eps = 1e-5;
  int64_t count = 0;
  ChannelVec mean, invstd, scale, shift;
};
cudaError_t launch_fwd_coeffs(const FwdCoeffPtrs& p, int64_t C, cudaStream_t stream);

// The evaluation forward in one launch: launch_apply with each channel's scale and shift computed where they are
// used, from p's stat_mean and stat_var (the running statistics), weight, bias and eps, as launch_fwd_coeffs
// computes them; writes p's mean and invstd (scale, shift unused). Not for an empty input (nothing runs).
cudaError_t launch_eval_apply(DType dtype, const BnShape& s, const void* x, const void* res, void* y, int act,
                              const FwdCoeffPtrs& p, cudaStream_t stream);

cudaError_t launch_affine(ChannelVec mean, ChannelVec invstd, ChannelVec weight, ChannelVec bias, ChannelVec scale,
                          ChannelVec shift, int64_t C, cudaStream_t stream);

struct BwdCoeffPtrs {
  ChannelVec sum_dz, sum_dz_xmu, invstd, weight;
  bool training = true;
  int64_t count = 0;
  ChannelVec dw, db, k, a, b;
};
cudaError_t launch_bwd_coeffs(const BwdCoeffPtrs& p, int64_t C, cudaStream_t stream);

// ---- training forward / backward of planes-walk layers (inner > 1) with small channels, one launch each ----
// A block owns whole channels (kernels/bn_channel.cuh): statistics, coefficients and y in one launch (writes p's
// mean, invstd and running statistics; p.scale / p.shift may be null); plain batch_norm's sums, coefficients and
// dx in one launch (writes p's dw and db, either may be null; mean: the accumulation type). channel_passes_fit:
// inner > 1 and one channel's input (outer * inner elements) within TORCH_DNN_BN_CHANNEL_KB (256 by default; 0: never).
bool channel_passes_fit(DType dtype, const BnShape& s);
cudaError_t launch_channel_forward(DType dtype, const BnShape& s, const void* x, void* y, const FwdCoeffPtrs& p,
                                   cudaStream_t stream);
cudaError_t launch_channel_backward(DType dtype, const BnShape& s, const void* dy, const void* x, const void* mean,
                                    const BwdCoeffPtrs& p, void* dx, cudaStream_t stream);

// ---- training forward / backward in one persistent kernel each ----
// Statistics (sums) and the elementwise pass in one cooperative launch, part of the data kept on chip in
// between (rows walk only: inner == 1, 16-byte vectors, 16- and 32-bit floats; kernels/bn_persistent.cuh says how).
// plan_persist: the launch's geometry and workspace, computed once per call and passed to the launch; ok is
// false when the device, the shape, a pointer's alignment or the knobs rule the kernel out (the caller then runs
// the separate passes). The forward writes p's mean, invstd and running statistics (not scale/shift: p.scale /
// p.shift may be null); the backward writes p's dw and db (either may be null) and dx = k (dz - a - (x - mean) b),
// dz = dy for plain batch_norm.
// ForwardAct, BackwardAct(Res): batch_norm_add_act (an activation and / or a residual; Res: with a residual)
enum class PersistKind { Forward, ForwardAct, Backward, BackwardAct, BackwardActRes };

struct PersistGeom {
  int TX = 0;            // threads across a row (one 16-byte vector of channels each)
  int G = 0;             // blocks
  int chunk_rows = 0;    // rows of a chunk
  int stages = 0;        // ring slots
  int slots = 0;         // chunk slots of shared memory (the ring is the top `stages`)
  int cache_cap = 0;     // at most this many chunks stay in shared memory (knob)
  int l2_chunks = 0;     // a block's last chunks streamed in pass 1 with the evict_last hint
  int red_h = 0;         // rows of the block-reduction tree's buffer
  int red_bytes = 0;
  size_t smem = 0;
};

struct PersistPlan {
  bool ok = false;
  PersistKind kind = PersistKind::Forward;
  DType dtype = DType::Float32;
  BnShape s;
  PersistGeom geo;
  int64_t ws_floats = 0;  // workspace (float elements)
};

PersistPlan plan_persist(DType dtype, const BnShape& s, PersistKind kind, std::initializer_list<const void*> ptrs);
// act: 0 identity, 1 relu, 2 silu (ForwardAct plans; Forward plans take res == nullptr and act == 0)
cudaError_t launch_persist_forward(const PersistPlan& plan, const void* x, const void* res, void* y, int act,
                                   const FwdCoeffPtrs& p, void* ws, cudaStream_t stream);
// batch_norm_add_act's backward (BackwardAct / BackwardActRes plans): the residual (exactly for Res plans), the
// forward's affine map (float, read when act != 0) and dz = dy * act'(x * scale + shift + res), written (d_residual
// or scratch); dx then as plain batch_norm's from dz. Plain Backward plans take the defaults.
struct BwdActArgs {
  const void* res = nullptr;
  const float* scale = nullptr;
  const float* shift = nullptr;
  int act = 0;
  void* dz = nullptr;
};
cudaError_t launch_persist_backward(const PersistPlan& plan, const void* dy, const void* x, const void* mean,
                                    const BwdCoeffPtrs& p, void* dx, void* ws, cudaStream_t stream,
                                    const BwdActArgs& act = {});

}  // namespace batch_norm
}  // namespace torch_dnn
