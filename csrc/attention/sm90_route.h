// When the Hopper (wgmma) attention kernels take a problem: what flash_forward_sm90 and flash_backward_sm90 share.
// Torch-free.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "attention/attention_kernels.h"
#include "common/cuda/device.cuh"
#include "common/cuda/tma.cuh"

namespace torch_dnn {
namespace attention {

// The problem (16-bit, head dims 64 or 128 with Dqk == Dv, no mask / dropout / softcap / ALiBi, a positive scale,
// GQA groups, 16-byte-aligned rows of q, k, v, o), the device (sm_90), the build (sm_90a code) and the op layer's
// choice (a.sm90_enabled: TORCH_DNN_ATTENTION_SM90=0 turns the route off).
inline bool sm90_route_takes(const AttnArgs& a) {
  if (a.dtype != DType::Float16 && a.dtype != DType::BFloat16) return false;
  if (a.Dqk != a.Dv || (a.Dqk != 64 && a.Dqk != 128)) return false;
  if (a.mask_kind != MaskKind::None || a.dropout_p != 0.0 || a.softcap != 0.0 || a.alibi_slopes != nullptr ||
      !(a.scale > 0.0))
    return false;
  if (a.Hkv <= 0 || a.Hq % a.Hkv != 0) return false;
  const bool varlen = a.cu_seqlens_q != nullptr;
  if (!rows_aligned16(a.q, varlen) || !rows_aligned16(a.k, varlen) || !rows_aligned16(a.v, varlen) ||
      !rows_aligned16(a.o, varlen))
    return false;
  if (!a.sm90_enabled) return false;
#if defined(TORCH_DNN_EMULATE_CUDA)
  return true;  // the host emulation (tests/emulation/wgmma_emulation.h)
#else
#ifdef TORCH_DNN_CUDA_ARCHS
  if (std::strstr(TORCH_DNN_CUDA_ARCHS, "9.0a") == nullptr && std::strstr(TORCH_DNN_CUDA_ARCHS, "90a") == nullptr)
    return false;
#endif  // else built outside setup.py (the probes), for sm_90a by its caller
  return cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(0) == 9;
#endif
}

// Lets Kernel take `bytes` of dynamic shared memory (asked once per device), or false where the device cannot.
template <auto Kernel>
bool sm90_allow_smem(int bytes) {
#if defined(TORCH_DNN_EMULATE_CUDA)
  (void)bytes;
  return true;
#else
  if (bytes > max_smem_optin() || raise_smem_limit_once<Kernel>(bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
#endif
}

// The tensor map of operand o ([B][H][rows][D] through its strides; a packed batch is one sequence of `rows`),
// copied in boxes of 64 columns by box_rows.
inline bool sm90_operand_map(TmaMap4* m, const Operand4& o, int64_t B, int64_t H, int64_t rows, int D,
                             bool varlen, int box_rows) {
  const int64_t dim[4] = {D, rows, H, varlen ? 1 : B};
  int64_t stride[4] = {2, o.ss * 2, o.sh * 2, o.sb * 2};
  for (int i = 1; i < 4; ++i)
    if (dim[i] == 1) stride[i] = 16;  // never stepped: any stride the encoder takes (a size-1 dim's may be 0)
  return tma_map_16bit(m, o.ptr, dim, stride, 64, box_rows);
}

}  // namespace attention
}  // namespace torch_dnn
