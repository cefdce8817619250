// The boxed autograd kernels of autograd_register.h. The single-input kernel is boxed so that one piece of code
// serves every signature. It runs the op below the Autograd key and records a torch::autograd::Function node
// whose backward computes the input's gradient with a GradientFn: the op's backward op, called boxed with the saved
// tensors and arguments, or (grad mode on) the spec's differentiable form: its formula, or the backward op recorded
// as a node linear in grad (LinearInGradFn) whose gradient is the spec's adjoint. The specs registered are kept by
// op name and read by two schema'd queries (no tensors), from which torch_dnn/ops/_registry.py derives the ops'
// Python formulas for torch.func's transforms.
#include "common/autograd_register.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "common/autograd_kernel.h"

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

namespace torch_dnn {
namespace autograd_kernel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Kernel;

// "torch_dnn::relu" as the ops' messages name it: "torch_dnn.relu".
std::string op_label(const std::string& name) {
  const size_t at = name.find("::");
  return at == std::string::npos ? name : name.substr(0, at) + "." + name.substr(at + 2);
}

// check_no_tangent (autograd_kernel.h) over the op's tensor arguments on the stack.
void check_no_tangent_boxed(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n_args = op.schema().arguments().size();
  for (size_t i = stack.size() - n_args; i < stack.size(); ++i) {
    if (stack[i].isTensor() && has_tangent(stack[i].toTensor())) forward_ad_unsupported(op.schema().name());
  }
}

// forward(ctx, x, kernel, op, keys, stack): stack holds the op's arguments (x first) and gets its results.
struct SingleInputFn : torch::autograd::Function<SingleInputFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const Kernel* kernel,
                               const c10::OperatorHandle* op, c10::DispatchKeySet keys, torch::jit::Stack* stack);
  static variable_list backward(AutogradContext* ctx, variable_list grads);
};

struct Kernel final : c10::OperatorKernel {
  Kernel(std::vector<Saved> saved, bool input_dtype, GradientFn gradient, GradientFn create_graph)
      : saved(std::move(saved)),
        input_dtype(input_dtype),
        gradient(std::move(gradient)),
        create_graph(std::move(create_graph)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    const size_t n_args = op.schema().arguments().size();
    const at::Tensor x = (*stack)[stack->size() - n_args].toTensor();
    check_no_tangent_boxed(op, *stack);
    if (!torch::autograd::compute_requires_grad(x)) {
      at::AutoDispatchBelowADInplaceOrView below;
      op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
      return;
    }
    const variable_list outs = SingleInputFn::apply(x, this, &op, keys, stack);
    torch::jit::drop(*stack, outs.size());
    for (const auto& t : outs) stack->emplace_back(t);
  }

  std::vector<Saved> saved;
  bool input_dtype;
  GradientFn gradient, create_graph;
};

variable_list SingleInputFn::forward(AutogradContext* ctx, const at::Tensor& x, const Kernel* kernel,
                                     const c10::OperatorHandle* op, c10::DispatchKeySet keys,
                                     torch::jit::Stack* stack) {
  const size_t n_args = op->schema().arguments().size();
  const size_t first = stack->size() - n_args + 1;  // the arguments after x
  c10::impl::GenericList args(c10::AnyType::get());
  args.reserve(n_args - 1 + kernel->input_dtype);
  for (size_t i = first; i < stack->size(); ++i) args.push_back((*stack)[i]);
  if (kernel->input_dtype) args.push_back(c10::IValue(static_cast<int64_t>(x.scalar_type())));
  {
    at::AutoDispatchBelowADInplaceOrView below;
    op->redispatchBoxed(keys & c10::after_autograd_keyset, stack);
  }
  const size_t n_out = op->schema().returns().size();
  variable_list outs;
  outs.reserve(n_out);
  for (size_t i = stack->size() - n_out; i < stack->size(); ++i) outs.push_back((*stack)[i].toTensor());
  variable_list saved;
  for (Saved s : kernel->saved) saved.push_back(s == Saved::Input ? x : outs[s == Saved::Output0 ? 0 : 1]);
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
  const bool differentiable = kernel->create_graph && at::GradMode::is_enabled();
  out[0] = (differentiable ? kernel->create_graph : kernel->gradient)(grads[0], ctx->get_saved_variables(),
                                                                       ctx->saved_data["args"].toListRef());
  return out;
}

// backward(grad) -> the backward op's result, linear in grad; its gradient is adjoint(gradient, saved, args).
// forward(ctx, grad, backward, adjoint, saved, args): the GradientFns live as long as the kernels that hold them.
struct LinearInGradFn : torch::autograd::Function<LinearInGradFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& grad, const GradientFn* backward,
                               const GradientFn* adjoint, const variable_list& saved, c10::ArrayRef<c10::IValue> args) {
    const at::Tensor dx = (*backward)(grad, saved, args);  // grad mode is off in a Function's forward
    ctx->save_for_backward(saved);
    c10::impl::GenericList kept(c10::AnyType::get());
    for (const auto& a : args) kept.push_back(a);
    ctx->saved_data["adjoint"] = reinterpret_cast<int64_t>(adjoint);
    ctx->saved_data["args"] = std::move(kept);
    return {dx};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(5);  // grad, backward, adjoint, saved, args
    const auto* adjoint = reinterpret_cast<const GradientFn*>(ctx->saved_data["adjoint"].toInt());
    if (grads[0].defined()) {
      out[0] = (*adjoint)(grads[0], ctx->get_saved_variables(), ctx->saved_data["args"].toListRef());
    }
    return out;
  }
};

// The create_graph form of a backward op linear in grad, from the op's call and its adjoint.
GradientFn linear_in_grad(GradientFn backward, GradientFn adjoint) {
  auto fns = std::make_shared<std::pair<GradientFn, GradientFn>>(std::move(backward), std::move(adjoint));
  return [fns](const at::Tensor& grad, const std::vector<at::Tensor>& saved, c10::ArrayRef<c10::IValue> args) {
    return LinearInGradFn::apply(grad, &fns->first, &fns->second, saved, args)[0];
  };
}

// An op looked up at its first call (its schema may be defined by a later translation unit).
struct LazyOp {
  explicit LazyOp(std::string name) : name(std::move(name)) {}
  const c10::OperatorHandle& get() {
    std::call_once(once, [&] { handle = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), ""); });
    return *handle;
  }
  std::string name;
  std::once_flag once;
  std::optional<c10::OperatorHandle> handle;
};

// The op `name` called with (grad, saved... (with_saved), the first n_args arguments (-1: all) [, the input dtype,
// kept last]).
GradientFn call_backward_op(const std::string& name, bool with_saved, int n_args, bool input_dtype) {
  auto op = std::make_shared<LazyOp>("torch_dnn::" + name);
  return [op, with_saved, n_args, input_dtype](const at::Tensor& grad, const std::vector<at::Tensor>& saved,
                                               c10::ArrayRef<c10::IValue> args) {
    torch::jit::Stack stack;
    stack.emplace_back(grad);
    if (with_saved) {
      for (const auto& t : saved) stack.emplace_back(t);
    }
    const size_t n = args.size() - input_dtype;
    for (size_t i = 0; i < (n_args < 0 ? n : size_t(n_args)); ++i) stack.push_back(args[i]);
    if (input_dtype) stack.push_back(args.back());
    if (at::GradMode::is_enabled()) {
      op->get().callBoxed(stack);  // recorded: differentiating it raises the op's error
    } else {
      // nothing to record: straight to the backend kernel, past the Autograd key's boxed fallback (host time)
      at::AutoDispatchBelowADInplaceOrView below;
      op->get().callBoxed(stack);
    }
    return stack[0].toTensor();
  };
}

struct InPlaceKernel;

// forward(ctx, x, kernel, from_result, op, keys, stack): the op writes x in place; stack holds its arguments (x
// first) and gets its result.
struct InPlaceFn : torch::autograd::Function<InPlaceFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const InPlaceKernel* kernel,
                               bool from_result, const c10::OperatorHandle* op, c10::DispatchKeySet keys,
                               torch::jit::Stack* stack);
  static variable_list backward(AutogradContext* ctx, variable_list grads);
};

struct InPlaceKernel final : c10::OperatorKernel {
  InPlaceKernel(const std::string& backward, std::function<bool(c10::ArrayRef<c10::IValue>)> from_result)
      : gradient(call_backward_op(backward, true, -1, false)), from_result(std::move(from_result)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    check_no_tangent_boxed(op, *stack);
    const size_t n_args = op.schema().arguments().size();
    const size_t first = stack->size() - n_args;
    for (size_t i = first + 1; i < stack->size(); ++i) {
      const c10::IValue& v = (*stack)[i];
      TORCH_CHECK(!(v.isTensor() && torch::autograd::compute_requires_grad(v.toTensor())),
                  op_label(op.schema().name()), ": only the input may require grad");
    }
    const at::Tensor x = (*stack)[first].toTensor();
    if (!torch::autograd::compute_requires_grad(x)) {
      {
        at::AutoDispatchBelowADInplaceOrView below;
        op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
      }
      // as the ADInplaceOrView key would: a node that saved x (x * w with w requiring grad) must see that it changed
      if (!x.is_inference()) torch::autograd::impl::bump_version(x);
      return;
    }
    TORCH_CHECK(!x.is_leaf() && !x.is_view(), op_label(op.schema().name()),
                ": in place on a leaf or a view that requires grad; call the functional form with inplace=True "
                "(torch_dnn.functional), which handles them as PyTorch does");
    const bool result = from_result && from_result(c10::ArrayRef<c10::IValue>(*stack).slice(first + 1));
    // the ops return nothing: apply rebases x's own history (x is marked dirty), and leaves the stack empty
    TORCH_INTERNAL_ASSERT(op.schema().returns().empty(), op_label(op.schema().name()), ": an in-place op returns ()");
    InPlaceFn::apply(x, this, result, &op, keys, stack);
  }

  GradientFn gradient;
  std::function<bool(c10::ArrayRef<c10::IValue>)> from_result;
};

variable_list InPlaceFn::forward(AutogradContext* ctx, const at::Tensor& x, const InPlaceKernel* kernel,
                                 bool from_result, const c10::OperatorHandle* op, c10::DispatchKeySet keys,
                                 torch::jit::Stack* stack) {
  const size_t n_args = op->schema().arguments().size();
  c10::impl::GenericList args(c10::AnyType::get());
  args.reserve(n_args - 1);
  for (size_t i = stack->size() - n_args + 1; i < stack->size(); ++i) args.push_back((*stack)[i]);
  const at::Tensor before = from_result ? at::Tensor() : x.clone();  // the value the backward reads
  {
    at::AutoDispatchBelowADInplaceOrView below;
    op->redispatchBoxed(keys & c10::after_autograd_keyset, stack);
  }
  torch::autograd::impl::bump_version(x);  // nodes that saved x before see that it changed
  ctx->mark_dirty({x});
  ctx->save_for_backward({from_result ? x : before});
  ctx->set_materialize_grads(false);
  ctx->saved_data["kernel"] = reinterpret_cast<int64_t>(kernel);
  ctx->saved_data["args"] = std::move(args);
  return {x};
}

variable_list InPlaceFn::backward(AutogradContext* ctx, variable_list grads) {
  variable_list out(6);  // x, kernel, from_result, op, keys, stack
  if (!grads[0].defined()) return out;
  const auto* kernel = reinterpret_cast<const InPlaceKernel*>(ctx->saved_data["kernel"].toInt());
  out[0] = kernel->gradient(grads[0], ctx->get_saved_variables(), ctx->saved_data["args"].toListRef());
  return out;
}

// What the Python formulas are derived from: each registered spec's saved tensors, n_args and input_dtype, by op
// name (without the namespace). Written by the static registrations at load, read by the queries below.
struct SpecRecord {
  std::vector<Saved> saved;
  int64_t n_args;
  bool input_dtype;
};

std::mutex& spec_table_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, SpecRecord>& spec_table() {
  static std::map<std::string, SpecRecord> table;
  return table;
}

void record_spec(const std::string& name, const SingleInputSpec& spec) {
  std::lock_guard<std::mutex> lock(spec_table_mutex());
  spec_table()[name] = {spec.saved, spec.n_args, spec.input_dtype};
}

std::vector<std::string> single_input_autograd_ops() {
  std::lock_guard<std::mutex> lock(spec_table_mutex());
  std::vector<std::string> names;
  for (const auto& entry : spec_table()) names.push_back(entry.first);
  return names;
}

// (saved: "input", "output0" or "output1" each, n_args (-1: every argument), input_dtype)
std::tuple<std::vector<std::string>, int64_t, bool> single_input_autograd_spec(const std::string& name) {
  std::lock_guard<std::mutex> lock(spec_table_mutex());
  const auto it = spec_table().find(name);
  TORCH_CHECK(it != spec_table().end(), "torch_dnn._single_input_autograd_spec: no single-input autograd spec for '",
              name, "'");
  std::vector<std::string> saved;
  for (Saved s : it->second.saved) {
    saved.push_back(s == Saved::Input ? "input" : s == Saved::Output0 ? "output0" : "output1");
  }
  return {saved, it->second.n_args, it->second.input_dtype};
}

}  // namespace

void forward_ad_unsupported(const std::string& op) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op_label(op),
                              ": forward-mode AD (torch.func.jvp, torch.func.jacfwd, torch.autograd.forward_ad) is not "
                              "supported: the op has no forward-mode formula (reverse mode, e.g. torch.func.vjp or "
                              "jacrev, is)");
}

GradientFn call_op(const char* name) { return call_backward_op(name, false, -1, false); }

GradientFn by_recompute(std::function<at::Tensor(const at::Tensor& x, c10::ArrayRef<c10::IValue> args)> forward) {
  return [forward = std::move(forward)](const at::Tensor& grad, const std::vector<at::Tensor>& saved,
                                        c10::ArrayRef<c10::IValue> args) {
    const at::Tensor& x = saved[0];
    const at::Tensor y = forward(x, args);  // grad mode is on: recorded from x
    return torch::autograd::grad({y}, {x}, {grad}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  };
}

void register_first_order_backward(torch::Library& m, std::initializer_list<const char*> names) {
  for (const char* name : names) m.impl(name, torch::autograd::autogradNotImplementedFallback());
}

void register_in_place_autograd(torch::Library& m, std::vector<InPlaceSpec> specs) {
  for (auto& spec : specs) {
    m.impl(spec.name, torch::CppFunction::makeFromBoxedFunctor(
                          std::make_unique<InPlaceKernel>(spec.backward, std::move(spec.from_result))));
  }
}

void register_single_input_autograd(torch::Library& m, const char* name, SingleInputSpec spec) {
  TORCH_CHECK(!(spec.create_graph && spec.adjoint), "torch_dnn: ", name,
              ": a create_graph form or an adjoint, not both");
  record_spec(name, spec);
  GradientFn backward = call_backward_op(std::string(name) + "_backward", true, spec.n_args, spec.input_dtype);
  GradientFn create_graph =
      spec.adjoint ? linear_in_grad(backward, std::move(spec.adjoint)) : std::move(spec.create_graph);
  m.impl(name, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(
                   std::move(spec.saved), spec.input_dtype, std::move(backward), std::move(create_graph))));
}

}  // namespace autograd_kernel
}  // namespace torch_dnn

// The single-input specs as Python reads them (torch_dnn/ops/_registry.py: register_single_input_formula); queries
// without tensors, so they are no family's ops.
TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  m.def("_single_input_autograd_ops() -> str[]", &torch_dnn::autograd_kernel::single_input_autograd_ops);
  m.def("_single_input_autograd_spec(str name) -> (str[] saved, int n_args, bool input_dtype)",
        &torch_dnn::autograd_kernel::single_input_autograd_spec);
}
