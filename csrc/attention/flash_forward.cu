// The flash forward (attention_kernels.h: flash_forward): FlashAttention-2's algorithm on tensor cores
// (mma.sync m16n8k16, sm_80+), kernels/flash_forward_kernel.cuh; Float16 and BFloat16, float accumulation.
//
// Takes: head dims Dqk == Dv in {32, 64, 96, 128, 256}; no mask; dropout p < 1 (philox.h's mask, one Philox block
// an element); causal and sliding windows in either alignment; GQA/MQA; softcap; ALiBi; variable lengths; any strides whose rows are 16-byte aligned (base
// pointers, row, head and batch strides multiples of 8 elements; head dim contiguous).
// Refuses (cudaErrorNotSupported; the reference kernels take it): Float32/Float64, other head dims or
// Dqk != Dv, bool/additive masks, dropout p >= 1, misaligned operands, grids past 2^31 CTAs, devices before sm_80, or a
// device whose shared memory cannot hold the tiles.
//
// Tiles: a CTA of WARPS warps owns 16 WARPS query rows (a warp 16 rows) and walks the key tiles of BN keys:
//   D = 32 .. 128   BN = 64, 8 warps (128 rows: the K/V tile serves more rows), or 4 warps (64 rows) where
//                   128-row CTAs would not give every SM two; Q fragments held in registers
//   D = 256         BN = 32, 4 warps (64 rows); Q fragments reloaded from shared memory each key tile
// Shared memory (16-bit): Q [BM][D] + two stages of K and V [BN][D]: 48 KB (D 64, 8 warps) to 96 KB (D 128 /
// 256). Registers: head dims up to 64 are held to 128 (8 warps) / 170 (4 warps) a thread for 2-3 CTAs an SM, no
// spills; 96 and up take 255. Dropout is a kernel of its own (DROP), up to 255 registers: its Philox draws (10
// rounds an element) would otherwise take registers from the plain kernel. A 1-D grid of (query tiles x Hq x B) CTAs, query tiles fastest; lse written in float [B][Hq][Sq].
#include <cstdint>

#include "attention/kernels/flash_forward_kernel.cuh"
#include "common/cuda/device.cuh"

namespace torch_dnn {
namespace attention {

namespace flash {
namespace {

#if defined(TORCH_DNN_EMULATE_CUDA)
int device_major() { return 8; }
#else
int device_major() { return cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(0); }
#endif

template <typename T, class Cfg, bool DROP>
cudaError_t launch_kernel(const AttnArgs& a, cudaStream_t stream) {
  constexpr auto kernel = flash_forward_kernel<T, Cfg, DROP>;
  constexpr int smem = Cfg::kSmemBytes;
#if !defined(TORCH_DNN_EMULATE_CUDA)
  if (smem > 48 * 1024) {
    if (smem > max_smem_optin()) return cudaErrorNotSupported;
    const cudaError_t e = raise_smem_limit_once<kernel>(smem);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return cudaErrorNotSupported;
    }
  }
#endif
  const int64_t blocks = (a.Sq + Cfg::kBM - 1) / Cfg::kBM * a.Hq * a.B;
  if (blocks > int64_t(0x7fffffff)) return cudaErrorNotSupported;
  launch_1d(kernel, blocks, Cfg::kThreads, smem, stream, a, make_score_params(a));
  return cudaGetLastError();
}

template <typename T, class Cfg>
cudaError_t launch(const AttnArgs& a, cudaStream_t stream) {
  return a.dropout_p > 0.0 ? launch_kernel<T, Cfg, true>(a, stream) : launch_kernel<T, Cfg, false>(a, stream);
}

template <typename T, int D>
cudaError_t launch_d(const AttnArgs& a, cudaStream_t stream) {
  if constexpr (D == 256) {
    return launch<T, FwdConfig<D, 4, 32>>(a, stream);
  } else {
    const int64_t ctas128 = (a.Sq + 127) / 128 * a.Hq * a.B;
    if (ctas128 < 2 * int64_t(sm_count())) return launch<T, FwdConfig<D, 4, 64>>(a, stream);
    return launch<T, FwdConfig<D, 8, 64>>(a, stream);
  }
}

template <typename T>
cudaError_t forward_typed(const AttnArgs& a, cudaStream_t stream) {
  switch (a.Dqk) {
    case 32: return launch_d<T, 32>(a, stream);
    case 64: return launch_d<T, 64>(a, stream);
    case 96: return launch_d<T, 96>(a, stream);
    case 128: return launch_d<T, 128>(a, stream);
    case 256: return launch_d<T, 256>(a, stream);
    default: return cudaErrorNotSupported;
  }
}

}  // namespace
}  // namespace flash

cudaError_t flash_forward(const AttnArgs& a, const Workspace&, cudaStream_t stream) {
  if (a.dtype != DType::Float16 && a.dtype != DType::BFloat16) return cudaErrorNotSupported;
  if (a.Dqk != a.Dv || a.mask_kind != MaskKind::None || a.dropout_p >= 1.0) return cudaErrorNotSupported;
  if (a.Hkv <= 0 || a.Hq % a.Hkv != 0) return cudaErrorNotSupported;
  const bool varlen = a.cu_seqlens_q != nullptr;
  if (!rows_aligned16(a.q, varlen) || !rows_aligned16(a.k, varlen) || !rows_aligned16(a.v, varlen) ||
      !rows_aligned16(a.o, varlen))
    return cudaErrorNotSupported;
  if (flash::device_major() < 8) return cudaErrorNotSupported;
  if (a.B == 0 || a.Sq == 0) return cudaSuccess;
#if !defined(TORCH_DNN_EMULATE_CUDA)
  const cudaError_t hopper = flash_forward_sm90(a, stream);
  if (hopper != cudaErrorNotSupported) return hopper;
  (void)cudaGetLastError();
#endif
  return a.dtype == DType::Float16 ? flash::forward_typed<__half>(a, stream)
                                    : flash::forward_typed<__nv_bfloat16>(a, stream);
}

}  // namespace attention
}  // namespace torch_dnn
