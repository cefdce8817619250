// Pooling family: schemas, and the CPU kernels' registration. Every op exists for ranks 1, 2 and 3
// (max_pool1d, max_pool2d, max_pool3d, ...), its size arguments as lists of that length (normalised in Python).
#include <string>

#include "pool/pool_cpu.h"
#include "pool/pool_ops.h"

namespace {

// The schemas of one rank: "{r}" (in the name) and "{n}" (the length of the size lists) both stand for it.
void define_rank(torch::Library& m, int rank) {
  const char* schemas[] = {
      // (output, indices): indices are flat (d * H + h) * W + w positions within each (n, c) volume, as PyTorch's
      "max_pool{r}d(Tensor self, int[{n}] kernel_size, int[{n}] stride, int[{n}] padding, int[{n}] dilation, bool ceil_mode) -> (Tensor, Tensor)",
      "max_pool{r}d_backward(Tensor grad_output, Tensor self, Tensor indices, int[{n}] kernel_size, int[{n}] stride, int[{n}] padding, int[{n}] dilation, bool ceil_mode) -> Tensor",
      "avg_pool{r}d(Tensor self, int[{n}] kernel_size, int[{n}] stride, int[{n}] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
      "avg_pool{r}d_backward(Tensor grad_output, Tensor self, int[{n}] kernel_size, int[{n}] stride, int[{n}] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
      "adaptive_avg_pool{r}d(Tensor self, int[{n}] output_size) -> Tensor",
      "adaptive_avg_pool{r}d_backward(Tensor grad_output, Tensor self) -> Tensor",
      "adaptive_max_pool{r}d(Tensor self, int[{n}] output_size) -> (Tensor, Tensor)",
      "adaptive_max_pool{r}d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor",
      // PyTorch's lp_pool: (avg_pool(x^p) * kernel numel)^(1/p), padding 0; norm_type finite and non-zero
      "lp_pool{r}d(Tensor self, float norm_type, int[{n}] kernel_size, int[{n}] stride, bool ceil_mode) -> Tensor",
      "lp_pool{r}d_backward(Tensor grad_output, Tensor self, Tensor output, float norm_type, int[{n}] kernel_size, int[{n}] stride, bool ceil_mode) -> Tensor",
  };
  const std::string r = std::to_string(rank);
  for (const char* schema : schemas) {
    std::string s = schema;
    for (size_t at = s.find('{'); at != std::string::npos; at = s.find('{', at)) s.replace(at, 3, r);
    m.def(s.c_str());
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  for (int rank = 1; rank <= 3; ++rank) define_rank(m, rank);
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::pool::register_pool_impls<torch_dnn::pool::CpuBackend>(m);
}
