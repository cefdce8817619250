// The convolution family's fused forward ops (conv_fused_ops.h): schemas, the CPU kernels' registration, and autocast
// (convolution's policy: floating inputs cast to the autocast dtype, float64 left alone) for CPU and CUDA. Their
// autograd is conv_fused_autograd.cpp's; the CUDA registration sits in conv_cuda.cpp beside the backend.
#include <ATen/core/dispatch/Dispatcher.h>

#include "common/autocast.h"
#include "conv/conv_cpu.h"
#include "conv/conv_fused_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  // act(convolution(input, weight, bias)) in one pass (not transposed; geometry as convolution's). activation:
  // bias_act's names ("none", "relu", "gelu", "silu", ...); act_a / act_b override its parameters as linear_act's
  // (None: bias_act's defaults).
  m.def(
      "conv_bias_act(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
      "int groups, str activation='relu', float? act_a=None, float? act_b=None) -> Tensor");
  // act(convolution(input, weight, bias) + residual) in one pass: the end of a ResNet block. residual has the
  // output's shape; it is added before the activation (unlike linear_act's, added after it).
  m.def(
      "conv_bias_add_act(Tensor input, Tensor weight, Tensor? bias, Tensor residual, int[] stride, int[] padding, "
      "int[] dilation, int groups, str activation='relu', float? act_a=None, float? act_b=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::conv::register_conv_fused_impls<torch_dnn::conv::CpuBackend>(m);
}

namespace torch_dnn {
namespace conv {
namespace {

using OptTensor = std::optional<at::Tensor>;
using OptDouble = std::optional<double>;

template <c10::DeviceType D>
struct FusedAutocast : autocast::LowerPrecision<D> {
  using autocast::LowerPrecision<D>::cast;
  using autocast::LowerPrecision<D>::exclude;
  static at::Tensor bias_act(const at::Tensor& x, const at::Tensor& w, const OptTensor& b, IntArrayRef stride,
                             IntArrayRef padding, IntArrayRef dilation, int64_t groups, c10::string_view act,
                             OptDouble act_a, OptDouble act_b) {
    static auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("torch_dnn::conv_bias_act", "").typed<BiasActSig>();
    auto g = exclude();
    return op.call(cast(x), cast(w), cast(b), stride, padding, dilation, groups, act, act_a, act_b);
  }
  static at::Tensor bias_add_act(const at::Tensor& x, const at::Tensor& w, const OptTensor& b, const at::Tensor& r,
                                 IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups,
                                 c10::string_view act, OptDouble act_a, OptDouble act_b) {
    static auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("torch_dnn::conv_bias_add_act", "").typed<BiasAddActSig>();
    auto g = exclude();
    return op.call(cast(x), cast(w), cast(b), cast(r), stride, padding, dilation, groups, act, act_a, act_b);
  }
  static void register_all(torch::Library& m) {
    m.impl("conv_bias_act", &bias_act);
    m.impl("conv_bias_add_act", &bias_add_act);
  }
};

}  // namespace
}  // namespace conv
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, AutocastCPU, m) {
  torch_dnn::conv::FusedAutocast<c10::DeviceType::CPU>::register_all(m);
}

TORCH_LIBRARY_IMPL(torch_dnn, AutocastCUDA, m) {
  torch_dnn::conv::FusedAutocast<c10::DeviceType::CUDA>::register_all(m);
}
