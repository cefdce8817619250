// The Hopper flash forward (kernels/flash_forward_sm90.cuh: wgmma; 128 x 128, 128 x 176 or 192 x 128 tiles): the
// first route of flash_forward on an sm_90 device when this build has sm_90a code.
//
// Takes: Float16 / BFloat16, head dims Dqk == Dv in {64, 128}, no mask, no dropout, no softcap or ALiBi, a
// positive scale; causal and sliding windows in either alignment, GQA/MQA, variable lengths; 16-byte-aligned rows
// (as the mma.sync kernels). Everything else answers cudaErrorNotSupported and flash_forward's mma.sync kernels
// take it. TORCH_DNN_ATTENTION_SM90=0 turns the route off (tests of the mma.sync kernels on Hopper).
// The tiles are copied by the copy engine through tensor maps made here, one per operand and call (the
// warp-specialised schedules), or, where a map cannot be made (or TORCH_DNN_ATTENTION_SM90_FWD=cp.async), by
// cp.async from the MMA threads.
#include <cstdint>

#include "attention/kernels/flash_forward_sm90.cuh"
#include "attention/sm90_route.h"
#include "common/cuda/device.cuh"

namespace torch_dnn {
namespace attention {
namespace {

// Tensor maps for the Q, K and V tiles of a BM x BN schedule; false where one cannot be made (the copy engine's
// coordinates are 32-bit; rows must be 16-byte aligned with 16-byte strides).
template <int D>
bool make_maps(const AttnArgs& a, int bm, int bn, Sm90FwdMaps* maps) {
  const bool varlen = a.cu_seqlens_q != nullptr;
  const bool fits = a.q_rows < (int64_t(1) << 31) && a.k_rows < (int64_t(1) << 31) && a.Hq < (int64_t(1) << 31) &&
                    a.B < (int64_t(1) << 31);
  return fits && sm90_operand_map(&maps->q, a.q, a.B, a.Hq, a.q_rows, D, varlen, bm) &&
         sm90_operand_map(&maps->k, a.k, a.B, a.Hkv, a.k_rows, D, varlen, bn) &&
         sm90_operand_map(&maps->v, a.v, a.B, a.Hkv, a.k_rows, D, varlen, bn);
}

// One schedule and tile; a tensor-copy schedule whose maps cannot be made runs cp.async instead. The maps' boxes
// are the configuration's tiles, so the tile is chosen in one place (launch_dim).
template <typename T, int D, Sm90Fwd kSchedule, int BN = 128, int WGs = 2>
cudaError_t launch(const AttnArgs& a, cudaStream_t stream) {
  using C = Sm90FwdConfig<D, kSchedule, BN, WGs>;
  Sm90FwdMaps maps{};
  if constexpr (kSchedule != Sm90Fwd::CpAsync) {
    if (!make_maps<D>(a, C::kBM, C::kBN, &maps)) return launch<T, D, Sm90Fwd::CpAsync>(a, stream);
  }
  constexpr auto kernel = flash_forward_sm90_kernel<T, D, kSchedule, BN, WGs>;
  if (!sm90_allow_smem<kernel>(C::kSmemBytes)) return cudaErrorNotSupported;
  const int64_t blocks = (a.Sq + C::kBM - 1) / C::kBM * a.Hq * a.B;
  if (blocks > int64_t(0x7fffffff)) return cudaErrorNotSupported;
  const float scale_log2 = float(a.scale * 1.4426950408889634);
  launch_1d(kernel, blocks, C::kThreads, C::kSmemBytes, stream, a, scale_log2, maps);
  return cudaGetLastError();
}

// The ping-pong schedule's tiles (FlashAttention-3's): at head dim 128, 176 keys where every query row sees every
// key (fewer iterations for the fixed costs of each: the O rescale, the barriers, the turns; the registers still
// hold S, P and O), else 128 (with causal or windowed visibility most tiles are the diagonal's, and smaller tiles
// mask less); at head dim 64, where the softmax of a tile takes longer than its MMAs, three MMA warpgroups (192
// query rows) so that two warpgroups' MMAs cover one's softmax. The other schedules: 128 x 128, two warpgroups.
template <typename T, int D>
cudaError_t launch_dim(const AttnArgs& a, cudaStream_t stream) {
  switch (a.sm90_fwd) {
    case Sm90Fwd::CpAsync:
      return launch<T, D, Sm90Fwd::CpAsync>(a, stream);
    case Sm90Fwd::WarpSpecialized:
      return launch<T, D, Sm90Fwd::WarpSpecialized>(a, stream);
    default:
      break;
  }
  if constexpr (D == 64) {
    return launch<T, D, Sm90Fwd::PingPong, 128, 3>(a, stream);
  } else {
    const bool all_keys_seen = !a.causal && a.window_left < 0 && a.window_right < 0;
    return all_keys_seen ? launch<T, D, Sm90Fwd::PingPong, 176>(a, stream) : launch<T, D, Sm90Fwd::PingPong>(a, stream);
  }
}

template <typename T>
cudaError_t launch_typed(const AttnArgs& a, cudaStream_t stream) {
  return a.Dqk == 64 ? launch_dim<T, 64>(a, stream) : launch_dim<T, 128>(a, stream);
}

}  // namespace

cudaError_t flash_forward_sm90(const AttnArgs& a, cudaStream_t stream) {
  if (!sm90_route_takes(a)) return cudaErrorNotSupported;
  if (a.B == 0 || a.Sq == 0) return cudaSuccess;
  return a.dtype == DType::Float16 ? launch_typed<__half>(a, stream) : launch_typed<__nv_bfloat16>(a, stream);
}

}  // namespace attention
}  // namespace torch_dnn
