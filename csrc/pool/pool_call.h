// torch_dnn's average pooling called through the dispatcher (so differentiable to any order), for the composites
// that other ops' double backward is built from (lp_pool's, local_response_norm's). Defined in pool.cpp.
#pragma once
#include <ATen/ATen.h>

namespace torch_dnn {
namespace pool {

// avg_pool{1,2,3}d(x, kernel, stride, padding 0, ceil_mode, count_include_pad, no divisor override); the rank is
// kernel's length.
at::Tensor call_avg_pool(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride, bool ceil_mode);

}  // namespace pool
}  // namespace torch_dnn
