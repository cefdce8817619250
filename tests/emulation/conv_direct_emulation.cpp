// The direct convolution kernels (csrc/conv/conv_direct*.cu) and the stem kernel (conv_stem.cu) run on the CPU
// through cuda_host_shim.h, as ops of torch.ops.torch_dnn_conv_emu that take 5-D tensors of any strides and write the result in place: the
// contract's entry points called exactly as the op layer calls them. tests/test_conv_emulation.py compares them
// with PyTorch's convolution in float64. Built on demand by that test with g++ (no GPU, no nvcc).
#include "cuda_host_shim.h"

// the stem kernel's ldmatrix / mma.sync (mma_emulation.h) exchange operands per warp: emu_warp_barrier; the
// direct kernels keep the shim's block-wide shuffles
#include "warp_emulation.h"
#undef __shfl_xor_sync
#undef __syncwarp

#include "conv/conv_direct.cu"
#include "conv/conv_direct_depthwise.cu"
#include "conv/conv_stem.cu"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "conv_emulation_geometry.h"

namespace {

using namespace torch_dnn;
using namespace torch_dnn::conv;

DType to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::Float32;
    case at::kHalf: return DType::Float16;
    case at::kBFloat16: return DType::BFloat16;
    case at::kDouble: return DType::Float64;
    default: TORCH_CHECK(false, "conv emulation: unsupported dtype");
  }
}

Operand5 operand(const at::Tensor& t) {
  TORCH_CHECK(t.dim() == 5, "conv emulation: 5-D operands only");
  Operand5 o;
  o.ptr = const_cast<void*>(t.const_data_ptr());
  for (int i = 0; i < 5; ++i) o.stride[i] = t.stride(i);
  return o;
}

// Scratch memory that lives until the next call; poisoned so that a read before a write shows.
std::vector<at::Tensor>& scratch() {
  static std::vector<at::Tensor> s;
  return s;
}
void* workspace_get(void*, int64_t bytes) {
  scratch().push_back(at::full({bytes}, 0xff, at::TensorOptions().dtype(at::kByte)));
  return scratch().back().data_ptr();
}

ConvArgs make_args(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y, at::IntArrayRef stride,
                   at::IntArrayRef pad, at::IntArrayRef dil, int64_t groups, bool workspace) {
  scratch().clear();
  ConvArgs a;
  a.dtype = to_dtype(x.scalar_type());
  a.g = emulation_geometry(x, w, y, stride, pad, dil, groups);
  a.x = operand(x);
  a.w = operand(w);
  a.y = operand(y);
  if (workspace) a.workspace.fn = workspace_get;
  return a;
}

void check(cudaError_t e) { TORCH_CHECK(e == cudaSuccess, "emulated launch failed: ", int(e)); }

void fprop(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y, const std::optional<at::Tensor>& bias,
           const std::optional<at::Tensor>& residual, at::IntArrayRef stride, at::IntArrayRef pad, at::IntArrayRef dil,
           int64_t groups, int64_t act, double act_a, double act_b) {
  ConvArgs a = make_args(x, w, y, stride, pad, dil, groups, false);
  if (bias) a.bias = bias->const_data_ptr();
  if (residual) a.residual = operand(*residual);
  a.act = Act(act);
  a.act_params.a = act_a;
  a.act_params.b = act_b;
  check(conv_direct_fprop(a, nullptr));
}

// The stem kernel (conv_stem.cu); false where it does not take the problem.
bool stem_fprop(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y, const std::optional<at::Tensor>& bias,
                const std::optional<at::Tensor>& residual, at::IntArrayRef stride, at::IntArrayRef pad, int64_t act,
                double act_a, double act_b) {
  ConvArgs a = make_args(x, w, y, stride, pad, {1, 1, 1}, 1, false);
  if (bias) a.bias = bias->const_data_ptr();
  if (residual) a.residual = operand(*residual);
  a.act = Act(act);
  a.act_params.a = act_a;
  a.act_params.b = act_b;
  const cudaError_t e = conv_stem_fprop(a, nullptr);
  if (e == cudaErrorNotSupported) return false;
  check(e);
  return true;
}

// The stem kernel's weight gradient; false where it does not take the problem.
bool stem_wgrad(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& dw, at::IntArrayRef stride,
                at::IntArrayRef pad) {
  const cudaError_t e = conv_stem_wgrad(make_args(x, dw, dy, stride, pad, {1, 1, 1}, 1, true), nullptr);
  if (e == cudaErrorNotSupported) return false;
  check(e);
  return true;
}

void dgrad(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& dx, at::IntArrayRef stride,
           at::IntArrayRef pad, at::IntArrayRef dil, int64_t groups) {
  check(conv_direct_dgrad(make_args(dx, w, dy, stride, pad, dil, groups, false), nullptr));
}

// Returns the workspace bytes the launch asked for (a split reduction's partial sums).
int64_t wgrad(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& dw, at::IntArrayRef stride,
              at::IntArrayRef pad, at::IntArrayRef dil, int64_t groups, bool workspace) {
  check(conv_direct_wgrad(make_args(x, dw, dy, stride, pad, dil, groups, workspace), nullptr));
  int64_t bytes = 0;
  for (const at::Tensor& t : scratch()) bytes += t.numel();
  return bytes;
}

void bias_grad(const at::Tensor& dy, const at::Tensor& db, bool workspace) {
  scratch().clear();
  ConvGeometry g;
  g.N = dy.size(0);
  g.K = g.C = dy.size(1);
  for (int i = 0; i < 3; ++i) g.out[i] = dy.size(2 + i);
  Workspace ws;
  if (workspace) ws.fn = workspace_get;
  check(conv_bias_grad(to_dtype(dy.scalar_type()), g, operand(dy), db.data_ptr(), ws, nullptr));
}

}  // namespace

TORCH_LIBRARY(torch_dnn_conv_emu, m) {
  m.def("fprop(Tensor x, Tensor w, Tensor(a!) y, Tensor? bias, Tensor? residual, int[] stride, int[] pad, "
        "int[] dil, int groups, int act, float act_a, float act_b) -> ()");
  m.def("stem_fprop(Tensor x, Tensor w, Tensor(a!) y, Tensor? bias, Tensor? residual, int[] stride, int[] pad, "
        "int act, float act_a, float act_b) -> bool");
  m.def("stem_wgrad(Tensor dy, Tensor x, Tensor(a!) dw, int[] stride, int[] pad) -> bool");
  m.def("dgrad(Tensor dy, Tensor w, Tensor(a!) dx, int[] stride, int[] pad, int[] dil, int groups) -> ()");
  m.def("wgrad(Tensor dy, Tensor x, Tensor(a!) dw, int[] stride, int[] pad, int[] dil, int groups, "
        "bool workspace) -> int");
  m.def("bias_grad(Tensor dy, Tensor(a!) db, bool workspace) -> ()");
}

TORCH_LIBRARY_IMPL(torch_dnn_conv_emu, CPU, m) {
  m.impl("fprop", fprop);
  m.impl("stem_fprop", stem_fprop);
  m.impl("stem_wgrad", stem_wgrad);
  m.impl("dgrad", dgrad);
  m.impl("wgrad", wgrad);
  m.impl("bias_grad", bias_grad);
}
