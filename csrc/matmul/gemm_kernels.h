// Torch-free entry points of the matmul family's GEMM kernels: the contract between the op layer
// (matmul_ops.h, matmul_cuda.cpp) and the tensor-core kernels (a portable sm_80+ mma.sync path and a Hopper
// wgmma + TMA path). Every launch enqueues on `stream` and returns a cudaError_t (cudaErrorNotSupported when
// a path cannot take the problem: the caller then tries the next path).
//
// One (batched) GEMM with a fused epilogue, for b < batch:
//     pre[b] = alpha * A[b] @ B[b] + bias            (A: M x K, B: K x N, accumulated in float)
//     D[b]   = act(pre[b]) + residual[b]             (D: M x N, row-major)
// and, when `preact` is set, pre[b] is stored too (row-major, leading dimension ldd), for the backward.
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "activation/activation_math.h"
#include "common/hd.h"
#include "matmul/matmul_knobs.h"

namespace torch_dnn {
namespace matmul {

using activation::Act;
using activation::ActParams;

// A matrix operand of `rows` x `cols` in memory: element (r, c) of batch b lies at
// ptr + b * batch_stride + (col_major ? c * ld + r : r * ld + c)   (elements, not bytes).
// For A (M x K) col_major means M-contiguous ("transposed"); for B (K x N) col_major means K-contiguous,
// which is how x @ weight.T sees an nn.Linear weight [N, K].
struct MatrixRef {
  const void* ptr = nullptr;
  int64_t ld = 0;
  int64_t batch_stride = 0;  // 0 broadcasts one matrix over the batch
  bool col_major = false;
};

struct GemmArgs {
  DType dtype = DType::Float32;  // of A, B, bias, residual, D and preact: Float16, BFloat16 or Float32
                                //   (Float64 only in the portable path's SIMT kernel and on the CPU)
  bool allow_tf32 = false;     // Float only: TF32 tensor cores allowed (torch.backends.cuda.matmul.allow_tf32)
  bool fp32_simt = false;      // Float without TF32: the portable path's SIMT FFMA kernel instead of 3xTF32
                               // (TORCH_DNN_GEMM_FP32=simt)
  int64_t M = 0, N = 0, K = 0, batch = 1;
  MatrixRef A, B;
  void* D = nullptr;
  int64_t ldd = 0, batch_stride_d = 0;
  float alpha = 1.0f;
  const void* bias = nullptr;      // [N] or null
  const void* residual = nullptr;  // M x N row-major (ldr, batch_stride_r) or null; added after act
  int64_t ldr = 0, batch_stride_r = 0;
  void* preact = nullptr;          // optional output of pre (ld = ldd, batch stride = batch_stride_d)
  Act act = Act::Identity;
  ActParams act_params;
  bool deterministic = true;       // any split-K reduction in a fixed order
  bool tf32_rounded = false;       // Float with allow_tf32: an operand was rounded to TF32 by round_to_tf32, so
                                   // the Hopper kernel (which truncates) may take it
  MatmulKnobs knobs;               // the call's TORCH_DNN_* knobs (MatmulKnobs::read), for every choice below
};

// Hopper (sm_90a): wgmma + TMA, warp-specialised. gemm_sm90_plan says, once a call, which kernel takes a problem;
// none (not ok) when the build has no sm_90a code, when the device is not sm_90, or when TMA's rules do not hold
// (16-byte aligned base pointers and leading dimensions, unit stride along the contiguous dimension).
struct Sm90Plan {
  int kind = 0;         // the kernel (gemm_sm90.cu's Kind); 0: the path cannot take the problem
  bool skinny = false;  // the skinny kernels of gemm_sm90_skinny.cu (x @ w.T, M <= 256)
  int splits = 0;       // the split-K d_weight kernel's K splits (gemm_sm90.cu's tt_splits); 0 for the others
  bool ok() const { return kind != 0; }
};
Sm90Plan gemm_sm90_plan(const GemmArgs& a);
// Device scratch memory that a launch asks for only when it needs some (one whose kernel parameters are cached
// asks for none, so a decode call neither sizes nor allocates a workspace): get(bytes) returns at least `bytes`
// that stay valid for the work queued on the launch's stream (the caching allocator's stream order), or null.
// A launch may ask more than once (the split skinny kernels: their partial sums, then the GEMM's own).
struct WorkspaceSource {
  void* (*fn)(void* ctx, int64_t bytes) = nullptr;
  void* ctx = nullptr;
  void* get(int64_t bytes) const { return bytes > 0 && fn != nullptr ? fn(ctx, bytes) : nullptr; }
};
// Runs the plan's kernel (cudaErrorNotSupported when the plan is not ok); plan: gemm_sm90_plan of these args.
cudaError_t gemm_sm90(const GemmArgs& a, const Sm90Plan& plan, const WorkspaceSource& workspace, cudaStream_t stream);

// Float32 -> TF32 values (round to nearest, cvt.rna), n elements of src into dst (distinct buffers).
cudaError_t round_to_tf32(const float* src, float* dst, int64_t n, cudaStream_t stream);
// The same for an R x C matrix with element (r, c) at src[r * ld + c], into dense dst: [C][R] (transpose) or [R][C];
// vec: the 16-byte kernel where the pointers and sizes allow it (MatmulKnobs::tf32_round_vec), else the scalar one.
cudaError_t round_to_tf32_2d(const float* src, int64_t ld, int64_t rows, int64_t cols, bool transpose, float* dst,
                             bool vec, cudaStream_t stream);

// Portable sm_80+ path: mma.sync tensor cores for Half/BFloat16, Float with allow_tf32 (TF32) and Float without
// it (3xTF32: float32 accuracy from three TF32 products; or a SIMT FFMA kernel with fp32_simt), a SIMT DFMA kernel
// for Double. Any M, N, K, strides and alignment: the fallback.
cudaError_t gemm_sm80(const GemmArgs& a, void* workspace, int64_t workspace_bytes, cudaStream_t stream);
int64_t gemm_sm80_workspace_bytes(const GemmArgs& a);
// Whether the portable path takes this problem with its skinny kernel (16-bit x @ W.T with M <= 64, both
// K-contiguous and 16-byte aligned, batch 1; TORCH_DNN_GEMM_SKINNY=0 turns it off, =1 prefers it): a
// weight-streaming kernel. hopper_skinny: the Hopper path's skinny kernels can take the problem
// (Sm90Plan::skinny); they are then preferred (unless TORCH_DNN_GEMM_SKINNY forces this kernel).
bool gemm_skinny_applies(const GemmArgs& a, bool hopper_skinny);

}  // namespace matmul
}  // namespace torch_dnn
