// CPU kernels of the attention family: the readable reference of attention_kernels.h's contract (every option:
// masks, causal / window alignment, softcap, ALiBi, GQA, dropout, variable lengths), on host memory.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <utility>

#include "attention/attention_kernels.h"

namespace torch_dnn {
namespace attention {

// AttnArgs / AttnGrads on host memory (cu_seqlens too), for every DType; accumulation in float, double for Float64.
void forward_cpu(const AttnArgs& a);
void backward_cpu(const AttnArgs& a, const AttnGrads& g);

struct CpuBackend {
  // (seed, offset) for a dropout mask: a fresh seed drawn from torch's default CPU generator (so that
  // torch.manual_seed reproduces it), offset 0.
  static std::pair<uint64_t, uint64_t> philox_seed_offset(const at::Tensor& like);
  static void forward(const AttnArgs& a, const at::Tensor& like) { forward_cpu(a); }
  static void backward(const AttnArgs& a, const AttnGrads& g, const at::Tensor& like) { backward_cpu(a, g); }
  static bool deterministic() { return true; }  // the CPU backward has one order
};

}  // namespace attention
}  // namespace torch_dnn
