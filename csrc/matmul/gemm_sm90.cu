// The Hopper GEMM path (sm_90a): CUTLASS 3.x kernels, TMA loads + wgmma, warp-specialised persistent kernels
// (cooperative; one opt-in ping-pong), with the fused epilogue of kernels/sm90_epilogue.cuh (alpha, bias, activation,
// residual, preact). Only compiled when setup.py finds the CUTLASS headers (TORCH_DNN_WITH_SM90_GEMM); the
// kernels' bodies exist only in the sm_90a device code (CUTLASS's own arch guards), and gemm_sm90_supports
// says no on any other device or when the build has no sm_90a code.
//
// Instantiations (13), see benchmarks/NOTES.md "Hopper GEMM":
//   bf16, fp16  A K-major, B K-major (x @ w.T)   128x256x64, cluster 2x1, persistent, no preact store
//   bf16, fp16  A K-major, B K-major (x @ w.T)   128x256x64, cluster 2x1, persistent     "big"
//   bf16, fp16  A K-major, B K-major             128x128x64, cluster 1x1, stream-K      "skinny / few tiles"
//   bf16, fp16  A K-major, B N-major (dZ @ W)    128x256x64, cluster 2x1, persistent, no preact store
//   bf16, fp16  A M-major, B N-major (dZ.T @ X)  128x256x64, cluster 2x1, persistent, no preact store
//   tf32        A K-major, B K-major             128x128x32, cluster 2x1, persistent
//   tf32        A K-major, B K-major             128x256x32, cluster 2x1, persistent, no preact store (default)
//   bf16        A K-major, B K-major             64x256x64 ping-pong, cluster 2x1, opt-in (TORCH_DNN_SM90_KERNEL)
//
// NDEBUG before any include: CUTLASS's device-side asserts become calls to __assertfail, and a call inside the
// mainloop makes ptxas serialise the wgmma pipeline (warning C7510), which costs a large share of the speed.
#ifndef NDEBUG
#define NDEBUG 1
#endif
#include "matmul/gemm_kernels.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "matmul/kernels/sm90_epilogue.cuh"

namespace torch_dnn {
namespace matmul {
namespace {

using namespace cute;

enum class Layout { TN, NN, TT };  // A K-major/B K-major, A K-major/B N-major, A M-major/B N-major

// kPreact: the epilogue can store pre (the aux store); without it the mainloop gets the aux smem back.
template <class ElementAB, class LayoutA, class LayoutB, class ElementD, class TileShape, class ClusterShape,
          class Scheduler, bool kPreact = true, bool kPingpong = false>
struct Sm90Gemm {
  using MainloopSchedule = cute::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                               cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = cute::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                               cutlass::epilogue::TmaWarpSpecializedCooperative>;
  static constexpr int kAlignAB = 128 / cutlass::sizeof_bits<ElementAB>::value;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  static constexpr bool kFast = cutlass::sizeof_bits<ElementD>::value == 16;
  using FusionOp = cute::conditional_t<kPreact, sm90::LinActResidualAux<ElementD, kFast>,
                                       sm90::LinActResidualCallbacks<TileShape, ElementD, kFast>>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementD, cutlass::layout::RowMajor, kAlignD,
      ElementD, cutlass::layout::RowMajor, kAlignD, EpilogueSchedule, FusionOp>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, LayoutA, kAlignAB, ElementAB, LayoutB, kAlignAB,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

using Big = Shape<_128, _256, _64>;
using Mid32 = Shape<_128, _128, _32>;  // tf32: 4-byte elements (128x256x32 left only 2 smem stages)
using Mid = Shape<_128, _128, _64>;
using Wide64 = Shape<_64, _256, _64>;  // ping-pong: one consumer warpgroup a tile
using C21 = Shape<_2, _1, _1>;
using C11 = Shape<_1, _1, _1>;
using Persistent = cutlass::gemm::PersistentScheduler;
using StreamK = cutlass::gemm::StreamKScheduler;
using RowM = cutlass::layout::RowMajor;
using ColM = cutlass::layout::ColumnMajor;
using bf16 = cutlass::bfloat16_t;
using fp16 = cutlass::half_t;

// CUTLASS's B is N x K: "ColumnMajor" B is K-contiguous (our col_major B), "RowMajor" B is N-contiguous.
template <class T> using TnBig = Sm90Gemm<T, RowM, ColM, T, Big, C21, Persistent>;
template <class T> using TnBigPlain = Sm90Gemm<T, RowM, ColM, T, Big, C21, Persistent, false>;
// Ping-pong alternative to TnBigPlain (bf16 only, chosen by TORCH_DNN_SM90_KERNEL=pingpong): the two consumer
// warpgroups work on different tiles, so one's epilogue (bias + activation) overlaps the other's MMAs.
using TnPingpongBf16 = Sm90Gemm<bf16, RowM, ColM, bf16, Wide64, C21, Persistent, false, true>;
template <class T> using TnStreamK = Sm90Gemm<T, RowM, ColM, T, Mid, C11, StreamK>;
// The backward layouts never store preact: without the aux store their mainloop keeps 4 stages.
template <class T> using NnBig = Sm90Gemm<T, RowM, RowM, T, Big, C21, Persistent, false>;
template <class T> using TtBig = Sm90Gemm<T, ColM, RowM, T, Big, C21, Persistent, false>;
using Tf32Big = Sm90Gemm<cutlass::tfloat32_t, RowM, ColM, float, Mid32, C21, Persistent>;
// The wide TF32 tile without the preact store (its smem goes to mainloop stages): the default (prefer_tf32_wide).
using Tf32Wide = Sm90Gemm<cutlass::tfloat32_t, RowM, ColM, float, Shape<_128, _256, _32>, C21, Persistent, false>;

// ---- device facts, queried once per device ----------------------------------------------------------------

struct DeviceInfo {
  bool sm90 = false;
  int sm_count = 0;
};

constexpr int kMaxDevices = 64;

bool build_has_sm90a() {
#ifdef TORCH_DNN_CUDA_ARCHS
  const char* archs = TORCH_DNN_CUDA_ARCHS;
  return std::strstr(archs, "9.0a") != nullptr || std::strstr(archs, "90a") != nullptr;
#else
  return true;  // built outside setup.py: assume the caller compiled for sm_90a
#endif
}

const DeviceInfo& device_info() {
  static DeviceInfo infos[kMaxDevices];
  static std::once_flag flags[kMaxDevices];
  static DeviceInfo none;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return none;
  }
  std::call_once(flags[dev], [dev] {
    int major = 0, minor = 0, sms = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    infos[dev].sm90 = major == 9 && minor == 0 && build_has_sm90a();
    infos[dev].sm_count = sms;
  });
  return infos[dev];
}

// Raster swizzle and order of the persistent scheduler (tuning knobs, read at every call like the others:
// TORCH_DNN_SM90_SWIZZLE=1,2,4,8; TORCH_DNN_SM90_RASTER=m|n, default CUTLASS's heuristic). Swizzle 8 is the
// default: on the H100 (scripts/sweep_sm90.py) it took 16384x16384x4096 bf16 from 0.92x to 1.03x cuBLAS and
// linear+bias+gelu there from 0.99x to 1.11x eager (consecutive tiles share A and B panels in L2), and was
// within 4% of the best setting on every other shape.
int swizzle() {
  const char* e = std::getenv("TORCH_DNN_SM90_SWIZZLE");
  const int v = e ? std::atoi(e) : 8;
  return (v == 1 || v == 2 || v == 4 || v == 8) ? v : 8;
}

using RasterOrder = cutlass::gemm::kernel::detail::RasterOrderOptions;
RasterOrder raster_order() {
  const char* e = std::getenv("TORCH_DNN_SM90_RASTER");
  if (e != nullptr && std::strcmp(e, "m") == 0) return RasterOrder::AlongM;
  if (e != nullptr && std::strcmp(e, "n") == 0) return RasterOrder::AlongN;
  return RasterOrder::Heuristic;
}

// ---- TMA rules --------------------------------------------------------------------------------------------

int64_t elem_bytes(DType t) { return t == DType::Float32 ? 4 : 2; }

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

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
enum class Kind { None, TnBig, TnBigPlain, TnPingpong, TnStreamK, NnBig, TtBig, Tf32, Tf32Wide };

// TF32 tile: 128x256x32 unless TORCH_DNN_SM90_TF32_TILE=mid (H100, 8192^3 on rounded copies: 339 TFLOP/s
// against 278 for 128x128x32; cuBLAS 390 in that run). Problems that store preact keep 128x128x32.
bool prefer_tf32_wide() {
  const char* e = std::getenv("TORCH_DNN_SM90_TF32_TILE");
  return e == nullptr || std::strcmp(e, "mid") != 0;
}

// TORCH_DNN_SM90_KERNEL=pingpong: bf16 K-major x K-major problems that would take TnBigPlain take the ping-pong
// kernel instead (to compare the two on the device; see benchmarks/NOTES.md).
// Read at every call, as TORCH_DNN_GEMM_PATH is, so that one benchmark process can compare both kernels.
bool prefer_pingpong() {
  const char* e = std::getenv("TORCH_DNN_SM90_KERNEL");
  return e != nullptr && std::strcmp(e, "pingpong") == 0;
}

Kind choose(const GemmArgs& a) {
  Layout l;
  if (!layout_of(a, &l)) return Kind::None;
  if (a.dtype == DType::Float32) {
    if (!a.allow_tf32 || l != Layout::TN) return Kind::None;
    return (!a.preact && prefer_tf32_wide()) ? Kind::Tf32Wide : Kind::Tf32;
  }
  if (a.dtype != DType::Float16 && a.dtype != DType::BFloat16) return Kind::None;
  if (l == Layout::NN) return a.preact ? Kind::None : Kind::NnBig;
  if (l == Layout::TT) return a.preact ? Kind::None : Kind::TtBig;
  // K-major x K-major: the big persistent tile when it fills the machine, else stream-K on 128x128 tiles.
  const int64_t tiles = ((a.M + 127) / 128) * ((a.N + 255) / 256) * a.batch;
  const int sms = device_info().sm_count > 0 ? device_info().sm_count : 132;
  if (tiles < sms) return Kind::TnStreamK;
  if (a.preact) return Kind::TnBig;
  return (a.dtype == DType::BFloat16 && prefer_pingpong()) ? Kind::TnPingpong : Kind::TnBigPlain;
}

// Strides of CUTLASS's (rows, cols, batch) operand views: the static _1 mode is the contiguous one.
template <class Stride>
Stride make_operand_stride(int64_t ld, int64_t batch_stride) {
  Stride s{};
  auto set = [](auto&& x, int64_t v) {  // static modes (_1) come back by value and are left alone
    if constexpr (std::is_same_v<decltype(x), int64_t&>) x = v;
  };
  set(get<0>(s), ld);
  set(get<1>(s), ld);
  set(get<2>(s), batch_stride);
  return s;
}

template <class Cfg>
typename Cfg::Gemm::Arguments make_arguments(const GemmArgs& a) {
  using Gemm = typename Cfg::Gemm;
  using Kernel = typename Cfg::Kernel;
  using EA = typename Kernel::ElementA;
  using EB = typename Kernel::ElementB;
  using ED = typename Kernel::ElementD;
  using StrideA = typename Kernel::StrideA;
  using StrideB = typename Kernel::StrideB;
  using StrideC = typename Kernel::StrideC;
  using StrideD = typename Kernel::StrideD;
  const bool batched = a.batch > 1;

  sm90::EpilogueParams ep;
  ep.alpha = a.alpha;
  ep.bias = a.bias;
  ep.preact = a.preact;
  ep.ld_pre = a.ldd;
  ep.batch_stride_pre = batched ? a.batch_stride_d : 0;
  ep.residual = a.residual != nullptr;
  ep.act.act = static_cast<int>(a.act);
  ep.act.a = static_cast<float>(a.act_params.a);
  ep.act.b = static_cast<float>(a.act_params.b);

  typename Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {int(a.M), int(a.N), int(a.K), int(a.batch)};
  args.mainloop.ptr_A = static_cast<EA const*>(a.A.ptr);
  args.mainloop.dA = make_operand_stride<StrideA>(a.A.ld, batched ? a.A.batch_stride : 0);
  args.mainloop.ptr_B = static_cast<EB const*>(a.B.ptr);
  args.mainloop.dB = make_operand_stride<StrideB>(a.B.ld, batched ? a.B.batch_stride : 0);
  args.epilogue.thread = {ep};
  // C is the residual; without one its load is skipped, and D's pointer stands in for a valid descriptor.
  args.epilogue.ptr_C = static_cast<ED const*>(a.residual ? a.residual : a.D);
  args.epilogue.dC = a.residual ? make_operand_stride<StrideC>(a.ldr, batched ? a.batch_stride_r : 0)
                                : make_operand_stride<StrideC>(a.ldd, batched ? a.batch_stride_d : 0);
  args.epilogue.ptr_D = static_cast<ED*>(a.D);
  args.epilogue.dD = make_operand_stride<StrideD>(a.ldd, batched ? a.batch_stride_d : 0);
  args.hw_info.device_id = 0;
  cudaGetDevice(&args.hw_info.device_id);
  args.hw_info.sm_count = device_info().sm_count;
  args.scheduler.max_swizzle_size = swizzle();
  args.scheduler.raster_order = raster_order();
  return args;
}

template <class Cfg>
int64_t workspace_bytes(const GemmArgs& a) {
  return static_cast<int64_t>(Cfg::Gemm::get_workspace_size(make_arguments<Cfg>(a)));
}

// The kernel's dynamic shared-memory limit, raised once per device (CUTLASS's adapter sets it at every call:
// a driver call per GEMM that skinny, microsecond-scale problems notice).
template <class Kernel>
cudaError_t raise_smem_limit() {
  static std::once_flag flags[kMaxDevices];
  static cudaError_t results[kMaxDevices];
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  std::call_once(flags[dev], [dev] {
    constexpr int smem = Kernel::SharedStorageSize;
    results[dev] = smem >= (48 << 10) ? cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem)
                                      : cudaSuccess;
  });
  return results[dev];
}

template <class Cfg>
cudaError_t run(const GemmArgs& a, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  using Gemm = typename Cfg::Gemm;
  using Kernel = typename Cfg::Kernel;
  auto args = make_arguments<Cfg>(a);
  if (Gemm::can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
  const size_t need = Gemm::get_workspace_size(args);
  if (need > 0 && (workspace == nullptr || static_cast<int64_t>(need) > workspace_bytes)) return cudaErrorInvalidValue;
  void* ws = need > 0 ? workspace : nullptr;
  if (cudaError_t e = raise_smem_limit<Kernel>(); e != cudaSuccess) return e;
  if (Kernel::initialize_workspace(args, ws, stream, nullptr) != cutlass::Status::kSuccess) {
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorLaunchFailure;
  }
  typename Kernel::Params params = Kernel::to_underlying_arguments(args, ws);
  if (Gemm::run(params, stream) != cutlass::Status::kSuccess) {
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorLaunchFailure;
  }
  return cudaGetLastError();
}

template <class F>
auto dispatch(const GemmArgs& a, Kind k, F&& f) {
  const bool bf = a.dtype == DType::BFloat16;
  switch (k) {
    case Kind::TnBig: return bf ? f.template operator()<TnBig<bf16>>() : f.template operator()<TnBig<fp16>>();
    case Kind::TnBigPlain:
      return bf ? f.template operator()<TnBigPlain<bf16>>() : f.template operator()<TnBigPlain<fp16>>();
    case Kind::TnPingpong: return f.template operator()<TnPingpongBf16>();
    case Kind::TnStreamK:
      return bf ? f.template operator()<TnStreamK<bf16>>() : f.template operator()<TnStreamK<fp16>>();
    case Kind::NnBig: return bf ? f.template operator()<NnBig<bf16>>() : f.template operator()<NnBig<fp16>>();
    case Kind::TtBig: return bf ? f.template operator()<TtBig<bf16>>() : f.template operator()<TtBig<fp16>>();
    case Kind::Tf32Wide: return f.template operator()<Tf32Wide>();
    case Kind::Tf32:
    default: return f.template operator()<Tf32Big>();
  }
}

}  // namespace

bool gemm_sm90_supports(const GemmArgs& a) {
  if (!device_info().sm90) return false;
  // TF32 only with a pre-rounded operand (tf32_rounded, see round_to_tf32): wgmma truncates fp32 operands to
  // TF32, which gave 2.7x cuBLAS's TF32 error on the H100, past the error-ratio rule.
  if (a.dtype == DType::Float32 && !a.tf32_rounded) return false;
  if (choose(a) == Kind::None) return false;
  if (!sm90::epilogue_act_supported(a.act)) return false;
  if (!fits_int(a.M) || !fits_int(a.N) || !fits_int(a.K) || !fits_int(a.batch)) return false;
  const int64_t eb = elem_bytes(a.dtype);
  const int64_t b = a.batch;
  if (!tma_ok(a.A.ptr, a.A.ld, a.A.batch_stride, b, eb) || !tma_ok(a.B.ptr, a.B.ld, a.B.batch_stride, b, eb)) return false;
  // a leading dimension shorter than the contiguous extent would overlap rows: not a TMA tensor
  if (a.A.ld < (a.A.col_major ? a.M : a.K) || a.B.ld < (a.B.col_major ? a.K : a.N)) return false;
  // CUTLASS's can_implement also wants each operand's contiguous extent a multiple of 16 bytes (K for a
  // K-major operand, M / N for an M- / N-major one, N for D, C and preact): the same rule here, so that
  // supports() and the launch agree.
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

int64_t gemm_sm90_workspace_bytes(const GemmArgs& a) {
  const Kind k = choose(a);
  if (k == Kind::None || !device_info().sm90) return 0;
  return dispatch(a, k, [&]<class Cfg>() { return workspace_bytes<Cfg>(a); });
}

cudaError_t gemm_sm90(const GemmArgs& a, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  if (!gemm_sm90_supports(a)) return cudaErrorNotSupported;
  return dispatch(a, choose(a), [&]<class Cfg>() { return run<Cfg>(a, workspace, workspace_bytes, stream); });
}

}  // namespace matmul
}  // namespace torch_dnn
