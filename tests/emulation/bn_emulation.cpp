// batch_norm's CUDA kernels run on the CPU through cuda_host_shim.h, as ops of torch.ops.torch_dnn_bn_emu:
// the whole-channel kernels (csrc/batch_norm/kernels/bn_channel.cuh) on an NCHW (dense [N][C][S]) input with a grid
// size (fewer blocks than channels: a block takes several in turn), and the one-pass evaluation forward
// (bn_elementwise.cuh: EvalApplyOp over the rows walk, S == 1, and the planes walk). tests/test_batch_norm_emulation.py
// compares them with PyTorch's batch_norm in float64. Built on demand by that test with g++ (no GPU, no nvcc).
#include "cuda_host_shim.h"

#include "batch_norm/kernels/bn_channel.cuh"
#include "batch_norm/kernels/bn_elementwise.cuh"
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

// the kernels' element type for x's dtype
template <class F>
void dispatch_dtype_of(const at::Tensor& x, F&& f) {
  switch (x.scalar_type()) {
    case at::kFloat: f(float{}); break;
    case at::kHalf: f(__half{}); break;
    case at::kBFloat16: f(__nv_bfloat16{}); break;
    case at::kDouble: f(double{}); break;
    default: TORCH_CHECK(false, "bn emulation: unsupported dtype");
  }
}

// T and V: 16-byte vectors when a plane allows them (the launchers' rule)
template <class F>
void dispatch(const at::Tensor& x, int64_t S, F&& f) {
  dispatch_dtype_of(x, [&](auto tag) {
    using T = decltype(tag);
    if (S % kVec16<T> == 0)
      f(tag, std::integral_constant<int, kVec16<T>>{});
    else
      f(tag, std::integral_constant<int, 1>{});
  });
}

// A forward's outputs, poisoned (an element the kernel does not write shows), and the coefficient pointers both
// forwards fill alike; the caller adds the statistics' pointers and the mode.
struct Forward {
  at::Tensor y, mean, invstd;
  FwdCoeffPtrs p;
};
Forward poisoned_forward(const at::Tensor& x, const c10::optional<at::Tensor>& w, const c10::optional<at::Tensor>& b,
                         double eps) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous(), "bn emulation: a contiguous [N][C][S] input");
  const auto stats = x.options().dtype(stat_dtype(x));
  Forward f{at::full_like(x, NAN), at::full({x.size(1)}, NAN, stats), at::full({x.size(1)}, NAN, stats), {}};
  f.p.weight = vec(w);
  f.p.bias = vec(b);
  f.p.eps = eps;
  f.p.count = x.size(0) * x.size(2);
  f.p.mean = vec(f.mean);
  f.p.invstd = vec(f.invstd);
  return f;
}

int64_t pieces(int64_t S, int V) { return (S / V + kPiece - 1) / kPiece; }

std::tuple<at::Tensor, at::Tensor, at::Tensor> channel_fwd(const at::Tensor& x, const c10::optional<at::Tensor>& w,
                                                           const c10::optional<at::Tensor>& b,
                                                           const c10::optional<at::Tensor>& rm,
                                                           const c10::optional<at::Tensor>& rv, double momentum,
                                                           double eps, int64_t grid) {
  auto [y, mean, invstd, p] = poisoned_forward(x, w, b, eps);
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  p.running_mean = vec(rm);
  p.running_var = vec(rv);
  p.training = true;
  p.momentum = momentum;
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

// grid_x, grid_y: the rows walk's grid (its blocks take TX = 32 channel vectors by kThreads / 32 rows);
// the planes walk takes grid_x blocks
std::tuple<at::Tensor, at::Tensor, at::Tensor> eval_apply(const at::Tensor& x, const c10::optional<at::Tensor>& res,
                                                          const c10::optional<at::Tensor>& w,
                                                          const c10::optional<at::Tensor>& b, const at::Tensor& rm,
                                                          const at::Tensor& rv, double eps, int64_t act,
                                                          int64_t grid_x, int64_t grid_y) {
  auto [y, mean, invstd, p] = poisoned_forward(x, w, b, eps);
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  p.stat_mean = vec(rm);
  p.stat_var = vec(rv);
  p.training = false;
  dispatch_dtype_of(x, [&](auto tag) {
    using T = decltype(tag);
    const T* rp = res.has_value() ? static_cast<const T*>(res->const_data_ptr()) : nullptr;
    const EvalApplyOp<T> op{{static_cast<const T*>(x.const_data_ptr()), rp, nullptr, nullptr,
                             static_cast<T*>(y.data_ptr()), int(act)},
                            p};
    constexpr int VV = kVec16<T>;
    if (S == 1) {
      const int TX = 32;
      const auto go = [&](auto v) {
        constexpr int V = decltype(v)::value;
        const unsigned gx = unsigned((C / V + TX - 1) / TX);
        emulate_launch_2d(elementwise_rows<V, EvalApplyOp<T>>, gx, unsigned(grid_y), unsigned(kThreads), op, N, C, TX);
      };
      if (C % VV == 0) go(std::integral_constant<int, VV>{});
      else go(std::integral_constant<int, 1>{});
    } else {
      const auto go = [&](auto v) {
        constexpr int V = decltype(v)::value;
        const int64_t pieces = (S / V + kPiece - 1) / kPiece;
        emulate_launch(elementwise_planes<V, EvalApplyOp<T>>, unsigned(grid_x), unsigned(kThreads), op, N * C, C, S,
                       pieces);
      };
      if (S % VV == 0) go(std::integral_constant<int, VV>{});
      else go(std::integral_constant<int, 1>{});
    }
  });
  return {y, mean, invstd};
}

}  // namespace

TORCH_LIBRARY(torch_dnn_bn_emu, m) {
  m.def("channel_forward(Tensor x, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, "
        "float momentum, float eps, int grid) -> (Tensor, Tensor, Tensor)");
  m.def("channel_backward(Tensor dy, Tensor x, Tensor? weight, Tensor mean, Tensor invstd, int grid) -> "
        "(Tensor, Tensor, Tensor)");
  m.def("eval_apply(Tensor x, Tensor? residual, Tensor? weight, Tensor? bias, Tensor running_mean, "
        "Tensor running_var, float eps, int act, int grid_x, int grid_y) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torch_dnn_bn_emu, CPU, m) {
  m.impl("channel_forward", &channel_fwd);
  m.impl("channel_backward", &channel_bwd);
  m.impl("eval_apply", &eval_apply);
}
