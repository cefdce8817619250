// The Hopper flash backward (kernels/flash_backward_sm90.cuh: wgmma; a preprocessing pass, dK/dV by key tiles, dQ
// by query tiles): the first route of flash_backward on an sm_90 device when this build has sm_90a code.
//
// Takes what the Hopper forward takes (flash_forward_sm90.cu: Float16 / BFloat16, head dims 64 and 128, no mask,
// dropout, softcap or ALiBi, a positive scale; causal and windows in either alignment, GQA, variable lengths,
// 16-byte-aligned rows); everything else answers cudaErrorNotSupported and the mma.sync backward takes it.
// TORCH_DNN_ATTENTION_SM90=0 turns it off, as the forward. The dK / dV and dQ passes' tiles are copied by a copy
// warpgroup's tensor copies where the tensor maps made here per call can be made (TORCH_DNN_ATTENTION_SM90_BWD=ws,
// the default), else by cp.async from the MMA threads.
#include <cstdint>

#include "attention/kernels/flash_backward_sm90.cuh"
#include "attention/sm90_route.h"
#include "common/cuda/device.cuh"

namespace torch_dnn {
namespace attention {
namespace {

template <typename T, int D, Sm90Bwd kSchedule>
cudaError_t launch(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, const Sm90BwdMaps& kv_maps,
                   const Sm90BwdMaps& q_maps, cudaStream_t stream) {
  using Kv = Sm90DkdvConfig<D, kSchedule>;
  using Q = Sm90DqConfig<D, kSchedule>;
  constexpr auto dkdv = flash_bwd_dkdv_sm90_kernel<T, D, kSchedule>;
  constexpr auto dq = flash_bwd_dq_sm90_kernel<T, D, kSchedule>;
  if (!sm90_allow_smem<dkdv>(Kv::kSmemBytes) || !sm90_allow_smem<dq>(Q::kSmemBytes)) return cudaErrorNotSupported;
  const int64_t sq_pad = (a.Sq + kSm90RowPad - 1) / kSm90RowPad * kSm90RowPad;
  const int64_t rows = a.B * a.Hq * sq_pad;
  const int64_t row_blocks = (rows + kSm90PrepWarps - 1) / kSm90PrepWarps;
  const int64_t dkdv_blocks = (a.Sk + Kv::kBN - 1) / Kv::kBN * a.Hkv * a.B;
  const int64_t dq_blocks = (a.Sq + Q::kBM - 1) / Q::kBM * a.Hq * a.B;
  if (row_blocks > int64_t(0x7fffffff) || dkdv_blocks > int64_t(0x7fffffff) || dq_blocks > int64_t(0x7fffffff))
    return cudaErrorNotSupported;
  float* lse2 = nullptr;
  float* dsum = nullptr;
  if (rows > 0) {
    lse2 = static_cast<float*>(ws.get(2 * rows * int64_t(sizeof(float))));
    if (lse2 == nullptr) return cudaErrorMemoryAllocation;
    dsum = lse2 + rows;
    launch_1d(flash_bwd_prep_sm90_kernel<T>, row_blocks, 32 * kSm90PrepWarps, 0, stream, a, g, lse2, dsum, sq_pad);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  const float scale_log2 = float(a.scale * 1.4426950408889634);
  if (dkdv_blocks > 0) {
    launch_1d(dkdv, dkdv_blocks, Kv::kThreads, Kv::kSmemBytes, stream, a, g, static_cast<const float*>(lse2),
              static_cast<const float*>(dsum), sq_pad, scale_log2, kv_maps);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (dq_blocks > 0)
    launch_1d(dq, dq_blocks, Q::kThreads, Q::kSmemBytes, stream, a, g, static_cast<const float*>(lse2),
              static_cast<const float*>(dsum), sq_pad, scale_log2, q_maps);
  return cudaGetLastError();
}

// The schedule of the dK / dV and dQ passes: the copy warpgroups' tensor copies where
// TORCH_DNN_ATTENTION_SM90_BWD=ws (the default) asks and every map can be made (aligned, 16-byte strides, 32-bit coordinates),
// else cp.async from the MMA threads. Each pass has its own boxes: the dK / dV pass copies query tiles of 64 rows
// against 128 resident keys, the dQ pass key tiles of 64 against 128 resident query rows.
template <typename T, int D>
cudaError_t launch_dim(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t stream) {
  Sm90BwdMaps kv_maps{}, q_maps{};
  const bool varlen = a.cu_seqlens_q != nullptr;
  const bool fits = a.q_rows < (int64_t(1) << 31) && a.k_rows < (int64_t(1) << 31) && a.Hq < (int64_t(1) << 31) &&
                    a.B < (int64_t(1) << 31);
  using Kv = Sm90DkdvConfig<D, Sm90Bwd::WarpSpecialized>;
  using Q = Sm90DqConfig<D, Sm90Bwd::WarpSpecialized>;
  auto maps = [&](Sm90BwdMaps* m, int q_box, int k_box) {
    return sm90_operand_map(&m->q, a.q, a.B, a.Hq, a.q_rows, D, varlen, q_box) &&
           sm90_operand_map(&m->dout, g.dout, a.B, a.Hq, a.q_rows, D, varlen, q_box) &&
           sm90_operand_map(&m->k, a.k, a.B, a.Hkv, a.k_rows, D, varlen, k_box) &&
           sm90_operand_map(&m->v, a.v, a.B, a.Hkv, a.k_rows, D, varlen, k_box);
  };
  if (a.sm90_bwd == Sm90Bwd::WarpSpecialized && fits && maps(&kv_maps, Kv::kBQ, Kv::kBN) &&
      maps(&q_maps, Q::kBM, Q::kBN))
    return launch<T, D, Sm90Bwd::WarpSpecialized>(a, g, ws, kv_maps, q_maps, stream);
  return launch<T, D, Sm90Bwd::CpAsync>(a, g, ws, kv_maps, q_maps, stream);
}

template <typename T>
cudaError_t launch_typed(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t stream) {
  return a.Dqk == 64 ? launch_dim<T, 64>(a, g, ws, stream) : launch_dim<T, 128>(a, g, ws, stream);
}

}  // namespace

cudaError_t flash_backward_sm90(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t stream) {
  if (!sm90_route_takes(a) || g.dbias != nullptr || a.lse == nullptr) return cudaErrorNotSupported;
  const bool varlen = a.cu_seqlens_q != nullptr;
  for (const Operand4* o : {&g.dout, &g.dq, &g.dk, &g.dv})
    if (!rows_aligned16(*o, varlen)) return cudaErrorNotSupported;
  if (a.B == 0 || (a.Sq == 0 && a.Sk == 0)) return cudaSuccess;
  return a.dtype == DType::Float16 ? launch_typed<__half>(a, g, ws, stream)
                                   : launch_typed<__nv_bfloat16>(a, g, ws, stream);
}

}  // namespace attention
}  // namespace torch_dnn
