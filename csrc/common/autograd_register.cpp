// The boxed autograd kernels of autograd_register.h. The single-input kernel is boxed so that one piece of code
// serves every signature. It runs the op below the Autograd key and records a torch::autograd::Function node
// whose backward calls the op's backward op with the saved tensors and arguments.
#include "common/autograd_register.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace torch_dnn {
namespace autograd_kernel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Kernel;

// forward(ctx, x, kernel, op, keys, stack): stack holds the op's arguments (x first) and gets its results.
struct SingleInputFn : torch::autograd::Function<SingleInputFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const Kernel* kernel,
                               const c10::OperatorHandle* op, c10::DispatchKeySet keys, torch::jit::Stack* stack);
  static variable_list backward(AutogradContext* ctx, variable_list grads);
};

struct Kernel final : c10::OperatorKernel {
  explicit Kernel(std::string backward_name, SingleInputSpec spec)
      : backward_name(std::move(backward_name)), spec(std::move(spec)) {}

  // The backward op, looked up at the first call (its schema may be defined by a later translation unit).
  const c10::OperatorHandle& backward_op() const {
    std::call_once(once, [&] {
      backward = c10::Dispatcher::singleton().findSchemaOrThrow(backward_name.c_str(), "");
    });
    return *backward;
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    const size_t n_args = op.schema().arguments().size();
    const at::Tensor x = (*stack)[stack->size() - n_args].toTensor();
    if (!torch::autograd::compute_requires_grad(x)) {
      at::AutoDispatchBelowADInplaceOrView below;
      op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
      return;
    }
    const variable_list outs = SingleInputFn::apply(x, this, &op, keys, stack);
    torch::jit::drop(*stack, outs.size());
    for (const auto& t : outs) stack->emplace_back(t);
  }

  std::string backward_name;
  SingleInputSpec spec;
  mutable std::once_flag once;
  mutable std::optional<c10::OperatorHandle> backward;
};

variable_list SingleInputFn::forward(AutogradContext* ctx, const at::Tensor& x, const Kernel* kernel,
                                     const c10::OperatorHandle* op, c10::DispatchKeySet keys,
                                     torch::jit::Stack* stack) {
  const SingleInputSpec& spec = kernel->spec;
  const size_t n_args = op->schema().arguments().size();
  const size_t first = stack->size() - n_args + 1;  // the arguments after x
  const size_t n_kept = spec.n_args < 0 ? n_args - 1 : size_t(spec.n_args);
  c10::impl::GenericList args(c10::AnyType::get());
  args.reserve(n_kept + spec.input_dtype);
  for (size_t i = 0; i < n_kept; ++i) args.push_back((*stack)[first + i]);
  if (spec.input_dtype) args.push_back(c10::IValue(static_cast<int64_t>(x.scalar_type())));
  {
    at::AutoDispatchBelowADInplaceOrView below;
    op->redispatchBoxed(keys & c10::after_autograd_keyset, stack);
  }
  const size_t n_out = op->schema().returns().size();
  variable_list outs;
  outs.reserve(n_out);
  for (size_t i = stack->size() - n_out; i < stack->size(); ++i) outs.push_back((*stack)[i].toTensor());
  variable_list saved;
  for (Saved s : spec.saved) saved.push_back(s == Saved::Input ? x : outs[s == Saved::Output0 ? 0 : 1]);
  ctx->save_for_backward(saved);
  for (size_t i = 1; i < n_out; ++i) {
    if (!at::isFloatingType(outs[i].scalar_type())) ctx->mark_non_differentiable({outs[i]});  // indices
  }
  ctx->set_materialize_grads(false);
  ctx->saved_data["kernel"] = reinterpret_cast<int64_t>(kernel);
  ctx->saved_data["args"] = std::move(args);
  return outs;
}

variable_list SingleInputFn::backward(AutogradContext* ctx, variable_list grads) {
  variable_list out(5);  // x, kernel, op, keys, stack
  if (!grads[0].defined()) return out;
  const auto* kernel = reinterpret_cast<const Kernel*>(ctx->saved_data["kernel"].toInt());
  torch::jit::Stack stack;
  stack.emplace_back(grads[0]);
  for (auto& t : ctx->get_saved_variables()) stack.emplace_back(std::move(t));
  for (const auto& a : ctx->saved_data["args"].toListRef()) stack.push_back(a);
  kernel->backward_op().callBoxed(stack);
  out[0] = stack[0].toTensor();
  return out;
}

}  // namespace

void register_first_order_backward(torch::Library& m, std::initializer_list<const char*> names) {
  for (const char* name : names) m.impl(name, torch::autograd::autogradNotImplementedFallback());
}

void register_single_input_autograd(torch::Library& m, const char* name, SingleInputSpec spec) {
  const std::string backward = std::string(name) + "_backward";
  const bool linear = spec.backward_linear_in_grad;
  m.impl(name, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>("torch_dnn::" + backward,
                                                                                 std::move(spec))));
  if (!linear) {
    register_first_order_backward(m, {backward.c_str()});
    return;
  }
  // backward(grad, input, args...) as a single-input op in grad: its backward is itself, called on the incoming
  // gradient with the same input and arguments (kept with the arguments; input gets no gradient from it)
  m.impl(backward.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                               std::make_unique<Kernel>("torch_dnn::" + backward, SingleInputSpec{{}, -1})));
}

}  // namespace autograd_kernel
}  // namespace torch_dnn
