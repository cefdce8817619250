// batch_norm's evaluation forward in one pass (csrc/batch_norm/kernels/bn_elementwise.cuh: EvalApplyOp over the
// rows and the planes walks) run on the CPU through cuda_host_shim.h, as an op of torch.ops.torch_dnn_bn_elt_emu
// that takes a dense [N][C][S] input (S == 1: the rows walk) and a grid. tests/test_batch_norm_emulation.py compares
// it with PyTorch's evaluation batch_norm in float64. Built on demand by that test with g++ (no GPU, no nvcc).
#include "cuda_host_shim.h"

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

template <class F>
void dispatch(const at::Tensor& x, F&& f) {
  switch (x.scalar_type()) {
    case at::kFloat: f(float{}); break;
    case at::kHalf: f(__half{}); break;
    case at::kBFloat16: f(__nv_bfloat16{}); break;
    case at::kDouble: f(double{}); break;
    default: TORCH_CHECK(false, "bn emulation: unsupported dtype");
  }
}

// grid_x, grid_y: the rows walk's grid (its blocks take TX = 32 channel vectors by kThreads / 32 rows);
// the planes walk takes grid_x blocks
std::tuple<at::Tensor, at::Tensor, at::Tensor> eval_apply(const at::Tensor& x, const c10::optional<at::Tensor>& res,
                                                          const c10::optional<at::Tensor>& w,
                                                          const c10::optional<at::Tensor>& b, const at::Tensor& rm,
                                                          const at::Tensor& rv, double eps, int64_t act,
                                                          int64_t grid_x, int64_t grid_y) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous(), "bn emulation: a contiguous [N][C][S] input");
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const auto sdt = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor y = at::full_like(x, NAN);  // poisoned: an element the kernel does not write shows
  at::Tensor mean = at::full({C}, NAN, x.options().dtype(sdt)), invstd = at::full({C}, NAN, x.options().dtype(sdt));
  FwdCoeffPtrs p;
  p.stat_mean = vec(rm);
  p.stat_var = vec(rv);
  p.weight = vec(w);
  p.bias = vec(b);
  p.training = false;
  p.eps = eps;
  p.count = N * S;
  p.mean = vec(mean);
  p.invstd = vec(invstd);
  dispatch(x, [&](auto tag) {
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

TORCH_LIBRARY(torch_dnn_bn_elt_emu, m) {
  m.def("eval_apply(Tensor x, Tensor? residual, Tensor? weight, Tensor? bias, Tensor running_mean, "
        "Tensor running_var, float eps, int act, int grid_x, int grid_y) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torch_dnn_bn_elt_emu, CPU, m) { m.impl("eval_apply", &eval_apply); }
