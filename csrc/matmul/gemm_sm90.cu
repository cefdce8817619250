// The Hopper GEMM path (sm_90a): CUTLASS 3.x kernels, TMA loads + wgmma, warp-specialised persistent kernels
// (cooperative; one opt-in ping-pong), with the fused epilogue of kernels/sm90_epilogue.cuh (alpha, bias, activation,
// residual, preact). Only compiled when setup.py finds the CUTLASS headers (TORCH_DNN_WITH_SM90_GEMM); the
// kernels' bodies exist only in the sm_90a device code (CUTLASS's own arch guards), and gemm_sm90_plan
// says no on any other device or when the build has no sm_90a code.
//
// Instantiations (14; docs/matmul.md says which problems take which):
//   bf16, fp16  A K-major, B K-major (x @ w.T)   128x256x64, cluster 2x1, persistent, no preact store
//   bf16, fp16  A K-major, B K-major (x @ w.T)   128x256x64, cluster 2x1, persistent     "big"
//   bf16, fp16  A K-major, B K-major             128x128x64, cluster 1x1, stream-K      "skinny / few tiles"
//   bf16, fp16  A K-major, B N-major (dZ @ W)    128x256x64, cluster 2x1, persistent, no preact store
//   bf16, fp16  A M-major, B N-major (dZ.T @ X)  128x256x64, cluster 2x1, persistent, no preact store
//   bf16, fp16  A M-major, B N-major             128x128x64, cluster 1x1, stream-K      "few tiles, long K"
//   tf32        A K-major, B K-major             128x128x32, cluster 2x1, persistent
//   tf32        A K-major, B K-major             128x256x32, cluster 2x1, persistent, no preact store (default)
// and, in gemm_sm90_skinny.cu, the kernels of skinny x @ w.T (M <= 256 rows of x: swap-AB and narrow tiles).
//
// NDEBUG before any include: CUTLASS's device-side asserts become calls to __assertfail, and a call inside the
// mainloop makes ptxas serialise the wgmma pipeline (warning C7510), which costs a large share of the speed.
#ifndef NDEBUG
#define NDEBUG 1
#endif
#include "common/cuda/vec.cuh"  // aligned16
#include "matmul/kernels/sm90_gemm.cuh"

namespace torch_dnn {
namespace matmul {
namespace {

using namespace cute;
using namespace sm90;

enum class Layout { TN, NN, TT };  // A K-major/B K-major, A K-major/B N-major, A M-major/B N-major

using Big = Shape<_128, _256, _64>;
using Mid32 = Shape<_128, _128, _32>;  // tf32: 4-byte elements (128x256x32 left only 2 smem stages)
using Mid = Shape<_128, _128, _64>;

// CUTLASS's B is N x K: "ColumnMajor" B is K-contiguous (our col_major B), "RowMajor" B is N-contiguous.
template <class T> using TnBig = Sm90Gemm<T, RowM, ColM, T, Big, C21, Persistent>;
template <class T> using TnBigPlain = Sm90Gemm<T, RowM, ColM, T, Big, C21, Persistent, false>;
template <class T> using TnStreamK = Sm90Gemm<T, RowM, ColM, T, Mid, C11, StreamK>;
// The backward layouts never store preact: without the aux store their mainloop keeps 4 stages.
template <class T> using NnBig = Sm90Gemm<T, RowM, RowM, T, Big, C21, Persistent, false>;
template <class T> using TtBig = Sm90Gemm<T, ColM, RowM, T, Big, C21, Persistent, false>;
// A weight gradient whose output has few tiles (a 512 x 512 weight: 8 of 128x256) reduces over the tokens (K of
// thousands): stream-K spreads K over every SM, its partial tiles summed in a fixed order.
template <class T> using TtStreamK = Sm90Gemm<T, ColM, RowM, T, Mid, C11, StreamK, false>;
using Tf32Big = Sm90Gemm<cutlass::tfloat32_t, RowM, ColM, float, Mid32, C21, Persistent>;
// The wide TF32 tile without the preact store (its smem goes to mainloop stages): the TF32 tile of every problem that
// stores no preact (it measured faster than 128x128x32 on the rounded copies; docs/matmul.md).
using Tf32Wide = Sm90Gemm<cutlass::tfloat32_t, RowM, ColM, float, Shape<_128, _256, _32>, C21, Persistent, false>;

// ---- TMA rules --------------------------------------------------------------------------------------------

int64_t elem_bytes(DType t) { return t == DType::Float32 ? 4 : 2; }

// One TMA operand: base 16-byte aligned, leading dimension and batch stride multiples of 16 bytes.
bool tma_ok(const void* p, int64_t ld, int64_t batch_stride, int64_t batch, int64_t eb) {
  if (!aligned16(p) || ld <= 0 || (ld * eb) % 16 != 0) return false;
  if (batch > 1 && (batch_stride < 0 || (batch_stride * eb) % 16 != 0)) return false;
  return true;
}

bool layout_of(const GemmArgs& a, Layout* out) {
  if (!a.A.col_major && a.B.col_major) *out = Layout::TN;
  else if (!a.A.col_major && !a.B.col_major) *out = Layout::NN;
  else if (a.A.col_major && !a.B.col_major) *out = Layout::TT;
  else return false;  // A M-major with B K-major: not instantiated
  return true;
}

bool fits_int(int64_t v) { return v >= 1 && v <= int64_t(INT32_MAX); }

// Which kernel a problem takes.
enum class Kind { None, TnBig, TnBigPlain, TnStreamK, TnSkinny, NnBig, TtBig, TtStreamK, Tf32, Tf32Wide };

// A d_weight's K splits on 128x128 tiles. CUTLASS's deterministic fixup is a turnstile: a tile's splits add their
// partials into the workspace one after another, so the chain grows with the splits while each split's MMAs
// shrink: 2 or 4 splits (the power of two that fills the SMs at most once), each at least 4 K-tiles; odd counts
// and more than 4 measured slower, as did CUTLASS's own stream-K heuristic (docs/matmul.md).
int tt_splits(const GemmArgs& a) {
  const int64_t tiles = ((a.M + 127) / 128) * ((a.N + 127) / 128) * a.batch;
  const int64_t fill = sm_count_or_h100() / tiles;
  const int64_t s = std::min<int64_t>(fill >= 4 ? 4 : fill >= 2 ? 2 : 1, (a.K + 63) / 64 / 4);
  return int(std::max<int64_t>(s, 1));
}

// The kernel a problem takes; `splits`: TtStreamK's K splits (tt_splits), else 0.
Kind choose(const GemmArgs& a, int& splits) {
  splits = 0;
  Layout l;
  if (!layout_of(a, &l)) return Kind::None;
  if (a.dtype == DType::Float32) {
    if (!a.allow_tf32 || l != Layout::TN) return Kind::None;
    return a.preact ? Kind::Tf32 : Kind::Tf32Wide;  // 128x256x32; problems that store preact keep 128x128x32
  }
  if (a.dtype != DType::Float16 && a.dtype != DType::BFloat16) return Kind::None;
  if (l == Layout::NN) return a.preact ? Kind::None : Kind::NnBig;
  // the big persistent tile when it fills the machine, else stream-K on 128x128 tiles
  const int64_t tiles = ((a.M + 127) / 128) * ((a.N + 255) / 256) * a.batch;
  const int sms = sm_count_or_h100();
  // d_weight: split K where the 128x128 tiles leave at least half the SMs idle (tt_splits() >= 2), else the big tile
  if (l == Layout::TT) {
    if (a.preact) return Kind::None;
    const int s = tt_splits(a);
    if (s < 2) return Kind::TtBig;
    splits = s;
    return Kind::TtStreamK;
  }
  // the skinny kernels of gemm_sm90_skinny.cu for x @ w.T with M <= 256 and N >= 4 M (swap-AB: x's rows on wgmma's
  // N side, so that no MMA work goes to rows of x that do not exist and each weight tile is read once; or narrow
  // 128x64 tiles); with MatmulKnobs::sm90_skinny off the stream-K kernel takes those
  if (a.batch == 1 && !a.preact && a.M <= 256 && a.N >= 4 * a.M && a.knobs.sm90_skinny)
    return Kind::TnSkinny;
  if (tiles < sms) return Kind::TnStreamK;
  return a.preact ? Kind::TnBig : Kind::TnBigPlain;
}

// The kernels of this file (the callers take TnSkinny to gemm_sm90_skinny.cu first).
template <class F>
auto dispatch(const GemmArgs& a, Kind k, F&& f) {
  const bool bf = a.dtype == DType::BFloat16;
  switch (k) {
    case Kind::TnBig: return bf ? f.template operator()<TnBig<bf16>>() : f.template operator()<TnBig<fp16>>();
    case Kind::TnBigPlain:
      return bf ? f.template operator()<TnBigPlain<bf16>>() : f.template operator()<TnBigPlain<fp16>>();
    case Kind::TnStreamK:
      return bf ? f.template operator()<TnStreamK<bf16>>() : f.template operator()<TnStreamK<fp16>>();
    case Kind::NnBig: return bf ? f.template operator()<NnBig<bf16>>() : f.template operator()<NnBig<fp16>>();
    case Kind::TtBig: return bf ? f.template operator()<TtBig<bf16>>() : f.template operator()<TtBig<fp16>>();
    case Kind::TtStreamK:
      return bf ? f.template operator()<TtStreamK<bf16>>() : f.template operator()<TtStreamK<fp16>>();
    case Kind::Tf32Wide: return f.template operator()<Tf32Wide>();
    case Kind::Tf32:
    default: return f.template operator()<Tf32Big>();
  }
}

// Whether the kernels can take the problem's operands and epilogue: TMA's rules and the epilogue's activations.
bool operands_fit(const GemmArgs& a) {
  if (!sm90::epilogue_act_supported(a.act)) return false;
  if (!fits_int(a.M) || !fits_int(a.N) || !fits_int(a.K) || !fits_int(a.batch)) return false;
  const int64_t eb = elem_bytes(a.dtype);
  const int64_t b = a.batch;
  if (!tma_ok(a.A.ptr, a.A.ld, a.A.batch_stride, b, eb) || !tma_ok(a.B.ptr, a.B.ld, a.B.batch_stride, b, eb)) return false;
  // a leading dimension shorter than the contiguous extent would overlap rows: not a TMA tensor
  if (a.A.ld < (a.A.col_major ? a.M : a.K) || a.B.ld < (a.B.col_major ? a.K : a.N)) return false;
  // CUTLASS's can_implement also wants each operand's contiguous extent a multiple of 16 bytes (K for a
  // K-major operand, M / N for an M- / N-major one, N for D, C and preact): the same rule here, so that
  // the plan and the launch agree.
  const int64_t al = 16 / eb;
  if ((a.A.col_major ? a.M : a.K) % al != 0 || (a.B.col_major ? a.K : a.N) % al != 0 || a.N % al != 0) return false;
  if (a.D == nullptr || !tma_ok(a.D, a.ldd, a.batch_stride_d, b, eb) || a.ldd < a.N) return false;
  if (b > 1 && a.batch_stride_d == 0) return false;
  if (a.preact && !aligned16(a.preact)) return false;
  if (a.residual && (!tma_ok(a.residual, a.ldr, a.batch_stride_r, b, eb) || a.ldr < a.N)) return false;
  // the bias is read in 16-byte vectors
  if (a.bias && (!aligned16(a.bias) || (a.N * eb) % 16 != 0)) return false;
  return true;
}

}  // namespace

Sm90Plan gemm_sm90_plan(const GemmArgs& a) {
  Sm90Plan p;
  if (!device_info().sm90) return p;
  // TF32 only with a pre-rounded operand (tf32_rounded, see round_to_tf32): wgmma truncates fp32 operands to
  // TF32, which gives several times cuBLAS's TF32 error, past the error-ratio rule.
  if (a.dtype == DType::Float32 && !a.tf32_rounded) return p;
  int splits = 0;
  const Kind k = choose(a, splits);
  if (k == Kind::None || !operands_fit(a)) return p;
  static_assert(int(Kind::None) == 0, "Sm90Plan::kind 0 means none");
  p.kind = int(k);
  p.skinny = k == Kind::TnSkinny;
  p.splits = splits;
  return p;
}

cudaError_t gemm_sm90(const GemmArgs& a, const Sm90Plan& plan, const WorkspaceSource& workspace, cudaStream_t stream) {
  if (!plan.ok()) return cudaErrorNotSupported;
  const Kind k = Kind(plan.kind);
  if (k == Kind::TnSkinny) return run_skinny(a, workspace, stream);
  int splits = plan.splits;
  if (k == Kind::TtStreamK) {  // TORCH_DNN_SM90_TT_SPLITS=n: n splits, -1: CUTLASS's stream-K heuristic (measurement)
    const int e = a.knobs.sm90_tt_splits;
    if (e != 0) splits = e > 0 ? e : 0;
  }
  return dispatch(a, k, [&]<class Cfg>() { return run<Cfg>(a, workspace, stream, splits); });
}

}  // namespace matmul
}  // namespace torch_dnn
