// The Hopper flash forward (kernels/flash_forward_sm90.cuh: wgmma, 128 x 128 tiles, two warpgroups): the first
// route of flash_forward on an sm_90 device when this build has sm_90a code.
//
// Takes: Float16 / BFloat16, head dims Dqk == Dv in {64, 128}, no mask, no dropout, no softcap or ALiBi, a
// positive scale; causal and sliding windows in either alignment, GQA/MQA, variable lengths; 16-byte-aligned rows
// (as the mma.sync kernels). Everything else answers cudaErrorNotSupported and flash_forward's mma.sync kernels
// take it. TORCH_DNN_ATTENTION_SM90=0 turns the route off (tests of the mma.sync kernels on Hopper).
#include <cstdint>

#include "attention/kernels/flash_forward_sm90.cuh"
#include "attention/sm90_route.h"
#include "common/cuda/device.cuh"

namespace torch_dnn {
namespace attention {
namespace {

template <typename T, int D>
cudaError_t launch(const AttnArgs& a, cudaStream_t stream) {
  using C = Sm90FwdConfig<D>;
  constexpr auto kernel = flash_forward_sm90_kernel<T, D>;
  if (!sm90_allow_smem<kernel>(C::kSmemBytes)) return cudaErrorNotSupported;
  const int64_t blocks = (a.Sq + C::kBM - 1) / C::kBM * a.Hq * a.B;
  if (blocks > int64_t(0x7fffffff)) return cudaErrorNotSupported;
  const float scale_log2 = float(a.scale * 1.4426950408889634);
  launch_1d(kernel, blocks, C::kThreads, C::kSmemBytes, stream, a, scale_log2);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const AttnArgs& a, cudaStream_t stream) {
  return a.Dqk == 64 ? launch<T, 64>(a, stream) : launch<T, 128>(a, stream);
}

}  // namespace

cudaError_t flash_forward_sm90(const AttnArgs& a, cudaStream_t stream) {
  if (!sm90_route_takes(a)) return cudaErrorNotSupported;
  if (a.B == 0 || a.Sq == 0) return cudaSuccess;
  return a.dtype == DType::Float16 ? launch_typed<__half>(a, stream) : launch_typed<__nv_bfloat16>(a, stream);
}

}  // namespace attention
}  // namespace torch_dnn
