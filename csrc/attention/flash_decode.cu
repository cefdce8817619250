// flash_decode on CUDA (decode_kernels.h): the append (kernels/kv_cache_append.cuh), the split-KV attention
// (kernels/flash_decode_split.cuh) and the combine (kernels/flash_decode_combine.cuh), on one stream, with the
// plan of decode_plan.h. Float16, BFloat16 and Float32 (float accumulation), Float64 (double); head dims 64, 128
// and 256; every row 16-byte aligned (the op layer copies operands that are not). Workspace: rows x splits x
// (D + 1) accumulators, rows = B x Hq x Sq.
#include <cstdint>
#include <initializer_list>

#include "attention/decode_plan.h"
#include "attention/kernels/attention_common.cuh"
#include "attention/kernels/flash_decode_combine.cuh"
#include "attention/kernels/flash_decode_split.cuh"
#include "attention/kernels/kv_cache_append.cuh"
#include "common/cuda/device.cuh"

namespace torch_dnn {
namespace attention {

namespace decode {
namespace {

bool aligned16(const void* p, std::initializer_list<int64_t> strides, int64_t vec) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  for (int64_t s : strides) {
    if (s % vec != 0) return false;
  }
  return true;
}

// Opts the kernel in to its dynamic shared memory (past 48 KB) and returns its CTAs an SM, 0 if it cannot run.
template <typename T, int D, int RC, bool STAGED>
int prepare_split_kernel() {
  constexpr auto kernel = flash_decode_split_kernel<T, D, RC, STAGED>;
  constexpr int64_t smem = split_smem_bytes<T, D, RC, STAGED>();
#if defined(TORCH_DNN_EMULATE_CUDA)
  (void)kernel;
  return 3;
#else
  if (smem > 48 * 1024) {
    if (smem > max_smem_optin() || raise_smem_limit_once<kernel>(int(smem)) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
  }
  return resident_per_sm<kernel>(kThreads, size_t(smem));
#endif
}

template <typename T, int D, int RC, bool STAGED>
cudaError_t attend_with(const DecodeArgs& a, const CacheMap& map, const Workspace& ws, cudaStream_t stream) {
  const int resident = prepare_split_kernel<T, D, RC, STAGED>();
  if (resident == 0) return cudaErrorNotSupported;
  const int64_t rows = a.B * a.Hq * a.Sq;
  const DecodePlan plan = plan_decode(a.B, a.Hq, a.Hkv, a.Sq, a.capacity, sm_count(), resident,
                                      sizeof(T) == 8 ? 4 : 8);
  using A = acc_t<T>;
  DecodeWork<A> w;
  w.splits = plan.splits;
  w.row_chunks = plan.row_chunks;
  w.o_part = static_cast<A*>(ws.get(rows * w.splits * D * int64_t(sizeof(A))));
  w.lse_part = static_cast<A*>(ws.get(rows * w.splits * int64_t(sizeof(A))));
  if (w.o_part == nullptr || w.lse_part == nullptr) return cudaErrorMemoryAllocation;
  launch_1d(flash_decode_split_kernel<T, D, RC, STAGED>, a.B * a.Hkv * w.splits * w.row_chunks, kThreads,
            size_t(split_smem_bytes<T, D, RC, STAGED>()), stream, a, map, w);
  launch_1d(flash_decode_combine_kernel<T, D>, (rows + kCombineRows - 1) / kCombineRows, 32 * kCombineRows, 0,
            stream, a, w);
  return cudaGetLastError();
}

template <typename T, int D, int RC>
cudaError_t attend(const DecodeArgs& a, const CacheMap& map, const Workspace& ws, cudaStream_t stream) {
  // the staged kernel where the device can hold it (it asks for 64 KB of shared memory a CTA)
  if (a.staged) {
    const cudaError_t e = attend_with<T, D, RC, true>(a, map, ws, stream);
    if (e != cudaErrorNotSupported) return e;
  }
  return attend_with<T, D, RC, false>(a, map, ws, stream);
}

template <typename T, int D>
cudaError_t run(const DecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  const CacheMap map = make_cache_map(a);
  if (a.Snew > 0) {
    const int64_t vecs = a.B * a.Snew * a.Hkv * (D / (16 / int64_t(sizeof(T))));
    if (vecs > 0) launch_1d(kv_cache_append_kernel<T>, int64_t(grid_for(vecs, 256)), 256, 0, stream, a, map);
  }
  if (a.B * a.Hq * a.Sq == 0) return cudaGetLastError();
  // double: at most 4 rows a CTA (8 would take 64 KB of static shared memory at D = 256)
  switch (decode_rows_per_cta(a.Hq, a.Hkv, a.Sq, sizeof(T) == 8 ? 4 : 8)) {
    case 1: return attend<T, D, 1>(a, map, ws, stream);
    case 4: return attend<T, D, 4>(a, map, ws, stream);
    default:
      if constexpr (sizeof(T) == 8) return cudaErrorNotSupported;
      else return attend<T, D, 8>(a, map, ws, stream);
  }
}

template <typename T>
cudaError_t run_typed(const DecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  switch (a.D) {
    case 64: return run<T, 64>(a, ws, stream);
    case 128: return run<T, 128>(a, ws, stream);
    case 256: return run<T, 256>(a, ws, stream);
    default: return cudaErrorNotSupported;
  }
}

}  // namespace
}  // namespace decode

cudaError_t flash_decode(const DecodeArgs& a, const Workspace& ws, cudaStream_t stream) {
  if (a.D != 64 && a.D != 128 && a.D != 256) return cudaErrorNotSupported;
  if (a.Hkv <= 0 || a.Hq % a.Hkv != 0) return cudaErrorNotSupported;
  // keys and block offsets are int32 in the kernels
  if (a.capacity > int64_t(0x7fffffff) || a.block_size > int64_t(0x7fffffff)) return cudaErrorNotSupported;
  const int64_t vec = a.dtype == DType::Float64 ? 2 : a.dtype == DType::Float32 ? 4 : 8;
  using decode::aligned16;
  if (!aligned16(a.q, {a.q_sb, a.q_ss, a.q_sh}, vec) || !aligned16(a.k.ptr, {a.k.s0, a.k.s1, a.k.s2}, vec) ||
      !aligned16(a.v.ptr, {a.v.s0, a.v.s1, a.v.s2}, vec))
    return cudaErrorNotSupported;
  if (a.Snew > 0 && (!aligned16(a.k_new, {a.kn_sb, a.kn_ss, a.kn_sh}, vec) ||
                     !aligned16(a.v_new, {a.vn_sb, a.vn_ss, a.vn_sh}, vec)))
    return cudaErrorNotSupported;
  switch (a.dtype) {
    case DType::Float64: return decode::run_typed<double>(a, ws, stream);
    case DType::Float32: return decode::run_typed<float>(a, ws, stream);
    case DType::Float16: return decode::run_typed<__half>(a, ws, stream);
    default: return decode::run_typed<__nv_bfloat16>(a, ws, stream);
  }
}

}  // namespace attention
}  // namespace torch_dnn
