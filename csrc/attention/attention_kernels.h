// Torch-free entry points of the attention kernels: the contract between the op layer (attention_ops.h,
// attention_cuda.cpp) and the CUDA kernels. Every launch enqueues on `stream` and returns a cudaError_t;
// cudaErrorNotSupported means "this path cannot take the problem" and the caller tries the next one (the
// flash tensor-core kernels first, the CUDA-core reference kernels last: those take every problem).
//
// One problem: for each batch b, query head h (its key/value head h / (Hq / Hkv): GQA) and query row i,
//   s[j]  = scale * <q[b][h][i], k[b][hk][j]>                       (j < Sk)
//   s[j]  = softcap > 0 ? softcap * tanh(s[j] / softcap) : s[j]
//   s[j] += bias[b][h][i][j]                                       (the additive float mask, if any)
//   s[j]  = -inf where masked: bool mask false, causal, outside the window
//   p     = softmax(s) (all masked: p = 0 and o = 0, as PyTorch), dropout applied to p (scaled by 1/(1-p_drop))
//   o[b][h][i] = sum_j p[j] v[b][hk][j];   lse[b][h][i] = log(sum_j exp(s[j])) (+inf where all masked)
// Causal and the window are aligned by `bottom_right`: with it, row i may see key j iff
//   j - (i + Sk - Sq) <= window_right (causal: window_right = 0) and (i + Sk - Sq) - j <= window_left (-1: unbounded);
// without it (PyTorch's is_causal), with Sk - Sq taken as 0.
// Variable lengths (THD layout): cu_seqlens_q/k (int32, batch + 1 entries) give each sequence's rows within a
// packed [total][H][D] tensor; B is then the number of sequences and Sq/Sk the maximal lengths.
//
// Operands are addressed by element strides over [B][H][S][D]; the head dimension must have stride 1.
// Accumulation in float (Float64: double, reference kernels only); outputs rounded once to their dtype.
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "common/hd.h"

namespace torch_dnn {
namespace attention {

// A [B][H][S][D] operand: element (b, h, s, d) at ptr + b * sb + h * sh + s * ss + d (elements).
struct Operand4 {
  void* ptr = nullptr;
  int64_t sb = 0, sh = 0, ss = 0;
};

// Whether the tensor-core kernels can copy o's rows 16 bytes at a time: a 16-byte-aligned base and row, head and
// (fixed-length batches) batch strides that are multiples of 8 elements.
inline bool rows_aligned16(const Operand4& o, bool varlen) {
  return reinterpret_cast<uintptr_t>(o.ptr) % 16 == 0 && o.ss % 8 == 0 && o.sh % 8 == 0 &&
         (varlen || o.sb % 8 == 0);
}

enum class MaskKind : int { None = 0, Bool = 1, Additive = 2 };

// The Hopper forward's schedules (kernels/flash_forward_sm90.cuh): every MMA thread copying its share of the tiles by
// cp.async, or a copy warpgroup's tensor copies feeding two MMA warpgroups that drift freely or take turns at the
// tensor cores.
enum class Sm90Fwd : int { CpAsync = 0, WarpSpecialized = 1, PingPong = 2 };

// The Hopper backward's dK / dV schedules (kernels/flash_backward_sm90.cuh): every MMA thread copying its share of
// the query tiles by cp.async, or a copy warpgroup's tensor copies feeding the two MMA warpgroups.
enum class Sm90Bwd : int { CpAsync = 0, WarpSpecialized = 1 };

struct AttnArgs {
  DType dtype = DType::BFloat16;  // of q, k, v, o and their gradients
  int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Sk = 0, Dqk = 0, Dv = 0;
  Operand4 q, k, v, o;
  void* lse = nullptr;  // [B][Hq][Sq] dense, float32 (double for Float64); written by forward, read by backward
  double scale = 1.0;
  bool causal = false;
  bool bottom_right = false;
  int64_t window_left = -1, window_right = -1;  // -1: unbounded
  double softcap = 0.0;
  // The mask, broadcast through zero strides over [B][Hq][Sq][Sk] (last dim stride sk, any value).
  MaskKind mask_kind = MaskKind::None;
  const void* mask = nullptr;  // bool (1 byte) or the dtype of q (Additive; Float32 allowed too: mask_dtype)
  DType mask_dtype = DType::BFloat16;
  int64_t mask_sb = 0, mask_sh = 0, mask_sq = 0, mask_sk = 0;
  const float* alibi_slopes = nullptr;  // [Hq] or [B][Hq] (alibi_sb = Hq or 0): s[j] -= slope * |i' - j|
  int64_t alibi_sb = 0;
  // Dropout: Philox4x32-10 keyed by (seed, offset), one counter per (b, h, i, j) so that backward regenerates it.
  double dropout_p = 0.0;
  uint64_t seed = 0, offset = 0;
  // Variable lengths (null for fixed-length batches).
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  bool deterministic = false;  // backward: no atomics whose order varies (dq summed in a fixed order)
  // Whether the Hopper (wgmma) route may run: the op layer's TORCH_DNN_ATTENTION_SM90 knob (attention_cuda.cpp,
  // docs/attention.md), so that the torch-free launchers read no environment.
  bool sm90_enabled = true;
  // The Hopper forward's schedule (TORCH_DNN_ATTENTION_SM90_FWD, docs/attention.md).
  Sm90Fwd sm90_fwd = Sm90Fwd::PingPong;
  // The Hopper backward's schedule (TORCH_DNN_ATTENTION_SM90_BWD, docs/attention.md).
  Sm90Bwd sm90_bwd = Sm90Bwd::WarpSpecialized;
  // Rows of q (and o) and of k and v along their sequence dim: Sq and Sk, or a packed batch's totals (the tensor
  // maps' bounds).
  int64_t q_rows = 0, k_rows = 0;
};

// Sequence b of a batch (the kernels' and the CPU reference's): its lengths and where its rows start. Fixed length: rows of batch b at b * sb (the
// operand's batch stride), lengths Sq, Sk. Variable length: rows at cu_seqlens[b] * ss of a packed tensor.
struct Seq {
  int64_t sq = 0, sk = 0;    // this sequence's lengths
  int64_t q_row0 = 0, k_row0 = 0;  // first packed row (variable length), else 0
  bool varlen = false;
  // Element offset of (b, h, row, 0) in operand o (rows of q / o / do: query; of k / v: key).
  TD_HD int64_t q_off(const Operand4& o, int64_t b, int64_t h, int64_t i) const {
    return varlen ? h * o.sh + (q_row0 + i) * o.ss : b * o.sb + h * o.sh + i * o.ss;
  }
  TD_HD int64_t k_off(const Operand4& o, int64_t b, int64_t h, int64_t j) const {
    return varlen ? h * o.sh + (k_row0 + j) * o.ss : b * o.sb + h * o.sh + j * o.ss;
  }
};

TD_HD Seq make_seq(const AttnArgs& a, int64_t b) {
  Seq s;
  s.varlen = a.cu_seqlens_q != nullptr;
  if (s.varlen) {
    s.q_row0 = a.cu_seqlens_q[b];
    s.sq = a.cu_seqlens_q[b + 1] - s.q_row0;
    s.k_row0 = a.cu_seqlens_k[b];
    s.sk = a.cu_seqlens_k[b + 1] - s.k_row0;
  } else {
    s.sq = a.Sq;
    s.sk = a.Sk;
  }
  return s;
}

// Device scratch memory: get(bytes) returns at least `bytes` valid for the work queued on the stream, or null.
struct Workspace {
  void* (*fn)(void* ctx, int64_t bytes) = nullptr;
  void* ctx = nullptr;
  void* get(int64_t bytes) const { return bytes > 0 && fn != nullptr ? fn(ctx, bytes) : nullptr; }
};

// Gradients, shaped as their operands: do (read), dq, dk, dv (written; for GQA dk/dv are per key/value head,
// summed over the query heads that share it), dmask (Additive masks only: d s, shaped as the broadcast mask's
// full [B][Hq][Sq][Sk] when non-null; the op layer reduces it to the mask's shape).
struct AttnGrads {
  Operand4 dout, dq, dk, dv;
  void* dbias = nullptr;
  int64_t dbias_sb = 0, dbias_sh = 0, dbias_sq = 0;
};

// The flash kernels (tensor cores, Float16/BFloat16).
cudaError_t flash_forward(const AttnArgs& a, const Workspace& ws, cudaStream_t stream);
cudaError_t flash_backward(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t stream);
// flash_forward's first route on sm_90 (wgmma; flash_forward_sm90.cu says what it takes).
cudaError_t flash_forward_sm90(const AttnArgs& a, cudaStream_t stream);
// flash_backward's first route on sm_90 (wgmma; flash_backward_sm90.cu).
cudaError_t flash_backward_sm90(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t stream);

// The reference kernels (CUDA cores, every dtype and option): the fallback, and what the flash kernels are tested
// against on the GPU.
cudaError_t reference_forward(const AttnArgs& a, const Workspace& ws, cudaStream_t stream);
cudaError_t reference_backward(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t stream);

}  // namespace attention
}  // namespace torch_dnn
