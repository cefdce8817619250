// CUDA launchers of the group_norm family: raw pointers, workspaces from the caching allocator and the current
// stream to the torch-free entry points, with the knobs (group_norm_plan.h) read once a launcher call. Registered
// for the CUDA dispatch key only.
#include "common/cuda_utils.h"
#include "common/layout_transpose.h"
#include "group_norm/group_norm_ops.h"

namespace torch_dnn {
namespace group_norm {
namespace {

const void* cptr(const at::Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }
void* mptr(at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// (N, C, *) laid out densely as [N][spatial][C] (channels_last, channels_last_3d, a channels-last 1-D layout);
// strides of size-1 dims do not matter.
bool channels_last_dense(const at::Tensor& x) {
  int64_t expected = 1;
  const auto next = [&](int64_t d) {
    if (x.size(d) != 1 && x.stride(d) != expected) return false;
    expected *= x.size(d);
    return true;
  };
  if (!next(1)) return false;
  for (int64_t d = x.dim() - 1; d >= 2; --d)
    if (!next(d)) return false;
  return next(0);
}

struct CudaBackend {
  // x (not contiguous) as a contiguous tensor: a dense channels-last one by the tiled layout transpose (16-byte
  // accesses on both sides where sizes and alignment allow; docs/group_norm.md compares it with ATen's permuting
  // copy), others by ATen.
  static at::Tensor contiguous(const at::Tensor& x) {
    if (x.dim() < 3 || !channels_last_dense(x)) return x.contiguous();
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
    const int64_t S = x.numel() == 0 ? 0 : x.numel() / (x.size(0) * x.size(1));
    TD_CHECK_LAUNCH(launch_layout_transpose(to_dtype(x.scalar_type()), x.const_data_ptr(), out.data_ptr(), x.size(0),
                                            S, x.size(1), /*to_channels_last=*/false, current_stream()));
    return out;
  }
  // group_norm (statistics computed) of a dense channels-last x, y written contiguous in the same pass (the
  // channels-last cluster plan, one read and one write); false, with nothing launched, where that plan does not
  // apply (the op then copies x contiguous first). w, b: as forward's.
  static bool forward_to_contiguous(const at::Tensor& x, int64_t G, const at::Tensor& w, const at::Tensor& b,
                                    double eps, at::Tensor& y, at::Tensor& mean, at::Tensor& rstd) {
    if (x.dim() < 3 || x.numel() == 0 || x.is_contiguous() || !channels_last_dense(x)) return false;
    c10::cuda::CUDAGuard guard(x.device());
    GnShape s;
    s.N = x.size(0);
    s.C = x.size(1);
    s.S = x.numel() / (s.N * s.C);
    s.G = G;
    s.channels_last = true;
    s.y_contiguous = true;
    y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
    mean = at::empty({s.N, G}, x.options().dtype(stat_type(x.scalar_type())));
    rstd = at::empty({s.N, G}, x.options().dtype(stat_type(x.scalar_type())));
    const ForwardArgs a{cptr(x), cptr(w), cptr(b), mptr(y), mptr(mean), mptr(rstd), eps, false, nullptr};
    const cudaError_t err = launch_forward(to_dtype(x.scalar_type()), a, s, read_knobs(), current_stream());
    if (err == cudaErrorNotSupported) return false;
    TD_CHECK_LAUNCH(err);
    return true;
  }
  static void forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, at::Tensor& y, at::Tensor& mean,
                      at::Tensor& rstd, const GnShape& s, double eps, bool stats_given) {
    c10::cuda::CUDAGuard guard(x.device());
    const DType dt = to_dtype(x.scalar_type());
    const int64_t n_ws = forward_workspace(dt, s, stats_given);
    const at::Tensor ws = workspace_or_none(n_ws, x.options().dtype(stat_type(x.scalar_type())));
    const ForwardArgs a{cptr(x), cptr(w), cptr(b), mptr(y), mptr(mean), mptr(rstd), eps, stats_given, data_or_null(ws)};
    TD_CHECK_LAUNCH(launch_forward(dt, a, s, read_knobs(), current_stream()));
  }
  static void backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
                       const at::Tensor& w, at::Tensor& dx, at::Tensor& dw, at::Tensor& db, const GnShape& s,
                       bool stats_given) {
    c10::cuda::CUDAGuard guard(x.device());
    const DType dt = to_dtype(x.scalar_type());
    const int64_t n_ws = backward_workspace(dt, s, stats_given, dw.defined() || db.defined());
    const at::Tensor ws = workspace_or_none(n_ws, x.options().dtype(stat_type(x.scalar_type())));
    const BackwardArgs a{cptr(dy), cptr(x), cptr(mean), cptr(rstd), cptr(w), mptr(dx), mptr(dw), mptr(db),
                         stats_given, data_or_null(ws)};
    TD_CHECK_LAUNCH(launch_backward(dt, a, s, read_knobs(), current_stream()));
  }
};

}  // namespace
}  // namespace group_norm
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CUDA, m) {
  torch_dnn::group_norm::register_group_norm_impls<torch_dnn::group_norm::CudaBackend>(m);
}
