// flash_decode at the Autograd key: inference only. It records no gradient, so an argument that requires grad
// (with grad mode on) or carries a forward-mode tangent is an error that names the op, not a result whose gradient
// silently ignores it (PyTorch's fallback for custom ops). The caches it appends to get their version counters
// bumped, as PyTorch's in-place ops do, so that autograd notices a saved cache that was modified.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "common/autograd_kernel.h"

namespace torch_dnn {
namespace attention {
namespace {

using OptT = std::optional<at::Tensor>;
using DecodeSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                     const at::Tensor&, const OptT&, const OptT&, const OptT&,
                                                     std::optional<double>, bool);

void check_no_grad(const char* arg, const at::Tensor& t) {
  TORCH_CHECK(!(at::GradMode::is_enabled() && t.defined() && t.requires_grad()), "torch_dnn.flash_decode: ", arg,
              " requires grad, but the op is inference only (it records no gradient); call it under "
              "torch.no_grad() or torch.inference_mode(), or detach ", arg);
}

void check_no_grad(const char* arg, const OptT& t) {
  if (t.has_value()) check_no_grad(arg, *t);
}

std::tuple<at::Tensor, at::Tensor> flash_decode_autograd(c10::DispatchKeySet ks, const at::Tensor& q,
                                                         const at::Tensor& k_cache, const at::Tensor& v_cache,
                                                         const at::Tensor& cache_seqlens, const OptT& k_new,
                                                         const OptT& v_new, const OptT& block_table,
                                                         std::optional<double> scale, bool causal) {
  autograd_kernel::check_no_tangent("torch_dnn.flash_decode", q, k_cache, v_cache, k_new, v_new);
  check_no_grad("q", q);
  check_no_grad("k_cache", k_cache);
  check_no_grad("v_cache", v_cache);
  check_no_grad("k_new", k_new);
  check_no_grad("v_new", v_new);
  static auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("torch_dnn::flash_decode", "").typed<DecodeSig>();
  std::tuple<at::Tensor, at::Tensor> r;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    r = op.redispatch(ks & c10::after_ADInplaceOrView_keyset, q, k_cache, v_cache, cache_seqlens, k_new, v_new,
                      block_table, scale, causal);
  }
  if (k_new.has_value() && k_new->defined()) {
    torch::autograd::impl::bump_version(k_cache);
    torch::autograd::impl::bump_version(v_cache);
  }
  return r;
}

}  // namespace
}  // namespace attention
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  m.impl("flash_decode", &torch_dnn::attention::flash_decode_autograd);
}
