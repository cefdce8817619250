// Softmax family: schemas, the CPU kernels' registration and the C++ autograd.
#include "common/autograd_register.h"
#include "common/create_graph.h"
#include "softmax/softmax_cpu.h"
#include "softmax/softmax_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  m.def("softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  m.def("log_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  // grad_input (of dtype input_dtype) from grad_output and the forward's output
  m.def("softmax_backward(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor");
  m.def("log_softmax_backward(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::softmax::register_softmax_impls<torch_dnn::softmax::CpuBackend>(m);
}

namespace torch_dnn {
namespace softmax {
namespace {

// The gradients from the result y as ATen ops, for a backward with grad mode on (create_graph=True): softmax's
// y (g - sum(g y)), log_softmax's g - exp(y) sum(g); in the input's dtype (the arguments' last).
autograd_kernel::GradientFn create_graph(bool log) {
  return [log](const at::Tensor& grad, const std::vector<at::Tensor>& saved, c10::ArrayRef<c10::IValue> args) {
    using create_graph::opmath;
    const int64_t dim = args[0].toInt();
    const at::Tensor g = opmath(grad), y = opmath(saved[0]);
    const at::Tensor dx = log ? g - y.exp() * g.sum(dim, true) : y * (g - (g * y).sum(dim, true));
    return dx.to(static_cast<at::ScalarType>(args.back().toInt()));
  };
}

}  // namespace
}  // namespace softmax
}  // namespace torch_dnn

// Autograd: the backward op reads the result, the dim and the input's dtype (the spec torch_dnn/ops/softmax.py derives
// its formula from).
TORCH_LIBRARY_IMPL(torch_dnn, Autograd, m) {
  using namespace torch_dnn::autograd_kernel;
  for (const bool log : {false, true}) {
    const std::string name = log ? "log_softmax" : "softmax";
    register_single_input_autograd(
        m, name.c_str(),
        {{Saved::Output0}, /*n_args=*/1, /*input_dtype=*/true, torch_dnn::softmax::create_graph(log)});
    register_first_order_backward(m, {(name + "_backward").c_str()});
  }
}
