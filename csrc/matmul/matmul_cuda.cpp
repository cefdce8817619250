// CUDA launcher of the matmul family: picks the GEMM path, allocates its workspace from the caching allocator,
// calls the torch-free entry points on the current stream. Registered for the CUDA dispatch key only.
//
// Path choice: the Hopper path (gemm_sm90, wgmma + TMA) when this build has it (TORCH_DNN_WITH_SM90_GEMM),
// the device is sm_90 and gemm_sm90_plan(args) is ok, unless the portable path's skinny kernel takes the problem
// (gemm_skinny_applies: decode-sized M, where streaming the weight is the whole cost, on GPUs without the Hopper
// skinny kernels or when forced); otherwise the portable sm_80+ path (gemm_sm80).
// TORCH_DNN_GEMM_PATH=auto|sm80|sm90 overrides it for tests and benchmarks (sm90 on a problem, build or device
// that cannot take it is an error, not a silent fallback). Float32 without TF32 always takes the portable path
// (the Hopper kernels take float32 only as TF32), there by the SIMT FFMA kernel (GemmArgs::fp32_simt), or by
// 3xTF32 under TORCH_DNN_GEMM_FP32=3xtf32. Every knob is read once a call into GemmArgs::knobs (matmul_knobs.h).
#include <string>

#include "activation/activation_kernels.h"
#include "common/cuda_utils.h"
#include "common/env.h"
#include "matmul/gemm_kernels.h"
#include "matmul/matmul_knobs.h"
#include "matmul/matmul_ops.h"

namespace torch_dnn {
namespace matmul {
namespace {

// A knob of named choices set to none of them (MatmulKnobs::read leaves it Unknown) is an error naming them.
template <size_t N>
void check_choice(bool known, const char* name, const char* const (&choices)[N]) {
  if (!known) bad_knob_choice(name, env::get(name), choices, N);
}

at::Tensor workspace(int64_t bytes, const at::Tensor& like) {
  return workspace_or_none(bytes, like.options().dtype(at::kByte));
}
int64_t size(const at::Tensor& ws) { return ws.defined() ? ws.numel() : 0; }

#ifdef TORCH_DNN_WITH_SM90_GEMM
// The workspaces one gemm_sm90 call asks for (at most two: the split skinny kernels' partial sums and the GEMM's
// own), held until its launches are queued.
struct CallWorkspace {
  const at::Tensor& like;
  at::Tensor held[2];
  int n = 0;
  explicit CallWorkspace(const at::Tensor& l) : like(l) {}
  static void* get(void* self, int64_t bytes) {
    auto* w = static_cast<CallWorkspace*>(self);
    TORCH_CHECK(w->n < 2, "torch_dnn: the sm90 GEMM asked for more than two workspaces");
    at::Tensor& t = w->held[w->n++];
    t = workspace(bytes, w->like);
    return data_or_null(t);
  }
  WorkspaceSource source() { return {&CallWorkspace::get, this}; }
};
#endif

#ifdef TORCH_DNN_WITH_SM90_GEMM
bool device_is_sm90(const at::Tensor& like) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(like.device().index());
  return prop->major == 9 && prop->minor == 0;
}

// The Hopper TF32 kernel (A and B K-major, batch 1) on TF32-rounded copies (round_to_tf32_2d), which also make
// an M-major A or N-major B K-major. False, with nothing launched, when the problem does not fit it.
bool gemm_sm90_tf32_rounded(const GemmArgs& a, const at::Tensor& like) {
  if (a.batch != 1 || a.M <= 0 || a.N <= 0 || a.K <= 0) return false;
  // stored shapes: A is [M][K] (row-major) or [K][M]; B is [N][K] (col_major) or [K][N]
  const bool a_t = a.A.col_major, b_t = !a.B.col_major;  // must be transposed to become K-major
  const int64_t a_rows = a_t ? a.K : a.M, b_rows = b_t ? a.K : a.N;  // stored rows of each source
  if ((a_rows + 31) / 32 > 65535 || (b_rows + 31) / 32 > 65535) return false;
  const auto fopt = like.options().dtype(at::kFloat);
  at::Tensor ca = at::empty({a.M * a.K}, fopt), cb = at::empty({a.N * a.K}, fopt);
  GemmArgs r = a;
  r.tf32_rounded = true;
  r.A = MatrixRef{ca.data_ptr(), a.K, 0, false};
  r.B = MatrixRef{cb.data_ptr(), a.K, 0, true};
  const Sm90Plan plan = gemm_sm90_plan(r);
  if (!plan.ok()) return false;
  const bool vec = a.knobs.tf32_round_vec;
  TD_CHECK_LAUNCH(round_to_tf32_2d(static_cast<const float*>(a.A.ptr), a.A.ld, a_rows, a_t ? a.M : a.K, a_t,
                                   ca.data_ptr<float>(), vec, current_stream()));
  TD_CHECK_LAUNCH(round_to_tf32_2d(static_cast<const float*>(a.B.ptr), a.B.ld, b_rows, b_t ? a.N : a.K, b_t,
                                   cb.data_ptr<float>(), vec, current_stream()));
  CallWorkspace ws(like);
  const cudaError_t err = gemm_sm90(r, plan, ws.source(), current_stream());
  TORCH_CHECK(err == cudaSuccess, "torch_dnn: the sm90 TF32 GEMM failed: ", cudaGetErrorString(err));
  return true;
}
#endif

struct CudaBackend {
  static void gemm(const GemmArgs& args, const at::Tensor& like) {
    c10::cuda::CUDAGuard guard(like.device());
    GemmArgs a = args;
    a.knobs = MatmulKnobs::read();
    const GemmPath path = a.knobs.path;
    check_choice(path != GemmPath::Unknown, "TORCH_DNN_GEMM_PATH", kGemmPathChoices);
    // the portable path's kernel for float32 without TF32
    const bool fp32_no_tf32 = a.dtype == DType::Float32 && !a.allow_tf32;
    if (fp32_no_tf32) check_choice(a.knobs.fp32 != GemmFp32::Unknown, "TORCH_DNN_GEMM_FP32", kGemmFp32Choices);
    a.fp32_simt = fp32_no_tf32 && a.knobs.fp32 == GemmFp32::Simt;
#ifdef TORCH_DNN_WITH_SM90_GEMM
    // the Hopper path's plan, made once a call (the skinny choice below and the launch both use it)
    const bool sm90 = path != GemmPath::Sm80 && device_is_sm90(like);
    const Sm90Plan plan = sm90 ? gemm_sm90_plan(a) : Sm90Plan{};
    if (path == GemmPath::Sm90 || (path == GemmPath::Auto && !gemm_skinny_applies(a, plan.skinny))) {
      // float32 with TF32 on the Hopper kernel over operand copies rounded to TF32 (both operands: cuBLAS's error,
      // where wgmma alone would truncate them, and several times the portable path's speed), unless
      // TORCH_DNN_SM90_TF32=off leaves it to the portable path (never under TORCH_DNN_GEMM_PATH=sm90)
      if (a.dtype == DType::Float32 && a.allow_tf32 && sm90) {
        if ((a.knobs.sm90_tf32 || path == GemmPath::Sm90) && gemm_sm90_tf32_rounded(a, like)) return;
      }
      const bool ok = plan.ok();
      TORCH_CHECK(ok || path != GemmPath::Sm90,
                  "torch_dnn: TORCH_DNN_GEMM_PATH=sm90, but the sm90 GEMM cannot take this problem (needs an sm_90 "
                  "device, float16/bfloat16 (or float32 with TF32), 16-byte aligned operands and leading dimensions; "
                  "got ", dtype_name(a.dtype), ", M=", a.M, " N=", a.N, " K=", a.K, ")");
      if (ok) {
        CallWorkspace ws(like);
        const cudaError_t err = gemm_sm90(a, plan, ws.source(), current_stream());
        if (err == cudaSuccess) return;
        TORCH_CHECK(err == cudaErrorNotSupported && path != GemmPath::Sm90, "torch_dnn: the sm90 GEMM failed: ",
                    cudaGetErrorString(err));
        (void)cudaGetLastError();  // not supported after all: the portable path takes it
      }
    }
#else
    TORCH_CHECK(path != GemmPath::Sm90,
                "torch_dnn: TORCH_DNN_GEMM_PATH=sm90, but this build has no sm90 GEMM (built without CUTLASS or "
                "without sm_90a); torch.ops.torch_dnn.gemm_paths() lists the paths it has");
#endif
    at::Tensor ws = workspace(gemm_sm80_workspace_bytes(a), like);
    TD_CHECK_LAUNCH(gemm_sm80(a, data_or_null(ws), size(ws), current_stream()));
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
