// Torch-free contract of flash_decode (attention against a KV cache, one to a few query rows per sequence): the op
// layer (decode_ops.h, decode_cpu.cpp, decode_cuda.cpp) fills DecodeArgs; the CUDA entry point is flash_decode.cu.
//
// One problem: for each batch b, with L = cache_seqlens[b] + Snew keys after the append,
//   1. (k_new / v_new given) rows t < Snew of k_new[b] / v_new[b] are written into the cache at positions
//      cache_seqlens[b] + t (in place: the caches are the op's mutated arguments);
//   2. for each query row i < Sq and query head h (key/value head h / (Hq / Hkv): GQA),
//        s[j] = scale * <q[b][i][h], k[b][j][hk]>   for j < L (causal: j <= i + L - Sq, queries aligned
//                                                   bottom-right to the cache's end)
//        o[b][i][h] = softmax(s) @ v[b][:L][hk];  lse[b][h][i] = log(sum_j exp(s[j]))
//      A row that sees no key (L = 0, or causal with i + L - Sq < 0) gives o = 0 and lse = +inf, as the family's
//      other ops.
// Key j of batch b lives in the cache at
//   contiguous ([B][S_max][Hkv][D]):        cache + b * s0 + j * s1 + hk * s2
//   paged ([num_blocks][block_size][Hkv][D]): cache + block_table[b][j / block_size] * s0 + (j % block_size) * s1
//                                              + hk * s2
// Strides are in elements; the head dim has stride 1. q is [B][Sq][Hq][D], k_new / v_new [B][Snew][Hkv][D] (any
// strides, head dim stride 1); out [B][Sq][Hq][D] and lse [B][Hq][Sq] (float32; float64 for Float64) dense.
// cache_seqlens + Snew beyond the capacity is the caller's error (the CPU op checks it; the CUDA kernels clamp
// the length to the capacity rather than read past it).
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "attention/attention_kernels.h"
#include "common/hd.h"

namespace torch_dnn {
namespace attention {

struct DecodeCache {
  void* ptr = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0;
};

struct DecodeArgs {
  DType dtype = DType::BFloat16;  // of q, the caches, k_new / v_new and out
  int64_t B = 0, Sq = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t Snew = 0;  // rows appended per batch (0: no append)
  const void* q = nullptr;
  int64_t q_sb = 0, q_ss = 0, q_sh = 0;
  DecodeCache k, v;
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  int64_t kn_sb = 0, kn_ss = 0, kn_sh = 0, vn_sb = 0, vn_ss = 0, vn_sh = 0;
  const int32_t* cache_seqlens = nullptr;  // [B]
  const int32_t* block_table = nullptr;    // paged: [B][*] with row stride bt_sb; null: contiguous
  int64_t bt_sb = 0;
  int64_t block_size = 0;  // paged: keys per block; contiguous: S_max
  int64_t capacity = 0;    // keys a batch row can hold: S_max, or block_table's width * block_size
  void* out = nullptr;     // [B][Sq][Hq][D] dense
  void* lse = nullptr;     // [B][Hq][Sq] dense
  double scale = 1.0;
  bool causal = false;
  // The split kernel's variant (decode_cuda.cpp's TORCH_DNN_DECODE_KERNEL knob): K / V staged through shared memory
  // with cp.async several batches ahead (true), or loaded straight into registers.
  bool staged = true;
};

// The CUDA kernels (Float32, Float16, BFloat16; D in {64, 128, 256}; every row of q, the caches and k_new / v_new
// 16-byte aligned): the append, then the split-KV attention and the combine (flash_decode.cu). Returns
// cudaErrorNotSupported for a problem outside that set (nothing launched).
cudaError_t flash_decode(const DecodeArgs& a, const Workspace& ws, cudaStream_t stream);

}  // namespace attention
}  // namespace torch_dnn
