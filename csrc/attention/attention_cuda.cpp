// CUDA launcher of the attention family: fills the problem (attention_ops.h), draws the dropout key from torch's
// CUDA generator as PyTorch's own SDPA does (so torch.manual_seed reproduces a dropout mask), takes workspaces
// from the caching allocator and calls the torch-free entry points on the current stream: the flash tensor-core
// kernels first, the reference kernels when those answer cudaErrorNotSupported.
// TORCH_DNN_ATTENTION_PATH=auto|flash|reference overrides the choice (tests and benchmarks; flash on a problem
// that it cannot take is an error, not a fallback); TORCH_DNN_ATTENTION_SM90=0 turns the Hopper route off
// (AttnArgs::sm90_enabled). Every knob is read here, once a call.
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>

#include <mutex>
#include <vector>

#include "attention/attention_kernels.h"
#include "attention/attention_ops.h"
#include "common/cuda_utils.h"
#include "common/env.h"

namespace torch_dnn {
namespace attention {
namespace {

enum class Path { Auto, Flash, Reference };

// The family's knobs (docs/attention.md), read once a call; a value that is none of the choices is an error.
struct Knobs {
  Path path = Path::Auto;
  bool sm90_enabled = true;
  Sm90Fwd sm90_fwd = Sm90Fwd::PingPong;
  Sm90Bwd sm90_bwd = Sm90Bwd::WarpSpecialized;
};

Knobs read_knobs() {
  Knobs k;
  k.path = Path(knob_choice("TORCH_DNN_ATTENTION_PATH", {"auto", "flash", "reference"}));
  k.sm90_enabled = knob_choice("TORCH_DNN_ATTENTION_SM90", {"1", "0"}) == 0;
  constexpr Sm90Fwd kSchedules[] = {Sm90Fwd::PingPong, Sm90Fwd::WarpSpecialized, Sm90Fwd::CpAsync};
  k.sm90_fwd = kSchedules[knob_choice("TORCH_DNN_ATTENTION_SM90_FWD", {"pingpong", "ws", "cp.async"})];
  constexpr Sm90Bwd kBwdSchedules[] = {Sm90Bwd::WarpSpecialized, Sm90Bwd::CpAsync};
  k.sm90_bwd = kBwdSchedules[knob_choice("TORCH_DNN_ATTENTION_SM90_BWD", {"ws", "cp.async"})];
  return k;
}

// The workspaces one call asks for, from the caching allocator (graph-capture safe), held until its launches are
// queued (the allocator keeps the memory for the stream's queued work).
struct CallWorkspace {
  at::TensorOptions opts;
  std::vector<at::Tensor> held;
  explicit CallWorkspace(const at::Tensor& like) : opts(like.options().dtype(at::kByte)) {}
  static void* get(void* self, int64_t bytes) {
    auto* w = static_cast<CallWorkspace*>(self);
    w->held.push_back(at::empty({bytes}, w->opts));
    return w->held.back().data_ptr();
  }
  Workspace source() { return {&CallWorkspace::get, this}; }
};

// flash first, then the reference kernels where flash answers cudaErrorNotSupported (as the path asks). flash gets
// the problem with the knobs' Hopper choices filled in.
template <class Flash, class Reference>
void launch(const char* what, const AttnArgs& a, Flash flash, Reference reference, const at::Tensor& like) {
  c10::cuda::CUDAGuard guard(like.device());
  const env::Scope scope;
  const Knobs knobs = read_knobs();
  const Path path = knobs.path;
  CallWorkspace ws(like);
  cudaError_t err = cudaErrorNotSupported;
  if (path != Path::Reference) {
    AttnArgs chosen = a;
    chosen.sm90_enabled = knobs.sm90_enabled;
    chosen.sm90_fwd = knobs.sm90_fwd;
    chosen.sm90_bwd = knobs.sm90_bwd;
    err = flash(chosen, ws.source(), current_stream());
    TORCH_CHECK(err != cudaErrorNotSupported || path != Path::Flash, "torch_dnn: TORCH_DNN_ATTENTION_PATH=flash, ",
                "but the flash ", what, " cannot take this problem");
    if (err == cudaErrorNotSupported) (void)cudaGetLastError();  // not supported: nothing was launched
  }
  if (err == cudaErrorNotSupported) err = reference(ws.source(), current_stream());
  TD_CHECK_LAUNCH(err);
}

struct CudaBackend {
  static std::pair<uint64_t, uint64_t> philox_seed_offset(const at::Tensor& like) {
    TORCH_CHECK(c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None,
                "torch_dnn.attention_forward: dropout_p > 0 is not supported inside CUDA graph capture (the dropout "
                "key is passed by value)");
    auto* gen = at::get_generator_or_default<at::CUDAGeneratorImpl>(
        std::nullopt, at::cuda::detail::getDefaultCUDAGenerator(like.device().index()));
    std::lock_guard<std::mutex> lock(gen->mutex_);
    // one Philox counter per (b, h, i, j) below the offset's 64 bits (philox.h): any increment separates calls
    const at::PhiloxCudaState st = gen->philox_cuda_state(4);
    return {st.seed_.val, st.offset_.val};
  }

  static void forward(const AttnArgs& a, const at::Tensor& like) {
    launch(
        "forward", a, [&](const AttnArgs& c, const Workspace& ws, cudaStream_t s) { return flash_forward(c, ws, s); },
        [&](const Workspace& ws, cudaStream_t s) { return reference_forward(a, ws, s); }, like);
  }

  static void backward(const AttnArgs& a, const AttnGrads& g, const at::Tensor& like) {
    launch(
        "backward", a,
        [&](const AttnArgs& c, const Workspace& ws, cudaStream_t s) { return flash_backward(c, g, ws, s); },
        [&](const Workspace& ws, cudaStream_t s) { return reference_backward(a, g, ws, s); }, like);
  }
};

}  // namespace
}  // namespace attention
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::attention::register_attention_impls<torch_dnn::attention::CudaBackend>(m);
}
