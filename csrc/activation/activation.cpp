// Activation family: schemas, the CPU kernels' registration and the activations' C++ autograd.
#include "activation/activation_cpu.h"
#include "activation/activation_create_graph.h"
#include "activation/activation_ops.h"
#include "common/autograd_register.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  // forward (names and defaults as torch.nn.functional)
  m.def("relu(Tensor self) -> Tensor");
  m.def("relu6(Tensor self) -> Tensor");
  m.def("hardtanh(Tensor self, float min_val=-1., float max_val=1.) -> Tensor");
  m.def("leaky_relu(Tensor self, float negative_slope=0.01) -> Tensor");
  m.def("elu(Tensor self, float alpha=1.) -> Tensor");
  m.def("gelu(Tensor self, *, str approximate='none') -> Tensor");
  m.def("silu(Tensor self) -> Tensor");
  m.def("sigmoid(Tensor self) -> Tensor");
  m.def("tanh(Tensor self) -> Tensor");
  m.def("softplus(Tensor self, float beta=1., float threshold=20.) -> Tensor");
  m.def("mish(Tensor self) -> Tensor");
  m.def("hardswish(Tensor self) -> Tensor");
  m.def("hardsigmoid(Tensor self) -> Tensor");
  // in place, where torch.nn.functional has an inplace flag (no return: a custom op's output may not alias
  // its input if torch.compile is to functionalize it)
  m.def("relu_(Tensor(a!) self) -> ()");
  m.def("relu6_(Tensor(a!) self) -> ()");
  m.def("hardtanh_(Tensor(a!) self, float min_val=-1., float max_val=1.) -> ()");
  m.def("leaky_relu_(Tensor(a!) self, float negative_slope=0.01) -> ()");
  m.def("elu_(Tensor(a!) self, float alpha=1.) -> ()");
  m.def("silu_(Tensor(a!) self) -> ()");
  m.def("mish_(Tensor(a!) self) -> ()");
  m.def("hardswish_(Tensor(a!) self) -> ()");
  m.def("hardsigmoid_(Tensor(a!) self) -> ()");
  // backward: grad_output and the input (the result for sigmoid and tanh)
  m.def("relu_backward(Tensor grad_output, Tensor self) -> Tensor");
  m.def("relu6_backward(Tensor grad_output, Tensor self) -> Tensor");
  m.def("hardtanh_backward(Tensor grad_output, Tensor self, float min_val, float max_val) -> Tensor");
  m.def("leaky_relu_backward(Tensor grad_output, Tensor self, float negative_slope) -> Tensor");
  m.def("elu_backward(Tensor grad_output, Tensor self, float alpha) -> Tensor");
  m.def("gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor");
  m.def("silu_backward(Tensor grad_output, Tensor self) -> Tensor");
  m.def("sigmoid_backward(Tensor grad_output, Tensor result) -> Tensor");
  m.def("tanh_backward(Tensor grad_output, Tensor result) -> Tensor");
  m.def("softplus_backward(Tensor grad_output, Tensor self, float beta, float threshold) -> Tensor");
  m.def("mish_backward(Tensor grad_output, Tensor self) -> Tensor");
  m.def("hardswish_backward(Tensor grad_output, Tensor self) -> Tensor");
  m.def("hardsigmoid_backward(Tensor grad_output, Tensor self) -> Tensor");
  // fused bias + activation: act(input + bias broadcast along dim); the conv/matmul epilogue primitive
  m.def("bias_act(Tensor input, Tensor? bias, int dim, str act) -> Tensor");
  m.def(
      "bias_act_backward(Tensor grad_output, Tensor input, Tensor? bias, int dim, str act, bool bias_grad) "
      "-> (Tensor grad_input, Tensor grad_bias)");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::activation::register_activation_impls<torch_dnn::activation::CpuBackend>(m);
}

// Autograd of the activations (not bias_act, which has two tensor arguments): the backward op reads the input, or
// the result for sigmoid and tanh (the specs from which torch_dnn/ops/activation.py derives the formulas torch.func
// runs). With grad mode on (double backward), the derivative as ATen ops (activation_create_graph.cpp).
TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::autograd_kernel;
  for (const char* name : {"relu", "relu6", "hardtanh", "leaky_relu", "elu", "gelu", "silu", "softplus", "mish",
                           "hardswish", "hardsigmoid", "sigmoid", "tanh"}) {
    const bool result = std::string(name) == "sigmoid" || std::string(name) == "tanh";
    register_single_input_autograd(m, name,
                                   {{result ? Saved::Output0 : Saved::Input}, -1, false,
                                    torch_dnn::activation::activation_create_graph(name)});
    register_first_order_backward(m, {(std::string(name) + "_backward").c_str()});
  }
  register_first_order_backward(m, {"bias_act_backward"});  // bias_act's own kernel: bias_act_autograd.cpp
  // In place: the derivative read from the result where it can be (as PyTorch's relu_, hardtanh_, leaky_relu_ with
  // a slope >= 0), else from a copy of the input.
  const auto always = [](c10::ArrayRef<c10::IValue>) { return true; };
  register_in_place_autograd(m, {{"relu_", "relu_backward", always},
                                 {"relu6_", "relu6_backward", always},
                                 {"hardtanh_", "hardtanh_backward", always},
                                 {"leaky_relu_", "leaky_relu_backward",
                                  [](c10::ArrayRef<c10::IValue> args) { return args[0].toDouble() >= 0; }},
                                 {"elu_", "elu_backward", nullptr},
                                 {"silu_", "silu_backward", nullptr},
                                 {"mish_", "mish_backward", nullptr},
                                 {"hardswish_", "hardswish_backward", nullptr},
                                 {"hardsigmoid_", "hardsigmoid_backward", nullptr}});
}
