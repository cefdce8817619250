// Boxed autograd kernels that the families register at the Autograd key (declared here without the heavy autograd
// headers):
// - register_single_input_autograd: the kernel shared by the ops of one differentiable tensor argument whose
//   backward is one torch_dnn op that gives the input's gradient (activations, softmax, pooling, LRN), with a spec
//   that says what the backward op reads;
// - register_first_order_backward: the backward ops, which have no derivative of their own: differentiating
//   through one (double backward: autograd.grad(..., create_graph=True) and a second backward) raises an error that
//   names the op, instead of PyTorch's warning for custom ops without an autograd kernel and a gradient silently
//   missing (zero). A create_graph=True backward that is not differentiated again still works.
#pragma once
#include <torch/library.h>

#include <initializer_list>
#include <vector>

namespace torch_dnn {
namespace autograd_kernel {

// What the forward keeps for the backward op, which is called as
//   <op>_backward(grad_of_output_0, saved..., the forward's first `n_args` non-tensor arguments [, input dtype]).
enum class Saved { Input, Output0, Output1 };

struct SingleInputSpec {
  std::vector<Saved> saved;
  int n_args = -1;           // -1: every argument after the input
  bool input_dtype = false;  // pass the input's dtype last (softmax's backward casts its result to it)
  // <op>_backward(grad, input, args...) is linear in grad and its derivative in input is zero almost everywhere (the
  // piecewise-linear activations): its gradient is itself, so double backward (and any order) works.
  bool backward_linear_in_grad = false;
};

// m.impl(name, ...) at the Autograd key: the op records `name`_backward as its gradient; `name`_backward is
// registered as register_first_order_backward's, or as its own gradient (backward_linear_in_grad).
void register_single_input_autograd(torch::Library& m, const char* name, SingleInputSpec spec);

// m.impl(name, ...) at the Autograd key for each backward op named: no derivative (an error if one is needed).
void register_first_order_backward(torch::Library& m, std::initializer_list<const char*> names);

}  // namespace autograd_kernel
}  // namespace torch_dnn
