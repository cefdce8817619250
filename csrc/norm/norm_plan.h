// The norm family's run-time knobs (benchmarking switches; docs/norm.md), read once by each launcher call
// (read_knobs, norm_cuda.cpp) and passed down to the plans in kernels/, so that one process can time every
// variant. Torch-free, header-only.
//
// | knob                      | choices                                                   | default            |
// |---------------------------|-----------------------------------------------------------|--------------------|
// | TORCH_DNN_NORM_FWD_STATS  | twopass: LayerNorm block forward by two block reductions  | fused; twopass for |
// |                           |   (mean, then variance)                                   | fp16 LayerNorm     |
// |                           | fused: one Chan-merged (count, mean, M2) reduction        |                    |
// | TORCH_DNN_NORM_FWD_GRID   | waves: the block forward as a persistent grid of 4 waves  | rows; waves for    |
// |                           | rows: a block per row                                     | fp16 LayerNorm     |
// | TORCH_DNN_NORM_BWD_BLOCKS | n > 0: the staged backward keeps at most n resident       | staged_bwd_grid's  |
// |                           |   blocks an SM (fewer partial rows)                       | caps by dtype and  |
// |                           |                                                           | block size         |
// Any other value counts as unset. The forward defaults are measured (docs/norm.md): one reduction and a block per
// row, except fp16 LayerNorm, for which the two-pass statistics and the 4-wave grid are faster.
#pragma once
#include <optional>

#include "common/env.h"

namespace torch_dnn {
namespace norm {

struct Knobs {
  std::optional<bool> fwd_twopass_stats;  // unset: the default for the row type
  std::optional<bool> fwd_grid_waves;
  int bwd_blocks = 0;  // 0: unset

  // Each forward choice: the knob's when set, else the measured default (fp16 LayerNorm's differs).
  bool twopass_stats(bool fp16_layer_norm) const { return fwd_twopass_stats.value_or(fp16_layer_norm); }
  bool grid_waves(bool fp16_layer_norm) const { return fwd_grid_waves.value_or(fp16_layer_norm); }
};

// true when `name` is `yes`, false when it is `no`, unset otherwise.
inline std::optional<bool> knob_choice(const char* name, const char* yes, const char* no) {
  if (env::is(name, yes)) return true;
  if (env::is(name, no)) return false;
  return std::nullopt;
}

inline Knobs read_knobs() {
  Knobs k;
  k.fwd_twopass_stats = knob_choice("TORCH_DNN_NORM_FWD_STATS", "twopass", "fused");
  k.fwd_grid_waves = knob_choice("TORCH_DNN_NORM_FWD_GRID", "waves", "rows");
  const int v = env::get_int("TORCH_DNN_NORM_BWD_BLOCKS", 0);
  k.bwd_blocks = v > 0 ? v : 0;
  return k;
}

}  // namespace norm
}  // namespace torch_dnn
