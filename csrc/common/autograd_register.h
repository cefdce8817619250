// Boxed autograd kernels that the families register at the Autograd key (declared here without the heavy autograd
// headers):
// - register_single_input_autograd: the kernel shared by the ops of one differentiable tensor argument whose
//   backward is one torch_dnn op that gives the input's gradient (activations, softmax, pooling, LRN), with a spec
//   that says what the backward op reads and, optionally, how to compute the gradient so that it can be
//   differentiated again;
// - register_first_order_backward: the backward ops, which have no derivative of their own: differentiating through
//   one raises an error that names the op, instead of PyTorch's warning for custom ops without an autograd kernel and
//   a gradient silently missing (zero). (torch.func's transforms, which run the Python formulas, see this too.)
// Forward-mode AD: every kernel here raises an error that names the op when an argument carries a tangent
// (autograd_kernel.h's check_no_tangent; the backward ops' fallback raises its own, which names the op too).
// Double backward (autograd.grad(..., create_graph=True), then a second backward): a gradient computed with grad
// mode on takes the spec's differentiable form where there is one, else the backward op.
#pragma once
#include <torch/library.h>

#include <functional>
#include <initializer_list>
#include <vector>

namespace torch_dnn {
namespace autograd_kernel {

// What the forward keeps for the backward op, which is called as
//   <op>_backward(grad_of_output_0, saved..., the forward's first `n_args` non-tensor arguments [, input dtype]).
enum class Saved { Input, Output0, Output1 };

// The input's gradient from the output's, the saved tensors (in the spec's order) and the forward's arguments
// after the input (every one, then the input's dtype where the spec asks for it).
using GradientFn = std::function<at::Tensor(const at::Tensor& grad, const std::vector<at::Tensor>& saved,
                                            c10::ArrayRef<c10::IValue> args)>;

struct SingleInputSpec {
  std::vector<Saved> saved;
  int n_args = -1;           // how many of the forward's arguments the backward op takes; -1: every one
  bool input_dtype = false;  // pass the input's dtype last (softmax's backward casts its result to it)
  // With grad mode on, at most one of:
  // - create_graph: the gradient as differentiable ops (ATen's, or torch_dnn ops that have derivatives);
  // - adjoint: the backward op is linear in grad and its derivative in the input is zero (almost everywhere:
  //   pooling): it is recorded as a node whose gradient is this adjoint map (the forward's arguments as above),
  //   itself differentiable.
  // Neither: the backward op, an error to differentiate.
  GradientFn create_graph = nullptr;
  GradientFn adjoint = nullptr;
};

// m.impl(name, ...) at the Autograd key: the op records `name`_backward as its gradient. The family registers
// `name`_backward with register_first_order_backward. The spec's saved, n_args and input_dtype are also kept by name
// for Python (torch.ops.torch_dnn._single_input_autograd_spec), which derives the op's formula for torch.func's
// transforms from them (torch_dnn/ops/_registry.py: register_single_input_formula): one place for both.
void register_single_input_autograd(torch::Library& m, const char* name, SingleInputSpec spec);

// A GradientFn that calls the torch_dnn op `name` with (grad, args...), no saved tensors: average pooling's adjoint,
// its forward.
GradientFn call_op(const char* name);

// A create_graph form from a recomputation of the forward as differentiable ops, `forward`(input, the forward's
// arguments after it): the gradient through autograd (create_graph), for ops whose derivative is simpler to get
// from a composition than to write out (lp_pool, local_response_norm). The input is the first saved tensor.
GradientFn by_recompute(std::function<at::Tensor(const at::Tensor& x, c10::ArrayRef<c10::IValue> args)> forward);

// m.impl(name, ...) at the Autograd key for each backward op named: no derivative (an error if one is needed).
void register_first_order_backward(torch::Library& m, std::initializer_list<const char*> names);

// An in-place op (relu_, ...) whose input's gradient is `backward`(grad, saved, the op's arguments after the
// input): saved is the result (which overwrote the input) where from_result(those arguments) says the derivative
// can be read from it (relu, hardtanh, leaky_relu with a slope >= 0, as PyTorch's in-place ops), else a copy of the
// input taken before the op (from_result null: always the copy).
struct InPlaceSpec {
  const char* name;
  const char* backward;
  std::function<bool(c10::ArrayRef<c10::IValue> args)> from_result;
};

// m.impl(spec.name, ...) at the Autograd key for each spec: the op runs below autograd; where its input requires
// grad (grad mode on) and is neither a leaf nor a view, it records a node per the spec (marks the input dirty, bumps
// its version); a leaf or a view that requires grad is an error that names the op (torch_dnn.functional's
// inplace=True form handles those as PyTorch does), as is a forward-mode tangent.
void register_in_place_autograd(torch::Library& m, std::vector<InPlaceSpec> specs);

}  // namespace autograd_kernel
}  // namespace torch_dnn
