// batch_norm launch geometry and plans on the host: block shapes, reduction splits, 16-byte access
// eligibility and the persistent launch's geometry. Included after the kernels (occupancy queries name them).
#pragma once
#include <algorithm>
#include <initializer_list>

#include "batch_norm/kernels/bn_persistent.cuh"
#include "batch_norm/kernels/bn_reduce.cuh"
#include "batch_norm/kernels/bn_stats.cuh"
#include "common/cuda/device.cuh"
#include "common/cuda/int_math.h"
#include "common/env.h"

namespace torch_dnn {
namespace batch_norm {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- launch geometry (a function of the shape alone, so the workspace size is known before the launch) ----

struct RowsGeom {
  int V, TX, TY;
  int64_t gx;
};
template <typename T>
RowsGeom rows_geom(const BnShape& s, bool vec) {
  RowsGeom g;
  g.V = vec ? kVec16<T> : 1;
  const int64_t cv = s.C / g.V;
  g.TX = pow2_at_least(cv, 32);
  g.TY = kThreads / g.TX;
  g.gx = ceil_div(cv, g.TX);
  return g;
}
// Pieces per plane (planes walk): units of work are (plane, piece).
template <typename T>
int64_t pieces_of(const BnShape& s, bool vec) {
  return ceil_div(s.inner / (vec ? kVec16<T> : 1), kPiece);
}

// Splits of a reduction: one full wave of resident blocks (so the pass walks the tensor front to back, which
// the reversed elementwise pass after it relies on for L2 hits), capped by the work.
template <auto Kernel>
int64_t resident_blocks() {
  return int64_t(std::max(resident_per_sm<Kernel>(kThreads), 1)) * sm_count();
}
template <typename T, bool STATS>
int reduction_splits(const BnShape& s) {
  constexpr int VM = kVec16<T>;
  const bool vec = (s.inner == 1 ? s.C : s.inner) % VM == 0;
  int64_t splits, most;
  if (s.inner == 1) {
    const RowsGeom g = rows_geom<T>(s, vec);
    const int64_t res = STATS ? (vec ? resident_blocks<stats_rows<T, VM>>() : resident_blocks<stats_rows<T, 1>>())
                              : (vec ? resident_blocks<reduce_rows<T, VM, false>>()
                                     : resident_blocks<reduce_rows<T, 1, false>>());
    splits = res / g.gx;
    most = ceil_div(s.outer, g.TY);
  } else {
    const int64_t res = STATS ? (vec ? resident_blocks<stats_planes<T, VM>>() : resident_blocks<stats_planes<T, 1>>())
                              : (vec ? resident_blocks<reduce_planes<T, VM, false>>()
                                     : resident_blocks<reduce_planes<T, 1, false>>());
    splits = res / s.C;
    most = ceil_div(s.outer * pieces_of<T>(s, vec), kWarps);
  }
  splits = splits < most ? splits : most;
  splits = splits < 65535 ? splits : 65535;
  return int(splits < 1 ? 1 : splits);
}

// 16-byte accesses when the channel count (rows) or the plane size (planes) is a multiple of the vector and
// every pointer is aligned.
template <typename T>
bool use_vectors(const BnShape& s, std::initializer_list<const void*> ptrs) {
  if ((s.inner == 1 ? s.C : s.inner) % kVec16<T> != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

bool empty(const BnShape& s) { return s.outer == 0 || s.C == 0 || s.inner == 0; }


// ---- one launch each way by whole channels (kernels/bn_channel.cuh) ----

// The largest channel (its outer * inner elements, KB of input) taken by the whole-channel kernels. A block then
// reads a channel two or three times from L2 in a few microseconds, while the call's host time is hundreds; past
// it the separate passes, which split a channel over many blocks, keep the GPU busier. Knob (docs/batch_norm.md):
// TORCH_DNN_BN_CHANNEL_KB; 0 turns the kernels off.
constexpr int kChannelKbDefault = 256;

template <typename T>
bool channel_fits(const BnShape& s) {
  if (s.inner <= 1 || empty(s)) return false;
  const int64_t kb = env::get_int("TORCH_DNN_BN_CHANNEL_KB", kChannelKbDefault);
  return s.outer * s.inner * int64_t(sizeof(T)) <= kb * 1024;
}

// ---- persistent passes: host side ----

// The geometry of a persistent launch over NT tensors a row (1 forward, 2 backward, 3 with a residual); false
// when the device (before sm_90) or the shape does not fit it: the separate passes run then. Knobs
// (docs/batch_norm.md): TORCH_DNN_BN_PERSIST=0 off; TORCH_DNN_BN_CACHE_KB caps a block's cached chunks;
// TORCH_DNN_BN_L2_MB sets the share of the grid's last streamed chunks loaded with evict_last; TORCH_DNN_BN_RING /
// TORCH_DNN_BN_CHUNK_KB the ring (launch_persist_forward reads the residual's two, TORCH_DNN_BN_RES_PREFETCH and
// TORCH_DNN_BN_RES_AHEAD).
template <typename T, auto Kernel>
bool persist_geom(const BnShape& s, int NT, PersistGeom& g) {
  constexpr int V = kVec16<T>;
  if (env::get_int("TORCH_DNN_BN_PERSIST", 1) == 0) return false;
  if (cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(0) < 9) return false;
  if (s.inner != 1 || s.C % V != 0 || s.C / V > kPersistThreads || s.outer < 1) return false;
  g.TX = int(s.C / V);
  const int TY = kPersistThreads / g.TX;
  int p2 = 1;
  while (p2 < TY) p2 *= 2;
  g.red_h = p2 / 2;
  g.red_bytes = int(int64_t(g.red_h) * 2 * s.C * int64_t(sizeof(float)));
  const int64_t row_bytes = int64_t(NT) * s.C * int64_t(sizeof(T));
  g.stages = std::min(std::max(env::get_int("TORCH_DNN_BN_RING", kRingStagesDefault), 2), kMaxRingStages);
  g.chunk_rows = int(std::max<int64_t>(1, int64_t(std::max(env::get_int("TORCH_DNN_BN_CHUNK_KB", kChunkKbDefault), 1)) * 1024 / row_bytes));
  const int64_t slot_bytes = row_bytes * g.chunk_rows;
  // the kernels have no static shared memory; the limit is raised once per device to the opt-in maximum
  if (raise_smem_limit_once<Kernel>(max_smem_optin()) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const int64_t area = int64_t(max_smem_optin()) - kBarBytes - g.red_bytes;
  g.slots = int(area > 0 ? area / slot_bytes : 0);
  if (g.slots < g.stages + 1) return false;
  const int cap_kb = env::get_int("TORCH_DNN_BN_CACHE_KB", -1);
  g.cache_cap = cap_kb >= 0 ? int(int64_t(cap_kb) * 1024 / slot_bytes) : g.slots;
  g.G = sm_count();  // one block per SM (launch bounds (512, 1): at most 128 registers, so one always fits)
  const int64_t chunks = (s.outer + g.G - 1) / g.G / g.chunk_rows + 1;  // a block's chunks, at most
  const int used = int(std::min<int64_t>(g.slots, std::max<int64_t>(chunks, g.stages + 1)));
  g.smem = size_t(kBarBytes) + size_t(g.red_bytes) + size_t(used) * size_t(slot_bytes);
  g.slots = used;
  g.l2_chunks = int((int64_t(env::get_int("TORCH_DNN_BN_L2_MB", 16)) << 20) / (int64_t(g.G) * slot_bytes));
  return true;
}


// The workspace of a persistent launch, in floats: partial sums [2][C][G], coefficients [3][C].
int64_t persist_ws_floats(const BnShape& s, int G) { return 2 * s.C * G + 3 * s.C; }

unsigned channel_blocks(int64_t C) { return unsigned(ceil_div(C, kThreads)); }

}  // namespace
}  // namespace batch_norm
}  // namespace torch_dnn
