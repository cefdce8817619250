// The softmax family's run-time knob (a benchmarking switch; docs/softmax.md), read once by each launcher call
// (read_knobs, softmax_cuda.cpp) and passed down to make_plan (kernels/softmax_common.cuh), so that one process
// can time every plan. Torch-free, header-only.
//
// | knob                   | choices                                                            | default       |
// |------------------------|--------------------------------------------------------------------|---------------|
// | TORCH_DNN_SOFTMAX_PLAN | regs | twopass | split: forces the plan of rows longer than a warp's | unset (empty): |
// |                        |   (1024 elements); a forced plan that cannot hold the row falls    | make_plan's   |
// |                        |   back to the default choice; any other non-empty value: twopass   | choice        |
#pragma once
#include <cstring>

#include "common/env.h"

namespace torch_dnn {
namespace softmax {

enum class ForcedPlan { None, Regs, TwoPass, Split };

struct Knobs {
  ForcedPlan plan = ForcedPlan::None;
};

inline Knobs read_knobs() {
  Knobs k;
  const char* p = env::get_nonempty("TORCH_DNN_SOFTMAX_PLAN");
  if (p) k.plan = std::strcmp(p, "regs") == 0 ? ForcedPlan::Regs
                  : std::strcmp(p, "split") == 0 ? ForcedPlan::Split
                                                 : ForcedPlan::TwoPass;
  return k;
}

}  // namespace softmax
}  // namespace torch_dnn
