// The flash backward (attention_kernels.h: flash_backward): FlashAttention-2's backward on tensor cores
// (mma.sync m16n8k16, sm_80+) in three launches, Float16 and BFloat16, float accumulation:
//   1. flash_bwd_dsum_kernel (kernels/flash_bwd_preprocess.cuh): D = rowsum(dO * O) into a float workspace
//      [B][Hq][Sq], a warp a row.
//   2. flash_bwd_dkdv_kernel (kernels/flash_bwd_dkdv.cuh): a CTA per 64 key rows of a (batch, key/value head),
//      4 warps of 16 keys, looping over the group's query heads and the query tiles that see its keys (32 rows a
//      tile for head dims 96 / 128, 64 below), computed transposed (keys on the mma's M side); dK, dV in registers.
//   3. flash_bwd_dq_kernel (kernels/flash_bwd_dq.cuh): a CTA per 64 query rows (4 warps of 16), looping over the
//      key tiles of 64 it sees, recomputing S and dP; dQ in registers.
// dQ has its own pass instead of atomics or per-key-tile partial sums: every gradient row is summed by one warp
// in a fixed order, so the results are bitwise reproducible (`deterministic` holds either way), at the cost of
// recomputing Q K^T and dO V^T once more (7 GEMM-sized products instead of 5).
// Takes what the flash forward takes (no mask; dropout p < 1, the mask regenerated from the same Philox key;
// causal / window in either alignment, GQA, softcap, ALiBi, variable lengths, 16-byte aligned rows) with Dqk == Dv in {32, 64, 96, 128}. Refuses
// (cudaErrorNotSupported; the reference kernels take it) everything else, head dim 256 included (its dK and dV
// accumulators alone would take 256 registers a thread in this layout).
#include <cstdint>

#include "attention/kernels/flash_bwd_dkdv.cuh"
#include "attention/kernels/flash_bwd_dq.cuh"
#include "attention/kernels/flash_bwd_preprocess.cuh"
#include "common/cuda/device.cuh"

namespace torch_dnn {
namespace attention {
namespace flash {
namespace {

#if defined(TORCH_DNN_EMULATE_CUDA)
int device_major_bwd() { return 8; }
#else
int device_major_bwd() { return cached_device_attribute<cudaDevAttrComputeCapabilityMajor>(0); }
#endif

// Dynamic shared memory past 48 KB for Kernel, or false where the device cannot give it.
template <auto Kernel>
bool allow_smem(int bytes) {
#if !defined(TORCH_DNN_EMULATE_CUDA)
  if (bytes > 48 * 1024) {
    if (bytes > max_smem_optin() || raise_smem_limit_once<Kernel>(bytes) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
  }
#else
  (void)bytes;
#endif
  return true;
}

template <typename T, int D, bool DROP>
cudaError_t backward_kernels(const AttnArgs& a, const AttnGrads& g, float* dsum, cudaStream_t stream) {
  using DkdvCfg = DkdvConfig<D, 4, (D > 64 ? 32 : 64)>;
  using DqCfg = DqConfig<D, 4, 64>;
  constexpr auto dkdv = flash_bwd_dkdv_kernel<T, DkdvCfg, DROP>;
  constexpr auto dq = flash_bwd_dq_kernel<T, DqCfg, DROP>;
  if (!allow_smem<dkdv>(DkdvCfg::kSmemBytes) || !allow_smem<dq>(DqCfg::kSmemBytes)) return cudaErrorNotSupported;
  const int64_t dkdv_blocks = (a.Sk + DkdvCfg::kBN - 1) / DkdvCfg::kBN * a.Hkv * a.B;
  const int64_t dq_blocks = (a.Sq + DqCfg::kBM - 1) / DqCfg::kBM * a.Hq * a.B;
  const int64_t rows = a.B * a.Hq * a.Sq;
  if (dkdv_blocks > int64_t(0x7fffffff) || dq_blocks > int64_t(0x7fffffff) ||
      (rows + kPreWarps - 1) / kPreWarps > int64_t(0x7fffffff))
    return cudaErrorNotSupported;
  const ScoreParams sp = make_score_params(a);
  launch_1d(flash_bwd_dsum_kernel<T>, (rows + kPreWarps - 1) / kPreWarps, 32 * kPreWarps, 0, stream, a, g, dsum);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  if (dkdv_blocks > 0) {
    launch_1d(dkdv, dkdv_blocks, DkdvCfg::kThreads, DkdvCfg::kSmemBytes, stream, a, g,
              static_cast<const float*>(dsum), sp);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  launch_1d(dq, dq_blocks, DqCfg::kThreads, DqCfg::kSmemBytes, stream, a, g, static_cast<const float*>(dsum), sp);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t backward_d(const AttnArgs& a, const AttnGrads& g, float* dsum, cudaStream_t stream) {
  return a.dropout_p > 0.0 ? backward_kernels<T, D, true>(a, g, dsum, stream)
                           : backward_kernels<T, D, false>(a, g, dsum, stream);
}

template <typename T>
cudaError_t backward_typed(const AttnArgs& a, const AttnGrads& g, float* dsum, cudaStream_t stream) {
  switch (a.Dqk) {
    case 32: return backward_d<T, 32>(a, g, dsum, stream);
    case 64: return backward_d<T, 64>(a, g, dsum, stream);
    case 96: return backward_d<T, 96>(a, g, dsum, stream);
    case 128: return backward_d<T, 128>(a, g, dsum, stream);
    default: return cudaErrorNotSupported;
  }
}

}  // namespace
}  // namespace flash

cudaError_t flash_backward(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t stream) {
  if (a.dtype != DType::Float16 && a.dtype != DType::BFloat16) return cudaErrorNotSupported;
  if (a.Dqk != a.Dv || (a.Dqk != 32 && a.Dqk != 64 && a.Dqk != 96 && a.Dqk != 128)) return cudaErrorNotSupported;
  if (a.mask_kind != MaskKind::None || a.dropout_p >= 1.0 || g.dbias != nullptr || a.lse == nullptr)
    return cudaErrorNotSupported;
  if (a.Hkv <= 0 || a.Hq % a.Hkv != 0) return cudaErrorNotSupported;
  const bool varlen = a.cu_seqlens_q != nullptr;
  for (const Operand4* o : {&a.q, &a.k, &a.v, &a.o, &g.dout, &g.dq, &g.dk, &g.dv})
    if (!rows_aligned16(*o, varlen)) return cudaErrorNotSupported;
  if (flash::device_major_bwd() < 8) return cudaErrorNotSupported;
  if (a.B == 0 || (a.Sq == 0 && a.Sk == 0)) return cudaSuccess;
#if !defined(TORCH_DNN_EMULATE_CUDA)
  const cudaError_t hopper = flash_backward_sm90(a, g, ws, stream);
  if (hopper != cudaErrorNotSupported) return hopper;
  (void)cudaGetLastError();
#endif
  float* dsum = nullptr;
  if (a.Sq > 0) {
    dsum = static_cast<float*>(ws.get(a.B * a.Hq * a.Sq * int64_t(sizeof(float))));
    if (dsum == nullptr) return cudaErrorMemoryAllocation;
  }
  return a.dtype == DType::Float16 ? flash::backward_typed<__half>(a, g, dsum, stream)
                                   : flash::backward_typed<__nv_bfloat16>(a, g, dsum, stream);
}

}  // namespace attention
}  // namespace torch_dnn
