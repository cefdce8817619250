// batch_norm's whole-channel kernels (csrc/batch_norm/kernels/bn_channel.cuh) run on the CPU through
// cuda_host_shim.h, as ops of torch.ops.torch_dnn_bn_emu that take an NCHW (dense [N][C][S]) input and a grid size
// (fewer blocks than channels: a block takes several in turn). tests/test_batch_norm_emulation.py compares them
// with PyTorch's batch_norm in float64. Built on demand by that test with g++ (no GPU, no nvcc).
#include "cuda_host_shim.h"

#include "batch_norm/kernels/bn_channel.cuh"
#include "common/tensor_utils.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

namespace {

using namespace torch_dnn;
using namespace torch_dnn::batch_norm;

ChannelVec vec(const c10::optional<at::Tensor>& t) {
  if (!t.has_value() || !t->defined()) return ChannelVec{};
  return ChannelVec{const_cast<void*>(t->const_data_ptr()), to_dtype(t->scalar_type())};
}

at::ScalarType stat_dtype(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// T: the kernels' element type for x's dtype; V: 16-byte vectors when a plane allows them (the launchers' rule)
template <class F>
void dispatch(const at::Tensor& x, int64_t S, F&& f) {
  const auto go = [&](auto tag) {
    using T = decltype(tag);
    if (S % kVec16<T> == 0)
      f(tag, std::integral_constant<int, kVec16<T>>{});
    else
      f(tag, std::integral_constant<int, 1>{});
  };
  switch (x.scalar_type()) {
    case at::kFloat: go(float{}); break;
    case at::kHalf: go(__half{}); break;
    case at::kBFloat16: go(__nv_bfloat16{}); break;
    case at::kDouble: go(double{}); break;
    default: TORCH_CHECK(false, "bn emulation: unsupported dtype");
  }
}

int64_t pieces(int64_t S, int V) { return (S / V + kPiece - 1) / kPiece; }

std::tuple<at::Tensor, at::Tensor, at::Tensor> channel_fwd(const at::Tensor& x, const c10::optional<at::Tensor>& w,
                                                           const c10::optional<at::Tensor>& b,
                                                           const c10::optional<at::Tensor>& rm,
                                                           const c10::optional<at::Tensor>& rv, double momentum,
                                                           double eps, int64_t grid) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous(), "bn emulation: a contiguous [N][C][S] input");
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  at::Tensor y = at::full_like(x, NAN);  // poisoned: an element the kernel does not write shows
  at::Tensor mean = at::full({C}, NAN, x.options().dtype(stat_dtype(x)));
  at::Tensor invstd = at::full({C}, NAN, x.options().dtype(stat_dtype(x)));
  FwdCoeffPtrs p;
  p.weight = vec(w);
  p.bias = vec(b);
  p.running_mean = vec(rm);
  p.running_var = vec(rv);
  p.training = true;
  p.momentum = momentum;
  p.eps = eps;
  p.count = N * S;
  p.mean = vec(mean);
  p.invstd = vec(invstd);
  dispatch(x, S, [&](auto tag, auto v) {
    using T = decltype(tag);
    constexpr int V = decltype(v)::value;
    emulate_launch(channel_forward<T, V>, unsigned(grid), unsigned(kThreads), static_cast<const T*>(x.const_data_ptr()),
                   static_cast<T*>(y.data_ptr()), N, C, S, pieces(S, V), p);
  });
  return {y, mean, invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> channel_bwd(const at::Tensor& dy, const at::Tensor& x,
                                                           const c10::optional<at::Tensor>& w, const at::Tensor& mean,
                                                           const at::Tensor& invstd, int64_t grid) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && dy.is_contiguous(), "bn emulation: contiguous [N][C][S] inputs");
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  at::Tensor dx = at::full_like(x, NAN);
  const auto pdtype = w.has_value() ? w->scalar_type() : x.scalar_type();
  at::Tensor dw = at::full({C}, NAN, x.options().dtype(pdtype)), db = at::full({C}, NAN, x.options().dtype(pdtype));
  BwdCoeffPtrs p;
  p.invstd = vec(invstd);
  p.weight = vec(w);
  p.training = true;
  p.count = N * S;
  p.dw = vec(dw);
  p.db = vec(db);
  dispatch(x, S, [&](auto tag, auto v) {
    using T = decltype(tag);
    constexpr int V = decltype(v)::value;
    emulate_launch(channel_backward<T, V>, unsigned(grid), unsigned(kThreads),
                   static_cast<const T*>(dy.const_data_ptr()), static_cast<const T*>(x.const_data_ptr()),
                   static_cast<const acc_t<T>*>(mean.const_data_ptr()), static_cast<T*>(dx.data_ptr()), N, C, S,
                   pieces(S, V), p);
  });
  return {dx, dw, db};
}

}  // namespace

TORCH_LIBRARY(torch_dnn_bn_emu, m) {
  m.def("channel_forward(Tensor x, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, "
        "float momentum, float eps, int grid) -> (Tensor, Tensor, Tensor)");
  m.def("channel_backward(Tensor dy, Tensor x, Tensor? weight, Tensor mean, Tensor invstd, int grid) -> "
        "(Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torch_dnn_bn_emu, CPU, m) {
  m.impl("channel_forward", &channel_fwd);
  m.impl("channel_backward", &channel_bwd);
}
