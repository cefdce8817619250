// Convolution family: schemas, the CPU kernels' registration, and autocast (as aten::convolution: floating inputs
// cast to the autocast dtype, float64 left alone) for CPU and CUDA. The autograd is conv_autograd.cpp's.
#include <ATen/core/dispatch/Dispatcher.h>

#include "common/autocast.h"
#include "conv/conv_cpu.h"
#include "conv/conv_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  // aten::convolution: input (N, C, *spatial) with 1 to 3 spatial dims, symmetric padding; transposed: the
  // adjoint of the convolution with this weight (weight [C_in, C_out / groups, *kernel]), output_padding added to
  // its output's size (only read when transposed). A list of one value stands for every spatial dim.
  m.def(
      "convolution(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
      "bool transposed, int[] output_padding, int groups) -> Tensor");
  // The gradients of convolution, each its own op (and each differentiable: conv_autograd.cpp). input_size /
  // weight_size: the shape of the tensor whose gradient is computed.
  m.def(
      "conv_backward_input(Tensor grad_output, Tensor weight, int[] input_size, int[] stride, int[] padding, "
      "int[] dilation, bool transposed, int[] output_padding, int groups) -> Tensor");
  m.def(
      "conv_backward_weight(Tensor grad_output, Tensor input, int[] weight_size, int[] stride, int[] padding, "
      "int[] dilation, bool transposed, int[] output_padding, int groups) -> Tensor");
  // grad_output summed over every dim but 1
  m.def("conv_backward_bias(Tensor grad_output) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::conv::register_conv_impls<torch_dnn::conv::CpuBackend>(m);
}

namespace torch_dnn {
namespace conv {
namespace {

// aten::conv1d/2d/3d, conv_transpose* and convolution's policy: lower_precision_fp (common/autocast.h).
template <c10::DeviceType D>
struct Autocast : autocast::LowerPrecision<D> {
  using autocast::LowerPrecision<D>::cast;
  using autocast::LowerPrecision<D>::exclude;
  static at::Tensor convolution(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b,
                                at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                bool transposed, at::IntArrayRef output_padding, int64_t groups) {
    using Sig = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, at::IntArrayRef,
                           at::IntArrayRef, at::IntArrayRef, bool, at::IntArrayRef, int64_t);
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("torch_dnn::convolution", "").typed<Sig>();
    auto guard = exclude();
    return op.call(cast(x), cast(w), cast(b), stride, padding, dilation, transposed, output_padding, groups);
  }
};

}  // namespace
}  // namespace conv
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, AutocastCPU, m) {
  m.impl("convolution", &torch_dnn::conv::Autocast<c10::DeviceType::CPU>::convolution);
}

TORCH_LIBRARY_IMPL(torch_dnn, AutocastCUDA, m) {
  m.impl("convolution", &torch_dnn::conv::Autocast<c10::DeviceType::CUDA>::convolution);
}
