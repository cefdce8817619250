// flash_decode's CUDA launcher: device guard, the current stream, workspace from the caching allocator (graph-capture
// safe), and the torch-free entry point (flash_decode.cu). A problem the kernels cannot take is an error that says
// why: there is no second CUDA path to fall back to.
// TORCH_DNN_DECODE_KERNEL=staged|registers picks the split kernel's variant (default staged: K / V through shared
// memory with cp.async; registers: loaded straight into registers), for tests and benchmarks.
#include <c10/cuda/CUDAGuard.h>

#include <vector>

#include "attention/decode_ops.h"
#include "common/cuda_utils.h"
#include "common/env.h"

namespace torch_dnn {
namespace attention {
namespace {

struct DecodeWorkspace {
  at::TensorOptions opts;
  std::vector<at::Tensor> held;
  explicit DecodeWorkspace(const at::Tensor& like) : opts(like.options().dtype(at::kByte)) {}
  static void* get(void* self, int64_t bytes) {
    auto* w = static_cast<DecodeWorkspace*>(self);
    w->held.push_back(at::empty({bytes}, w->opts));
    return w->held.back().data_ptr();
  }
};

struct CudaDecode {
  static void decode(const DecodeArgs& args, const at::Tensor& like) {
    const char* op = "torch_dnn.flash_decode";
    DecodeArgs a = args;
    {
      const env::Scope knobs;
      a.staged = knob_choice("TORCH_DNN_DECODE_KERNEL", {"staged", "registers"}) == 0;
    }
    TORCH_CHECK(a.capacity <= int64_t(0x7fffffff), op, ": the cache's capacity (", a.capacity,
                " keys) is past the CUDA kernels' int32 key index");
    c10::cuda::CUDAGuard guard(like.device());
    DecodeWorkspace ws(like);
    const cudaError_t err = flash_decode(a, {&DecodeWorkspace::get, &ws}, current_stream());
    TORCH_CHECK(err != cudaErrorNotSupported, op, ": the CUDA kernels cannot take this problem");
    TD_CHECK_LAUNCH(err);
  }
};

}  // namespace
}  // namespace attention
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::attention::register_decode_impls<torch_dnn::attention::CudaDecode>(m);
}
