// conv_staging.h's staging (the CUDA launcher's route for NCHW operands and channel counts that are not multiples
// of 8 onto the tensor-core paths) run on the CPU, with a stand-in for those paths: it takes a problem only under
// their operand rules (conv_implicit_gemm.cu's, restated here rather than shared so that staging is checked
// against them) and computes it with ATen in float64. torch.ops.torch_dnn_conv_stage.run returns whether the
// staged problem ran (else nothing is written: the launcher would run the direct kernels on the caller's
// operands). tests/test_conv_emulation.py compares the results with PyTorch's convolution. Built on demand by
// that test with g++ (no GPU, no nvcc).
#include "conv/conv_staging.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "conv_emulation_geometry.h"

namespace {

using namespace torch_dnn;
using namespace torch_dnn::conv;

// The kernels' operand rule: channels innermost, every other stride a multiple of 8 elements, 16-byte aligned.
bool channels_inner(const Operand5& o, int64_t n, int64_t c, const int64_t (&sp)[3]) {
  if (o.ptr == nullptr || reinterpret_cast<uintptr_t>(o.ptr) % 16 != 0) return false;
  if (c > 1 && o.stride[1] != 1) return false;
  const int64_t ext[5] = {n, c, sp[0], sp[1], sp[2]};
  for (const int j : {0, 2, 3, 4})
    if ((ext[j] == 1 ? 0 : o.stride[j]) % 8 != 0) return false;
  return true;
}

bool path_takes(Pass pass, const ConvArgs& a) {
  const ConvGeometry& g = a.g;
  if (!staging::tensor_core_dtype(a) || g.G != 1 || g.C % 8 != 0 || g.K % 8 != 0) return false;
  if (!channels_inner(a.x, g.N, g.C, g.in) || !channels_inner(a.y, g.N, g.K, g.out) ||
      !channels_inner(a.w, g.K, g.C, g.ker))
    return false;
  if (a.residual.ptr != nullptr && !channels_inner(a.residual, g.N, g.K, g.out)) return false;
  if (a.bias != nullptr && reinterpret_cast<uintptr_t>(a.bias) % 16 != 0) return false;
  if (pass == Pass::Wgrad) {  // dw dense in (t, r, s, c)
    const Operand5& w = a.w;
    if ((g.ker[2] > 1 && w.stride[4] != g.C) || (g.ker[1] > 1 && w.stride[3] != g.ker[2] * g.C) ||
        (g.ker[0] > 1 && w.stride[2] != g.ker[1] * g.ker[2] * g.C))
      return false;
  }
  return true;
}

// The stand-in path: the pass computed in float64 on the operands' memory.
bool stand_in(Pass pass, const ConvArgs& a, const at::TensorOptions& opts) {
  if (!path_takes(pass, a)) return false;
  const ConvGeometry& g = a.g;
  const auto view = [&](const Operand5& o, int64_t n, int64_t c, const int64_t (&sp)[3]) {
    return staging::view_of(o, staging::extents(n, c, sp), opts);
  };
  at::Tensor x = view(a.x, g.N, g.C, g.in), w = view(a.w, g.K, g.C, g.ker), y = view(a.y, g.N, g.K, g.out);
  const at::IntArrayRef stride(g.stride, 3), pad(g.pad, 3), dil(g.dil, 3);
  const auto f64 = [](const at::Tensor& t) { return t.to(at::kDouble); };
  if (pass == Pass::Fprop) {
    at::Tensor r = at::conv3d(f64(x), f64(w), {}, stride, pad, dil, 1);
    if (a.bias != nullptr)
      r = r + f64(staging::view_of(const_cast<void*>(a.bias), {g.K}, {1}, opts)).view({1, g.K, 1, 1, 1});
    if (a.residual.ptr != nullptr) r = r + f64(view(a.residual, g.N, g.K, g.out));
    if (a.act == Act::Relu) r = r.relu();
    TORCH_CHECK(a.act == Act::Identity || a.act == Act::Relu, "conv staging emulation: identity or relu only");
    y.copy_(r);
  } else {
    const auto grads = at::convolution_backward(f64(y), f64(x), f64(w), std::nullopt, stride, pad, dil, false,
                                                {0, 0, 0}, 1, {pass == Pass::Dgrad, pass == Pass::Wgrad, false});
    if (pass == Pass::Dgrad) x.copy_(std::get<0>(grads));
    else w.copy_(std::get<1>(grads));
  }
  return true;
}

Operand5 operand(const at::Tensor& t) {
  TORCH_CHECK(t.dim() == 5, "conv staging emulation: 5-D operands only");
  return staging::operand_of(t);
}

// pass 0 fprop (reads x, w, bias, residual; writes y), 1 dgrad (reads y, w; writes x), 2 wgrad (reads y, x;
// writes w). Returns 1 where the staged problem ran on the stand-in path, 0 where staging declined.
int64_t run(int64_t pass_index, const at::Tensor& x, const at::Tensor& w, const at::Tensor& y,
            const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& residual, at::IntArrayRef stride,
            at::IntArrayRef pad, at::IntArrayRef dil, int64_t groups, bool allow_tf32, int64_t act) {
  const Pass pass = pass_index == 0 ? Pass::Fprop : pass_index == 1 ? Pass::Dgrad : Pass::Wgrad;
  ConvArgs a;
  a.dtype = to_dtype(x.scalar_type());
  a.allow_tf32 = allow_tf32;
  a.knobs = ConvKnobs::read();  // as the CUDA launcher does: the staging and weight-cache switches
  a.g = emulation_geometry(x, w, y, stride, pad, dil, groups);
  a.x = operand(x);
  a.w = operand(w);
  a.y = operand(y);
  if (bias) a.bias = bias->const_data_ptr();
  if (residual) a.residual = operand(*residual);
  a.act = Act(act);
  const auto opts = x.options();
  // the weight tensor keys its staged copy where the pass reads it (conv_weight_cache.h)
  const at::Tensor owner = pass == Pass::Wgrad ? at::Tensor() : w;
  return staging::run_staged(pass, a, opts, &staging::aten_copy,
                             [&](const ConvArgs& b) { return stand_in(pass, b, opts); }, owner,
                             c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kCPU)))
             ? 1
             : 0;
}

// (hits, misses, entries) of the staged-weight cache since the last clear, which clear_weight_cache resets.
std::vector<int64_t> weight_cache_stats() {
  const auto s = staging::WeightCache::instance().stats();
  return {s[0], s[1], s[2]};
}

void clear_weight_cache() { staging::WeightCache::instance().clear(); }

}  // namespace

TORCH_LIBRARY(torch_dnn_conv_stage, m) {
  m.def("run(int pass_index, Tensor(a!) x, Tensor(b!) w, Tensor(c!) y, Tensor? bias, Tensor? residual, int[] stride, "
        "int[] pad, int[] dil, int groups, bool allow_tf32, int act) -> int");
  m.def("weight_cache_stats() -> int[]", &weight_cache_stats);
  m.def("clear_weight_cache() -> ()", &clear_weight_cache);
}

TORCH_LIBRARY_IMPL(torch_dnn_conv_stage, CPU, m) { m.impl("run", run); }
