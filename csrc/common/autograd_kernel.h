// Shared pieces of the C++ autograd kernels (torch::autograd::Function at the Autograd dispatch key) that the
// families register so that an eager training step runs no Python: on a device host's slow CPU the Python
// autograd.Function around a small op cost several times PyTorch's host time a step (research/host/README.md).
// Each family keeps its Python formula for torch.func's transforms.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <string>

namespace torch_dnn {
namespace autograd_kernel {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptionalTensor = c10::optional<at::Tensor>;

inline bool is_given(const OptionalTensor& t) { return t.has_value() && t->defined(); }
// save_for_backward takes tensors only: an absent optional one is saved as an undefined tensor, and back.
inline at::Tensor or_undefined(const OptionalTensor& t) { return is_given(t) ? *t : at::Tensor(); }
inline OptionalTensor or_none(const at::Tensor& t) { return t.defined() ? OptionalTensor(t) : c10::nullopt; }
inline at::Tensor if_wanted(bool want, const at::Tensor& t) { return want ? t : at::Tensor(); }

// needs_input_grad(i) numbers only the tensor arguments given to forward (an absent optional one has no edge): the
// input is 0, the next given tensor 1, and so on. The backward's outputs are numbered by argument, given or not.
inline bool needs_grad(AutogradContext* ctx, int edge) { return ctx->needs_input_grad(size_t(edge)); }

// A wanted parameter's gradient in the parameter's dtype (the backward ops compute in the input's).
inline at::Tensor param_grad(bool want, const at::Tensor& g, int64_t dtype) {
  if (!want) return at::Tensor();
  const auto t = static_cast<at::ScalarType>(dtype);
  return g.scalar_type() != t ? g.to(t) : g;
}
inline int64_t dtype_of(const OptionalTensor& t) {
  return static_cast<int64_t>(is_given(t) ? t->scalar_type() : at::ScalarType::Undefined);
}
// Whether the parameter whose dtype_of was saved under `key` was given (the dtype says it; no second entry).
inline bool given_param(AutogradContext* ctx, const char* key) {
  return ctx->saved_data[key].toInt() != static_cast<int64_t>(at::ScalarType::Undefined);
}

// Forward-mode AD (torch.func.jvp, torch.autograd.forward_ad): the ops have no forward formulas, so a tangent on
// any tensor argument is an error that names the op. Unchecked, a kernel would return a result without a tangent
// (zeros under jvp). A tangent is a forward gradient of level 0, the only level forward AD has (functorch's jvp
// sets it on its wrappers too). Each Autograd kernel checks its tensor arguments first (the boxed ones, and the
// backward ops' fallback, check theirs).
inline bool has_tangent(const at::Tensor& t) { return t.defined() && t._fw_grad(/*level=*/0).defined(); }
inline bool has_tangent(const OptionalTensor& t) { return t.has_value() && has_tangent(*t); }
[[noreturn]] void forward_ad_unsupported(const std::string& op);
template <class... Tensors>
void check_no_tangent(const char* op, const Tensors&... tensors) {
  if ((has_tangent(tensors) || ...)) forward_ad_unsupported(op);
}

// A family's op, called below the Autograd key by the kernels.
template <class Sig>
c10::TypedOperatorHandle<Sig> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// Whether a call records autograd: grad mode on and a tensor argument that requires grad. A kernel whose graph a
// Function records calls the op below the Autograd key when it records none (each Function's `below`): entering the
// Function would make its context and saved data for nothing, host time on every inference call.
inline bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }
inline bool requires_grad(const OptionalTensor& t) { return t.has_value() && requires_grad(*t); }
template <class... Tensors>
bool records_grad(const Tensors&... tensors) {
  return at::GradMode::is_enabled() && (requires_grad(tensors) || ...);
}

// The op called below the Autograd key (and ADInplaceOrView: the ops that take this path neither view nor mutate).
template <class Sig, class... Args>
auto call_below(const c10::TypedOperatorHandle<Sig>& op, Args&&... args) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.call(std::forward<Args>(args)...);
}

}  // namespace autograd_kernel
}  // namespace torch_dnn
