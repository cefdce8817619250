// CUDA launcher of the convolution family: fills the kernels' ConvArgs from PyTorch's switches and the family's
// knobs (conv_knobs.h), gives them workspace from the caching allocator, and calls the torch-free entry points of
// conv_kernels.h on the current stream: the stem kernel (forward of C <= 4), the Hopper implicit GEMM (float32 in
// TF32 on rounded copies of its operands, conv_tf32.h), then the
// portable one, then, where both answer cudaErrorNotSupported, the same two on a staged copy of the problem where
// its layout or channel counts were what they refused (conv_staging.h: NCHW, C or K not a multiple of 8), then the
// direct kernels (they take every problem); under torch.backends.cudnn.benchmark, the fastest of those routes as
// measured on the signature's first call (conv_autotune.h). Registered for the CUDA dispatch key only.
#include <torch/version.h>

#include <algorithm>
#include <initializer_list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/cuda_utils.h"
#include "common/layout_transpose.h"
#include "conv/conv_autotune.h"
#include "conv/conv_fused_ops.h"
#include "conv/conv_kernels.h"
#include "conv/conv_ops.h"
#include "conv/conv_staging.h"
#include "conv/conv_tf32.h"

namespace torch_dnn {
namespace conv {
namespace {

// The workspaces one call's launches ask for (ConvArgs::workspace), from the caching allocator (stream-ordered, so
// graph-capture safe), held until the launches are queued.
struct CallWorkspace {
  const at::Tensor& like;
  std::vector<at::Tensor> held;
  explicit CallWorkspace(const at::Tensor& l) : like(l) {}
  static void* get(void* self, int64_t bytes) {
    auto* w = static_cast<CallWorkspace*>(self);
    w->held.push_back(at::empty({bytes}, w->like.options().dtype(at::kByte)));
    return w->held.back().data_ptr();
  }
  Workspace source() { return {&CallWorkspace::get, this}; }
};

using Entry = cudaError_t (*)(const ConvArgs&, cudaStream_t);

// the Hopper implicit GEMM (conv_sm90.cu: CUTLASS's sm_90a kernels, in builds with CUTLASS and sm_90a, on sm_90
// devices; cudaErrorNotSupported elsewhere)
Entry hopper(Pass pass) {
  switch (pass) {
    case Pass::Fprop: return &conv_sm90_fprop;
    case Pass::Dgrad: return &conv_sm90_dgrad;
    default: return &conv_sm90_wgrad;
  }
}

// the portable implicit GEMM (conv_implicit_gemm.cu: mma.sync, any sm_80+ GPU)
Entry implicit_gemm(Pass pass) {
  switch (pass) {
    case Pass::Fprop: return &conv_igemm_fprop;
    case Pass::Dgrad: return &conv_igemm_dgrad;
    default: return &conv_igemm_wgrad;
  }
}

Entry direct(Pass pass) {
  switch (pass) {
    case Pass::Fprop: return &conv_direct_fprop;
    case Pass::Dgrad: return &conv_direct_dgrad;
    default: return &conv_direct_wgrad;
  }
}

// torch.backends.cudnn.allow_tf32 (torch.backends.cudnn.conv.fp32_precision where torch has it): the switch of
// PyTorch's own convolutions
bool allow_tf32(const at::Context& ctx) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
  return ctx.allowTF32CuDNN(at::Float32Op::CONV);
#else
  return ctx.allowTF32CuDNN();
#endif
}

// One entry point on the problem: true when it took it (its work queued), false when it answered
// cudaErrorNotSupported; any other error is raised.
bool run_entry(Entry path, const ConvArgs& a, cudaStream_t stream) {
  const cudaError_t err = path(a, stream);
  if (err == cudaSuccess) return true;
  TORCH_CHECK(err == cudaErrorNotSupported, "torch_dnn: a tensor-core convolution failed: ", cudaGetErrorString(err));
  (void)cudaGetLastError();
  return false;
}

// The Hopper path; float32 with TF32 on rounded copies of its operands (conv_tf32.h: the weight's kept per `owner`
// where that is defined). True when it took the problem.
bool run_hopper(Pass pass, const ConvArgs& a, const at::Tensor& like, const at::Tensor& owner, cudaStream_t stream) {
  if (!tf32::applies(pass, a)) return run_entry(hopper(pass), a, stream);
  return tf32::run(pass, a, like.options(), a.knobs.weight_cache ? owner : at::Tensor(),
                   c10::cuda::getCurrentCUDAStream().unwrap(), stream,
                   [&](const ConvArgs& b) { return run_entry(&conv_sm90_fprop, b, stream); });
}

// The tensor-core paths in turn; true when one took the problem.
bool run_tensor_cores(Pass pass, const ConvArgs& a, const at::Tensor& like, const at::Tensor& owner,
                      cudaStream_t stream) {
  return run_hopper(pass, a, like, owner, stream) || run_entry(implicit_gemm(pass), a, stream);
}

// conv_staging.h's dst.copy_(src): between a dense contiguous and a dense channels-last layout of the same sizes
// by the tiled layout transpose (16-byte accesses; ATen's permuting copy is slower), any other pair by ATen.
void staging_copy(const at::Tensor& dst, const at::Tensor& src) {
  constexpr auto cl = at::MemoryFormat::ChannelsLast3d;
  const bool to_cl = src.is_contiguous() && dst.is_contiguous(cl);
  const bool from_cl = src.is_contiguous(cl) && dst.is_contiguous();
  if (src.numel() == 0 || (!to_cl && !from_cl)) {
    dst.copy_(src);
    return;
  }
  const int64_t N = src.size(0), C = src.size(1), S = src.numel() / (N * C);
  TD_CHECK_LAUNCH(launch_layout_transpose(to_dtype(src.scalar_type()), src.const_data_ptr(), dst.data_ptr(), N, S, C,
                                          /*to_channels_last=*/to_cl, current_stream()));
}

// One call's problem and where its routes run.
struct Call {
  Pass pass;
  const ConvArgs& a;
  const at::Tensor& like;
  at::Tensor weight_owner;  // the weight whose staged copy may be kept (undefined: none, as under graph capture)
  cudaStream_t stream;
};

// Runs `route` (conv_autotune.h) on the call's problem; false where the route does not take it (nothing queued).
bool run_route(Route route, const Call& c) {
  switch (route) {
    case Route::Hopper: return run_hopper(c.pass, c.a, c.like, c.weight_owner, c.stream);
    case Route::ImplicitGemm: return run_entry(implicit_gemm(c.pass), c.a, c.stream);
    case Route::Staged:
      // the same paths on staged operands, where the operands' layout or channel counts were what they refused
      return staging::run_staged(c.pass, c.a, c.like.options(), &staging_copy,
                                 [&](const ConvArgs& b) {
                                   return run_tensor_cores(c.pass, b, c.like, c.weight_owner, c.stream);
                                 },
                                 c.weight_owner, c10::cuda::getCurrentCUDAStream().unwrap());
    case Route::Direct: TD_CHECK_LAUNCH(direct(c.pass)(c.a, c.stream)); return true;
    case Route::Stem:
      return c.pass != Pass::Dgrad &&
             run_entry(c.pass == Pass::Fprop ? &conv_stem_fprop : &conv_stem_wgrad, c.a, c.stream);
  }
  return false;
}

// Every route that takes the problem, timed (conv_autotune.h); runs the fastest last, so that the result is its,
// and returns it (-1: none took the problem, which the direct route always does).
int measure_routes(const Call& c) {
  cudaEvent_t start, stop;
  TD_CHECK_LAUNCH(cudaEventCreate(&start));
  TD_CHECK_LAUNCH(cudaEventCreate(&stop));
  int best = -1;
  float best_ms = 0.0f;
  for (int r = 0; r < kRoutes; ++r) {
    if (!run_route(Route(r), c)) continue;  // the warm-up run, and whether the route takes the problem
    float ms = -1.0f;
    for (int k = 0; k < kTimedRuns; ++k) {
      TD_CHECK_LAUNCH(cudaEventRecord(start, c.stream));
      run_route(Route(r), c);
      TD_CHECK_LAUNCH(cudaEventRecord(stop, c.stream));
      TD_CHECK_LAUNCH(cudaEventSynchronize(stop));
      float t = 0.0f;
      TD_CHECK_LAUNCH(cudaEventElapsedTime(&t, start, stop));
      ms = ms < 0.0f ? t : std::min(ms, t);
    }
    if (best < 0 || ms < best_ms) {
      best = r;
      best_ms = ms;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (best >= 0) run_route(Route(best), c);
  return best;
}

// A number naming the device's model and compute capability, the same in every process (the routes kept in a file
// carry over to other processes on the same GPU model); asked once per device.
int64_t device_kind(int index) {
  static std::mutex mu;
  static std::unordered_map<int, int64_t> kinds;
  std::lock_guard<std::mutex> lock(mu);
  const auto it = kinds.find(index);
  if (it != kinds.end()) return it->second;
  cudaDeviceProp prop{};
  int64_t kind = -1;
  if (cudaGetDeviceProperties(&prop, index) == cudaSuccess) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a of the name, then the capability
    for (const char* c = prop.name; *c != '\0'; ++c) h = (h ^ uint8_t(*c)) * 1099511628211ull;
    kind = int64_t((h ^ uint64_t(prop.major * 100 + prop.minor)) & 0x7fffffffffffffffull);
  } else {
    (void)cudaGetLastError();
  }
  kinds[index] = kind;
  return kind;
}

struct CudaBackend {
  static void run(Pass pass, ConvArgs& a, const at::Tensor& like, const at::Tensor& weight) {
    c10::cuda::CUDAGuard guard(like.device());
    auto& ctx = at::globalContext();
    a.allow_tf32 = allow_tf32(ctx);
    a.deterministic = ctx.deterministicAlgorithms() || ctx.deterministicCuDNN();
    a.knobs = ConvKnobs::read();
    CallWorkspace ws(like);
    a.workspace = ws.source();
    const cudaStream_t stream = current_stream();
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
      (void)cudaGetLastError();
      capture = cudaStreamCaptureStatusActive;
    }
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    // the weight's staged copy is kept between calls except under graph capture (a replay would not restage it)
    const Call c{pass, a, like, capturing ? at::Tensor() : weight, stream};
    // deterministic algorithms: the heuristic's route, the same in every process (a measured one can differ)
    if (ctx.benchmarkCuDNN() && !capturing && !a.deterministic) {
      const std::vector<int64_t> sig = problem_signature(pass, a, device_kind(like.device().index()));
      RouteCache& cache = RouteCache::instance();
      const int kept = cache.find(sig);
      if (kept >= 0 && run_route(Route(kept), c)) return;
      if (kept < 0) {
        const int best = measure_routes(c);
        if (best >= 0) {
          cache.keep(sig, best);
          return;
        }
      }
    }
    for (const Route r : {Route::Stem, Route::Hopper, Route::ImplicitGemm, Route::Staged, Route::Direct})
      if (run_route(r, c)) return;
  }

  static void bias_grad(const ConvGeometry& g, const Operand5& dy, const at::Tensor& db) {
    c10::cuda::CUDAGuard guard(db.device());
    CallWorkspace ws(db);
    TD_CHECK_LAUNCH(conv_bias_grad(to_dtype(db.scalar_type()), g, dy, db.data_ptr(), ws.source(), current_stream()));
  }
};

}  // namespace
}  // namespace conv
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::conv::register_conv_impls<torch_dnn::conv::CudaBackend>(m);
  torch_dnn::conv::register_conv_fused_impls<torch_dnn::conv::CudaBackend>(m);  // conv_fused_ops.h
}
