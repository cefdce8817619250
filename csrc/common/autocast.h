// PyTorch's lower_precision_fp autocast policy (aten::convolution, mm, bmm, linear, scaled_dot_product_attention),
// for the families' Autocast-key kernels: exclude the device's autocast key, cast the eligible floating inputs
// (defined, floating, not float64) to its autocast dtype, redispatch.
#pragma once
#include <ATen/autocast_mode.h>

#include <optional>

namespace torch_dnn {
namespace autocast {

template <c10::DeviceType D>
struct LowerPrecision {
  static at::Tensor cast(const at::Tensor& t) {
    return at::autocast::cached_cast(at::autocast::get_lower_precision_fp_from_device_type(D), t, D);
  }
  static std::optional<at::Tensor> cast(const std::optional<at::Tensor>& t) {
    return t.has_value() ? std::optional<at::Tensor>(cast(*t)) : t;
  }
  // Held around the redispatch, so that it reaches the kernels below autocast.
  static c10::impl::ExcludeDispatchKeyGuard exclude() {
    return c10::impl::ExcludeDispatchKeyGuard(at::autocast::get_autocast_dispatch_key_from_device_type(D));
  }
};

}  // namespace autocast
}  // namespace torch_dnn
