// CUDA launcher of the convolution family: fills the kernels' ConvArgs from PyTorch's switches, gives them workspace
// from the caching allocator, and calls the torch-free entry points of conv_kernels.h on the current stream: the
// Hopper implicit GEMM, then the portable one, then, where both answer cudaErrorNotSupported, the same two on a
// staged copy of the problem where its layout or channel counts were what they refused (conv_staging.h: NCHW,
// C or K not a multiple of 8), then the direct kernels (they take every problem). Registered for the CUDA
// dispatch key only.
#include <torch/version.h>

#include <initializer_list>
#include <vector>

#include "common/cuda_utils.h"
#include "common/layout_transpose.h"
#include "conv/conv_fused_ops.h"
#include "conv/conv_kernels.h"
#include "conv/conv_ops.h"
#include "conv/conv_staging.h"

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

// The tensor-core paths in turn, each answering cudaErrorNotSupported for what it does not take; true when one
// took the problem (its work queued).
bool run_tensor_cores(Pass pass, const ConvArgs& a, cudaStream_t stream) {
  for (const Entry path : {hopper(pass), implicit_gemm(pass)}) {
    const cudaError_t err = path(a, stream);
    if (err == cudaSuccess) return true;
    TORCH_CHECK(err == cudaErrorNotSupported, "torch_dnn: a tensor-core convolution failed: ",
                cudaGetErrorString(err));
    (void)cudaGetLastError();
  }
  return false;
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

struct CudaBackend {
  static void run(Pass pass, ConvArgs& a, const at::Tensor& like, const at::Tensor& weight) {
    c10::cuda::CUDAGuard guard(like.device());
    auto& ctx = at::globalContext();
    a.allow_tf32 = allow_tf32(ctx);
    a.deterministic = ctx.deterministicAlgorithms() || ctx.deterministicCuDNN();
    CallWorkspace ws(like);
    a.workspace = ws.source();
    const cudaStream_t stream = current_stream();
    if (run_tensor_cores(pass, a, stream)) return;
    // refused for the operands' layout or channel counts: the same paths on staged operands (conv_staging.h), the
    // weight's staged copy kept between calls except under graph capture (a replay would not restage it)
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
      (void)cudaGetLastError();
      capture = cudaStreamCaptureStatusActive;
    }
    const at::Tensor owner = capture == cudaStreamCaptureStatusNone ? weight : at::Tensor();
    if (staging::run_staged(pass, a, like.options(), &staging_copy,
                            [&](const ConvArgs& b) { return run_tensor_cores(pass, b, stream); }, owner,
                            c10::cuda::getCurrentCUDAStream().unwrap()))
      return;
    TD_CHECK_LAUNCH(direct(pass)(a, stream));
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
