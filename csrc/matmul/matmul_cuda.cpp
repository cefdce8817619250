// CUDA launcher of the matmul family: picks the GEMM path, allocates its workspace from the caching allocator,
// calls the torch-free entry points on the current stream. Registered for the CUDA dispatch key only.
//
// Path choice: the Hopper path (gemm_sm90, wgmma + TMA) when this build has it (TORCH_DNN_WITH_SM90_GEMM),
// the device is sm_90 and gemm_sm90_supports(args), unless the portable path's skinny kernel takes the problem
// (gemm_skinny_applies: decode-sized M, where streaming the weight is the whole cost); otherwise the portable
// sm_80+ path (gemm_sm80).
// TORCH_DNN_GEMM_PATH=auto|sm80|sm90 overrides it for tests and benchmarks (sm90 on a problem, build or device
// that cannot take it is an error, not a silent fallback).
#include <cstdlib>
#include <cstring>
#include <string>

#include "activation/activation_kernels.h"
#include "common/cuda_utils.h"
#include "matmul/gemm_kernels.h"
#include "matmul/matmul_ops.h"

namespace torch_dnn {
namespace matmul {
namespace {

enum class Path { Auto, Sm80, Sm90 };

Path requested_path() {
  const char* s = std::getenv("TORCH_DNN_GEMM_PATH");
  if (s == nullptr || *s == '\0' || std::strcmp(s, "auto") == 0) return Path::Auto;
  if (std::strcmp(s, "sm80") == 0) return Path::Sm80;
  if (std::strcmp(s, "sm90") == 0) return Path::Sm90;
  TORCH_CHECK(false, "torch_dnn: TORCH_DNN_GEMM_PATH must be auto, sm80 or sm90, but got '", s, "'");
}

// A workspace from the caching allocator (graph-capture safe); none (undefined) when no bytes are needed.
at::Tensor workspace(int64_t bytes, const at::Tensor& like) {
  return bytes > 0 ? at::empty({bytes}, like.options().dtype(at::kByte)) : at::Tensor();
}
void* ptr(const at::Tensor& ws) { return ws.defined() ? ws.data_ptr() : nullptr; }
int64_t size(const at::Tensor& ws) { return ws.defined() ? ws.numel() : 0; }

#ifdef TORCH_DNN_WITH_SM90_GEMM
bool device_is_sm90(const at::Tensor& like) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(like.device().index());
  return prop->major == 9 && prop->minor == 0;
}

// TORCH_DNN_SM90_TF32=round: float32 with TF32 allowed takes the Hopper path on a rounded operand copy (opt-in
// until measured; TORCH_DNN_GEMM_PATH=sm90 takes it too).
bool sm90_tf32_requested() {
  const char* s = std::getenv("TORCH_DNN_SM90_TF32");
  return s != nullptr && std::strcmp(s, "round") == 0;
}

// The Hopper TF32 kernel (A and B K-major, batch 1) on a copy of the smaller dense operand rounded to TF32
// (round_to_tf32): rounding one operand keeps the error inside the error-ratio rule (benchmarks/NOTES.md) for
// one extra pass over that operand. False, with nothing launched, when the problem does not fit it.
bool gemm_sm90_tf32_rounded(const GemmArgs& a, const at::Tensor& like) {
  if (a.batch != 1 || a.M <= 0 || a.N <= 0 || a.K <= 0) return false;
  const bool a_dense = !a.A.col_major && a.A.ld == a.K;  // row-major M x K
  const bool b_dense = a.B.col_major && a.B.ld == a.K;   // K-contiguous K x N (an nn.Linear weight)
  if (!a_dense && !b_dense) return false;
  const bool round_a = a_dense && (!b_dense || a.M <= a.N);
  const int64_t n = (round_a ? a.M : a.N) * a.K;
  at::Tensor copy = at::empty({n}, like.options().dtype(at::kFloat));
  GemmArgs r = a;
  r.tf32_rounded = true;
  (round_a ? r.A : r.B).ptr = copy.data_ptr();
  if (!gemm_sm90_supports(r)) return false;
  const float* src = static_cast<const float*>((round_a ? a.A : a.B).ptr);
  TD_CHECK_LAUNCH(round_to_tf32(src, copy.data_ptr<float>(), n, current_stream()));
  at::Tensor ws = workspace(gemm_sm90_workspace_bytes(r), like);
  const cudaError_t err = gemm_sm90(r, ptr(ws), size(ws), current_stream());
  TORCH_CHECK(err == cudaSuccess, "torch_dnn: the sm90 TF32 GEMM failed: ", cudaGetErrorString(err));
  return true;
}
#endif

struct CudaBackend {
  static void gemm(const GemmArgs& a, const at::Tensor& like) {
    c10::cuda::CUDAGuard guard(like.device());
    const Path path = requested_path();
#ifdef TORCH_DNN_WITH_SM90_GEMM
    if (path == Path::Sm90 || (path == Path::Auto && !gemm_skinny_applies(a))) {
      if (a.dtype == DType::Float32 && a.allow_tf32 && (path == Path::Sm90 || sm90_tf32_requested()) &&
          device_is_sm90(like) && gemm_sm90_tf32_rounded(a, like))
        return;
      const bool ok = device_is_sm90(like) && gemm_sm90_supports(a);
      TORCH_CHECK(ok || path != Path::Sm90,
                  "torch_dnn: TORCH_DNN_GEMM_PATH=sm90, but the sm90 GEMM cannot take this problem (needs an sm_90 "
                  "device, float16/bfloat16 (or float32 with TF32), 16-byte aligned operands and leading dimensions; "
                  "got ", dtype_name(a.dtype), ", M=", a.M, " N=", a.N, " K=", a.K, ")");
      if (ok) {
        at::Tensor ws = workspace(gemm_sm90_workspace_bytes(a), like);
        const cudaError_t err = gemm_sm90(a, ptr(ws), size(ws), current_stream());
        if (err == cudaSuccess) return;
        TORCH_CHECK(err == cudaErrorNotSupported && path != Path::Sm90, "torch_dnn: the sm90 GEMM failed: ",
                    cudaGetErrorString(err));
        (void)cudaGetLastError();  // not supported after all: the portable path takes it
      }
    }
#else
    TORCH_CHECK(path != Path::Sm90,
                "torch_dnn: TORCH_DNN_GEMM_PATH=sm90, but this build has no sm90 GEMM (built without CUTLASS or "
                "without sm_90a); torch.ops.torch_dnn.gemm_paths() lists the paths it has");
#endif
    at::Tensor ws = workspace(gemm_sm80_workspace_bytes(a), like);
    TD_CHECK_LAUNCH(gemm_sm80(a, ptr(ws), size(ws), current_stream()));
  }

  static void act_grad(const at::Tensor& g, const at::Tensor& pre, const at::Tensor& dpre, const at::Tensor& dbias,
                       int64_t rows, int64_t cols, Act k, ActParams p) {
    c10::cuda::CUDAGuard guard(g.device());
    const DType dt = to_dtype(g.scalar_type());
    const activation::BiasActShape s{rows, cols, 1};
    at::Tensor ws;
    if (dbias.defined()) {
      const auto acc = g.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
      ws = at::empty({activation::bias_act_backward_workspace(dt, s)}, g.options().dtype(acc));
    }
    TD_CHECK_LAUNCH(activation::launch_bias_act_backward(dt, k, p, g.const_data_ptr(), pre.const_data_ptr(), nullptr,
                                                         dpre.data_ptr(), dbias.defined() ? dbias.data_ptr() : nullptr,
                                                         ws.defined() ? ws.data_ptr() : nullptr, s, current_stream()));
  }
};

}  // namespace
}  // namespace matmul
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::matmul::register_matmul_impls<torch_dnn::matmul::CudaBackend>(m);
}
