// The group_norm family's run-time knobs (benchmarking switches; docs/group_norm.md), read once by each launcher
// call (read_knobs, group_norm_cuda.cpp) and passed down to the plan choices in kernels/gn_cluster.cuh and
// kernels/gn_backward.cuh, so that one process can time every variant. Torch-free, header-only.
//
// | knob                     | choices                                                             | default     |
// |--------------------------|---------------------------------------------------------------------|-------------|
// | TORCH_DNN_GN_PLAN        | auto (or empty): the cluster plan for channels-last; NCHW takes the | auto        |
// |                          |   per-(n, group) kernels where the group fits one CTA tile (forward)|             |
// |                          |   or shared memory (backward), clusters beyond that (the per-(n,    |             |
// |                          |   group) kernels measured faster there)                             |             |
// |                          | cluster: the cluster plan wherever it applies                       |             |
// |                          | smem (any other value): the per-(n, group) kernels wherever they    |             |
// |                          |   apply                                                             |             |
// | TORCH_DNN_GN_CLUSTER_MAX | n, clamped to 1..16: caps the cluster size (a power of two up to n) | 16          |
// | TORCH_DNN_GN_TILE_KB     | n, clamped to 1..227: the CTA tile budget (KB) that sets the        | 50 (4 CTAs  |
// |                          |   cluster size                                                      | an SM)      |
// | TORCH_DNN_GN_BULK_BUFS   | 2: gn_bulk_bwd as one persistent block an SM with the next group's  | 1           |
// |                          |   copies in flight (double buffer); any other value: 1              |             |
#pragma once
#include <cstring>

#include "common/env.h"

namespace torch_dnn {
namespace group_norm {

enum class GnPlan { Auto, Cluster, Smem };

struct Knobs {
  GnPlan plan = GnPlan::Auto;
  int cluster_max = 16;  // 1..16
  int tile_kb = 50;      // 1..227
  int bulk_bufs = 1;     // 1 or 2
};

inline int knob_int_clamped(const char* name, int dflt, int lo, int hi) {
  const int v = env::get_int(name, dflt);
  return v < lo ? lo : (v > hi ? hi : v);
}

inline Knobs read_knobs() {
  Knobs k;
  const char* e = env::get("TORCH_DNN_GN_PLAN");
  if (!e || !*e || std::strcmp(e, "auto") == 0) k.plan = GnPlan::Auto;
  else k.plan = std::strcmp(e, "cluster") == 0 ? GnPlan::Cluster : GnPlan::Smem;
  k.cluster_max = knob_int_clamped("TORCH_DNN_GN_CLUSTER_MAX", 16, 1, 16);
  k.tile_kb = knob_int_clamped("TORCH_DNN_GN_TILE_KB", 50, 1, 227);
  k.bulk_bufs = env::get_int("TORCH_DNN_GN_BULK_BUFS", 1) == 2 ? 2 : 1;
  return k;
}

}  // namespace group_norm
}  // namespace torch_dnn
