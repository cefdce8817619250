// A C++ autograd kernel shared by the ops of one differentiable tensor argument whose backward is one torch_dnn op
// that gives the input's gradient: activations, softmax, pooling. Registered at the Autograd key by each family
// with a spec that says what the backward op reads (declared here without the heavy autograd headers).
#pragma once
#include <torch/library.h>

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
};

// m.impl(name, ...) at the Autograd key: the op records `name`_backward as its gradient.
void register_single_input_autograd(torch::Library& m, const char* name, SingleInputSpec spec);

}  // namespace autograd_kernel
}  // namespace torch_dnn
