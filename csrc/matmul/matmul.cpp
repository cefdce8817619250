// Matmul family: schemas, the CPU kernels' registration, and autocast (as torch.matmul: floating inputs are
// cast to the autocast dtype, float64 is left alone) for CPU and CUDA.
#include <ATen/core/dispatch/Dispatcher.h>

#include "common/autocast.h"
#include "matmul/matmul_cpu.h"
#include "matmul/matmul_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  // torch.mm / torch.bmm; allow_tf32: float32 may use TF32 tensor cores (the Python wrappers pass
  // torch.backends.cuda.matmul.allow_tf32). torch_dnn.functional.matmul composes these with views.
  m.def("mm(Tensor self, Tensor mat2, *, bool allow_tf32=False) -> Tensor");
  m.def("bmm(Tensor self, Tensor mat2, *, bool allow_tf32=False) -> Tensor");
  // torch.nn.functional.linear: input @ weight.T + bias.
  m.def("linear(Tensor input, Tensor weight, Tensor? bias=None, *, bool allow_tf32=False) -> Tensor");
  // act(input @ weight.T + bias) + residual in one kernel; activation: bias_act's names ("none", "relu", "gelu",
  // ...), act_a / act_b override its parameters (None: bias_act's defaults). save_preact: also return
  // input @ weight.T + bias (for the backward; an empty tensor otherwise, or when the activation is "none").
  m.def(
      "linear_act(Tensor input, Tensor weight, Tensor? bias=None, str activation='none', Tensor? residual=None, "
      "float? act_a=None, float? act_b=None, *, bool allow_tf32=False, bool save_preact=False) "
      "-> (Tensor out, Tensor preact)");
  // output_mask: which of (grad_input, grad_weight, grad_bias) to compute; the others come back empty.
  m.def(
      "linear_act_backward(Tensor grad_output, Tensor input, Tensor weight, Tensor? preact, str activation, "
      "float? act_a, float? act_b, Tensor? grad_preact, bool[3] output_mask, *, bool allow_tf32=False) "
      "-> (Tensor grad_input, Tensor grad_weight, Tensor grad_bias)");
  // The GEMM paths this build has for CUDA ("sm80": mma.sync, any sm_80+ GPU; "sm90": wgmma + TMA, Hopper).
  m.def("gemm_paths() -> str[]", []() {
    std::vector<std::string> paths;
#ifdef TORCH_DNN_WITH_CUDA
    paths.push_back("sm80");
#endif
#ifdef TORCH_DNN_WITH_SM90_GEMM
    paths.push_back("sm90");
#endif
    return paths;
  });
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::matmul::register_matmul_impls<torch_dnn::matmul::CpuBackend>(m);
}

namespace torch_dnn {
namespace matmul {
namespace {

// aten::mm, bmm, matmul and linear's policy: lower_precision_fp (common/autocast.h).
template <c10::DeviceType D>
struct Autocast : autocast::LowerPrecision<D> {
  using autocast::LowerPrecision<D>::cast;
  using autocast::LowerPrecision<D>::exclude;

  static at::Tensor mm(const at::Tensor& a, const at::Tensor& b, bool tf32) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("torch_dnn::mm", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, bool)>();
    auto g = exclude();
    return op.call(cast(a), cast(b), tf32);
  }
  static at::Tensor bmm(const at::Tensor& a, const at::Tensor& b, bool tf32) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("torch_dnn::bmm", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, bool)>();
    auto g = exclude();
    return op.call(cast(a), cast(b), tf32);
  }
  static at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias,
                           bool tf32) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("torch_dnn::linear", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                           bool)>();
    auto g = exclude();
    return op.call(cast(x), cast(w), cast(bias), tf32);
  }
  using LinearActSig = std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
      const std::optional<at::Tensor>&, std::optional<double>, std::optional<double>, bool, bool);
  static std::tuple<at::Tensor, at::Tensor> linear_act(const at::Tensor& x, const at::Tensor& w,
                                                       const std::optional<at::Tensor>& bias, c10::string_view act,
                                                       const std::optional<at::Tensor>& residual,
                                                       std::optional<double> a, std::optional<double> b, bool tf32,
                                                       bool save_preact) {
    static auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("torch_dnn::linear_act", "").typed<LinearActSig>();
    auto g = exclude();
    return op.call(cast(x), cast(w), cast(bias), act, cast(residual), a, b, tf32, save_preact);
  }

  static void register_all(torch::Library& m) {
    m.impl("mm", &mm);
    m.impl("bmm", &bmm);
    m.impl("linear", &linear);
    m.impl("linear_act", &linear_act);
  }
};

}  // namespace
}  // namespace matmul
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, AutocastCPU, m) {
  torch_dnn::matmul::Autocast<c10::DeviceType::CPU>::register_all(m);
}

TORCH_LIBRARY_IMPL(torch_dnn, AutocastCUDA, m) {
  torch_dnn::matmul::Autocast<c10::DeviceType::CUDA>::register_all(m);
}
