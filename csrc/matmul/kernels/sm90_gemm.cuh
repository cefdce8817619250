// The Hopper GEMM's shared machinery (sm_90a, CUTLASS 3.x), for its two translation units: gemm_sm90.cu (the
// persistent and stream-K kernels with the fused epilogue) and gemm_sm90_skinny.cu (the kernels of
// skinny problems). Holds the kernel configuration (Sm90Gemm), the scheduler knobs, CUTLASS's arguments from a
// GemmArgs, and the cached-parameters run (the device facts and the launch: sm90_launch.cuh, shared with conv).
// Torch-free; each including file defines NDEBUG first (see gemm_sm90.cu).
#pragma once
#include <cstdlib>
#include <cstring>
#include <type_traits>

// CUTLASS makes each TMA descriptor through the driver's cuTensorMapEncodeTiled, which it looks up by name
// (cudaGetDriverEntryPointByVersion) at every call: four lookups a GEMM on the host path, which is the whole
// budget of a decode-sized problem. With CUTLASS's direct driver calls on, that name is routed here to a wrapper
// that looks it up once (the extension itself does not link libcuda, so that CPU-only machines import it).
#define CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL 1
#include "common/driver_api.h"

namespace torch_dnn {
namespace matmul {
namespace sm90 {
inline CUresult encode_tensor_map_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                        const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                        CUtensorMapFloatOOBfill oob_fill) {
  const auto fn = tensor_map_encode_tiled();
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  return fn(map, type, rank, address, dims, strides, box, element_strides, interleave, swizzle, l2, oob_fill);
}
}  // namespace sm90
}  // namespace matmul
}  // namespace torch_dnn
#define cuTensorMapEncodeTiled ::torch_dnn::matmul::sm90::encode_tensor_map_tiled

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "matmul/gemm_kernels.h"
#include "matmul/kernels/sm90_epilogue.cuh"
#include "matmul/kernels/sm90_launch.cuh"

namespace torch_dnn {
namespace matmul {
namespace sm90 {

using namespace cute;

// kPreact: the epilogue can store pre (the aux store); without it the mainloop gets the aux smem back.
// kSwapped: the kernel computes D^T = B^T A^T (swap-AB): D and C are column-major and the bias is broadcast
// along the kernel's rows (the problem's columns). Only without the preact store.
template <class ElementAB, class LayoutA, class LayoutB, class ElementD, class TileShape, class ClusterShape,
          class Scheduler_, bool kPreact = true, bool kPingpong = false, bool kSwapped = false>
struct Sm90Gemm {
  static_assert(!(kPreact && kSwapped), "the swap-AB kernels never store preact");
  using Scheduler = Scheduler_;
  using LayoutD = cute::conditional_t<kSwapped, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using MainloopSchedule = cute::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                               cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = cute::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                               cutlass::epilogue::TmaWarpSpecializedCooperative>;
  static constexpr int kAlignAB = 128 / cutlass::sizeof_bits<ElementAB>::value;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  static constexpr bool kFast = cutlass::sizeof_bits<ElementD>::value == 16;
  using FusionOp = cute::conditional_t<kPreact, sm90::LinActResidualAux<ElementD, kFast>,
                                       sm90::LinActResidualCallbacks<TileShape, ElementD, kFast, kSwapped>>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementD, LayoutD, kAlignD, ElementD, LayoutD, kAlignD, EpilogueSchedule,
      FusionOp>::CollectiveOp;

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

using C21 = Shape<_2, _1, _1>;
using C11 = Shape<_1, _1, _1>;
using Persistent = cutlass::gemm::PersistentScheduler;
using StreamK = cutlass::gemm::StreamKScheduler;
using RowM = cutlass::layout::RowMajor;
using ColM = cutlass::layout::ColumnMajor;
using bf16 = cutlass::bfloat16_t;
using fp16 = cutlass::half_t;

// Raster swizzle and order of the persistent scheduler (MatmulKnobs::sm90_swizzle, sm90_raster). Swizzle 8 is the
// default: with A and B panels larger than the L2, consecutive tiles then share panels instead of re-reading B
// from DRAM each wave (scripts/sweep_sm90.py sweeps the settings; docs/matmul.md has the measurements).
using RasterOrder = cutlass::gemm::kernel::detail::RasterOrderOptions;
inline RasterOrder raster_order(const GemmArgs& a) {
  switch (a.knobs.sm90_raster) {
    case Sm90Raster::AlongM: return RasterOrder::AlongM;
    case Sm90Raster::AlongN: return RasterOrder::AlongN;
    default: return RasterOrder::Heuristic;
  }
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

// CUTLASS's arguments for problem `a` (already in the kernel's orientation: see swapped()). splits > 0 fixes a
// stream-K scheduler's decomposition (1: data-parallel, > 1: split-K in that many K ranges, reduced in K order:
// deterministic); 0 leaves it to CUTLASS's heuristic.
template <class Cfg>
typename Cfg::Gemm::Arguments make_arguments(const GemmArgs& a, int splits = 0) {
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
  args.scheduler.max_swizzle_size = a.knobs.sm90_swizzle;
  args.scheduler.raster_order = raster_order(a);
  if constexpr (std::is_same_v<typename Cfg::Scheduler, cutlass::gemm::StreamKScheduler>) {
    using Mode = cutlass::gemm::kernel::detail::DecompositionMode;
    if (splits > 0) {
      args.scheduler.splits = splits;
      args.scheduler.decomposition_mode = splits > 1 ? Mode::SplitK : Mode::DataParallel;
      args.scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Deterministic;
    }
  }
  return args;
}

// Everything make_arguments reads of a problem (and the call's device, knobs and split count): two calls with
// equal keys get equal kernel parameters.
struct ParamsKey {
  static constexpr int kMax = 36;  // params_key adds 29
  int64_t v[kMax];
  int n = 0;
  // never matches (no caching): a key that did not fit (rather than a truncated one), or the cache off
  bool disabled = false;
  void add(int64_t x) {
    if (n < kMax) v[n++] = x;
    else disabled = true;
  }
  void add(const void* p) { add(static_cast<int64_t>(reinterpret_cast<uintptr_t>(p))); }
  void add(double x) {
    int64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    add(bits);
  }
  bool operator==(const ParamsKey& o) const {
    return !disabled && !o.disabled && n == o.n && std::memcmp(v, o.v, n * sizeof(int64_t)) == 0;
  }
};

inline ParamsKey params_key(const GemmArgs& a, int splits, int device) {
  ParamsKey k;
  k.add(int64_t(device)), k.add(int64_t(splits));
  k.add(int64_t(a.knobs.sm90_swizzle)), k.add(int64_t(raster_order(a)));
  k.add(int64_t(a.dtype)), k.add(a.M), k.add(a.N), k.add(a.K), k.add(a.batch);
  for (const MatrixRef* m : {&a.A, &a.B}) k.add(m->ptr), k.add(m->ld), k.add(m->batch_stride), k.add(int64_t(m->col_major));
  k.add(a.D), k.add(a.ldd), k.add(a.batch_stride_d), k.add(double(a.alpha)), k.add(a.bias), k.add(a.residual);
  k.add(a.ldr), k.add(a.batch_stride_r), k.add(a.preact), k.add(int64_t(a.act)), k.add(a.act_params.a);
  k.add(a.act_params.b);
  return k;
}

// The kernel parameters of the last few problems a configuration ran without a workspace, per host thread: a
// decode loop repeats its shapes on the same caching-allocator blocks, and CUTLASS's to_underlying_arguments
// (four TMA descriptors encoded, the scheduler's parameters) and can_implement cost host time every call.
template <class Params>
struct ParamsCache {
  static constexpr int kEntries = 8;
  ParamsKey keys[kEntries];
  Params params[kEntries];
  bool valid[kEntries] = {};
  int next = 0;
  const Params* find(const ParamsKey& k) const {
    for (int i = 0; i < kEntries; ++i)
      if (valid[i] && keys[i] == k) return &params[i];
    return nullptr;
  }
  void put(const ParamsKey& k, const Params& p) {
    if (k.disabled) return;
    keys[next] = k, params[next] = p, valid[next] = true;
    next = (next + 1) % kEntries;
  }
};

template <class Cfg>
ParamsCache<typename Cfg::Kernel::Params>& params_cache() {
  thread_local ParamsCache<typename Cfg::Kernel::Params> cache;
  return cache;
}

// The cache key of problem `a` on the current device; a disabled one (never matches) where the device is unknown
// or MatmulKnobs::sm90_params_cache is off (every call builds its parameters: the A/B knob).
inline ParamsKey cache_key(const GemmArgs& a, int splits) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || !a.knobs.sm90_params_cache) {
    ParamsKey off;
    off.disabled = true;
    return off;
  }
  return params_key(a, splits, device);
}

template <class Cfg>
cudaError_t run(const GemmArgs& a, const WorkspaceSource& workspace, cudaStream_t stream, int splits = 0) {
  using Gemm = typename Cfg::Gemm;
  using Kernel = typename Cfg::Kernel;
  using Params = typename Kernel::Params;
  static_assert(std::is_trivially_copyable_v<Params>, "kernel parameters are copied by value");
  ParamsCache<Params>& cache = params_cache<Cfg>();
  const ParamsKey key = cache_key(a, splits);
  if (const Params* hit = cache.find(key)) {
    Params params = *hit;
    return launch<Kernel>(params, stream);
  }
  auto args = make_arguments<Cfg>(a, splits);
  if (Gemm::can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
  const size_t need = Gemm::get_workspace_size(args);
  void* ws = workspace.get(static_cast<int64_t>(need));
  if (need > 0 && ws == nullptr) return cudaErrorMemoryAllocation;
  if (cudaError_t e = raise_smem_limit<Kernel>(); e != cudaSuccess) return e;
  if (Kernel::initialize_workspace(args, ws, stream, nullptr) != cutlass::Status::kSuccess) {
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorLaunchFailure;
  }
  Params params = Kernel::to_underlying_arguments(args, ws);
  // only problems without a workspace: one with a workspace is initialized (zeroed) for every launch
  if (need == 0) cache.put(key, params);
  return launch<Kernel>(params, stream);
}


// The skinny kernels (gemm_sm90_skinny.cu): x @ W^T with at most 256 rows of x (swap-AB, or narrow tiles).
cudaError_t run_skinny(const GemmArgs& a, const WorkspaceSource& workspace, cudaStream_t stream);

}  // namespace sm90
}  // namespace matmul
}  // namespace torch_dnn
